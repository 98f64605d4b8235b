"""Comparative rationales of the preference pairs: a template offline, or any OpenAI-compatible LLM.

`template` (`pairs.template_rationale`) states the comparison the ratings give and appends the annotators'
notes; it needs nothing but the pair. `llm` asks an OpenAI-compatible endpoint (GPT-4o, a `vllm serve`d
Qwen2.5-32B-Instruct as in the SageLM study, ...) to rewrite the notes into comparative form with the prompt
`rationale_prompt.yaml`, through the project's one endpoint client (`lalm_judge.core.endpoints`: the key from
the environment and redacted by value, retries with backoff, a total deadline per request, a concurrency cap)
and its per-request answer cache (one file per request: a rerun sends nothing for cached pairs).

An answer is used when it is a JSON object with a non-empty `rationale` that argues from the responses (it
quotes no rating or score: `RATING_WORDS`; the prompt shows the annotators' notes, never their ratings) and does
not contradict the pair's label by `lalm_judge.pairwise.consistency`'s rules; otherwise the endpoint is asked
again with the problem stated, up to `max_retries` times. A pair that ends without a usable rationale keeps its
status (`invalid_json`, `inconsistent`, `quotes_ratings`, `refusal`, `error`) and no rationale: the export leaves
it out and counts it, it never substitutes the template silently. Requests the endpoint never answers (its
retries spent) fail the job once the others are answered and cached, so a rerun asks only those.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lalm_judge.core.endpoints import CachedChat, Question, ResponseCache, chat_request_key, decode_json
from lalm_judge.core.files import read_yaml
from lalm_judge.core.refusals import opens_with_refusal
from lalm_judge.core.vocabulary import FINISH_CONTENT_FILTER, TIE
from lalm_judge.data.generators import GeneratorConfigError
from lalm_judge.pairwise.consistency import contradicts, rationale_verdict
from lalm_judge.preference.pairs import ASPECT_WORDS

PROMPT_PATH = Path(__file__).with_name("rationale_prompt.yaml")
TEMPLATE = "template"
LLM = "llm"
OK = "ok"
QUOTES_RATINGS = "quotes_ratings"
# A rationale that argues from the annotators' ratings instead of the responses (it would teach a judge to invent
# scores): "rated 4", "ratings", "4 out of 5", "3/5".
RATING_WORDS = re.compile(r"\brat(?:ed|ing|ings)\b|\bout of (?:5|five|10|ten)\b|\b\d+\s*/\s*(?:5|10)\b", re.IGNORECASE)


@dataclass(frozen=True)
class PairNotes:
    """What the rationale of one (pair, aspect) is written from."""

    key: str  # "<pair item id>/<aspect>"
    instruction: str
    responses: tuple[str, str]
    aspect: str
    ratings: tuple[int, int]
    notes: tuple[str, str]
    label: str


@dataclass(frozen=True)
class RationaleResult:
    status: str
    rationale: str | None = None
    attempts: int = 0
    error: str | None = None


@dataclass(frozen=True)
class RationalePrompt:
    version: str
    system: str
    user: str
    reask: str

    @classmethod
    def load(cls, path: str | Path = PROMPT_PATH) -> RationalePrompt:
        data = read_yaml(path)
        missing = [
            key for key in ("version", "system", "user", "reask") if not isinstance(data, dict) or key not in data
        ]
        if missing:
            raise GeneratorConfigError(f"{path}: rationale prompt lacks key(s) {missing}")
        return cls(str(data["version"]), data["system"], data["user"], data["reask"])

    def messages(self, notes: PairNotes) -> list[dict[str, str]]:
        verdict = (
            "the two responses are about equally good (Tie)"
            if notes.label == TIE
            else f"Response {notes.label} is better"
        )
        values = {
            "instruction": notes.instruction,
            "response1": notes.responses[0],
            "response2": notes.responses[1],
            "aspect": ASPECT_WORDS.get(notes.aspect, notes.aspect.replace("_", " ")),
            "note1": notes.notes[0] or "(no note)",
            "note2": notes.notes[1] or "(no note)",
            "verdict": verdict,
        }
        return [
            {"role": "system", "content": string.Template(self.system).substitute(values).strip()},
            {"role": "user", "content": string.Template(self.user).substitute(values).strip()},
        ]

    def reask_message(self, problem: str) -> dict[str, str]:
        return {"role": "user", "content": string.Template(self.reask).substitute(problem=problem).strip()}


def interpret_answer(reply: str | None, label: str, finish_reason: str | None = None) -> RationaleResult:
    """Classify one reply: ok (a rationale that does not argue against the label), or why not."""
    if finish_reason == FINISH_CONTENT_FILTER:
        return RationaleResult("refusal", error="the endpoint's content filter stopped the answer")
    if not reply or not reply.strip():
        return RationaleResult("invalid_json", error="empty reply")
    try:
        answer = decode_json(reply)
    except ValueError:
        if opens_with_refusal(reply):
            return RationaleResult("refusal", error=f"refused: {reply.strip()[:200]}")
        return RationaleResult("invalid_json", error=f"not a JSON object: {reply.strip()[:200]!r}")
    rationale = answer.get("rationale") if isinstance(answer, dict) else None
    if not isinstance(rationale, str) or not rationale.strip():
        return RationaleResult("invalid_json", error='the JSON object has no non-empty string "rationale"')
    rationale = " ".join(rationale.split())
    if opens_with_refusal(rationale):
        return RationaleResult("refusal", error=f"refused: {rationale[:200]}")
    if RATING_WORDS.search(rationale):
        return RationaleResult(
            QUOTES_RATINGS, error="the rationale mentions ratings or scores; it must argue from the responses"
        )
    if contradicts(label, rationale):
        argued = rationale_verdict(rationale)
        shown = "a tie" if argued == TIE else f"Response {argued}"
        wanted = "a tie" if label == TIE else f"Response {label}"
        return RationaleResult("inconsistent", error=f"the rationale argues for {shown} but the verdict is {wanted}")
    return RationaleResult(OK, rationale=rationale)


class LLMRationales:
    """Rewrites the rationales of many pairs concurrently, cached; one instance per job."""

    def __init__(self, config: Mapping[str, Any], cache_dir: str | Path, seed: int = 0):
        self.chat = CachedChat.from_config(
            config,
            caller="the rationale rewriter",
            what="rationale",
            default_prompt=PROMPT_PATH,
            cache=ResponseCache(Path(cache_dir), RationaleResult),
            error=GeneratorConfigError,
        )
        self.settings = self.chat.settings
        self.prompt = RationalePrompt.load(self.settings.prompt)
        self.chat.check_prompt_version(self.prompt.version)
        self.seed = seed

    @property
    def source(self) -> str:
        return f"llm:{self.settings.model}:{self.prompt.version}"

    def cache_key(self, notes: PairNotes, messages: list[dict[str, str]]) -> tuple[str, dict[str, Any]]:
        fields = {
            "model": self.settings.model,
            "prompt_version": self.prompt.version,
            "pair": notes.key,
            "seed": self.seed,
            **self.settings.sampling,
        }
        return chat_request_key(fields, messages)

    def rewrite(self, pairs: Sequence[PairNotes]) -> list[RationaleResult]:
        return self.chat.ask([self._question(notes) for notes in pairs], self.prompt.reask_message)

    def _question(self, notes: PairNotes) -> Question:
        messages = self.prompt.messages(notes)
        return Question(
            *self.cache_key(notes, messages),
            messages,
            seed=self.seed,
            label=notes.key,
            interpret=lambda reply: interpret_answer(reply.text, notes.label, reply.finish_reason),
        )
