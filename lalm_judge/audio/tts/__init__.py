"""Speech synthesis: engines behind one interface, registered by name and imported lazily.

An engine turns (text, voice, emotion, reference clips) into a mono waveform. Voices are plain
config mappings (`{engine: piper, ...}`) so that a speaker's voice is data, not code.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from lalm_judge.core.registry import LazyRegistry


@dataclass(frozen=True)
class SynthesisRequest:
    text: str
    emotion: str | None = None
    # Original clips of the same speaker: voice-cloning engines (XTTS) clone from them.
    reference_clips: tuple[str, ...] = ()
    reference_emotions: tuple[str, ...] = ()
    # Clips of another speaker carrying `emotion` (RAVDESS, `lalm_judge.audio.emotion_reference`): a cloning engine
    # takes the prosody from them and the voice from `reference_clips`.
    emotion_references: tuple[str, ...] = ()


@dataclass(frozen=True)
class Voice:
    engine: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, spec: Mapping[str, Any]) -> Voice:
        options = {k: v for k, v in spec.items() if k != "engine"}
        return cls(engine=spec["engine"], options=options)

    @property
    def key(self) -> tuple:
        return (self.engine, tuple(sorted(self.options.items())))


class TTSEngine(Protocol):
    def synthesize(self, request: SynthesisRequest) -> tuple[np.ndarray, int]: ...

    def describe(self) -> dict[str, str]:
        """Model id and revision for provenance columns."""
        ...


ENGINES = LazyRegistry(
    "TTS engine",
    {
        "piper": "lalm_judge.audio.tts.piper:PiperEngine",
        "espeak": "lalm_judge.audio.tts.espeak:EspeakEngine",
        "xtts": "lalm_judge.audio.tts.xtts:XTTSEngine",
    },
    extras={"xtts": "the XTTS environment (envs/tts-xtts.yaml: coqui-tts, torchaudio on a GPU node)"},
)


@functools.cache
def _engine(engine: str, options: tuple) -> TTSEngine:
    return ENGINES.get(engine)(**dict(options))


def get_engine(voice: Voice) -> TTSEngine:
    """One engine instance per distinct voice per process (models load once per job)."""
    return _engine(*voice.key)


def synthesize(voice: Voice, request: SynthesisRequest) -> tuple[np.ndarray, int]:
    if not request.text.strip():
        raise ValueError("cannot synthesize an empty text")
    audio, sr = get_engine(voice).synthesize(request)
    if len(audio) == 0:
        raise RuntimeError(f"{voice.engine} produced no audio for {request.text[:60]!r}")
    return audio.astype(np.float32), sr


def voice_for_speaker(voices: Mapping[str, Mapping[str, Any]], speaker: str, speakers: Sequence[str]) -> Voice:
    """The configured voice of `speaker`; unknown speakers take the voices in order of first appearance."""
    if speaker in voices:
        return Voice.from_config(voices[speaker])
    defaults = [spec for name, spec in voices.items() if name.startswith("default")]
    if not defaults:
        raise KeyError(f"no voice configured for speaker {speaker!r} and no 'default*' voices in tts.voices")
    return Voice.from_config(defaults[list(speakers).index(speaker) % len(defaults)])
