"""The `openai` judge backend: any OpenAI-compatible chat endpoint, concurrent and retried.

Works with GPT-4o audio models, Gemini's OpenAI-compatible endpoint, `vllm serve` and
`transformers serve`. Audio goes inline as an `input_audio` part (base64 16-bit wav), one per audio item.

Requests go through the project's one endpoint client (`lalm_judge.core.endpoints`), which the rewrite
generator and the rationale writer use too: the same settings under `spec.options`, with the defaults of the
config schema's `$defs/endpoint` (`base_url`, `api_key_env`, `header_env`, `concurrency`, `max_retries`,
`timeout_s` as a total deadline per attempt, `backoff_base_s`, `backoff_max_s`), the same retries of transport
failures (HTTP 408/409/429/5xx, a passed deadline, a connection error, a 200 that is not a chat completion)
after the same backoff or the server's cooldown, the keys from the environment redacted from every answer and
message. A request whose retries run out or that the endpoint rejects (HTTP 400, 401, 404, ...) fails the call
with an error naming the endpoint (`PartialGenerationError`: it carries the outputs of the call's requests that
finished, which the judge stage's request engine stores, so a rerun repeats only the unfinished requests). A
400 that names the endpoint's content policy is the answer instead: an output with no text and finish reason
`content_filter`.

Each output carries why generation stopped (`finish_reason`, normalized from the API's: `stop`, `length`,
`content_filter`, or None) and the model that served it (`extra['served_model']`, the response's `model`),
which the request engine checks against the configured one (`judges.<name>.accept_served_models`). A message
`content` that is not a string becomes its JSON as the text, with `extra['content_error']` saying so.

Options of this backend besides the endpoint's:
- `score_tokens` / `top_logprobs` (20): ask for logprobs and read P(safe) from the first answer token
  (when the server returns logprobs; `transformers serve` ignores the request). Without
  `score_tokens`, a request that carries `answer_tokens` (the `calibrated` prompt) is scored the same
  way with its own (safe, unsafe) words; only those requests ask for logprobs. P(safe) is read from the
  top `top_logprobs` tokens of the first position (OpenAI, Gemini): an answer word outside them counts with the
  bound of the smallest listed probability, and with neither listed there is no P(safe).
- `answer_token_ids`: read P(safe) exactly instead, from the probabilities of the answer words' first tokens
  themselves, wherever they rank: the request carries vLLM's `logprob_token_ids` (its chat completion
  extension, `vllm/entrypoints/openai/chat_completion/protocol.py`) with `return_tokens_as_token_ids`, so the
  answer names each token by its id. `server` learns the ids from the server's `/tokenize` route (vLLM's, at
  the server root: `base_url` without its `/v1`); any other value names the tokenizer to read them with (a
  local directory or hub name, read at the judge's `revision` when it is the judge's `model`). A server without
  the extension fails the request naming this option (OpenAI answers HTTP 400; a server that ignores it returns
  no logprobs of those ids): only a vLLM server takes it.
Token probabilities follow `spec.capabilities.logprobs`. false (Gemini's OpenAI-compatible endpoint, GPT-4o
audio models): no request asks for logprobs, and the calibrated prompt is scored from its parsed
SAFETY_SCORE line (`score_source` 'parsed'); the config check reports those cells when the workflow is
parsed. An endpoint that still answers HTTP 400 to a request with logprobs gets the same request again
without them, and the rest of the job asks for none: the documented alternative, logged with the advice to
set `capabilities.logprobs: false`, and marked `logprobs_rejected` in the output.
`spec.capabilities.system_role: false` prepends the system prompt to the user turn.
`spec.generation`: `max_new_tokens` (-> `max_tokens`; `max_completion_tokens` for OpenAI's reasoning models, which
refuse `max_tokens` and take a temperature other than 1 only with `reasoning_effort: none`, checked when the
workflow parses: `decoding.decoding_problems`), `temperature` (default 0), and any other chat
completion parameter (`seed`, `top_p`, `stop`, `reasoning_effort`) passed through. Gemini 2.5 thinks by
default and its thinking tokens count against `max_tokens`, which can leave an empty answer: its paper entry
sends `reasoning_effort: none` (Gemini's OpenAI compatibility guide, "Thinking").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from lalm_judge.core.endpoints import (
    Completion,
    EndpointClient,
    EndpointRejected,
    EndpointSettings,
    Session,
    completion_token_limit,
)
from lalm_judge.core.secrets import redact
from lalm_judge.core.vocabulary import FINISH_CONTENT_FILTER
from lalm_judge.judging.backends.base import JudgeOutput, JudgeRequest, JudgeSpec, PartialGenerationError
from lalm_judge.judging.backends.chat import (
    AnswerProbability,
    build_openai_messages,
    p_safe_from_logprobs,
    score_token_ids,
    validate_score_tokens,
    wav_base64,
)
from lalm_judge.judging.backends.decoding import decoding_problems

logger = logging.getLogger(__name__)

BAD_REQUEST = 400
# `options.answer_token_ids` value that learns the answer words' token ids from the server's `/tokenize` route.
IDS_FROM_SERVER = "server"
# How a vLLM server names a token asked for with `return_tokens_as_token_ids` (vLLM's `format_token_id_placeholder`).
TOKEN_ID_PREFIX = "token_id:"


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


def logprobs_by_token_id(entries: list[tuple[str, float]]) -> dict[int, float]:
    """{token id: logprob} of a position's (token, logprob) pairs named `token_id:<id>`; other names are left out."""
    return {
        int(token.removeprefix(TOKEN_ID_PREFIX)): logprob
        for token, logprob in entries
        if token.startswith(TOKEN_ID_PREFIX) and token.removeprefix(TOKEN_ID_PREFIX).isdigit()
    }


def tokenize_url(base_url: str, judge: str) -> str:
    """vLLM's `/tokenize` route of the server at `base_url`: the server root, where its `/v1` routes hang from."""
    root = base_url.rstrip("/")
    if not root.endswith("/v1"):
        raise ValueError(
            f"judge {judge}: options.answer_token_ids: {IDS_FROM_SERVER} asks vLLM's /tokenize route at the server "
            f"root, base_url without its /v1, but base_url {base_url!r} does not end in /v1; name the served model's "
            "tokenizer in options.answer_token_ids instead"
        )
    return f"{root.removesuffix('/v1')}/tokenize"


class LearnedTokenIds:
    """The token ids of words learned from a server's `/tokenize`, read like a tokenizer (`encode`)."""

    def __init__(self) -> None:
        self.ids: dict[str, list[int]] = {}

    def encode(self, word: str, add_special_tokens: bool = False) -> list[int]:
        if word not in self.ids:
            raise KeyError(f"the token ids of {word!r} were not asked of the server's /tokenize yet")
        return self.ids[word]


class OpenAIBackend:
    """Chat completions through the endpoint client; `generate` blocks until the whole call is done."""

    def __init__(self, spec: JudgeSpec):
        self.spec = spec
        options = spec.options
        self.client = EndpointClient(EndpointSettings.from_config(options, f"judge {spec.name}"), f"judge {spec.name}")
        self.base_url = self.client.url
        self.merge_system = not spec.capabilities.system_role
        # Set when the endpoint answered 400 to a request with logprobs: the rest of the job asks for none.
        self.logprobs_rejected = False
        score_tokens = options.get("score_tokens")
        self.score_words = validate_score_tokens(score_tokens) if score_tokens else None
        self.top_logprobs = int(options.get("top_logprobs", 20))
        self.params = self._request_params(spec)
        # Where the answer words' token ids come from when P(safe) is read exactly (None: from the top-k list).
        self.ids_source: str | None = options.get("answer_token_ids")
        if self.ids_source is not None and not spec.capabilities.logprobs:
            raise ValueError(
                f"judge {spec.name}: options.answer_token_ids reads P(safe) from logprobs, but the judge's "
                "capabilities.logprobs is false; remove one of them"
            )
        self.tokenize_url = tokenize_url(self.base_url, spec.name) if self.ids_source == IDS_FROM_SERVER else None
        self._token_ids: Any = LearnedTokenIds() if self.tokenize_url else None  # a tokenizer, loaded when needed

    @property
    def n_http_attempts(self) -> int:
        """HTTP attempts sent by this backend (retries included)."""
        return self.client.n_attempts

    def _request_params(self, spec: JudgeSpec) -> dict[str, Any]:
        problems = decoding_problems("openai", spec.generation, spec.name, model=spec.model)
        if problems:
            raise ValueError("; ".join(problems))
        generation = dict(spec.generation)
        params: dict[str, Any] = {"model": spec.model, "temperature": generation.pop("temperature", 0.0)}
        if "max_new_tokens" in generation:
            params[completion_token_limit(spec.model)] = int(generation.pop("max_new_tokens"))
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
        endpoint serves them: of the answer tokens themselves with `answer_token_ids`, else the top k."""
        words = self.request_score_words(request)
        if words is None or not self.spec.capabilities.logprobs:
            return self.params
        if self.ids_source is None:
            return {**self.params, "logprobs": True, "top_logprobs": self.top_logprobs}
        safe, unsafe = self.answer_ids(words)
        extra_body = {
            **self.params.get("extra_body", {}),
            "logprob_token_ids": sorted({*safe, *unsafe}),
            "return_tokens_as_token_ids": True,
        }
        return {**self.params, "logprobs": True, "extra_body": extra_body}

    def answer_ids(self, words: tuple[list[str], list[str]]) -> tuple[list[int], list[int]]:
        """(safe, unsafe) first token ids of the answer words, from `options.answer_token_ids`' source."""
        if self._token_ids is None:
            self._token_ids = self._load_tokenizer()
        return score_token_ids(self._token_ids, {"safe": words[0], "unsafe": words[1]})

    def _load_tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        source = str(self.ids_source)
        revision = self.spec.revision if source == self.spec.model else None
        try:
            return AutoTokenizer.from_pretrained(source, revision=revision)
        except (OSError, ValueError) as err:
            raise ValueError(
                f"judge {self.spec.name}: options.answer_token_ids names the tokenizer {source!r}, which does not "
                f"load ({err}); name the served model's tokenizer (a directory or hub name) or {IDS_FROM_SERVER!r}"
            ) from err

    async def _learn_token_ids(self, session: Session, requests: list[JudgeRequest]) -> None:
        """Ask the server's `/tokenize` for the answer words of `requests` not learned yet."""
        learned = self._token_ids
        if not isinstance(learned, LearnedTokenIds):
            return
        scored = [words for words in map(self.request_score_words, requests) if words is not None]
        for word in sorted({word for safe, unsafe in scored for word in (*safe, *unsafe)} - set(learned.ids)):
            learned.ids[word] = await self._tokenize(session, word)

    async def _tokenize(self, session: Session, word: str) -> list[int]:
        import openai

        body = {"model": self.spec.model, "prompt": word, "add_special_tokens": False}
        problem = "its answer has no list of token ids"
        try:
            answer = await session.client.post(str(self.tokenize_url), cast_to=object, body=body)
        except openai.APIError as err:
            answer, problem = None, redact(f"{type(err).__name__}: {err}").splitlines()[0][:200]
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
            raise RuntimeError(
                f"judge {self.spec.name}: {self.tokenize_url} did not tokenize the answer word {word!r} ({problem}); "
                f"options.answer_token_ids: {IDS_FROM_SERVER} needs a vLLM server that is up, else name the served "
                "model's tokenizer there"
            )
        return tokens

    def describe(self) -> dict[str, str]:
        return {"model": self.spec.model, "model_revision": self.spec.revision}

    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        return asyncio.run(self._generate_all(requests))

    async def _generate_all(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        session = self.client.session()
        async with session.client:
            await self._learn_token_ids(session, requests)
            # return_exceptions: requests still in flight when one fails finish, and their outputs are kept.
            results = await asyncio.gather(
                *(self._one(session, request) for request in requests), return_exceptions=True
            )
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            raise PartialGenerationError(
                f"judge {self.spec.name}: {len(failures)} of {len(results)} requests to {self.base_url} failed "
                f"({len(results) - len(failures)} finished); first error: {failures[0]}",
                [None if isinstance(result, BaseException) else result for result in results],
            ) from failures[0]
        return results  # type: ignore[return-value]

    def _messages(self, request: JudgeRequest) -> list[dict[str, Any]]:
        audio_b64 = [wav_base64(*item) for item in request.audio_items]
        return build_openai_messages(request, audio_b64=audio_b64, merge_system=self.merge_system)

    def _payload(self, params: dict[str, Any], request: JudgeRequest) -> Callable[[], dict[str, Any]]:
        """The request's parameters, built when it holds a slot: at most `concurrency` encoded audios at a time."""
        return lambda: {**params, "messages": self._messages(request)}

    async def _one(self, session: Session, request: JudgeRequest) -> JudgeOutput:
        params = self.request_params(request)
        while True:
            if self.logprobs_rejected and "logprobs" in params:
                params = self._without_logprobs(params)
            try:
                completion = await self.client.complete(session, self._payload(params, request), request.request_id)
            except EndpointRejected as err:
                # Exact P(safe) has no documented alternative: an endpoint without vLLM's extension fails the job.
                if err.status == BAD_REQUEST and "logprobs" in params and self.ids_source is None:
                    self._reject_logprobs(err)
                    continue  # the same request without logprobs; not a retry of a failure
                if err.status == BAD_REQUEST and err.content_policy:
                    return self._filtered(err)
                raise
            return self._output(completion, request)

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
                redact(str(err)).splitlines()[0][:200],
            )
        self.logprobs_rejected = True

    @staticmethod
    def _filtered(err: EndpointRejected) -> JudgeOutput:
        """A request the endpoint's content policy refused (HTTP 400): an answer withheld by the provider."""
        return JudgeOutput(
            text="", latency_s=0.0, finish_reason=FINISH_CONTENT_FILTER, extra={"rejected": str(err)[:300]}
        )

    def _output(self, completion: Completion, request: JudgeRequest) -> JudgeOutput:
        words = self.request_score_words(request)
        if self.ids_source is not None and words is not None:
            answer = self._exact_answer_probability(completion, request, self.answer_ids(words))
        else:
            answer = self._answer_probability(completion.logprobs, words)
        extra: dict[str, Any] = {
            "served_model": completion.served_model,
            "logprobs_rejected": self.logprobs_rejected and self.request_score_words(request) is not None,
        }
        if completion.raw_finish_reason != completion.finish_reason:
            extra["raw_finish_reason"] = completion.raw_finish_reason
        if completion.content_error:
            extra["content_error"] = completion.content_error
        return JudgeOutput(
            text=completion.text or "",
            latency_s=completion.latency_s,
            n_input_tokens=completion.prompt_tokens,
            n_output_tokens=completion.completion_tokens,
            p_safe=answer.p_safe if answer else None,
            answer_mass=answer.mass if answer else None,
            finish_reason=completion.finish_reason,
            extra=extra,
        )

    @staticmethod
    def _answer_probability(logprobs: Any, score_words: tuple[list[str], list[str]] | None) -> AnswerProbability | None:
        """P(safe) and the answer mass of a choice's first position (None without logprobs or score words)."""
        if score_words is None or logprobs is None or not logprobs.content:
            return None
        first = logprobs.content[0]
        pairs = [(entry.token, entry.logprob) for entry in first.top_logprobs or []]
        pairs.append((first.token, first.logprob))
        return p_safe_from_top_logprobs(list(dict(pairs).items()), *score_words)

    def _exact_answer_probability(
        self, completion: Completion, request: JudgeRequest, ids: tuple[list[int], list[int]]
    ) -> AnswerProbability:
        """P(safe) and the answer mass from the first position's logprobs of exactly the answer tokens (vLLM's
        `logprob_token_ids`); an answer without all of them is an error naming the option."""
        content = completion.logprobs.content if completion.logprobs is not None else None
        first = content[0] if content else None
        entries = [(entry.token, entry.logprob) for entry in (first.top_logprobs or [])] if first else []
        by_id = logprobs_by_token_id(entries)
        missing = sorted({*ids[0], *ids[1]} - set(by_id))
        if missing:
            raise RuntimeError(
                f"judge {self.spec.name}: {self.base_url} answered request {request.request_id} without the "
                f"logprobs of the answer token ids {missing} it was asked for (vLLM's logprob_token_ids, "
                "options.answer_token_ids): only a vLLM server takes them; remove the option for this endpoint"
            )
        return p_safe_from_logprobs(by_id, *ids)
