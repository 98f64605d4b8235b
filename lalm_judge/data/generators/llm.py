"""The LLM rewrite generator: any OpenAI-compatible chat endpoint, concurrent, retried and cached.

All requests of a turn run concurrently under a semaphore (`concurrency`). Transport failures
(429, 408, 409, 5xx, timeouts, connection errors, and 200 answers that are not a chat completion: cut
short, not JSON, no choices) are retried with exponential backoff; unusable answers (not JSON, or JSON
outside the answer schema) are re-asked with the problem stated. Both are bounded by `max_retries`. A
refusal ends as status 'refusal' and is never replaced by other text.

A request whose transport retries run out fails the job (`EndpointUnavailable`, naming the endpoint) once
every other request of the turn has finished and been cached: an unreachable endpoint is not a property of
the variant, so it must not become a row that a rerun would keep. A request the endpoint rejects (an HTTP
400 that is not a content-policy refusal) becomes a row with status 'error'.

Refusals are recognised by, in order: the endpoint's `refusal` message field, a `content_filter`
finish reason, a 400 error naming a content policy, the answer's `"refused": true`, or a reply
(or rewritten text) that opens like a refusal (`lalm_judge.core.refusals.opens_with_refusal`).

Answers are cached on disk, one JSON file per request under `cache_dir`, so a rerun sends no
request for a cached key. Endpoint failures are not cached: a rerun retries them.
The API key is read from the environment variable named by `api_key_env` and never logged or written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import jsonschema
import openai
import yaml

from lalm_judge.core.endpoints import MALFORMED_RESPONSE, chat_request_key, first_choice, redact
from lalm_judge.core.files import read_json, write_json
from lalm_judge.core.refusals import opens_with_refusal
from lalm_judge.core.taxonomy import EMOTIONS
from lalm_judge.data.generators import (
    GeneratorConfigError,
    RewriteRequest,
    RewriteResult,
    check_config_keys,
)

log = logging.getLogger(__name__)

PROMPT_PATH = Path(__file__).with_name("rewrite_prompt.yaml")
RETRYABLE_STATUS = frozenset({408, 409, 429})
# Status codes that mean the configuration is wrong (key, permissions, model name): stop the job.
CONFIG_STATUS = frozenset({401, 403, 404})

_CODE_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


class MissingAPIKey(GeneratorConfigError):
    """The environment variable that should hold the API key is not set."""


class EndpointConfigError(RuntimeError):
    """The endpoint rejected the configuration (key, permissions, model); no further requests are sent."""


class EndpointUnavailable(RuntimeError):
    """Requests still failed in transport after every retry; the answered ones are cached for the rerun."""


@dataclass(frozen=True)
class LLMSettings:
    """Options of the `llm` generator block; each key is described in schemas/config.schema.yaml."""

    model: str
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    prompt: str = str(PROMPT_PATH)
    prompt_version: str | None = None
    temperature: float = 0.7
    max_tokens: int = 400
    concurrency: int = 8
    max_retries: int = 4
    timeout_s: float = 60.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    json_mode: bool = True
    send_seed: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LLMSettings:
        known = [f.name for f in fields(cls)]
        check_config_keys(config, known, "llm")
        if not config.get("model"):
            raise GeneratorConfigError("the 'llm' generator config needs 'model' (the endpoint's model name)")
        settings = cls(**{k: v for k, v in config.items() if k in known})
        if settings.concurrency < 1 or settings.max_retries < 0:
            raise GeneratorConfigError("llm generator: 'concurrency' must be >= 1 and 'max_retries' >= 0")
        return settings


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
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
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


def decode_json(reply: str) -> Any:
    """Parse a reply as JSON, tolerating a Markdown code fence or prose around one object."""
    fenced = _CODE_FENCE.match(reply)
    candidates = [fenced.group(1) if fenced else reply.strip()]
    start, end = reply.find("{"), reply.rfind("}")
    if 0 <= start < end:
        candidates.append(reply[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError("the reply is not a JSON object")


def interpret_reply(reply: str | None, schema: Mapping[str, Any], finish_reason: str | None = None) -> RewriteResult:
    """Classify one reply text into a result (attempts are filled in by the caller)."""
    if finish_reason == "content_filter":
        return RewriteResult("refusal", error="the endpoint's content filter stopped the answer")
    if not reply or not reply.strip():
        return RewriteResult("invalid_json", error="empty reply")
    try:
        answer = decode_json(reply)
    except ValueError:
        if opens_with_refusal(reply):
            return RewriteResult("refusal", error=f"refused: {reply.strip()[:200]}")
        cut = " (cut at max_tokens)" if finish_reason == "length" else ""
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


class ResponseCache:
    """One JSON file per request key under `root`, written atomically; results are `result_type` dataclasses."""

    def __init__(self, root: Path, result_type: type = RewriteResult):
        self.root = root
        self.result_type = result_type

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> RewriteResult | None:
        path = self.path(key)
        if not path.exists():
            return None
        return self.result_type(**read_json(path)["result"])

    def put(self, key: str, fields_: Mapping[str, Any], result: Any) -> None:
        record = {"key": fields_, "result": {f.name: getattr(result, f.name) for f in fields(result)}}
        write_json(self.path(key), record)


class GiveUp(Exception):
    """A non-retryable endpoint error (a row with status 'error' or 'refusal'), or transport retries exhausted
    (`unavailable`: the endpoint never answered)."""

    def __init__(self, message: str, attempts: int, result_status: str = "error", unavailable: bool = False):
        super().__init__(message)
        self.attempts = attempts
        self.result_status = result_status
        self.unavailable = unavailable


@dataclass(frozen=True)
class ChatReply:
    text: str | None
    finish_reason: str | None
    refusal: str | None
    attempts: int


class ChatEndpoint:
    """An OpenAI-compatible chat endpoint: the API key from the environment, one answer per call with
    transport failures retried under exponential backoff, the key never shown in messages. Shared by the
    rewrite generator and the preference builder's rationale rewriter."""

    def __init__(self, settings: LLMSettings, what: str = "the llm generator"):
        self.settings = settings
        self.what = what
        self.api_key = self._read_api_key()

    def _read_api_key(self) -> str:
        env = self.settings.api_key_env
        if env is None:  # local servers (vllm serve, transformers serve) that need no key
            return "no-key"
        key = os.environ.get(env)
        if not key:
            raise MissingAPIKey(
                f"{self.what} reads its API key from the environment variable {env!r}, which is not set; "
                f"export {env}=... (or set api_key_env to the variable that holds the key)"
            )
        return key

    @property
    def url(self) -> str:
        return self.settings.base_url or "https://api.openai.com/v1"

    def redact(self, message: str) -> str:
        return redact(message, self.api_key)

    def client(self) -> openai.AsyncOpenAI:
        # Retries are ours (counted, bounded, logged), so the client's own retries are off.
        return openai.AsyncOpenAI(
            api_key=self.api_key, base_url=self.settings.base_url, timeout=self.settings.timeout_s, max_retries=0
        )

    def request_options(self, seed: int) -> dict[str, Any]:
        options: dict[str, Any] = {
            "model": self.settings.model,
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        if self.settings.json_mode:
            options["response_format"] = {"type": "json_object"}
        if self.settings.send_seed:
            options["seed"] = seed
        return options

    async def complete(
        self,
        client: openai.AsyncOpenAI,
        semaphore: asyncio.Semaphore,
        messages: list[dict[str, str]],
        seed: int,
        label: str,
    ) -> ChatReply:
        """One answer from the endpoint, retrying transport failures with exponential backoff; `label` names
        the request in the log."""
        last_problem = ""
        for attempt in range(1, self.settings.max_retries + 2):
            retry_after: float | None = None
            try:
                async with semaphore:
                    completion = await client.chat.completions.create(messages=messages, **self.request_options(seed))
                choice = first_choice(completion)
                return ChatReply(
                    choice.message.content, choice.finish_reason, getattr(choice.message, "refusal", None), attempt
                )
            except openai.APIStatusError as err:
                code = err.status_code
                if code in CONFIG_STATUS:
                    raise EndpointConfigError(
                        f"the endpoint {self.url} answered HTTP {code} for model "
                        f"{self.settings.model!r}: check the key in ${self.settings.api_key_env}, its permissions "
                        "and the model name"
                    ) from None
                if code == 400 and _mentions_content_policy(err):
                    raise GiveUp(
                        f"refused by the endpoint's content policy (HTTP {code})", attempt, "refusal"
                    ) from None
                if code not in RETRYABLE_STATUS and code < 500:
                    raise GiveUp(self.redact(f"HTTP {code}: {err.message}")[:300], attempt) from None
                last_problem = f"HTTP {code}"
                retry_after = _retry_after_s(err)
            except (openai.APITimeoutError, openai.APIConnectionError) as err:
                last_problem = type(err).__name__
            except MALFORMED_RESPONSE as err:
                last_problem = f"malformed answer ({type(err).__name__})"
            if attempt <= self.settings.max_retries:
                delay = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2 ** (attempt - 1))
                if retry_after is not None:
                    delay = min(self.settings.backoff_max_s, max(delay, retry_after))
                log.info("%s: %s, retry %d in %.2fs", label, last_problem, attempt, delay)
                await asyncio.sleep(delay)
        attempts = self.settings.max_retries + 1
        raise GiveUp(f"{label}: gave up after {attempts} attempts: {last_problem}", attempts, unavailable=True)


async def ask_until_usable(
    endpoint: ChatEndpoint,
    client: openai.AsyncOpenAI,
    semaphore: asyncio.Semaphore,
    messages: list[dict[str, str]],
    *,
    seed: int,
    label: str,
    interpret: Callable[[ChatReply], Any],
    reask: Callable[[str], dict[str, str]],
    failure: Callable[[str, str, int], Any],
    unavailable: list[GiveUp] | None = None,
) -> Any:
    """Ask until `interpret` (reply -> a result dataclass with `status`, `error` and `attempts`) gives an 'ok'
    or 'refusal' result, re-asking with the problem stated, at most `max_retries` times; transport failures
    and refusals of the endpoint become `failure(status, error, attempts)`, and a request the endpoint never
    answered is also appended to `unavailable` (for the caller to fail the job). Returns the last result."""
    attempts, result = 0, failure("error", "no request sent", 1)
    for _ in range(endpoint.settings.max_retries + 1):
        try:
            reply = await endpoint.complete(client, semaphore, messages, seed, label)
        except GiveUp as given_up:
            if given_up.unavailable and unavailable is not None:
                unavailable.append(given_up)
            return failure(given_up.result_status, str(given_up), attempts + given_up.attempts)
        attempts += reply.attempts
        if reply.refusal:
            return failure("refusal", f"refused: {reply.refusal[:200]}", attempts)
        result = dataclasses.replace(interpret(reply), attempts=attempts)
        if result.status in ("ok", "refusal"):
            return result
        log.info("%s: %s, asking again", label, result.error)
        messages = [*messages, {"role": "assistant", "content": reply.text or ""}, reask(result.error or result.status)]
    return result


@dataclass(frozen=True)
class Question:
    """One request for `ask_all_cached`: its cache key and the fields it hashes, the messages, the seed, a label
    for the log, and how a reply becomes a result (`interpret`, as in `ask_until_usable`)."""

    key: str
    key_fields: dict[str, Any]
    messages: list[dict[str, str]]
    seed: int
    label: str
    interpret: Callable[[ChatReply], Any]


def ask_all_cached(
    endpoint: ChatEndpoint,
    cache: ResponseCache,
    questions: Sequence[Question],
    *,
    reask: Callable[[str], dict[str, str]],
    failure: Callable[[str, str, int], Any],
    what: str,
) -> list[Any]:
    """The result of every question, in order: from `cache`, or asked by `ask_until_usable`, at most
    `concurrency` at once over one client, and cached unless it ended in an endpoint error (a rerun asks those
    again). The first exception raised cancels the other requests and is raised. Questions the endpoint never
    answered fail the call once all the others are answered and cached (`EndpointUnavailable`, naming `what`
    the requests were)."""
    questions = list(questions)
    unavailable: list[GiveUp] = []
    semaphore = asyncio.Semaphore(endpoint.settings.concurrency)

    async def ask(client: openai.AsyncOpenAI, question: Question) -> Any:
        cached = cache.get(question.key)
        if cached is not None:
            return cached
        result = await ask_until_usable(
            endpoint,
            client,
            semaphore,
            question.messages,
            seed=question.seed,
            label=question.label,
            interpret=question.interpret,
            reask=reask,
            failure=failure,
            unavailable=unavailable,
        )
        if result.status != "error":
            cache.put(question.key, question.key_fields, result)
        return result

    async def ask_all() -> list[asyncio.Task]:
        async with endpoint.client() as client:
            try:
                async with asyncio.TaskGroup() as group:
                    return [group.create_task(ask(client, question)) for question in questions]
            except ExceptionGroup as failures:
                raise failures.exceptions[0] from None

    tasks = asyncio.run(ask_all())
    if unavailable:
        raise EndpointUnavailable(
            f"the endpoint {endpoint.url} did not answer {len(unavailable)} of {len(questions)} {what} "
            f"requests ({unavailable[0]}); the {len(questions) - len(unavailable)} answered ones are cached in "
            f"{cache.root}: rerun when the endpoint is reachable"
        )
    return [task.result() for task in tasks]


def load_rewrite_prompt(settings: LLMSettings) -> RewritePrompt:
    """The rewrite prompt the settings name, which must be the version they ask for (when they ask for one); the
    workflow calls this when it is parsed, the generator when it starts."""
    prompt = RewritePrompt.load(settings.prompt)
    if settings.prompt_version is not None and str(settings.prompt_version) != prompt.version:
        raise GeneratorConfigError(
            f"config asks for rewrite prompt version {settings.prompt_version!r} but "
            f"{settings.prompt} is version {prompt.version!r}; update one of them"
        )
    return prompt


class LLMGenerator:
    name = "llm"

    def __init__(self, config: Mapping[str, Any], cache_dir: str | Path):
        self.settings = LLMSettings.from_config(config)
        self.prompt = load_rewrite_prompt(self.settings)
        self.model = self.settings.model
        self.prompt_version = self.prompt.version
        self.generation = {
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
            "json_mode": self.settings.json_mode,
            "send_seed": self.settings.send_seed,
            "max_retries": self.settings.max_retries,  # also bounds the re-asks after unusable answers
        }
        self.cache = ResponseCache(Path(cache_dir))
        self.endpoint = ChatEndpoint(self.settings)

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
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        return chat_request_key(fields_, messages)

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[RewriteResult]:
        return ask_all_cached(
            self.endpoint,
            self.cache,
            [self._question(request) for request in requests],
            reask=self.prompt.reask_message,
            failure=lambda status, error, attempts: RewriteResult(status, attempts=attempts, error=error),
            what="rewrite",
        )

    def _question(self, request: RewriteRequest) -> Question:
        messages = self.prompt.messages(request)
        return Question(
            *self.cache_key(request, messages),
            messages,
            seed=request.seed,
            label=request.key.variant_id,
            interpret=lambda reply: interpret_reply(reply.text, self.prompt.response_schema, reply.finish_reason),
        )


def _mentions_content_policy(err: Any) -> bool:
    text = f"{getattr(err, 'code', '')} {getattr(err, 'message', '')}".lower()
    return any(marker in text for marker in ("content_policy", "content_filter", "content policy", "safety system"))


def _retry_after_s(err: Any) -> float | None:
    value = getattr(getattr(err, "response", None), "headers", {}).get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
