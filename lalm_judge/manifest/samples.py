"""Reading per-dialogue manifests: every sample (the safe original and each variant) with its clips and its
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

from lalm_judge.audio import waveform as waveform_lib
from lalm_judge.core.files import read_json
from lalm_judge.core.taxonomy import SAFE_SEVERITY, original_id


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
    # Transcript source ('gt', 'asr:<model>') -> one text per turn.
    texts: Mapping[str, tuple[str, ...]]

    @property
    def n_turns(self) -> int:
        return len(self.speakers)

    def transcript(self, source: str) -> list[tuple[str, str]]:
        """(speaker, text) per turn for a transcript source ('gt' or 'asr:<model>')."""
        if source not in self.texts:
            raise KeyError(f"sample {self.sample_id} has no transcript source {source!r}; has {sorted(self.texts)}")
        return list(zip(self.speakers, self.texts[source]))


@dataclass(frozen=True)
class AssembledAudio:
    """A sample's full-dialogue waveform and where each turn lies in it (sample offsets, end exclusive)."""

    waveform: np.ndarray
    sample_rate: int
    turn_bounds: tuple[tuple[int, int], ...]


def assemble_waveform(
    sample: Sample, sample_rate: int | None = None, turn_audio: Mapping[int, np.ndarray] | None = None
) -> AssembledAudio:
    """The sample's full dialogue as one waveform: turns in order, original pauses, at `sample_rate`.

    `turn_audio` replaces chosen turns' audio (at the manifest rate): controls use it to mask or
    perturb one turn without writing files.
    """
    rate = sample.sample_rate
    clips = [
        turn_audio[i] if turn_audio and i in turn_audio else waveform_lib.read_audio(path, rate)[0]
        for i, path in enumerate(sample.clips)
    ]
    joined = waveform_lib.concatenate_turns(clips, sample.gaps_s, rate)
    bounds, cursor = [], 0
    for i, clip in enumerate(clips):
        bounds.append((cursor, cursor + len(clip)))
        cursor += len(clip) + (max(0, round(sample.gaps_s[i] * rate)) if i < len(sample.gaps_s) else 0)
    if not sample_rate or sample_rate == rate:
        return AssembledAudio(joined, rate, tuple(bounds))
    resampled = waveform_lib.resample(joined, rate, sample_rate)
    ratio = sample_rate / rate
    n = len(resampled)
    scaled = tuple((min(round(start * ratio), n), min(round(end * ratio), n)) for start, end in bounds)
    return AssembledAudio(resampled, sample_rate, scaled)


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


def export_sample_audio(manifest_path: str, sample_id: str, out_wav: str, sample_rate: int | None = None) -> None:
    """Write one sample's full-dialogue waveform (the only place a variant dialogue is materialized)."""
    samples = {s.sample_id: s for s in Manifest.load(manifest_path).samples()}
    if sample_id not in samples:
        raise KeyError(f"{manifest_path} has no usable sample {sample_id!r}")
    assembled = assemble_waveform(samples[sample_id], sample_rate)
    waveform_lib.write_wav(out_wav, assembled.waveform, assembled.sample_rate)
