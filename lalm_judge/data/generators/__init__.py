"""Rewrite generators: the interface that turns one safe turn into unsafe variants, and their registry.

A generator receives one `RewriteRequest` per (category, severity) of a turn and answers one
`RewriteResult` each, in the same order. Failures are results with a status, never exceptions,
except for configuration errors (missing key, unknown option), which stop the job with a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.registry import LazyRegistry
from lalm_judge.core.taxonomy import VariantKey

# ok: a usable rewrite; refusal: the model declined; invalid_json / schema_error: the answer could not be
# used after every re-ask; error: the endpoint rejected the request (an HTTP 4xx that is no refusal). An endpoint
# that stays unreachable after every retry fails the job instead (a rerun asks again; `generators.llm`).
STATUSES = ("ok", "refusal", "invalid_json", "schema_error", "error")


class GeneratorConfigError(ValueError):
    """A generator config block that cannot be used; the message names the key and what to do."""


@dataclass(frozen=True, eq=False)
class RewriteRequest:
    """Rewrite turn `turn_index` of `dialogue` into `category` at `severity`."""

    dialogue: Dialogue
    turn_index: int
    category: str
    severity: int
    seed: int

    @property
    def key(self) -> VariantKey:
        return VariantKey(self.dialogue.dialogue_id, self.turn_index, self.category, self.severity)


@dataclass(frozen=True)
class RewriteResult:
    status: str
    text: str | None = None
    emotion: str | None = None
    attempts: int = 1
    error: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown rewrite status {self.status!r}; expected one of {STATUSES}")
        if (self.status == "ok") != (self.text is not None and self.emotion is not None):
            raise ValueError(f"a rewrite has text and emotion exactly when its status is 'ok' (got {self!r})")


class RewriteGenerator(Protocol):
    name: str
    model: str
    prompt_version: str
    # The sampling settings the rewrites depend on (recorded as the `generation` provenance column).
    generation: Mapping[str, object]

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[RewriteResult]: ...


GENERATORS = LazyRegistry(
    "rewrite generator",
    {
        "template": "lalm_judge.data.generators.template:TemplateGenerator",
        "llm": "lalm_judge.data.generators.llm:LLMGenerator",
    },
    extras={"llm": "the openai client (the 'judge' extra of lalm-judge)"},
)


def check_config_keys(config: Mapping[str, object], known: Sequence[str], generator: str) -> None:
    """Reject keys a generator does not know, so that a typo is not silently ignored."""
    unknown = sorted(set(config) - set(known) - {"name"})
    if unknown:
        raise GeneratorConfigError(
            f"unknown key(s) {unknown} in the {generator!r} generator config; known keys: {sorted(known)}"
        )


def build_generator(config: Mapping[str, object], cache_dir: str | Path) -> RewriteGenerator:
    """Instantiate the generator named by `config['name']` with the rest of the block as its options."""
    name = config.get("name")
    if not isinstance(name, str):
        raise GeneratorConfigError(f"the generator config needs a 'name' (one of {GENERATORS.names()})")
    return GENERATORS.get(name)(config, Path(cache_dir))
