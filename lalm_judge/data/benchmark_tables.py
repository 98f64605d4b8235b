"""The tables of an `hf_benchmark` folder (its layout and index: `data.benchmark`): the variant and TTS tables of one
turn from a released benchmark (`import_turn_variants`), the ASR table of a dialogue from its released transcripts
(`import_transcripts`), and the writer of a benchmark folder (`BenchmarkWriter`, used by `lalm-judge import`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from lalm_judge.audio import waveform
from lalm_judge.audio.transcription import transcript_rows
from lalm_judge.core.dialogue import CorpusError, Dialogue
from lalm_judge.core.files import stable_hash, with_provenance, write_json, write_parquet
from lalm_judge.core.tables import TTS, VARIANTS, TableSchema
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.data.benchmark import (
    FORMAT,
    FORMAT_VERSION,
    IMPORTED,
    INDEX,
    dialogue_path,
    read_index,
    transcripts_path,
    variants_path,
)
from lalm_judge.data.variants import write_variant_table

log = logging.getLogger(__name__)

# The released transcripts: one row per (sample, turn, ASR source) of each turn clip the ASR stage transcribes.
TRANSCRIPTS = TableSchema(
    "benchmark transcript",
    {"sample_id": pl.String, "turn_index": pl.Int64, "source": pl.String, "text": pl.String},
)


def _check_selection(index: Mapping[str, Any], categories: Sequence[str], severities: Sequence[int]) -> None:
    for key, wanted, present in (
        ("categories", categories, index["categories"]),
        ("severities", severities, index["severities"]),
    ):
        absent = [v for v in wanted if v not in present]
        if absent:
            raise CorpusError(
                f"variants.{key} asks for {absent}, which the imported benchmark does not have; it has {present}"
            )


def import_turn_variants(
    dialogue_json: str,
    benchmark: str,
    turn_index: int,
    categories: Sequence[str],
    severities: Sequence[int],
    variants_table: str,
    tts_table: str,
    clips_dir: str,
    *,
    seed: int = 0,
) -> pl.DataFrame:
    """Write the variant and TTS tables of one turn from the benchmark (in the order categories x severities),
    with the released clips copied into `clips_dir`; return the TTS table.

    The benchmark holds only usable variants: a (category, severity) it lacks at this turn has no row."""
    dialogue = Dialogue.load(dialogue_json)
    _check_selection(read_index(benchmark), categories, severities)
    source = variants_path(benchmark, dialogue.dialogue_id)
    released = {
        (r["category"], r["severity"]): r
        for r in TTS.read(source).filter(pl.col("turn_index") == turn_index).iter_rows(named=True)
    }
    rows = []
    for category in categories:
        for severity in severities:
            row = released.get((category, severity))
            if row is None:
                log.info(
                    "%s t%d: the benchmark has no %s s%d variant", dialogue.dialogue_id, turn_index, category, severity
                )
                continue
            audio, _ = waveform.read_audio(source.parent / row["clip"], dialogue.sample_rate)
            clip = f"{clips_dir}/{row['variant_id']}.wav"
            waveform.write_wav(clip, audio, dialogue.sample_rate)
            rows.append({**row, "clip": clip, "duration_s": len(audio) / dialogue.sample_rate})
    Path(clips_dir).mkdir(parents=True, exist_ok=True)
    config_hash = stable_hash({"benchmark": benchmark, "categories": categories, "severities": severities})
    provenance = {"config_hash": config_hash, "seed": seed, "imported_from": str(source)}
    write_variant_table(with_provenance(VARIANTS.frame(rows), **provenance), variants_table)
    frame = with_provenance(TTS.frame(rows), **provenance)
    write_parquet(tts_table, frame)
    return frame


def import_transcripts(
    dialogue_json: str,
    tts_tables: Sequence[str],
    benchmark: str,
    asr_name: str,
    out_table: str,
    *,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Write the ASR table of one dialogue for source 'asr:<asr_name>' from the released transcripts."""
    dialogue = Dialogue.load(dialogue_json)
    source = TranscriptSource.asr(asr_name)
    released = read_index(benchmark)["transcript_sources"]
    if source not in released:
        raise CorpusError(
            f"asr.models.{asr_name}: model {IMPORTED!r} takes the transcripts of {source!r} from the "
            f"benchmark {benchmark}, which has {released}"
        )
    path = transcripts_path(benchmark, dialogue.dialogue_id)
    texts = {
        (r["sample_id"], r["turn_index"]): r["text"]
        for r in TRANSCRIPTS.read(path).filter(pl.col("source") == source).iter_rows(named=True)
    }

    def released_text(sample_id: str, turn_index: int, _audio: np.ndarray, _sr: int) -> str:
        if (sample_id, turn_index) not in texts:
            raise CorpusError(f"{path} has no {source!r} transcript of {sample_id} turn {turn_index}")
        return texts[(sample_id, turn_index)]

    frame = with_provenance(
        transcript_rows(
            dialogue, tts_tables, released_text, desc=f"imported {source} {dialogue.dialogue_id}", progress=progress
        ),
        config_hash=stable_hash({"benchmark": benchmark, "source": source}),
        seed=seed,
        asr_name=asr_name,
        asr_model=IMPORTED,
    )
    write_parquet(out_table, frame)
    return frame


class BenchmarkWriter:
    """Writes a benchmark folder from samples given in any order: audio goes to disk at once, the tables and
    the index are written by `close` (which checks that every dialogue has its safe original)."""

    def __init__(self, root: str | os.PathLike, sample_rate: int):
        self.root = Path(root)
        self.sample_rate = sample_rate
        self._dialogues: dict[str, Dialogue] = {}
        self._variants: dict[str, list[dict[str, Any]]] = {}
        self._transcripts: dict[str, list[dict[str, Any]]] = {}

    def _folder(self, dialogue_id: str) -> Path:
        return dialogue_path(self.root, dialogue_id).parent

    def add_original(self, dialogue: Dialogue, turn_audio: Sequence[np.ndarray]) -> None:
        """The safe original; its turns' `clip` fields are set here."""
        if dialogue.dialogue_id in self._dialogues:
            raise CorpusError(f"the dataset holds the original of {dialogue.dialogue_id!r} twice")
        turns = []
        for turn, audio in zip(dialogue.turns, turn_audio, strict=True):
            clip = f"turns/t{turn.index}.wav"
            waveform.write_wav(self._folder(dialogue.dialogue_id) / clip, audio, self.sample_rate)
            turns.append(replace(turn, clip=clip))
        self._dialogues[dialogue.dialogue_id] = replace(dialogue, turns=turns)

    def add_variant(self, row: Mapping[str, Any], audio: np.ndarray) -> None:
        """One variant: a TTS-table row (its `clip` is set here) and the audio of its replaced turn."""
        clip = f"variants/{row['variant_id']}.wav"
        waveform.write_wav(self._folder(row["dialogue_id"]) / clip, audio, self.sample_rate)
        self._variants.setdefault(row["dialogue_id"], []).append({**row, "clip": clip})

    def add_transcripts(self, dialogue_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._transcripts.setdefault(dialogue_id, []).extend(rows)

    def close(self, source: str) -> dict[str, Any]:
        """Write every dialogue's tables and the index; return the index."""
        orphans = sorted((set(self._variants) | set(self._transcripts)) - set(self._dialogues))
        if orphans:
            raise CorpusError(f"the dataset has variants but no safe original (severity 0) of {orphans}")
        for dialogue_id, dialogue in self._dialogues.items():
            dialogue.save(dialogue_path(self.root, dialogue_id))
            variants = sorted(self._variants.get(dialogue_id, []), key=lambda r: (r["turn_index"], r["variant_id"]))
            write_parquet(variants_path(self.root, dialogue_id), TTS.frame(variants))
            transcripts = sorted(
                self._transcripts.get(dialogue_id, []), key=lambda r: (r["source"], r["sample_id"], r["turn_index"])
            )
            write_parquet(transcripts_path(self.root, dialogue_id), TRANSCRIPTS.frame(transcripts))
        variants = [r for rows in self._variants.values() for r in rows]
        transcripts = [r for rows in self._transcripts.values() for r in rows]
        index = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "source": source,
            "sample_rate": self.sample_rate,
            "dialogues": [
                {
                    "id": d,
                    "n_turns": len(self._dialogues[d].turns),
                    "variant_turns": sorted({r["turn_index"] for r in self._variants.get(d, [])}),
                }
                for d in sorted(self._dialogues)
            ],
            "categories": sorted({r["category"] for r in variants}),
            "severities": sorted({r["severity"] for r in variants}),
            "transcript_sources": sorted({r["source"] for r in transcripts}),
            "n_variants": len(variants),
        }
        write_json(self.root / INDEX, index)
        return index
