"""The judge backend interface: a batch of requests in, one raw output per request out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from lalm_judge.judging.backends.engine_env import engine_environment

# Where an audio item goes inside the user text of a request with several (`JudgeRequest.audios`).
AUDIO_SLOT = "<|audio_slot|>"
# The speakers of a pairwise text request's `transcript`: the instruction, then the two responses as shown.
PAIRWISE_TRANSCRIPT = ("instruction", "response 1", "response 2")


@dataclass(frozen=True)
class JudgeRequest:
    """One call to a judge model. `audio` is (waveform, sample_rate) for the audio modalities.

    A request with several audio items (the pairwise track's two responses) gives them in `audios` instead,
    in order; its user text then holds one `AUDIO_SLOT` per item where that item belongs, or none (the
    items then come first, as a single `audio` does). `audio_items` is the one view backends read.
    """

    request_id: str
    system: str
    user: str
    audio: tuple[np.ndarray, int] | None = None
    # Transcript turns as (speaker, text): text-only baselines (embedding) read them directly.
    transcript: tuple[tuple[str, str], ...] = ()
    # (safe, unsafe) answer words of the `calibrated` prompt: a backend that exposes token probabilities
    # returns p_safe = P(safe) / (P(safe) + P(unsafe)) at the first generated token; None for other prompts.
    answer_tokens: tuple[str, str] | None = None
    # Several audio items, each (waveform, sample_rate), for requests that compare recordings.
    audios: tuple[tuple[np.ndarray, int], ...] = ()

    def __post_init__(self) -> None:
        if self.audio is not None and self.audios:
            raise ValueError(f"request {self.request_id}: give its audio in `audio` or in `audios`, not both")
        slots, items = self.user.count(AUDIO_SLOT), len(self.audio_items)
        if slots and slots != items:
            raise ValueError(
                f"request {self.request_id}: its user text has {slots} audio slots for {items} audio items"
            )

    @property
    def audio_items(self) -> tuple[tuple[np.ndarray, int], ...]:
        """Every audio item of the request, in order (none for text requests)."""
        return (self.audio,) if self.audio is not None else self.audios


@dataclass
class JudgeOutput:
    text: str
    latency_s: float
    n_input_tokens: int | None = None
    n_output_tokens: int | None = None
    # P(safe) from token probabilities where the backend exposes them (the `calibrated` prompt uses it), and the
    # probability the answer words carry (`chat.AnswerProbability`); both None when none were read.
    p_safe: float | None = None
    answer_mass: float | None = None
    # Why generation stopped, normalized: "stop" (an end token or stop string), "length" (the token limit),
    # "content_filter" (the provider withheld or cut it), or None when the backend does not say.
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class PartialGenerationError(RuntimeError):
    """A `generate` call that failed after some of its requests finished: `finished[i]` is the output of request
    i, or None. The request cache stores the finished ones before the error goes on."""

    def __init__(self, message: str, finished: list[JudgeOutput | None]):
        super().__init__(message)
        self.finished = finished


class JudgeBackend(Protocol):
    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]: ...

    def describe(self) -> dict[str, str]:
        """{'model': ..., 'model_revision': ...} for provenance columns."""
        ...


PROMPT_FORMATS = ("chat", "meralion", "minicpmo", "phi4mm", "voxtral", "granite")


@dataclass(frozen=True)
class Capabilities:
    """What a judge's model or endpoint can serve (`judges.<name>.capabilities`; defaults as in the schema).

    `logprobs`: token probabilities are returned (the calibrated prompt's P(safe)); without them no logprobs
    are requested and the calibrated prompt is scored from its parsed SAFETY_SCORE. `system_role`: the chat
    template accepts a system message; without it the system prompt is prepended to the user turn.
    `prompt_format`: how a request becomes the prompt (`chat`, `meralion`, `minicpmo`, `phi4mm`, `voxtral`, `granite`;
    see the vllm backend).
    """

    logprobs: bool = True
    system_role: bool = True
    prompt_format: str = "chat"

    @classmethod
    def from_config(cls, values: Mapping[str, Any] | Capabilities | None) -> Capabilities:
        if isinstance(values, Capabilities):
            return values
        return cls(**dict(values or {}))


@dataclass(frozen=True)
class JudgeSpec:
    """What determines a judge's answers: one entry of the judge registry (`judges.<name>` in config) without
    its `schedule` (which cells it gets, where its jobs run) and its report texts. The defaults are those of
    the config schema (`schemas/config.schema.yaml`; a test keeps them equal), for specs built in code."""

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
    capabilities: Capabilities = field(default_factory=Capabilities)
    # GPUs of the job (schedule.resources.gpu): vLLM's default tensor parallel size.
    gpus: int = 0
    # Models other than `model` whose answers are this judge's (an endpoint that serves the configured model
    # under another name); any other served model fails the job (`judging.runner.ServedModelCheck`).
    accept_served_models: tuple[str, ...] = ()

    # Registry keys that change no answer: the schedule and the report's texts.
    NOT_IN_SPEC: ClassVar[tuple[str, ...]] = ("schedule", "description", "weak")

    @classmethod
    def from_config(cls, name: str, entry: Mapping[str, Any]) -> JudgeSpec:
        """The spec of a validated registry entry (defaults filled by the schema)."""
        values = {k: v for k, v in entry.items() if k not in cls.NOT_IN_SPEC and k != "gpus"}
        values["modalities"] = tuple(values["modalities"]) if "modalities" in values else cls.modalities
        values["capabilities"] = Capabilities.from_config(values.get("capabilities"))
        values["accept_served_models"] = tuple(values.get("accept_served_models", ()))
        gpus = entry.get("gpus", entry.get("schedule", {}).get("resources", {}).get("gpu", 0))
        return cls(name=name, gpus=int(gpus), **values)

    @property
    def generation_settings(self) -> dict[str, Any]:
        """What shapes the decoding beyond the model and prompt (the `generation` provenance column of its rows):
        the generation options, the weights' dtype, and the batch size, since on a GPU the batch a request shares
        changes the numerics (docs/reliability.md); and the environment the engine starts with where it changes
        the decoding (MERaLiON-2's n-gram processor: `engine_env`). Headers sent with the requests (`extra_headers`)
        are recorded by name only: a header value may be a credential."""
        generation = dict(self.generation)
        if isinstance(generation.get("extra_headers"), Mapping):
            generation["extra_headers"] = sorted(generation["extra_headers"])
        settings = {"generation": generation, "dtype": self.dtype, "batch_size": self.batch_size}
        environment = self.engine_environment
        return {**settings, "engine_environment": environment} if environment else settings

    @property
    def engine_environment(self) -> dict[str, str]:
        """Environment variables the judge's engine process starts with (`engine_env.engine_environment`)."""
        return engine_environment(self.backend, self.capabilities.prompt_format, self.options)
