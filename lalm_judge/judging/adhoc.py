"""Ad-hoc scoring outside the workflow: one canonical `dialogue.json` (its safe original) with one judge cell,
optionally with one full-dialogue audio file in place of the turn clips (`lalm-judge score`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lalm_judge.audio.waveform import read_audio
from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.taxonomy import SAFE_SEVERITY, original_id
from lalm_judge.core.vocabulary import AUDIO, TranscriptSource
from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import JudgeBackend, JudgeSpec
from lalm_judge.judging.cell import AudioLoader, cell_settings, dialogue_audio
from lalm_judge.judging.job import score_samples
from lalm_judge.judging.prompts import Prompt
from lalm_judge.judging.windows import Window
from lalm_judge.manifest.samples import Sample


def _resolve_clip(clip: str | None, base: Path) -> str:
    if clip is None:
        return ""
    path = Path(clip)
    return str(path if path.is_absolute() or path.exists() else base / path)


def sample_from_dialogue(dialogue_path: str | Path) -> Sample:
    """The safe original of a canonical `dialogue.json` as a Sample (ground-truth transcript, its clips)."""
    dialogue_path = Path(dialogue_path)
    dialogue = Dialogue.load(dialogue_path)
    if dialogue.status != "ok":
        raise ValueError(f"dialogue {dialogue.dialogue_id} ({dialogue_path}) was not ingested: {dialogue.skip_reason}")
    return Sample(
        sample_id=original_id(dialogue.dialogue_id),
        dialogue_id=dialogue.dialogue_id,
        category=None,
        severity=SAFE_SEVERITY,
        turn_index=None,
        speakers=tuple(t.speaker for t in dialogue.turns),
        clips=tuple(_resolve_clip(t.clip, dialogue_path.parent) for t in dialogue.turns),
        gaps_s=tuple(dialogue.gaps_s()),
        sample_rate=dialogue.sample_rate,
        texts={TranscriptSource.GT: tuple(t.text for t in dialogue.turns)},
    )


def whole_file_audio(path: str | Path) -> AudioLoader:
    """An audio loader that uses one full-dialogue file, without turn boundaries, for every sample."""

    def load(sample: Sample, sample_rate: int) -> tuple[np.ndarray, list[Window]]:
        waveform, _ = read_audio(path, sample_rate)
        return waveform, [Window(tuple(range(sample.n_turns)), 0, len(waveform))]

    return load


def score_one(
    spec: JudgeSpec,
    sample: Sample,
    modality: str = "text",
    prompt: Prompt | str | Path = "basic",
    transcript_source: str = TranscriptSource.GT,
    *,
    audio_path: str | Path | None = None,
    backend: JudgeBackend | None = None,
    audio_sample_rate: int = 16000,
) -> dict[str, Any]:
    """Score one sample ad hoc; `audio_path` replaces its assembled audio by one full-dialogue file."""
    if modality == AUDIO:
        transcript_source = TranscriptSource.NONE
    cell = cell_settings(spec, modality, transcript_source, prompt, "clean", audio_sample_rate)
    backend = backend if backend is not None else BACKENDS.get(spec.backend)(spec)
    loader = whole_file_audio(audio_path) if audio_path is not None else dialogue_audio
    return score_samples([sample], cell, backend, load_audio=loader)[0]
