"""The judge backend interface: a batch of requests in, one raw output per request out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class JudgeRequest:
    """One call to a judge model. `audio` is (waveform, sample_rate) for the audio modalities."""

    request_id: str
    system: str
    user: str
    audio: tuple[np.ndarray, int] | None = None
    # Transcript turns as (speaker, text): text-only baselines (embedding) read them directly.
    transcript: tuple[tuple[str, str], ...] = ()
    # (safe, unsafe) answer words of the `calibrated` prompt: a backend that exposes token probabilities
    # returns p_safe = P(safe) / (P(safe) + P(unsafe)) at the first generated token; None for other prompts.
    answer_tokens: tuple[str, str] | None = None


@dataclass
class JudgeOutput:
    text: str
    latency_s: float
    n_input_tokens: int | None = None
    n_output_tokens: int | None = None
    # P(safe) from token probabilities where the backend exposes them (the `calibrated` prompt uses it).
    p_safe: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class JudgeBackend(Protocol):
    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]: ...

    def describe(self) -> dict[str, str]:
        """{'model': ..., 'model_revision': ...} for provenance columns."""
        ...


MODALITIES = ("text", "audio", "audio_text")
LONG_AUDIO_POLICIES = ("chunk", "truncate", "skip")


@dataclass(frozen=True)
class JudgeSpec:
    """One entry of the judge registry in config (`judges.<name>`); backends are built from it."""

    name: str
    backend: str
    model: str
    revision: str = "main"
    modalities: tuple[str, ...] = ("text",)
    max_audio_s: float | None = None
    long_audio: str = "chunk"
    generation: dict[str, Any] = field(default_factory=dict)
    dtype: str = "auto"
    batch_size: int = 8
    # Backend-specific settings (base_url, api_key_env, gguf_file, model_class, tensor_parallel_size, ...).
    options: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @classmethod
    def from_config(cls, name: str, entry: dict[str, Any]) -> JudgeSpec:
        # Workflow-only keys: which cells are planned and which conda env runs them.
        values = {k: v for k, v in entry.items() if k not in ("prompts", "transcript_sources", "conda_env")}
        values["modalities"] = tuple(values.get("modalities", ("text",)))
        return cls(name=name, **values)
