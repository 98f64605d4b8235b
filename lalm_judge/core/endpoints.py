"""The one client of OpenAI-compatible chat endpoints, for every caller: the `llm` rewrite generator
(`data.generators.llm`), the preference builder's rationale writer (`preference.rationales`) and the `openai`
judge backend (`judging.backends.openai_backend`). Its settings and their defaults are declared once, in the
config schema's `$defs/endpoint` (`EndpointSettings`).

What one request goes through (`EndpointClient.complete`), the same for the three callers:
- at most `concurrency` requests of a caller in flight at once;
- each attempt bounded by a total deadline, `timeout_s`: connecting, sending and receiving the whole body (an
  endpoint that trickles its answer a byte at a time is given up on at the deadline, as one that says nothing);
- transport failures retried after a backoff of `backoff_base_s * 2**(retry - 1)` seconds, or the server's own
  cooldown when longer (the Retry-After header; Gemini's `retryDelay`, which its 429 carries in the error
  body's `google.rpc.RetryInfo`), both capped at `backoff_max_s`, at most `max_retries` times. A server that
  asks to wait past what the request can still wait (its remaining retries, each at most `backoff_max_s` apart,
  would all come too early; or the batch job ends first, `SLURM_JOB_END_TIME`) is given up on at once
  (`EndpointCoolingDown`, naming the time the server gave) instead of retried in vain. Transport
  failures: HTTP 408, 409, 429 and 5xx, a deadline passed, a connection error, and a 200 whose body is not a
  chat completion (cut short, not JSON, no choices: `MALFORMED_RESPONSE`). Every retry is logged and kept in
  `EndpointClient.retries`;
- any other HTTP error is not retried: `EndpointRejected` (HTTP 401, 403 and 404 as `EndpointConfigError`: the
  key, its permissions or the model name are wrong, and every other request would fail the same way);
  retries spent: `EndpointGaveUp`;
- the answer read into a `Completion`: its text (a `content` that is not a string is kept as JSON, with
  `content_error` saying what it was), why generation stopped (`finish_reason`, normalized), the refusal
  field, the model that served it, the token counts and logprobs.

Keys come only from the environment variables the config names (`api_key_env` for the bearer key,
`header_env` for keys sent in other headers, e.g. Azure's `api-key`), through `core.secrets`: their values are
redacted from every answer text and error message the client hands on, so an endpoint that quotes the key back
puts it in no table, cache entry or log.

`ask_all_cached` is the cache hook of the callers that keep one JSON answer per request (rewrites, rationales):
results come from the cache or from `ask_until_usable` (which re-asks, with the problem stated, when an answer
cannot be used), and are cached unless the endpoint failed them. The judge backend's answers are cached by the
judge stage's request engine instead (`judging.runner`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import email.utils
import functools
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lalm_judge.core.files import read_json, read_schema, stable_hash, write_json
from lalm_judge.core.secrets import read_secret, redact, redact_value
from lalm_judge.core.vocabulary import FINISH_CONTENT_FILTER, FINISH_LENGTH, FINISH_STOP

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
# Sent to servers configured with `api_key_env: null`; the client library requires some key.
NO_KEY_PLACEHOLDER = "no-key"
RETRYABLE_STATUS = frozenset({408, 409, 429})
# The Unix time at which SLURM stops the batch job (set in every job's environment).
JOB_END_ENV = "SLURM_JOB_END_TIME"
# Status codes that mean the configuration is wrong (key, permissions, model name).
CONFIG_STATUS = frozenset({401, 403, 404})
# A 400 that names one of these is the endpoint's content policy refusing the request.
CONTENT_POLICY_MARKERS = ("content_policy", "content_filter", "content policy", "safety system")
# Gemini's cooldown in a 429 body: error.details[] of type google.rpc.RetryInfo, e.g. {"retryDelay": "34.4s"}.
_RETRY_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")
_CODE_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)

# The normalized finish reasons (`Completion.finish_reason`, `JudgeOutput.finish_reason`; `core.vocabulary`): "stop"
# (an end token or stop string), "length" (the token limit), "content_filter" (the provider withheld or cut the
# answer), from each provider's own words.
_FINISH_REASONS = {
    "stop": FINISH_STOP,
    "end_turn": FINISH_STOP,
    "stop_sequence": FINISH_STOP,
    "eos": FINISH_STOP,
    "length": FINISH_LENGTH,
    "max_tokens": FINISH_LENGTH,
    "content_filter": FINISH_CONTENT_FILTER,
    "safety": FINISH_CONTENT_FILTER,
    "recitation": FINISH_CONTENT_FILTER,
    "prohibited_content": FINISH_CONTENT_FILTER,
    "blocklist": FINISH_CONTENT_FILTER,
    "spii": FINISH_CONTENT_FILTER,
}


def normalized_finish_reason(raw: Any) -> str | None:
    """The normalized finish reason of an endpoint's or engine's own value (case-insensitive); None when it is
    absent or says nothing of these three (e.g. "tool_calls")."""
    return _FINISH_REASONS.get(str(raw).lower()) if raw is not None else None


class MalformedCompletion(ValueError):
    """A 200 answer that is not a usable chat completion (no choices, no message)."""


# Exceptions of one attempt that mean "the answer was unusable, ask again" (besides transport errors).
MALFORMED_RESPONSE: tuple[type[Exception], ...] = (MalformedCompletion, json.JSONDecodeError)


class EndpointRejected(RuntimeError):
    """The endpoint answered an HTTP error that is not retried; the message is redacted."""

    def __init__(self, message: str, status: int, attempts: int, content_policy: bool = False):
        super().__init__(message)
        self.status, self.attempts, self.content_policy = status, attempts, content_policy


class EndpointConfigError(EndpointRejected):
    """HTTP 401, 403 or 404: the key, its permissions or the model name; no further request can succeed."""


class EndpointGaveUp(RuntimeError):
    """A request still failed in transport after every retry: `label` names it, `problem` is the last failure."""

    def __init__(self, message: str, attempts: int, label: str, problem: str):
        super().__init__(message)
        self.attempts, self.label, self.problem = attempts, label, problem


class EndpointCoolingDown(EndpointGaveUp):
    """The server asked to be asked again later than the request can still wait (its retries, the job's end): given
    up at once, naming the server's time."""

    def __init__(self, message: str, attempts: int, label: str, problem: str, cooldown: Cooldown):
        super().__init__(message, attempts, label, problem)
        self.cooldown = cooldown


class EndpointUnavailable(RuntimeError):
    """Requests of a batch the endpoint never answered; the answered ones are cached for the rerun."""


# --- settings ---------------------------------------------------------------------------------------------------
@functools.cache
def endpoint_defaults() -> dict[str, Any]:
    """The defaults of `$defs/endpoint` in the config schema, the one place they are declared."""
    schema = read_schema()
    return {name: spec["default"] for name, spec in schema["$defs"]["endpoint"]["properties"].items()}


@dataclass(frozen=True)
class EndpointSettings:
    """Where an endpoint is and how it is asked (`$defs/endpoint`; every key is described there)."""

    base_url: str | None
    api_key_env: str | None
    header_env: Mapping[str, str]
    concurrency: int
    max_retries: int
    timeout_s: float
    backoff_base_s: float
    backoff_max_s: float

    @classmethod
    def from_config(cls, values: Mapping[str, Any], what: str) -> EndpointSettings:
        """The endpoint settings among `values` (other keys are ignored), the schema's defaults for the others."""
        merged = {**endpoint_defaults(), **{k: v for k, v in values.items() if k in endpoint_defaults()}}
        settings = cls(
            base_url=merged["base_url"],
            api_key_env=merged["api_key_env"],
            header_env=dict(merged["header_env"] or {}),
            concurrency=int(merged["concurrency"]),
            max_retries=int(merged["max_retries"]),
            timeout_s=float(merged["timeout_s"]),
            backoff_base_s=float(merged["backoff_base_s"]),
            backoff_max_s=float(merged["backoff_max_s"]),
        )
        if settings.concurrency < 1 or settings.max_retries < 0 or settings.timeout_s <= 0:
            raise ValueError(f"{what}: concurrency must be >= 1, max_retries >= 0 and timeout_s > 0")
        return settings

    @property
    def url(self) -> str:
        return self.base_url or OPENAI_BASE_URL

    def backoff_s(self, retry: int, cooldown_s: float | None) -> float:
        """The pause before retry number `retry` (1-based): exponential, or the server's longer cooldown."""
        delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (retry - 1))
        return max(delay, min(self.backoff_max_s, cooldown_s)) if cooldown_s else delay


# --- answers ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Completion:
    """One chat completion as read by the client (every text redacted)."""

    text: str | None  # the message content; JSON of it when it was not a string (`content_error`)
    finish_reason: str | None  # normalized (`normalized_finish_reason`)
    raw_finish_reason: str | None  # as the endpoint said it
    refusal: str | None
    served_model: str | None  # the response's `model`
    prompt_tokens: int | None
    completion_tokens: int | None
    logprobs: Any
    attempts: int
    latency_s: float  # of the attempt that answered
    content_error: str | None = None


@dataclass(frozen=True)
class Retry:
    """One retry: the request's label, the attempt that failed (1-based), what went wrong, the pause taken."""

    label: str
    attempt: int
    problem: str
    delay_s: float


def first_choice(completion: Any) -> Any:
    """The first choice of a chat completion; MalformedCompletion if there is none or it has no message."""
    choices = None if isinstance(completion, str | bytes) else getattr(completion, "choices", None)
    if not choices:
        shown = completion[:80] if isinstance(completion, str | bytes) else "a completion without choices"
        raise MalformedCompletion(f"the endpoint answered {shown!r} instead of a chat completion")
    choice = choices[0]
    if getattr(choice, "message", None) is None:
        raise MalformedCompletion("the endpoint answered a choice without a message")
    return choice


def _content_text(content: Any) -> tuple[str | None, str | None]:
    """(text, problem) of a message's content: a string as it is; anything else as JSON with the problem."""
    if content is None or isinstance(content, str):
        return content, None
    shown = json.dumps(redact_value(content), sort_keys=True, default=str)
    return shown, f"the endpoint's message content is a {type(content).__name__}, not a string"


def read_completion(response: Any, attempts: int, latency_s: float) -> Completion:
    """A `Completion` of the `openai` client's response (MalformedCompletion when it is none)."""
    choice = first_choice(response)
    text, problem = _content_text(choice.message.content)
    usage = getattr(response, "usage", None)
    refusal = getattr(choice.message, "refusal", None)
    raw_reason = getattr(choice, "finish_reason", None)
    return Completion(
        text=None if text is None else redact(text),
        finish_reason=normalized_finish_reason(raw_reason),
        raw_finish_reason=None if raw_reason is None else str(raw_reason),
        refusal=redact(str(refusal)) if refusal else None,
        served_model=getattr(response, "model", None),
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
        logprobs=getattr(choice, "logprobs", None),
        attempts=attempts,
        latency_s=latency_s,
        content_error=problem,
    )


def retry_delay_from_body(body: Any) -> float | None:
    """The largest `retryDelay` ("12.5s") anywhere in an error body, in seconds; None when there is none."""
    found: list[float] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                match = _RETRY_DELAY.match(item) if key == "retryDelay" and isinstance(item, str) else None
                if match:
                    found.append(float(match.group(1)))
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body)
    return max(found) if found else None


@dataclass(frozen=True)
class Cooldown:
    """The pause a server asks for before the next attempt: its length, the time it ends and how the server said it
    (`Retry-After: 3600`, `Retry-After: <HTTP date>`, `retryDelay 34.4s`)."""

    seconds: float
    until: datetime.datetime  # UTC
    said: str


def _retry_after(header: str, now: datetime.datetime) -> Cooldown | None:
    """The Retry-After header: delay-seconds or an HTTP date (RFC 9110, 10.2.3); None when it is neither."""
    try:
        seconds = float(header)
    except ValueError:
        try:
            until = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            return None
        until = until if until.tzinfo else until.replace(tzinfo=datetime.UTC)
        return Cooldown(
            max(0.0, (until - now).total_seconds()), until.astimezone(datetime.UTC), f"Retry-After: {header}"
        )
    return Cooldown(max(0.0, seconds), now + datetime.timedelta(seconds=seconds), f"Retry-After: {header}")


def server_cooldown(err: Exception, now: datetime.datetime | None = None) -> Cooldown | None:
    """The server's requested pause of an HTTP error: Retry-After (seconds or a date) or a body's retryDelay, the
    longer; None when it asks for none."""
    now = now or datetime.datetime.now(datetime.UTC)
    response = getattr(err, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    found = [_retry_after(header, now)] if header else []
    delay = retry_delay_from_body(getattr(err, "body", None))
    if delay is not None:
        found.append(Cooldown(delay, now + datetime.timedelta(seconds=delay), f"retryDelay {delay:g}s"))
    found = [cooldown for cooldown in found if cooldown is not None]
    return max(found, key=lambda cooldown: cooldown.seconds) if found else None


def cooldown_s(err: Exception) -> float | None:
    """The length in seconds of the server's requested pause (`server_cooldown`), or None."""
    cooldown = server_cooldown(err)
    return cooldown.seconds if cooldown else None


def batch_job_end(environ: Mapping[str, str] | None = None) -> datetime.datetime | None:
    """When the batch job this process runs in will be stopped: SLURM's `SLURM_JOB_END_TIME` (a Unix time, set in
    the job's environment), or None outside such a job."""
    value = (os.environ if environ is None else environ).get(JOB_END_ENV, "")
    try:
        return datetime.datetime.fromtimestamp(int(value), datetime.UTC) if value else None
    except (ValueError, OverflowError, OSError):
        return None


def mentions_content_policy(err: Any) -> bool:
    text = f"{getattr(err, 'code', '')} {getattr(err, 'message', '')}".lower()
    return any(marker in text for marker in CONTENT_POLICY_MARKERS)


# --- the client -------------------------------------------------------------------------------------------------
@dataclass
class Session:
    """One event loop's connection pool and concurrency limit (`EndpointClient.session`)."""

    client: openai.AsyncOpenAI
    semaphore: asyncio.Semaphore


class EndpointClient:
    """An OpenAI-compatible chat endpoint as every caller of the project asks it (module docstring). `what` names
    the caller in messages ("the llm generator", "judge gemini")."""

    def __init__(self, settings: EndpointSettings, what: str, job_end: datetime.datetime | None = None):
        self.settings, self.what = settings, what
        # When the job running this client is stopped (SLURM's end time by default); None: no end is known.
        self.job_end = job_end if job_end is not None else batch_job_end()
        env = settings.api_key_env
        self._api_key = NO_KEY_PLACEHOLDER if env is None else read_secret(env, what)
        self._headers = {
            header: read_secret(variable, what, f"header_env.{header}")
            for header, variable in settings.header_env.items()
        }
        self.retries: list[Retry] = []
        self.n_attempts = 0

    @property
    def url(self) -> str:
        return self.settings.url

    def session(self) -> Session:
        """A client and semaphore for one `asyncio.run` (use as `async with session.client:`)."""
        import openai  # the `judge` extra; imported here so that the settings and defaults need no client

        # Retries and the deadline are ours (counted, bounded, logged), so the library's own retries are off.
        client = openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.settings.base_url,
            timeout=self.settings.timeout_s,
            max_retries=0,
            default_headers=self._headers or None,
        )
        return Session(client, asyncio.Semaphore(self.settings.concurrency))

    async def complete(
        self, session: Session, params: Mapping[str, Any] | Callable[[], Mapping[str, Any]], label: str
    ) -> Completion:
        """One chat completion of `params` (model, messages, ...), transport failures retried (module
        docstring); `label` names the request in logs and errors. The request holds one of the `concurrency`
        slots from its first attempt to its last; `params` may be a function, called once the slot is taken,
        so that at most `concurrency` requests' payloads (e.g. encoded audio) are in memory at a time."""
        async with session.semaphore:
            built = params() if callable(params) else params
            for attempt in range(1, self.settings.max_retries + 2):
                answer, cooldown = await self._attempt(session, built, attempt)
                if isinstance(answer, Completion):
                    return answer
                if attempt > self.settings.max_retries:
                    raise EndpointGaveUp(
                        f"{self.what}: the endpoint {self.url} failed request {label} after {attempt} attempts "
                        f"({answer}); check that the server is up and reachable, then rerun",
                        attempt,
                        label,
                        answer,
                    )
                if cooldown is not None:
                    self._check_cooldown(cooldown, label, attempt, answer)
                seconds = cooldown.seconds if cooldown else None
                await self._pause(label, attempt, answer, self.settings.backoff_s(attempt, seconds))
        raise AssertionError("unreachable")

    def _check_cooldown(self, cooldown: Cooldown, label: str, attempt: int, problem: str) -> None:
        """Give up at once (`EndpointCoolingDown`) when the server asks to wait past what the request may still wait:
        its remaining retries, each at most `backoff_max_s` apart, would all come before the server's time (each
        answered the same), or the job ends before it."""
        retries_left = self.settings.max_retries - attempt + 1
        budget = retries_left * self.settings.backoff_max_s
        limits = [
            (
                budget,
                f"its {retries_left} remaining retries, at most backoff_max_s {self.settings.backoff_max_s:g} s apart",
            )
        ]
        if self.job_end is not None:
            left = (self.job_end - datetime.datetime.now(datetime.UTC)).total_seconds()
            limits.append((left, f"the job ends at {_utc(self.job_end)} ({JOB_END_ENV})"))
        horizon, why = min(limits)
        if cooldown.seconds <= horizon:
            return
        raise EndpointCoolingDown(
            f"{self.what}: the endpoint {self.url} answered request {label} with {problem} and asks to be asked again "
            f"at {_utc(cooldown.until)} ({cooldown.said}), {cooldown.seconds:.0f} s from now: later than the request "
            f"can wait ({max(0.0, horizon):.0f} s: {why}); given up at once, rerun after that time",
            attempt,
            label,
            f"{problem}, asked to wait until {_utc(cooldown.until)}",
            cooldown,
        )

    async def _pause(self, label: str, attempt: int, problem: str, delay_s: float) -> None:
        self.retries.append(Retry(label, attempt, problem, delay_s))
        log.warning(
            "%s: request %s attempt %d failed (%s); retrying in %.2f s", self.url, label, attempt, problem, delay_s
        )
        await asyncio.sleep(delay_s)

    async def _attempt(
        self, session: Session, params: Mapping[str, Any], attempt: int
    ) -> tuple[Completion | str, Cooldown | None]:
        """(the completion, None) or (what went wrong, the server's cooldown) of one attempt; errors that are not
        retried are raised."""
        import openai

        self.n_attempts += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                response = await session.client.chat.completions.create(**params)
            return read_completion(response, attempt, time.perf_counter() - started), None
        except TimeoutError:
            return f"no complete answer within the deadline of {self.settings.timeout_s:g} s", None
        except openai.APIStatusError as err:
            status = err.status_code
            if status in RETRYABLE_STATUS or status >= 500:
                return f"HTTP {status}", server_cooldown(err)
            raise self._rejected(err, status, str(params.get("model")), attempt) from None
        except (openai.APITimeoutError, openai.APIConnectionError) as err:
            return type(err).__name__, None
        except MALFORMED_RESPONSE as err:
            return f"malformed answer ({type(err).__name__})", None

    def _rejected(self, err: openai.APIStatusError, status: int, model: str, attempt: int) -> EndpointRejected:
        if status in CONFIG_STATUS:
            return EndpointConfigError(
                f"{self.what}: the endpoint {self.url} answered HTTP {status} for model {model!r}: check the key in "
                f"${self.settings.api_key_env}, its permissions and the model name",
                status,
                attempt,
            )
        message = redact(f"{self.what}: the endpoint {self.url} rejected a request (HTTP {status}): {err.message}")
        return EndpointRejected(message[:500], status, attempt, content_policy=mentions_content_policy(err))


def _utc(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- chat settings, requests with re-asks, and the per-request answer cache ----------------------------------
# OpenAI's reasoning models: the o-series and GPT-5 onwards (gpt-6-luna, the configs' successor of gpt-4o, is one).
# They refuse `max_tokens` ("not compatible with o-series models", API reference, chat/create) and take
# `max_completion_tokens`, which also bounds their reasoning tokens; and they think by default (medium effort), when
# they accept no temperature but 1: a temperature of their choice needs `reasoning_effort: none` (reasoning off).
OPENAI_REASONING_MODEL = re.compile(r"(o\d+|gpt-(?:[5-9]|[1-9]\d+))(?:[-.]|$)")
# OpenAI's models before them, which refuse the parameter (gpt-4o, a study's model, among them).
OPENAI_NON_REASONING_MODEL = re.compile(r"gpt-(?:3\.5|4)")
REASONING_OFF = "none"


def is_openai_reasoning_model(model: str) -> bool:
    return OPENAI_REASONING_MODEL.match(model) is not None


def completion_token_limit(model: str) -> str:
    """The chat completion parameter that caps a reply's length: `max_completion_tokens` for OpenAI's reasoning
    models, `max_tokens` for every other model (and every other OpenAI-compatible server: vLLM's, Gemini's)."""
    return "max_completion_tokens" if is_openai_reasoning_model(model) else "max_tokens"


def reasoning_sampling_problem(model: str, temperature: float, reasoning_effort: str | None, what: str) -> str | None:
    """Why an OpenAI model would refuse this sampling (every request alike), or None: a reasoning model a temperature
    with reasoning on, an earlier model any `reasoning_effort`."""
    if reasoning_effort is not None and OPENAI_NON_REASONING_MODEL.match(model):
        return f"{what}: {model} is not a reasoning model and refuses reasoning_effort; remove it (or set it to null)"
    if not is_openai_reasoning_model(model) or temperature == 1 or reasoning_effort == REASONING_OFF:
        return None
    effort = "its default reasoning effort" if reasoning_effort is None else f"reasoning_effort {reasoning_effort!r}"
    return (
        f"{what}: {model} is an OpenAI reasoning model, which takes temperature {temperature} only with reasoning "
        f"off; with {effort} it refuses any temperature but 1: add reasoning_effort: {REASONING_OFF}"
    )


@dataclass(frozen=True)
class ChatSettings:
    """The `$defs/llm_settings` block of the callers that send one prompt per request (the rewrite generator, the
    rationale writer): the endpoint, the model and its sampling, the prompt file."""

    endpoint: EndpointSettings
    model: str
    prompt: str
    prompt_version: str | None = None
    temperature: float = 0.7
    max_tokens: int = 400
    json_mode: bool = True
    send_seed: bool = True
    reasoning_effort: str | None = None

    CHAT_KEYS = (
        "model",
        "prompt",
        "prompt_version",
        "temperature",
        "max_tokens",
        "json_mode",
        "send_seed",
        "reasoning_effort",
    )

    def __post_init__(self) -> None:
        problem = reasoning_sampling_problem(self.model, self.temperature, self.reasoning_effort, "the chat settings")
        if problem:
            raise ValueError(problem)

    @property
    def sampling(self) -> dict[str, Any]:
        """What the answers depend on beyond the prompt: in the cache keys and the `generation` provenance
        (`reasoning_effort` only when set, so that the keys of earlier runs hold)."""
        sampling: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.reasoning_effort is not None:
            sampling["reasoning_effort"] = self.reasoning_effort
        return sampling

    @classmethod
    def from_config(cls, config: Mapping[str, Any], what: str, error: type[Exception] = ValueError) -> ChatSettings:
        """The settings of a config block (its `name` aside); `error` is raised for an unknown key, a missing
        model or an impossible endpoint setting."""
        unknown = sorted(set(config) - set(cls.CHAT_KEYS) - set(endpoint_defaults()) - {"name"})
        if unknown:
            known = sorted({*cls.CHAT_KEYS, *endpoint_defaults()})
            raise error(f"unknown key(s) {unknown} in the config of {what}; known keys: {known}")
        if not config.get("model"):
            raise error(f"{what} needs 'model' (the endpoint's model name)")
        chat = {k: v for k, v in config.items() if k in cls.CHAT_KEYS}
        try:
            return cls(endpoint=EndpointSettings.from_config(config, what), **chat)
        except ValueError as err:
            raise error(str(err)) from None

    def check_prompt_version(self, version: str, what: str, error: type[Exception] = ValueError) -> None:
        """The prompt file's version must be the one the config asks for, if it asks for one; `what` names the
        prompt in the error."""
        if self.prompt_version is not None and str(self.prompt_version) != version:
            raise error(
                f"config asks for {what} prompt version {self.prompt_version!r} but {self.prompt} is version "
                f"{version!r}; update one of them"
            )

    def params(self, messages: list[dict[str, str]], seed: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            completion_token_limit(self.model): self.max_tokens,
        }
        if self.reasoning_effort is not None:
            params["reasoning_effort"] = self.reasoning_effort
        if self.json_mode:
            params["response_format"] = {"type": "json_object"}
        if self.send_seed:
            params["seed"] = seed
        return params


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


def chat_request_key(fields: dict[str, Any], messages: list[dict[str, str]]) -> tuple[str, dict[str, Any]]:
    """Stable cache key of one chat request: its identifying fields plus a hash of the exact messages (which cover
    the prompt text and the content); returns the key and the fields it was computed from."""
    keyed = {**fields, "messages_sha256": hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()}
    return stable_hash(keyed, length=32), keyed


class ResponseCache:
    """One JSON file per request key under `root`, written atomically; results are `result_type` dataclasses."""

    def __init__(self, root: Path, result_type: type):
        self.root = root
        self.result_type = result_type

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> Any | None:
        path = self.path(key)
        if not path.exists():
            return None
        return self.result_type(**read_json(path)["result"])

    def put(self, key: str, fields_: Mapping[str, Any], result: Any) -> None:
        values = redact_value({f.name: getattr(result, f.name) for f in dataclasses.fields(result)})
        write_json(self.path(key), {"key": fields_, "result": values})


@dataclass(frozen=True)
class Question:
    """One request for `ask_all_cached`: its cache key and the fields it hashes, the messages, the seed, a label
    for the log, and how a completion becomes a result (`interpret`: a dataclass with `status`, `error` and
    `attempts`)."""

    key: str
    key_fields: dict[str, Any]
    messages: list[dict[str, str]]
    seed: int
    label: str
    interpret: Callable[[Completion], Any]


@dataclass
class Asking:
    """How the results of one batch of questions are made (`ask_all_cached`): `reask(problem)` is the message
    that asks again, `failure(status, error, attempts)` the result of a request the endpoint failed, `what` names
    the requests in the error of those it never answered."""

    client: EndpointClient
    settings: ChatSettings
    reask: Callable[[str], dict[str, str]]
    failure: Callable[[str, str, int], Any]
    what: str
    unavailable: list[EndpointGaveUp] = field(default_factory=list)

    async def until_usable(self, session: Session, question: Question) -> Any:
        """Ask until the result is 'ok' or 'refusal', re-asking with the problem stated at most `max_retries`
        times; endpoint failures become `failure(...)` results (a never answered one is also kept in
        `unavailable`). The last result."""
        messages, attempts = question.messages, 0
        result = self.failure("error", "no request sent", 1)
        for _ in range(self.settings.endpoint.max_retries + 1):
            try:
                reply = await self.client.complete(
                    session, self.settings.params(messages, question.seed), question.label
                )
            except EndpointConfigError:
                raise
            except EndpointRejected as err:
                status = "refusal" if err.status == 400 and err.content_policy else "error"
                return self.failure(status, str(err)[:300], attempts + err.attempts)
            except EndpointGaveUp as err:
                self.unavailable.append(err)
                return self.failure("error", str(err), attempts + err.attempts)
            attempts += reply.attempts
            if reply.refusal:
                return self.failure("refusal", f"refused: {reply.refusal[:200]}", attempts)
            result = dataclasses.replace(question.interpret(reply), attempts=attempts)
            if result.status in ("ok", "refusal"):
                return result
            log.info("%s: %s, asking again", question.label, result.error)
            problem = result.error or result.status
            messages = [*messages, {"role": "assistant", "content": reply.text or ""}, self.reask(problem)]
        return result


def ask_all_cached(asking: Asking, cache: ResponseCache, questions: Sequence[Question]) -> list[Any]:
    """The result of every question, in order: from `cache`, or asked (`Asking.until_usable`) over one session,
    and cached unless it ended in an endpoint error (a rerun asks those again). The first exception raised cancels
    the other requests and is raised. Questions the endpoint never answered fail the call once all the others are
    answered and cached (`EndpointUnavailable`, naming the endpoint and `asking.what`)."""
    questions = list(questions)

    async def ask(session: Session, question: Question) -> Any:
        cached = cache.get(question.key)
        if cached is not None:
            return cached
        result = await asking.until_usable(session, question)
        if result.status != "error":
            cache.put(question.key, question.key_fields, result)
        return result

    async def ask_all() -> list[asyncio.Task]:
        session = asking.client.session()
        async with session.client:
            try:
                async with asyncio.TaskGroup() as group:
                    return [group.create_task(ask(session, question)) for question in questions]
            except ExceptionGroup as failures:
                raise failures.exceptions[0] from None

    tasks = asyncio.run(ask_all())
    if asking.unavailable:
        missing, first = len(asking.unavailable), asking.unavailable[0]
        raise EndpointUnavailable(
            f"the endpoint {asking.client.url} did not answer {missing} of {len(questions)} {asking.what} "
            f"requests ({first.label}: {first.problem} after {first.attempts} attempts); the "
            f"{len(questions) - missing} answered ones are cached in {cache.root}: rerun when the endpoint is reachable"
        )
    return [task.result() for task in tasks]


@dataclass
class CachedChat:
    """A caller that sends one prompt per request and caches one answer per request (the rewrite generator, the
    rationale writer): its settings, the client, the answer cache, and what its requests are (`what`)."""

    settings: ChatSettings
    client: EndpointClient
    cache: ResponseCache
    what: str
    error: type[Exception]

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        caller: str,
        what: str,
        default_prompt: Path,
        cache: ResponseCache,
        error: type[Exception] = ValueError,
    ) -> CachedChat:
        """The `$defs/llm_settings` block of `caller` (its prompt `default_prompt` unless it names one)."""
        settings = ChatSettings.from_config({"prompt": str(default_prompt), **config}, caller, error)
        return cls.of(settings, caller=caller, what=what, cache=cache, error=error)

    @classmethod
    def of(
        cls, settings: ChatSettings, *, caller: str, what: str, cache: ResponseCache, error: type[Exception]
    ) -> CachedChat:
        """The caller of settings already read (`ChatSettings.from_config`); its key is read here."""
        return cls(settings, EndpointClient(settings.endpoint, caller), cache, what, error)

    def check_prompt_version(self, version: str) -> None:
        """The prompt file's version must be the one the config asks for, if it asks for one."""
        self.settings.check_prompt_version(version, self.what, self.error)

    def ask(self, questions: Sequence[Question], reask: Callable[[str], dict[str, str]]) -> list[Any]:
        """Every question's result (`ask_all_cached`); a failed request's result is the cache's result type with
        the failure's status, error and attempts."""
        result_type = self.cache.result_type

        def failure(status: str, error: str, attempts: int) -> Any:
            return result_type(status, attempts=attempts, error=error)

        return ask_all_cached(Asking(self.client, self.settings, reask, failure, self.what), self.cache, questions)
