"""What the project knows about a judge's model family and what it assumes for the judge, in words
(`lalm-judge judges`).

For a model of a known family (`judging.backends.capabilities.FAMILIES`) the facts are the family's: the engines that
serve it, the audio window its processor keeps, the audio tokens per second of its encoder and its context (the numbers
`options.max_model_len: auto` is computed with, `workflow.context_length`), its placeholder, what is switched off or
relied on, its known limits, the tests that run it on its engines, and for an API model its retirement as the provider
states it. For any other model the project knows nothing beyond the entry, and says what it assumes instead: the
entry's own `max_audio_s` and `capabilities`, and Whisper's unpooled 50 audio tokens a second for `auto`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lalm_judge.judging.backends.capabilities import FAMILIES, ModelFamily, family_of
from lalm_judge.workflow.context_length import (
    AUDIO_TOKENS_PER_CHUNK,
    AUDIO_TOKENS_PER_ITEM,
    AUDIO_TOKENS_PER_S,
    CONTEXT_TOKENS,
    UNKNOWN_AUDIO_TOKENS_PER_S,
)


def audio_rate_text(family: ModelFamily | None) -> str:
    """How many audio tokens the `auto` context counts for one audio item of the family."""
    if family is None:
        return f"{UNKNOWN_AUDIO_TOKENS_PER_S} audio tokens a second assumed (Whisper's unpooled frame rate)"
    if family.name in AUDIO_TOKENS_PER_CHUNK:
        per_chunk, chunk_s, _ = AUDIO_TOKENS_PER_CHUNK[family.name]
        return f"{per_chunk} audio tokens per started {chunk_s} s"
    if family.name in AUDIO_TOKENS_PER_ITEM:
        return f"{AUDIO_TOKENS_PER_ITEM[family.name]} audio tokens per audio item, whatever its length"
    if family.name in AUDIO_TOKENS_PER_S:
        return f"{AUDIO_TOKENS_PER_S[family.name]} audio tokens a second"
    if not family.audio or "openai" in family.backends:
        return "not counted (no local engine context)"
    return f"not known: {UNKNOWN_AUDIO_TOKENS_PER_S} audio tokens a second assumed"


def family_lines(family: ModelFamily) -> list[str]:
    """The facts of a family, one line each."""
    lines = [f"engines: {', '.join(family.backends)}" + (f" ({family.why_backends})" if family.why_backends else "")]
    if family.audio:
        window = (
            f"{family.max_audio_s:g} s (longer audio would be cut silently)" if family.max_audio_s else "none known"
        )
        lines.append(f"audio window: {window}")
        if "openai" not in family.backends:
            lines.append(f"audio tokens: {audio_rate_text(family)}")
        if family.placeholder:
            lines.append(f"audio placeholder: {family.placeholder} (one per audio item)")
    else:
        lines.append("audio: none (a text model)")
    context = CONTEXT_TOKENS.get(family.name)
    if context:
        lines.append(f"context: {context:,} tokens")
    known = {key: getattr(family, key) for key in ("system_role", "prompt_format", "logprobs")}
    stated = [f"{key} {json.dumps(value)}" for key, value in known.items() if value is not None]
    if stated:
        lines.append(f"capabilities it needs: {', '.join(stated)}")
    if family.gated:
        lines.append("gated hub repository: needs HF_TOKEN with access")
    for label, text in (("assumes", family.assumes), ("known limits", family.limits), ("retires", family.retires)):
        if text:
            lines.append(f"{label}: {text}")
    lines.append(
        f"verified by: {', '.join(family.verified_by)}"
        if family.verified_by
        else "verified by: no test in this project"
    )
    return lines


@dataclass(frozen=True)
class JudgeFacts:
    """One judge of a config: its family (None: none known) and what it will run with."""

    name: str
    model: str
    backend: str
    family: ModelFamily | None
    entry: Mapping[str, Any]

    def lines(self) -> list[str]:
        """The judge's facts and assumptions as indented lines under a heading."""
        head = f"{self.name}: {self.model} on {self.backend}"
        if self.family is None:
            body = ["family: none known; the entry is checked only against itself", f"assumes: {self._assumed()}"]
        else:
            body = [f"family: {self.family.name}", *family_lines(self.family)]
        body.append(f"this entry: {_entry_text(self.entry)}")
        return [head, *(f"  {line}" for line in body)]

    def _assumed(self) -> str:
        """What a judge of no known family is taken to be: its entry, as written."""
        parts = [f"its capabilities hold ({_capabilities_text(self.entry)})"]
        if any(modality != "text" for modality in self.entry["modalities"]):
            limit = self.entry.get("max_audio_s")
            parts.append(
                f"the model reads {limit:g} s of audio whole" if limit is not None else "it reads audio of any length"
            )
            if self.backend == "vllm":
                parts.append(f"options.max_model_len: auto counts {audio_rate_text(None)}")
        return "; ".join(parts)


def _capabilities_text(entry: Mapping[str, Any]) -> str:
    capabilities = entry.get("capabilities", {})
    return ", ".join(f"{key} {json.dumps(capabilities[key])}" for key in ("system_role", "prompt_format", "logprobs"))


def _entry_text(entry: Mapping[str, Any]) -> str:
    parts = [f"modalities {', '.join(entry['modalities'])}"]
    if entry.get("max_audio_s") is not None:
        parts.append(f"max_audio_s {entry['max_audio_s']:g} (long_audio {entry['long_audio']})")
    if entry["backend"] in ("transformers", "vllm"):
        parts.append(f"revision {entry['revision']}")
    max_model_len = entry.get("options", {}).get("max_model_len")
    if max_model_len is not None:
        parts.append(f"max_model_len {max_model_len}")
    if entry["backend"] != "embedding":
        parts.append(f"capabilities {_capabilities_text(entry)}")
    return "; ".join(parts)


def judge_facts(name: str, entry: Mapping[str, Any]) -> JudgeFacts:
    """The facts of a validated judge entry."""
    return JudgeFacts(name, entry["model"], entry["backend"], family_of(entry["model"]), entry)


def known_families() -> list[list[str]]:
    """Every known family's facts: a heading and its lines."""
    return [[f"{family.name} (model ids matching {family.pattern})", *family_lines(family)] for family in FAMILIES]
