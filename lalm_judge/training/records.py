"""Training examples: SageLM/LLaMA-Factory records read and checked, and the seeded mix of a stage.

A record (LLaMA-Factory's alpaca layout, as SageLM's data and the pairwise track's export write it) is

    {"instruction": "... ### Response 1:\\n<audio>\\n\\n### Response 2:\\n<audio>\\n\\n", "input": "",
     "output": "<1, 2 or Tie>\\n<rationale>", "audios": ["<response 1>", "<response 2>"]}

The user turn is `instruction`, then a newline and `input` when that is not empty (LLaMA-Factory's alpaca
converter). Each `<audio>` placeholder is where the matching entry of `audios` goes, in order; the audio paths stay
inside the dataset's `audio_root` (no absolute path, no `..`, no symbolic link out of it), as in the pairwise
track's SageLM import. A training record must carry its label: the first line of `output` is exactly 1, 2 or Tie.
The rationale after it is what rationale-augmented SFT adds to the label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from lalm_judge.pairwise.items import ItemError
from lalm_judge.pairwise.sagelm import RECORD_AUDIO, contained_path, read_records, split_output
from lalm_judge.training.settings import DatasetSource, StageSettings, TrainingError


@dataclass(frozen=True)
class TrainingRecord:
    """One example: the user text with `<audio>` placeholders, the target answer, the audio files in order."""

    source: str  # "<file> record <index>", for messages
    dataset: str
    user: str
    output: str
    audios: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.output.partition("\n")[0]

    def as_row(self) -> dict[str, object]:
        """The row the trainer's dataset holds (plain types; the collator reads it back)."""
        return {"source": self.source, "user": self.user, "output": self.output, "audios": list(self.audios)}


def _record(raw: Mapping[str, object], where: str, dataset: DatasetSource) -> TrainingRecord:
    instruction, query, output, audios = (raw.get(key) for key in ("instruction", "input", "output", "audios"))
    if not isinstance(instruction, str) or not instruction:
        raise TrainingError(f"{where}: needs a non-empty string 'instruction'")
    if query is not None and not isinstance(query, str):
        raise TrainingError(f"{where}: 'input' must be a string")
    if not isinstance(audios, list) or not audios or not all(isinstance(a, str) and a for a in audios):
        raise TrainingError(f"{where}: 'audios' must be a non-empty list of paths, got {audios!r}")
    user = f"{instruction}\n{query}" if query else instruction
    slots = user.count(RECORD_AUDIO)
    if slots != len(audios):
        raise TrainingError(
            f"{where}: the instruction has {slots} {RECORD_AUDIO} placeholders for {len(audios)} audios"
        )
    if output is not None and not isinstance(output, str):
        raise TrainingError(f"{where}: 'output' must be a string")
    try:
        label, _ = split_output(output, where)
    except ItemError as err:
        raise TrainingError(str(err)) from err
    if label is None:
        raise TrainingError(f"{where}: a training record needs its output: the label (1, 2 or Tie), then the rationale")
    paths = []
    for audio in audios:
        try:
            contained_path(audio, where, dataset.audio_root)
        except ItemError as err:
            raise TrainingError(str(err)) from None
        path = Path(dataset.audio_root) / audio
        if not path.is_file():
            raise TrainingError(f"{where}: audio file {path} does not exist (audio_root {dataset.audio_root})")
        paths.append(str(path))
    return TrainingRecord(source=where, dataset=dataset.name, user=user, output=output, audios=tuple(paths))


def read_dataset(dataset: DatasetSource) -> list[TrainingRecord]:
    """Every record of a dataset's files, in file order; raise naming the file and record of the first problem."""
    records = []
    for file in dataset.records:
        try:
            raw = read_records(file)
        except ItemError as err:
            raise TrainingError(f"training dataset {dataset.name}: {err}") from err
        records += [_record(item, f"{file} record {index}", dataset) for index, item in enumerate(raw)]
    if not records:
        raise TrainingError(f"training dataset {dataset.name}: its files {list(dataset.records)} hold no records")
    return records


def stage_records(
    stage: StageSettings, datasets: Mapping[str, Sequence[TrainingRecord]], seed: int
) -> list[TrainingRecord]:
    """The stage's examples: from each dataset of its mix, a seeded draw of that share of its records (all of
    them at 1), kept in source order. The draw depends on the seed, the stage and the dataset only."""
    chosen = []
    for name in sorted(stage.mix):
        records, share = datasets[name], stage.mix[name]
        count = len(records) if share >= 1 else max(1, math.floor(share * len(records)))
        if count == len(records):
            chosen += records
            continue
        generator = np.random.default_rng([seed, *(ord(c) for c in f"{stage.name}/{name}")])
        keep = np.sort(generator.choice(len(records), size=count, replace=False))
        chosen += [records[i] for i in keep]
    return chosen


@dataclass(frozen=True)
class AudioCut:
    """How many response clips are longer than the limit and get cut to it (never silently)."""

    limit_s: float
    n_clips: int
    n_cut: int
    longest_s: float


def audio_cut(records: Sequence[TrainingRecord], limit_s: float) -> AudioCut:
    durations = [sf.info(path).duration for path in sorted({a for record in records for a in record.audios})]
    return AudioCut(
        limit_s=limit_s,
        n_clips=len(durations),
        n_cut=sum(duration > limit_s for duration in durations),
        longest_s=max(durations, default=0.0),
    )


def describe_counts(records: Sequence[TrainingRecord]) -> dict[str, dict[str, int]]:
    """Records per dataset and label, for the training report."""
    counts: dict[str, dict[str, int]] = {}
    for record in records:
        per_label = counts.setdefault(record.dataset, {})
        per_label[record.label] = per_label.get(record.label, 0) + 1
    return {name: dict(sorted(labels.items())) for name, labels in sorted(counts.items())}
