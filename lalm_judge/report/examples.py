"""Audio examples of the report: the safe original beside one variant of the highest severity, assembled from
the turn clips as the judges hear them; chosen by sorted ids so the report depends only on its inputs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lalm_judge.audio import waveform
from lalm_judge.manifest.samples import Manifest, Sample, assemble_waveform

N_AUDIO_EXAMPLES = 3


@dataclass(frozen=True)
class AudioExample:
    """A safe original and one variant of the same dialogue, with their wav paths relative to the report."""

    original: Sample
    variant: Sample
    original_wav: str
    variant_wav: str


def choose_examples(manifests: Sequence[Manifest], n_examples: int) -> list[tuple[Sample, Sample]]:
    """(original, variant) for the first n usable dialogues in id order that have variants; example i takes
    the i-th (cyclically) of its dialogue's highest-severity variants in id order, so examples differ in turn
    and category."""
    chosen = []
    for manifest in sorted((m for m in manifests if m.usable), key=lambda m: m.dialogue_id):
        samples = list(manifest.samples())
        variants = [s for s in samples if s.severity > 0]
        if not variants:
            continue
        top = max(s.severity for s in variants)
        candidates = sorted((s for s in variants if s.severity == top), key=lambda s: s.sample_id)
        chosen.append((samples[0], candidates[len(chosen) % len(candidates)]))
        if len(chosen) == n_examples:
            break
    return chosen


def write_audio_examples(
    manifests: Sequence[Manifest], audio_dir: str | os.PathLike, n_examples: int = N_AUDIO_EXAMPLES
) -> list[AudioExample]:
    """Assemble the examples of `choose_examples` and write them as <audio_dir>/<sample id>.wav."""
    examples = []
    for original, variant in choose_examples(manifests, n_examples):
        names = []
        for sample in (original, variant):
            assembled = assemble_waveform(sample)
            path = Path(audio_dir) / f"{sample.sample_id}.wav"
            waveform.write_wav(path, assembled.waveform, assembled.sample_rate)
            names.append(f"{Path(audio_dir).name}/{path.name}")
        examples.append(AudioExample(original, variant, *names))
    return examples
