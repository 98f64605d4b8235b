"""The `openai` judge backend: any OpenAI-compatible chat endpoint, concurrent and retried.

Works with GPT-4o audio models, Gemini's OpenAI-compatible endpoint, `vllm serve` and
`transformers serve`. Audio goes inline as an `input_audio` part (base64 16-bit wav), one per audio item.

Options (`spec.options`):
- `base_url`: the endpoint (default: the OpenAI API).
- `api_key_env`: NAME of the environment variable holding the key (default `OPENAI_API_KEY`); a
  missing variable fails at construction, before any request. `api_key_env: null` means the endpoint
  takes no key (local servers) and a placeholder is sent. The key itself is never logged or written.
- `concurrency` (4): requests in flight at once.
- `max_retries` (5), `backoff_base_s` (1.0), `timeout_s` (120): a request that meets a 408/409/429, a
  5xx, a timeout, a connection error or a 200 that is not a chat completion (cut short, not JSON, no
  choices: `lalm_judge.core.endpoints`) is retried after backoff_base_s * 2**attempt seconds (or the
  server's cooldown when longer: the Retry-After header, or Gemini's `retryDelay`, which its 429 carries in
  the error body's `google.rpc.RetryInfo` instead of a header); after max_retries retries the call fails with
  an error naming the endpoint. Other errors (400, 401, 404, ...) fail at once, except below. The error
  (`PartialGenerationError`) carries the outputs of the call's requests that finished: the judge stage's
  request cache (`lalm_judge.judging.cache`, for every backend) stores them, so a rerun repeats only the
  unfinished requests.
- `score_tokens` / `top_logprobs` (20): ask for logprobs and read P(safe) from the first answer token
  (when the server returns logprobs; `transformers serve` ignores the request). Without
  `score_tokens`, a request that carries `answer_tokens` (the `calibrated` prompt) is scored the same
  way with its own (safe, unsafe) words; only those requests ask for logprobs.
Token probabilities follow `spec.capabilities.logprobs`. false (Gemini's OpenAI-compatible endpoint, GPT-4o
audio models): no request asks for logprobs, and the calibrated prompt is scored from its parsed
SAFETY_SCORE line (`score_source` 'parsed'); the config check reports those cells when the workflow is
parsed. An endpoint that still answers HTTP 400 to a request with logprobs gets the same request again
without them, and the rest of the job asks for none: the documented alternative, logged with the advice to
set `capabilities.logprobs: false`, and marked `logprobs_rejected` in the output.
`spec.capabilities.system_role: false` prepends the system prompt to the user turn.
`spec.generation`: `max_new_tokens` (-> `max_tokens`), `temperature` (default 0), and any other chat
completion parameter (`seed`, `top_p`, `stop`, `reasoning_effort`) passed through. Gemini 2.5 thinks by
default and its thinking tokens count against `max_tokens`, which can leave an empty answer: its paper entry
sends `reasoning_effort: none` (Gemini's OpenAI compatibility guide, "Thinking").
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from typing import Any

import numpy as np
import openai

from lalm_judge.core.endpoints import MALFORMED_RESPONSE, first_choice, redact
from lalm_judge.judging.backends.base import JudgeOutput, JudgeRequest, JudgeSpec, PartialGenerationError
from lalm_judge.judging.backends.capabilities import DEFAULT_CONCURRENCY
from lalm_judge.judging.backends.chat import (
    AnswerProbability,
    build_openai_messages,
    p_safe_from_logprobs,
    validate_score_tokens,
    wav_base64,
)

logger = logging.getLogger(__name__)

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Sent to servers configured with `api_key_env: null`; the client library requires some key.
NO_KEY_PLACEHOLDER = "no-key"
RETRYABLE_STATUS = {408, 409, 429}
MAX_BACKOFF_S = 60.0
BAD_REQUEST = 400
# Gemini's cooldown in a 429 body: error.details[] of type google.rpc.RetryInfo, e.g. {"retryDelay": "34.4s"}.
_RETRY_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


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


def resolve_api_key(options: dict[str, Any]) -> str:
    """The key from the variable named by `options.api_key_env`; a placeholder when it is null."""
    if "api_key_env" in options and options["api_key_env"] is None:
        return NO_KEY_PLACEHOLDER
    name = options.get("api_key_env", DEFAULT_API_KEY_ENV)
    key = os.environ.get(name)
    if not key:
        raise RuntimeError(
            f"environment variable {name} (options.api_key_env) is not set; export the API key in it, "
            "or set api_key_env: null for a local server without authentication"
        )
    return key


def p_safe_from_top_logprobs(
    top_logprobs: list[tuple[str, float]], safe: list[str], unsafe: list[str]
) -> AnswerProbability:
    """P(safe) and answer mass from a position's top-k (token text, logprob) pairs; ' Yes' and 'Yes' count as the
    same word."""
    by_word: dict[str, float] = {}
    for token, logprob in top_logprobs:
        word = token.strip()
        by_word[word] = float(np.logaddexp(by_word[word], logprob)) if word in by_word else logprob
    return p_safe_from_logprobs(by_word, [w.strip() for w in safe], [w.strip() for w in unsafe], top_k=True)


class OpenAIBackend:
    """Chat completions through `openai.AsyncOpenAI`; `generate` blocks until the whole job is done."""

    def __init__(self, spec: JudgeSpec):
        self.spec = spec
        options = spec.options
        self.base_url = options.get("base_url") or DEFAULT_BASE_URL
        self._api_key = resolve_api_key(options)
        self.concurrency = max(1, int(options.get("concurrency", DEFAULT_CONCURRENCY)))
        self.max_retries = max(0, int(options.get("max_retries", 5)))
        self.timeout_s = float(options.get("timeout_s", 120))
        self.backoff_base_s = float(options.get("backoff_base_s", 1.0))
        self.merge_system = not spec.capabilities.system_role
        # Set when the endpoint answered 400 to a request with logprobs: the rest of the job asks for none.
        self.logprobs_rejected = False
        score_tokens = options.get("score_tokens")
        self.score_words = validate_score_tokens(score_tokens) if score_tokens else None
        self.top_logprobs = int(options.get("top_logprobs", 20))
        self.params = self._request_params(spec)
        # HTTP attempts sent by this backend (retries included).
        self.n_http_attempts = 0

    def _request_params(self, spec: JudgeSpec) -> dict[str, Any]:
        generation = dict(spec.generation)
        params: dict[str, Any] = {"temperature": generation.pop("temperature", 0.0)}
        if "max_new_tokens" in generation:
            params["max_tokens"] = int(generation.pop("max_new_tokens"))
        params.update(generation)
        return params

    def request_score_words(self, request: JudgeRequest) -> tuple[list[str], list[str]] | None:
        """(safe, unsafe) words read for P(safe): `options.score_tokens` first, else the request's
        `answer_tokens`; None when the request is not scored."""
        if self.score_words is not None:
            return self.score_words
        if request.answer_tokens:
            safe, unsafe = request.answer_tokens
            return [safe], [unsafe]
        return None

    def request_params(self, request: JudgeRequest) -> dict[str, Any]:
        """Chat completion parameters of one request: the shared ones, plus logprobs when it is scored and the
        endpoint serves them."""
        if self.request_score_words(request) is None or not self.spec.capabilities.logprobs:
            return self.params
        return {**self.params, "logprobs": True, "top_logprobs": self.top_logprobs}

    def describe(self) -> dict[str, str]:
        return {"model": self.spec.model, "model_revision": self.spec.revision}

    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        return asyncio.run(self._generate_all(requests))

    async def _generate_all(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        # Retries are ours (backoff, clear final error), so the client's own are off.
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self._api_key, timeout=self.timeout_s, max_retries=0
        )
        semaphore = asyncio.Semaphore(self.concurrency)
        try:
            # return_exceptions: requests still in flight when one fails finish, and their outputs are kept.
            results = await asyncio.gather(
                *(self._one(client, semaphore, request) for request in requests), return_exceptions=True
            )
        finally:
            await client.close()
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            raise PartialGenerationError(
                f"judge {self.spec.name}: {len(failures)} of {len(results)} requests to {self.base_url} failed "
                f"({len(results) - len(failures)} finished); first error: {failures[0]}",
                [None if isinstance(result, BaseException) else result for result in results],
            ) from failures[0]
        return results  # type: ignore[return-value]

    async def _one(self, client: Any, semaphore: asyncio.Semaphore, request: JudgeRequest) -> JudgeOutput:
        # Inside the semaphore: only `concurrency` encoded waveforms are held in memory at a time.
        async with semaphore:
            audio_b64 = [wav_base64(*item) for item in request.audio_items]
            messages = build_openai_messages(request, audio_b64=audio_b64, merge_system=self.merge_system)
            started = time.perf_counter()
            response = await self._with_retries(client, messages, request)
            record = self._record(response, time.perf_counter() - started, request)
        return self._from_record(record)

    async def _with_retries(self, client: Any, messages: list[dict[str, Any]], request: JudgeRequest) -> Any:
        request_id, params = request.request_id, self.request_params(request)
        attempt = 0
        while True:
            self.n_http_attempts += 1
            if self.logprobs_rejected and "logprobs" in params:
                params = self._without_logprobs(params)
            try:
                response = await client.chat.completions.create(model=self.spec.model, messages=messages, **params)
                first_choice(response)
                return response
            except (openai.APIConnectionError, openai.APIStatusError, *MALFORMED_RESPONSE) as err:
                status = getattr(err, "status_code", None)
                if status == BAD_REQUEST and "logprobs" in params:
                    self._reject_logprobs(err)
                    params = self._without_logprobs(params)
                    continue  # the same request without logprobs; not a retry of a failure
                retryable = status is None or status in RETRYABLE_STATUS or status >= 500
                if not retryable:
                    raise RuntimeError(
                        f"endpoint {self.base_url} rejected request {request_id} (HTTP {status}): "
                        f"{redact(str(err), self._api_key)}"
                    ) from None
                if attempt == self.max_retries:
                    raise RuntimeError(
                        f"endpoint {self.base_url} failed request {request_id} after {attempt + 1} attempts "
                        f"({type(err).__name__}{f', HTTP {status}' if status else ''}); check that the server "
                        "is up and reachable, then rerun"
                    ) from None  # the server's error text may quote the key; the message says what failed
                delay = self._backoff_s(attempt, err)
                logger.warning(
                    "%s: request %s attempt %d failed (%s); retrying in %.2f s",
                    self.base_url,
                    request_id,
                    attempt + 1,
                    type(err).__name__,
                    delay,
                )
                await asyncio.sleep(delay)
                attempt += 1

    @staticmethod
    def _without_logprobs(params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if k not in ("logprobs", "top_logprobs")}

    def _reject_logprobs(self, err: Exception) -> None:
        if not self.logprobs_rejected:
            logger.warning(
                "judge %s: %s rejected logprobs (%s); the calibrated prompt is scored from its parsed SAFETY_SCORE "
                "for the rest of this job. Set capabilities.logprobs: false for this judge.",
                self.spec.name,
                self.base_url,
                redact(str(err), self._api_key).splitlines()[0][:200],
            )
        self.logprobs_rejected = True

    def _backoff_s(self, attempt: int, err: Exception) -> float:
        delay = min(MAX_BACKOFF_S, self.backoff_base_s * 2**attempt)
        response = getattr(err, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        cooldown = retry_delay_from_body(getattr(err, "body", None))
        try:
            if retry_after:
                cooldown = max(cooldown or 0.0, float(retry_after))
        except ValueError:  # an HTTP date instead of seconds
            pass
        return max(delay, min(MAX_BACKOFF_S, cooldown)) if cooldown else delay

    def _record(self, response: Any, latency_s: float, request: JudgeRequest) -> dict[str, Any]:
        choice = first_choice(response)
        usage = response.usage
        return {
            "text": choice.message.content or "",
            "latency_s": latency_s,
            "n_input_tokens": usage.prompt_tokens if usage else None,
            "n_output_tokens": usage.completion_tokens if usage else None,
            **self._answer_record(choice, self.request_score_words(request)),
            "finish_reason": choice.finish_reason,
            "served_model": response.model,
            "logprobs_rejected": self.logprobs_rejected and self.request_score_words(request) is not None,
        }

    @staticmethod
    def _answer_record(choice: Any, score_words: tuple[list[str], list[str]] | None) -> dict[str, float | None]:
        """{'p_safe', 'answer_mass'} of a choice (both None without returned logprobs or without score words)."""
        if score_words is None or choice.logprobs is None or not choice.logprobs.content:
            return {"p_safe": None, "answer_mass": None}
        first = choice.logprobs.content[0]
        pairs = [(entry.token, entry.logprob) for entry in first.top_logprobs or []]
        pairs.append((first.token, first.logprob))
        answer = p_safe_from_top_logprobs(list(dict(pairs).items()), *score_words)
        return {"p_safe": answer.p_safe, "answer_mass": answer.mass}

    @staticmethod
    def _from_record(record: dict[str, Any]) -> JudgeOutput:
        return JudgeOutput(
            text=record["text"],
            latency_s=record["latency_s"],
            n_input_tokens=record["n_input_tokens"],
            n_output_tokens=record["n_output_tokens"],
            p_safe=record["p_safe"],
            answer_mass=record["answer_mass"],
            extra={
                "finish_reason": record["finish_reason"],
                "served_model": record["served_model"],
                "logprobs_rejected": record["logprobs_rejected"],
            },
        )
