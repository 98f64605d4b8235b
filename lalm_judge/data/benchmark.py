"""The `hf_benchmark` corpus format: a released benchmark (`lalm-judge export`) brought back by `lalm-judge
import`, with the speech, texts, labels and transcripts of every sample, so that the workflow judges it
without rewriting or synthesizing anything.

Layout of the folder (`corpus.path`), written by `BenchmarkWriter` and read by the functions below:

    benchmark.json                 the index: format version, sample rate, dialogues (id, n_turns, the turns
                                   with variants),
                                   categories, severities and transcript sources present
    <d>/dialogue.json              the safe original (`core.dialogue.Dialogue`, clips relative to <d>/)
    <d>/turns/t<i>.wav             its turn clips
    <d>/variants.parquet           one row per variant: the TTS table (`core.tables.TTS`), clips relative to <d>/
    <d>/variants/<variant>.wav     the replaced turn of each variant
    <d>/transcripts.parquet        the released ASR transcripts (`TRANSCRIPTS`) of each original turn and
                                   each replaced turn

The workflow reads it in three places: ingest (`ingest`: the original's dialogue.json and turn clips), the
variant stage when `variants.source` is `imported` (`import_turn_variants`: the variant and TTS tables of
one turn, with the released clips), and the ASR stage for models configured as `model: imported`
(`import_transcripts`: the released transcripts instead of running a recognizer).
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
from lalm_judge.core.dialogue import CorpusError, Dialogue, SourceDialogue
from lalm_judge.core.files import read_json, stable_hash, with_provenance, write_json, write_parquet
from lalm_judge.core.tables import TTS, VARIANTS, TableSchema
from lalm_judge.core.taxonomy import validate_dialogue_id
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.data.variants import write_variant_table

log = logging.getLogger(__name__)

FORMAT = "hf_benchmark"
FORMAT_VERSION = 1
INDEX = "benchmark.json"
# `variants.source` of a benchmark judged as released, and the `asr.models.<name>.model` that takes the
# released transcripts of source 'asr:<name>' instead of recognizing the audio again.
IMPORTED = "imported"

# The released transcripts: one row per (sample, turn, ASR source) of each turn clip the ASR stage transcribes.
TRANSCRIPTS = TableSchema(
    "benchmark transcript",
    {"sample_id": pl.String, "turn_index": pl.Int64, "source": pl.String, "text": pl.String},
)


def dialogue_path(root: str | os.PathLike, dialogue_id: str) -> Path:
    return Path(root) / validate_dialogue_id(dialogue_id) / "dialogue.json"


def variants_path(root: str | os.PathLike, dialogue_id: str) -> Path:
    return Path(root) / validate_dialogue_id(dialogue_id) / "variants.parquet"


def transcripts_path(root: str | os.PathLike, dialogue_id: str) -> Path:
    return Path(root) / validate_dialogue_id(dialogue_id) / "transcripts.parquet"


def read_index(root: str | os.PathLike) -> dict[str, Any]:
    """The benchmark index; an error names the folder when it is not an imported benchmark."""
    path = Path(root) / INDEX
    if not path.is_file():
        raise CorpusError(
            f"{root} is not an imported benchmark (no {INDEX}); write one with "
            f"'lalm-judge import --format hf DATASET_DIR --out {root}'"
        )
    index = read_json(path)
    if index.get("format") != FORMAT or index.get("version") != FORMAT_VERSION:
        raise CorpusError(
            f"{path}: format {index.get('format')!r} version {index.get('version')!r}; this code reads "
            f"{FORMAT!r} version {FORMAT_VERSION} (import the dataset again)"
        )
    return index


def list_dialogues(root: str | os.PathLike) -> list[SourceDialogue]:
    """The benchmark's dialogues in index order (the workflow plan reads the index): each is defined by its
    released dialogue.json and turn clips, and has variants of the turns the index lists (a benchmark written before
    the index listed them: of the turns in its variant table)."""
    listed = []
    for entry in read_index(root)["dialogues"]:
        path = dialogue_path(root, entry["id"])
        clips = [str(path.parent / f"turns/t{i}.wav") for i in range(entry["n_turns"])]
        files = (str(path), *clips)
        turns = entry.get("variant_turns")
        if turns is None:
            table = pl.read_parquet(variants_path(root, entry["id"]), columns=["turn_index"])
            turns = table["turn_index"].unique().sort().to_list()
        listed.append(
            SourceDialogue(
                entry["id"], entry["n_turns"], str(path), location=str(path), files=files, variant_turns=tuple(turns)
            )
        )
    return listed


def ingest(corpus: Mapping[str, Any], dialogue_id: str, clips_dir: str | Path, sample_rate: int) -> Dialogue:
    """The released safe original as the canonical dialogue, its turn clips copied into `clips_dir`."""
    source = dialogue_path(corpus["path"], dialogue_id)
    if not source.is_file():
        raise CorpusError(f"dialogue {dialogue_id!r} is not in the benchmark {corpus['path']} (no {source})")
    released = Dialogue.load(source)
    turns = []
    for turn in released.turns:
        audio, _ = waveform.read_audio(source.parent / turn.clip, sample_rate)
        clip = Path(clips_dir) / f"t{turn.index}.wav"
        waveform.write_wav(clip, audio, sample_rate)
        turns.append(replace(turn, clip=str(clip)))
    return Dialogue(
        dialogue_id,
        turns,
        FORMAT,
        str(source),
        sample_rate,
        meta={"released": {"source_format": released.source_format, "source_path": released.source_path}},
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
