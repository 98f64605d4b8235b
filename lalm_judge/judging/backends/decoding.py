"""How a local judge decodes (`judges.<name>.generation`): greedy, or sampled with one seed per sample.

Keys the `transformers` and `vllm` backends honour:
- `max_new_tokens`: the longest answer;
- `temperature`: 0 (the default) is greedy decoding, one answer per request; above 0 the answer is sampled;
- `top_p`, `top_k`: nucleus and top-k filtering of the sampled distribution (only with `temperature` > 0; unset
  means off, never a library's default such as transformers' top_k 50);
- `seeds`: one sample per seed (SageLM sampled each request once with each of the seeds 42, 123 and 1234, at
  temperature 0.95, top_p 0.7, top_k 50). Required with `temperature` > 0, so every sampled answer can be
  reproduced; refused with greedy decoding (every sample would be the same answer).

A request with several samples is answered with the first seed's sample as its text and every sample, with its
seed, in `JudgeOutput.extra["samples"]`; the pairwise judge stage aggregates them (`pairwise.samples`).
Anything else in `generation` is refused for these backends (`decoding_problems`, checked when the config is
parsed): a setting a backend cannot honour is never recorded as if it had been used. The `openai` backend
passes its generation settings to the endpoint as they are, except `seeds`, which it cannot honour (it asks each
request once); the `embedding` baseline does not decode at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lalm_judge.core.endpoints import reasoning_sampling_problem

LOCAL_BACKENDS = ("transformers", "vllm")
LOCAL_KEYS = ("max_new_tokens", "temperature", "top_p", "top_k", "seeds")
SAMPLING_KEYS = ("top_p", "top_k", "seeds")
DEFAULT_MAX_NEW_TOKENS = 256
SAMPLES = "samples"


@dataclass(frozen=True)
class Decoding:
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seeds: tuple[int, ...] = ()

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    @property
    def sample_seeds(self) -> tuple[int | None, ...]:
        """The seed of each sample: the configured seeds, or one unseeded (greedy) answer."""
        return self.seeds or (None,)

    @classmethod
    def from_generation(cls, generation: Mapping[str, Any], judge: str, backend: str) -> Decoding:
        """The decoding of a local judge's `generation` settings; ValueError naming what cannot be honoured."""
        problems = decoding_problems(backend, generation, judge)
        if problems:
            raise ValueError("; ".join(problems))
        return cls(
            max_new_tokens=int(generation.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)),
            temperature=float(generation.get("temperature", 0.0)),
            top_p=None if generation.get("top_p") is None else float(generation["top_p"]),
            top_k=None if generation.get("top_k") is None else int(generation["top_k"]),
            seeds=tuple(int(seed) for seed in generation.get("seeds") or ()),
        )


def decoding_problems(
    backend: str, generation: Mapping[str, Any], judge: str = "judge", *, model: str = ""
) -> list[str]:
    """What in a judge's `generation` its backend (and, on the openai backend, its `model`) cannot honour (empty
    when everything can be)."""
    where = f"judges.{judge}.generation"
    if backend == "openai":
        problems = (
            [f"{where}.seeds: the openai backend asks each request once; remove seeds"] if "seeds" in generation else []
        )
        reasoning = reasoning_sampling_problem(
            model, generation.get("temperature", 0.0), generation.get("reasoning_effort"), where
        )
        return problems + ([reasoning] if reasoning else [])
    if backend not in LOCAL_BACKENDS:
        extra = sorted(set(generation) - {"max_new_tokens"})
        return [f"{where}: the {backend} backend does not decode, so {extra} would not be used"] if extra else []
    problems = [
        f"{where}.{key}: the {backend} backend does not use {key!r}; it honours {', '.join(LOCAL_KEYS)}"
        for key in sorted(set(generation) - set(LOCAL_KEYS))
    ]
    temperature = float(generation.get("temperature", 0.0) or 0.0)
    seeds = generation.get("seeds") or []
    if temperature < 0:
        problems.append(f"{where}.temperature must be >= 0 (0 is greedy decoding), got {temperature}")
    if temperature > 0 and not seeds:
        problems.append(
            f"{where}: temperature {temperature} samples the answers; give `seeds` (one sample per seed, e.g. "
            "[42, 123, 1234] as SageLM) so that every answer can be reproduced"
        )
    if temperature == 0:
        problems += [
            f"{where}.{key}: greedy decoding (temperature 0) gives one answer, so {key!r} would not be used; "
            "set a temperature above 0 to sample, or remove it"
            for key in SAMPLING_KEYS
            if generation.get(key) is not None
        ]
    if len(set(seeds)) != len(seeds):
        problems.append(f"{where}.seeds: {seeds} repeats a seed (its samples would be the same answer)")
    return problems
