"""The rows of the released benchmark, read from a run's results folder: one per usable sample (each safe
original and each ok variant), with its full-dialogue audio, texts, transcripts, labels and provenance
(columns: `lalm_judge.export.features.benchmark_features`).

A run's outputs name their clips relative to the run's working directory, the parent of its `results/`
folder, so the clip paths of the manifests are resolved against that folder's parent.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.audio.waveform import wav_bytes
from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.tables import TTS
from lalm_judge.core.taxonomy import SAFE_SEVERITY
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.manifest.samples import Manifest, Sample, assemble_waveform


class ExportError(ValueError):
    """Results that cannot be released as they are; the message names the file or sample."""


@dataclass(frozen=True)
class RunResults:
    """Where a run's stage outputs lie (the layout of the workflow's rules)."""

    results: Path

    @property
    def workdir(self) -> Path:
        return self.results.parent

    def manifest(self, dialogue_id: str) -> Path:
        return self.results / "manifests" / f"{dialogue_id}.json"

    def dialogue(self, dialogue_id: str) -> Path:
        return self.results / "corpus" / dialogue_id / "dialogue.json"

    def tts_tables(self, dialogue_id: str) -> list[Path]:
        return sorted((self.results / "tts" / dialogue_id).glob("t*.parquet"))

    def dialogue_ids(self) -> list[str]:
        """Every dialogue with a manifest (shard indexes live in a subfolder and are not listed)."""
        return sorted(p.stem for p in (self.results / "manifests").glob("*.json"))

    def resolve(self, clip: str) -> str:
        return clip if os.path.isabs(clip) else str(self.workdir / clip)


@dataclass(frozen=True)
class DialogueSamples:
    """The released samples of one dialogue: the fields of each row and the sample its audio comes from."""

    dialogue_id: str
    sample_rate: int
    rows: tuple[tuple[dict[str, Any], Sample], ...]


def _variant_provenance(run: RunResults, dialogue_id: str) -> dict[str, dict[str, Any]]:
    tables = run.tts_tables(dialogue_id)
    frame = TTS.read(tables) if tables else TTS.empty()
    return {r["variant_id"]: r for r in frame.filter(pl.col("status") == "ok").iter_rows(named=True)}


def dialogue_samples(run: RunResults, dialogue_id: str) -> DialogueSamples:
    """The rows of one dialogue (none if its manifest is not usable, e.g. a skipped one-turn dialogue)."""
    path = run.manifest(dialogue_id)
    if not path.is_file():
        raise ExportError(f"no manifest {path}; run the workflow up to the manifests first")
    manifest = Manifest.load(path)
    dialogue = Dialogue.load(run.dialogue(dialogue_id))
    turns = manifest.data["turns"]
    spoken = _variant_provenance(run, dialogue_id)
    variants = {v["variant_id"]: v for v in manifest.data["variants"]}
    common = {
        "dialogue_id": dialogue_id,
        "speakers": [t["speaker"] for t in turns],
        "turn_boundary_method": [t.boundary_method for t in dialogue.turns],
        "turn_boundary_confidence": [t.boundary_confidence for t in dialogue.turns],
        "corpus_format": dialogue.source_format,
    }
    rows = []
    for sample in manifest.samples():
        sample = dataclasses.replace(sample, clips=tuple(run.resolve(c) for c in sample.clips))
        emotions = [t["emotion"] for t in turns]
        row = {
            **common,
            "sample_id": sample.sample_id,
            "label": "safe" if sample.severity == SAFE_SEVERITY else "unsafe",
            "category": sample.category,
            "severity": sample.severity,
            "unsafe_turn_index": sample.turn_index,
            "n_turns": sample.n_turns,
            "texts": list(sample.texts[TranscriptSource.GT]),
            "asr_transcripts": [
                {"source": source, "texts": list(texts)}
                for source, texts in sample.texts.items()
                if source != TranscriptSource.GT
            ],
            "original_text": None,
            "original_emotion": None,
            "generation": None,
            "speech": None,
        }
        if sample.turn_index is not None:
            t = sample.turn_index
            if sample.sample_id not in spoken:
                raise ExportError(f"{sample.sample_id} is in {path} but in no TTS table of {run.results / 'tts'}")
            tts = spoken[sample.sample_id]
            emotions[t] = variants[sample.sample_id]["emotion"]
            row |= {
                "original_text": turns[t]["texts"][TranscriptSource.GT],
                "original_emotion": turns[t]["emotion"],
                "generation": {k: tts[k] for k in ("generator", "model", "prompt_version", "seed", "attempts")},
                "speech": {k: tts[k] for k in ("tts_engine", "tts_model", "tts_revision", "gain_db")},
            }
        rows.append(({**row, "emotions": emotions}, sample))
    return DialogueSamples(dialogue_id, manifest.data["sample_rate"], tuple(rows))


def with_audio(fields: Mapping[str, Any], sample: Sample) -> dict[str, Any]:
    """A complete row: the fields plus the full-dialogue audio (at the manifest's rate) and the turn times in it."""
    assembled = assemble_waveform(sample)
    rate = assembled.sample_rate
    return {
        **fields,
        "audio": {"bytes": wav_bytes(assembled.waveform, rate), "path": f"{sample.sample_id}.wav"},
        "turn_start_s": [start / rate for start, _ in assembled.turn_bounds],
        "turn_end_s": [end / rate for _, end in assembled.turn_bounds],
    }


def release_samples(run: RunResults, dialogue_ids: Sequence[str]) -> tuple[int, list[DialogueSamples]]:
    """The sample rate and the samples of the dialogues; all manifests must share one sample rate."""
    released = [d for d in (dialogue_samples(run, i) for i in dialogue_ids) if d.rows]
    if not released:
        raise ExportError(f"no usable sample in the manifests of {run.results} for dialogues {list(dialogue_ids)}")
    rates = {d.sample_rate for d in released}
    if len(rates) > 1:
        by_rate = {rate: [d.dialogue_id for d in released if d.sample_rate == rate] for rate in sorted(rates)}
        raise ExportError(f"the manifests mix sample rates {by_rate}; one dataset holds one audio sample rate")
    return rates.pop(), released


def iter_rows(released: Sequence[DialogueSamples]) -> Iterator[dict[str, Any]]:
    for dialogue in released:
        for fields, sample in dialogue.rows:
            yield with_audio(fields, sample)
