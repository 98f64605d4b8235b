"""Per-dialogue manifests: every sample (the safe original and each variant) with its clips and its
transcript per source, and the one function that assembles a sample's full-dialogue waveform.

A variant differs from its source in one turn, so a manifest stores the original turns once and, per
variant, only the replaced turn; `Sample` views combine the two on demand.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lalm_judge import audio as audio_lib
from lalm_judge.io import read_json
from lalm_judge.taxonomy import SAFE_SEVERITY, original_id

GROUND_TRUTH = "gt"


def asr_source(model_name: str) -> str:
    """Transcript-source label of an ASR model, e.g. 'asr:whisper_tiny_en'."""
    return f"asr:{model_name}"


@dataclass(frozen=True)
class Sample:
    """One dialogue as a judge sees it: the original (severity 0) or a variant with one replaced turn."""

    sample_id: str
    dialogue_id: str
    category: str | None
    severity: int
    turn_index: int | None
    speakers: tuple[str, ...]
    clips: tuple[str, ...]
    gaps_s: tuple[float, ...]
    sample_rate: int
    texts: Mapping[str, tuple[str, ...]]

    @property
    def n_turns(self) -> int:
        return len(self.speakers)

    def transcript(self, source: str) -> list[tuple[str, str]]:
        """(speaker, text) per turn for a transcript source ('gt' or 'asr:<model>')."""
        if source not in self.texts:
            raise KeyError(f"sample {self.sample_id} has no transcript source {source!r}; has {sorted(self.texts)}")
        return list(zip(self.speakers, self.texts[source]))

    def turn_bounds(self) -> list[tuple[int, int]]:
        """Sample offsets (start, end) of each turn in the assembled waveform at `self.sample_rate`."""
        bounds, cursor = [], 0
        for i, clip in enumerate(self.clips):
            length = _clip_length(clip, self.sample_rate)
            bounds.append((cursor, cursor + length))
            cursor += length + (round(self.gaps_s[i] * self.sample_rate) if i < len(self.gaps_s) else 0)
        return bounds


def _clip_length(path: str, sample_rate: int) -> int:
    import soundfile as sf

    info = sf.info(path)
    return round(info.frames * sample_rate / info.samplerate)


def assemble_waveform(
    sample: Sample, sample_rate: int | None = None, turn_audio: Mapping[int, np.ndarray] | None = None
) -> tuple[np.ndarray, int]:
    """The sample's full dialogue as one waveform: turns in order, original pauses, at `sample_rate`.

    `turn_audio` replaces chosen turns' audio (at the manifest rate): controls use it to mask or
    perturb one turn without writing files.
    """
    clips = [
        turn_audio[i] if turn_audio and i in turn_audio else audio_lib.read_audio(path, sample.sample_rate)[0]
        for i, path in enumerate(sample.clips)
    ]
    waveform = audio_lib.concatenate_turns(clips, sample.gaps_s, sample.sample_rate)
    if sample_rate and sample_rate != sample.sample_rate:
        return audio_lib.resample(waveform, sample.sample_rate, sample_rate), sample_rate
    return waveform, sample.sample_rate


@dataclass
class Manifest:
    data: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path) -> Manifest:
        return cls(read_json(path))

    @property
    def dialogue_id(self) -> str:
        return self.data["dialogue_id"]

    @property
    def usable(self) -> bool:
        return self.data["status"] == "ok"

    def samples(self, include_original: bool = True) -> Iterator[Sample]:
        if not self.usable:
            return
        turns = self.data["turns"]
        speakers = tuple(t["speaker"] for t in turns)
        clips = tuple(t["clip"] for t in turns)
        gaps = tuple(self.data["gaps_s"])
        sources = sorted(turns[0]["texts"]) if turns else []
        base_texts = {s: tuple(t["texts"][s] for t in turns) for s in sources}
        common = {
            "dialogue_id": self.dialogue_id,
            "speakers": speakers,
            "gaps_s": gaps,
            "sample_rate": self.data["sample_rate"],
        }
        if include_original:
            yield Sample(
                original_id(self.dialogue_id),
                category=None,
                severity=SAFE_SEVERITY,
                turn_index=None,
                clips=clips,
                texts=base_texts,
                **common,
            )
        for variant in self.data["variants"]:
            if variant["status"] != "ok":
                continue
            t = variant["turn_index"]
            yield Sample(
                variant["variant_id"],
                category=variant["category"],
                severity=variant["severity"],
                turn_index=t,
                clips=_replace(clips, t, variant["clip"]),
                texts={s: _replace(base_texts[s], t, variant["texts"][s]) for s in sources},
                **common,
            )


def _replace(items: Sequence[str], index: int, value: str) -> tuple[str, ...]:
    return tuple(value if i == index else item for i, item in enumerate(items))


def build_manifest(
    dialogue_json: str,
    variant_tables: Sequence[str],
    tts_tables: Sequence[str],
    asr_tables: Mapping[str, str],
    out_path: str,
) -> dict[str, Any]:
    """Gather one dialogue's turns, variants, clips and transcripts (per source) into its manifest."""
    import polars as pl

    from lalm_judge.corpus import Dialogue
    from lalm_judge.io import write_json

    dialogue = Dialogue.load(dialogue_json)
    transcripts: dict[str, dict[tuple[str, int], str]] = {}
    for name, table in asr_tables.items():
        frame = pl.read_parquet(table)
        transcripts[asr_source(name)] = {
            (r["sample_id"], r["turn_index"]): r["text"] for r in frame.iter_rows(named=True)
        }
    clips = {r["variant_id"]: r["clip"] for t in tts_tables for r in pl.read_parquet(t).iter_rows(named=True)}

    def texts_for(sample: str, turn_index: int, ground_truth: str) -> dict[str, str]:
        return {GROUND_TRUTH: ground_truth, **{s: table[(sample, turn_index)] for s, table in transcripts.items()}}

    turns = [
        {
            "index": t.index,
            "speaker": t.speaker,
            "emotion": t.emotion,
            "clip": t.clip,
            "start": t.start,
            "end": t.end,
            "texts": texts_for(original_id(dialogue.dialogue_id), t.index, t.text),
        }
        for t in dialogue.turns
    ]
    variants = []
    for table in variant_tables:
        for row in pl.read_parquet(table).iter_rows(named=True):
            ok = row["status"] == "ok"
            variants.append(
                {
                    "variant_id": row["variant_id"],
                    "turn_index": row["turn_index"],
                    "category": row["category"],
                    "severity": row["severity"],
                    "emotion": row["emotion"],
                    "status": row["status"],
                    "generator": row["generator"],
                    "model": row["model"],
                    "prompt_version": row["prompt_version"],
                    "clip": clips.get(row["variant_id"]) if ok else None,
                    "texts": texts_for(row["variant_id"], row["turn_index"], row["text"]) if ok else None,
                }
            )
    manifest = {
        "dialogue_id": dialogue.dialogue_id,
        "status": dialogue.status,
        "skip_reason": dialogue.skip_reason,
        "sample_rate": dialogue.sample_rate,
        "n_turns": len(turns),
        "gaps_s": dialogue.gaps_s(),
        "transcript_sources": [GROUND_TRUTH, *transcripts],
        "turns": turns,
        "variants": variants,
    }
    write_json(out_path, manifest)
    return manifest


def audio_accounting(manifest_paths: Sequence[str]) -> dict[str, float]:
    """Audio seconds synthesized/transcribed by the one-turn design vs. the naive design that renders and
    transcribes every sample (each original and each variant) as a full dialogue."""
    import soundfile as sf

    turn_s = variant_turn_s = naive_s = 0.0
    n_variants = 0
    for path in manifest_paths:
        manifest = Manifest.load(path).data
        durations = [sf.info(t["clip"]).duration for t in manifest["turns"]]
        gaps = sum(manifest["gaps_s"])
        turn_s += sum(durations)
        naive_s += sum(durations) + gaps  # the original is a full dialogue in both designs
        for variant in manifest["variants"]:
            if variant["status"] != "ok":
                continue
            new = sf.info(variant["clip"]).duration
            variant_turn_s += new
            naive_s += sum(durations) - durations[variant["turn_index"]] + new + gaps
            n_variants += 1
    design_s = turn_s + variant_turn_s
    return {
        "n_variants": n_variants,
        "original_turn_audio_s": turn_s,
        "variant_turn_audio_s": variant_turn_s,
        "design_audio_s": design_s,
        "naive_full_dialogue_audio_s": naive_s,
        "ratio": design_s / naive_s if naive_s else float("nan"),
    }


def export_sample_audio(manifest_path: str, sample_id: str, out_wav: str, sample_rate: int | None = None) -> None:
    """Write one sample's full-dialogue waveform (the only place a variant dialogue is materialized)."""
    samples = {s.sample_id: s for s in Manifest.load(manifest_path).samples()}
    if sample_id not in samples:
        raise KeyError(f"{manifest_path} has no usable sample {sample_id!r}")
    waveform, sr = assemble_waveform(samples[sample_id], sample_rate)
    audio_lib.write_wav(out_wav, waveform, sr)


def write_shard_index(manifest_paths: Sequence[str], out_path: str) -> None:
    """List a shard's manifests with content hashes (so the index changes whenever a manifest does)."""
    import hashlib

    from lalm_judge.io import write_json

    entries = [{"path": p, "sha256": hashlib.sha256(Path(p).read_bytes()).hexdigest()} for p in manifest_paths]
    write_json(out_path, {"manifests": entries})


def read_shard_index(index_path: str) -> list[str]:
    return [entry["path"] for entry in read_json(index_path)["manifests"]]
