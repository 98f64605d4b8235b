"""The LLM rewrite generator: the rewrite prompt and the reading of its answers, asked through the project's one
endpoint client (`lalm_judge.core.endpoints`: concurrency, retries with backoff, the total deadline per request,
the per-request answer cache, the key from the environment and redacted by value).

All requests of a turn run concurrently. Unusable answers (not JSON, or JSON outside the answer schema) are
re-asked with the problem stated, at most `max_retries` times. A refusal ends as status 'refusal' and is never
replaced by other text.

A request whose transport retries run out fails the job (`EndpointUnavailable`, naming the endpoint) once
every other request of the turn has finished and been cached: an unreachable endpoint is not a property of
the variant, so it must not become a row that a rerun would keep. A request the endpoint rejects (an HTTP
400 that is not a content-policy refusal) becomes a row with status 'error'; a 401, 403 or 404 fails the job
(`EndpointConfigError`: the key, its permissions or the model name).

Refusals are recognised by, in order: the endpoint's `refusal` message field, a `content_filter`
finish reason, a 400 error naming a content policy, the answer's `"refused": true`, or a reply
(or rewritten text) that opens like a refusal (`lalm_judge.core.refusals.opens_with_refusal`).

Answers are cached on disk, one JSON file per request under `cache_dir`, so a rerun sends no
request for a cached key. Endpoint failures are not cached: a rerun retries them.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from lalm_judge.core.endpoints import (
    CachedChat,
    ChatSettings,
    Completion,
    Question,
    ResponseCache,
    chat_request_key,
    decode_json,
)
from lalm_judge.core.files import read_yaml
from lalm_judge.core.refusals import opens_with_refusal
from lalm_judge.core.taxonomy import EMOTIONS
from lalm_judge.core.vocabulary import FINISH_CONTENT_FILTER, FINISH_LENGTH
from lalm_judge.data.generators import GeneratorConfigError, RewriteRequest, RewriteResult

PROMPT_PATH = Path(__file__).with_name("rewrite_prompt.yaml")
CALLER = "the llm generator"


@dataclass(frozen=True)
class RewritePrompt:
    version: str
    system: str
    user: str
    reask: str
    categories: Mapping[str, str]
    severities: Mapping[int, str]
    response_schema: Mapping[str, Any]

    @classmethod
    def load(cls, path: str | Path = PROMPT_PATH) -> RewritePrompt:
        data = read_yaml(path)
        missing = [k for k in ("version", "system", "user", "reask", "categories", "severities") if k not in data]
        if missing:
            raise GeneratorConfigError(f"{path}: rewrite prompt lacks key(s) {missing}")
        schema = dict(data.get("response_schema") or {})
        schema["properties"] = {**schema.get("properties", {}), "emotion": {"type": "string", "enum": list(EMOTIONS)}}
        jsonschema.Draft202012Validator.check_schema(schema)
        return cls(
            version=str(data["version"]),
            system=data["system"],
            user=data["user"],
            reask=data["reask"],
            categories=dict(data["categories"]),
            severities={int(k): v for k, v in data["severities"].items()},
            response_schema=schema,
        )

    def messages(self, request: RewriteRequest) -> list[dict[str, str]]:
        """Chat messages asking for one rewrite; every turn of the dialogue is given as context."""
        if request.category not in self.categories or request.severity not in self.severities:
            raise GeneratorConfigError(
                f"the rewrite prompt defines no category {request.category!r} or severity {request.severity}"
            )
        turn = request.dialogue.turns[request.turn_index]
        dialogue = "\n".join(
            f"[{t.index}] {t.speaker} ({t.emotion or 'unlabelled'}): {t.text}" for t in request.dialogue.turns
        )
        values = {
            "emotions": ", ".join(EMOTIONS),
            "category_definitions": "\n".join(f"- {c}: {d}" for c, d in self.categories.items()),
            "severity_definitions": "\n".join(f"- {s}: {d}" for s, d in self.severities.items()),
            "dialogue": dialogue,
            "turn_index": request.turn_index,
            "speaker": turn.speaker,
            "original_emotion": turn.emotion or "unlabelled",
            "category": request.category,
            "category_definition": self.categories[request.category],
            "severity": request.severity,
            "severity_definition": self.severities[request.severity],
        }
        return [
            {"role": "system", "content": string.Template(self.system).substitute(values).strip()},
            {"role": "user", "content": string.Template(self.user).substitute(values).strip()},
        ]

    def reask_message(self, problem: str) -> dict[str, str]:
        return {"role": "user", "content": string.Template(self.reask).substitute(problem=problem).strip()}


def interpret_reply(reply: str | None, schema: Mapping[str, Any], finish_reason: str | None = None) -> RewriteResult:
    """Classify one reply text into a result (attempts are filled in by the caller)."""
    if finish_reason == FINISH_CONTENT_FILTER:
        return RewriteResult("refusal", error="the endpoint's content filter stopped the answer")
    if not reply or not reply.strip():
        return RewriteResult("invalid_json", error="empty reply")
    try:
        answer = decode_json(reply)
    except ValueError:
        if opens_with_refusal(reply):
            return RewriteResult("refusal", error=f"refused: {reply.strip()[:200]}")
        cut = " (cut at max_tokens)" if finish_reason == FINISH_LENGTH else ""
        return RewriteResult("invalid_json", error=f"not a JSON object{cut}: {reply.strip()[:200]!r}")
    if isinstance(answer, dict) and answer.get("refused") is True:
        return RewriteResult("refusal", error=f"refused: {str(answer.get('reason', ''))[:200]}")
    problems = sorted(jsonschema.Draft202012Validator(schema).iter_errors(answer), key=lambda e: list(e.path))
    if problems:
        where = "/".join(str(p) for p in problems[0].path) or "answer"
        return RewriteResult("schema_error", error=f"{where}: {problems[0].message}"[:300])
    text = answer["text"].strip()
    if opens_with_refusal(text):
        return RewriteResult("refusal", error=f"refused: {text[:200]}")
    return RewriteResult("ok", text=text, emotion=answer["emotion"])


def load_rewrite_prompt(settings: ChatSettings) -> RewritePrompt:
    """The rewrite prompt the settings name, which must be the version they ask for (when they ask for one); the
    workflow calls this when it is parsed, the generator when it starts."""
    prompt = RewritePrompt.load(settings.prompt)
    settings.check_prompt_version(prompt.version, "rewrite", GeneratorConfigError)
    return prompt


def rewrite_settings(config: Mapping[str, Any]) -> ChatSettings:
    """The settings of an `llm` generator block (`GeneratorConfigError` for an unknown key, a missing model or an
    impossible endpoint setting); reads no key, so the workflow checks them when it is parsed."""
    return ChatSettings.from_config({"prompt": str(PROMPT_PATH), **config}, CALLER, GeneratorConfigError)


class LLMGenerator:
    name = "llm"

    def __init__(self, config: Mapping[str, Any], cache_dir: str | Path):
        self.settings = rewrite_settings(config)
        self.prompt = load_rewrite_prompt(self.settings)
        cache = ResponseCache(Path(cache_dir), RewriteResult)
        self.chat = CachedChat.of(self.settings, caller=CALLER, what="rewrite", cache=cache, error=GeneratorConfigError)
        self.model = self.settings.model
        self.prompt_version = self.prompt.version
        self.generation = {
            **self.settings.sampling,
            "json_mode": self.settings.json_mode,
            "send_seed": self.settings.send_seed,
            "max_retries": self.settings.endpoint.max_retries,  # also bounds the re-asks after unusable answers
        }

    def cache_key(self, request: RewriteRequest, messages: list[dict[str, str]]) -> tuple[str, dict[str, Any]]:
        """Stable key of one request; the messages' hash covers the prompt text and the dialogue content."""
        fields_ = {
            "model": self.model,
            "prompt_version": self.prompt_version,
            "dialogue_id": request.dialogue.dialogue_id,
            "turn_index": request.turn_index,
            "category": request.category,
            "severity": request.severity,
            "seed": request.seed,
            **self.settings.sampling,
        }
        return chat_request_key(fields_, messages)

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[RewriteResult]:
        return self.chat.ask([self._question(request) for request in requests], self.prompt.reask_message)

    def _question(self, request: RewriteRequest) -> Question:
        messages = self.prompt.messages(request)
        return Question(
            *self.cache_key(request, messages),
            messages,
            seed=request.seed,
            label=request.key.variant_id,
            interpret=lambda reply: self.interpret(reply),
        )

    def interpret(self, reply: Completion) -> RewriteResult:
        return interpret_reply(reply.text, self.prompt.response_schema, reply.finish_reason)
