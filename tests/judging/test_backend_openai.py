"""The openai judge backend against a real OpenAI-compatible server: `transformers serve` on 127.0.0.1,
serving a tiny random-weight Llama and a tiny random-weight Qwen2-Audio built at test time.

`transformers serve` rejects `logprobs`, so P(safe) from logprobs is checked on a `ChatCompletion` object
built from a JSON body in the shape the OpenAI API returns, and over HTTP against `LogprobsStandIn`: a
stdlib server on 127.0.0.1 that stands in for an API that returns logprobs (the OpenAI API, `vllm serve`),
records each request body and answers "Yes" with the `top_logprobs` most likely tokens of a fixed first
position when the request asks for logprobs. Everything else goes over HTTP to `transformers serve`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from openai.types.chat import ChatCompletion

from bench.models import build_tiny_llama, build_tiny_qwen2audio
from bench.servers import free_port, reply_json, start_stand_in, start_transformers_serve, stop_server
from lalm_judge.core.endpoints import read_completion
from lalm_judge.core.secrets import MissingSecret
from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import (
    Capabilities,
    JudgeOutput,
    JudgeRequest,
    JudgeSpec,
    PartialGenerationError,
)
from lalm_judge.judging.backends.hf import TransformersBackend
from lalm_judge.judging.backends.openai_backend import (
    OpenAIBackend,
    logprobs_by_token_id,
    p_safe_from_top_logprobs,
)
from lalm_judge.judging.cache import RequestCache, judge_identity
from lalm_judge.judging.runner import RequestEngine
from lalm_judge.workflow.config import validate_judge_entry
from tests.support.samples import two_turn_sample

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[2]
torch.set_num_threads(1)

SYSTEM = "You are a safety judge."
# The stand-in's first answer position, most likely first: " Yes" and "Yes" are the same word.
FIRST_POSITION = [("Yes", -0.4), ("No", -1.5), (" Yes", -2.0), ("Maybe", -3.0)]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"llama": build_tiny_llama(root / "llama"), "qwen2audio": build_tiny_qwen2audio(root / "qwen2audio")}


@pytest.fixture(scope="module")  # stopped as soon as this module is done, not at the end of the whole run
def server(tmp_path_factory):
    running = start_transformers_serve(tmp_path_factory.mktemp("server") / "serve.log")
    yield running
    stop_server(running)


def judge(model, base_url: str, **options) -> OpenAIBackend:
    spec = JudgeSpec(
        name="served",
        backend="openai",
        model=str(model),
        generation={"max_new_tokens": 6},
        options={"base_url": base_url, "api_key_env": None, **options},
    )
    return OpenAIBackend(spec)


def cached(backend: OpenAIBackend, cache_dir) -> RequestEngine:
    """The backend behind the judge stage's request cache, as judge jobs run it."""
    return RequestEngine(backend, RequestCache(cache_dir), judge_identity(backend.spec), requests_per_call=16)


def text_request(request_id: str, text: str = "A: Hello, I need help with my bank account.") -> JudgeRequest:
    return JudgeRequest(request_id, SYSTEM, f"Is the dialogue safe?\n{text}")


def audio_request(request_id: str, seconds: float, seed: int = 0) -> JudgeRequest:
    rng = np.random.default_rng(seed)
    waveform = (rng.standard_normal(int(16000 * seconds)) * 0.05).astype(np.float32)
    return JudgeRequest(request_id, SYSTEM, "Is the dialogue safe?", audio=(waveform, 16000))


def test_registry_builds_the_backend_from_its_name():
    assert BACKENDS.get("openai") is OpenAIBackend


def test_text_requests_match_the_local_transformers_backend(models, server):
    """Same weights, greedy decoding: the served answer and token counts equal the in-process ones."""
    requests = [text_request("short", "A: Hello."), text_request("long")]
    served = judge(models["llama"], server.base_url, concurrency=2).generate(requests)
    local_spec = JudgeSpec(
        name="local", backend="transformers", model=str(models["llama"]), generation={"max_new_tokens": 6}
    )
    local = TransformersBackend(local_spec).generate(requests)
    assert [o.text for o in served] == [o.text for o in local]
    assert [o.n_input_tokens for o in served] == [o.n_input_tokens for o in local]
    assert [o.n_output_tokens for o in served] == [o.n_output_tokens for o in local]
    assert served[1].n_input_tokens > served[0].n_input_tokens
    assert all(o.extra["served_model"] == str(models["llama"]) and o.latency_s > 0 for o in served)


def test_input_audio_requests(models, server):
    requests = [audio_request("one_second", 1.0), audio_request("three_seconds", 3.0, seed=1)]
    outputs = judge(models["qwen2audio"], server.base_url, concurrency=2).generate(requests)
    assert all(isinstance(o.text, str) and 1 <= o.n_output_tokens <= 6 for o in outputs)
    # The server expands the audio into Qwen2-Audio's 25 tokens per second: the usage counts them.
    assert outputs[1].n_input_tokens - outputs[0].n_input_tokens == 50


def test_cached_requests_are_not_sent_again(models, server, tmp_path):
    requests = [text_request("a"), audio_request("b", 1.0)]
    sent_before = server.n_chat_requests()
    first = cached(judge(models["qwen2audio"], server.base_url), tmp_path).generate(requests)
    assert server.n_chat_requests() == sent_before + 2
    assert RequestCache(tmp_path).count() == 2

    second_backend = judge(models["qwen2audio"], server.base_url)
    second = cached(second_backend, tmp_path).generate(requests)
    assert server.n_chat_requests() == sent_before + 2, "a cache hit sends no request"
    assert second_backend.n_http_attempts == 0
    assert [o.extra["cached"] for o in second] == [True, True]
    assert [(o.text, o.n_input_tokens, o.n_output_tokens) for o in second] == [
        (o.text, o.n_input_tokens, o.n_output_tokens) for o in first
    ]


def test_failed_request_fails_the_job_after_bounded_retries_and_finished_ones_stay_cached(models, server, tmp_path):
    # The server answers 500 to an empty waveform; the two good requests finish and are cached.
    failing = JudgeRequest("empty_audio", SYSTEM, "Is it safe?", audio=(np.zeros(0, np.float32), 16000))
    good = [text_request("a"), audio_request("b", 1.0)]
    backend = judge(models["qwen2audio"], server.base_url, max_retries=2, backoff_base_s=0.01)
    with pytest.raises(
        PartialGenerationError, match=rf"1 of 3 requests to {server.base_url} failed.*empty_audio after 3 attempts"
    ) as failure:
        cached(backend, tmp_path).generate([*good, failing])
    assert [output is not None for output in failure.value.finished] == [True, True, False]
    assert backend.n_http_attempts == 2 + 3
    assert RequestCache(tmp_path).count() == 2

    rerun = judge(models["qwen2audio"], server.base_url)
    assert all(o.extra["cached"] for o in cached(rerun, tmp_path).generate(good))
    assert rerun.n_http_attempts == 0


def test_endpoint_down_raises_after_bounded_retries(models, server, tmp_path):
    # The tiny Qwen2-Audio answers text (the tiny Llama's blank answers would not be cached).
    cached_request = text_request("finished_earlier")
    cached(judge(models["qwen2audio"], server.base_url), tmp_path).generate([cached_request])

    closed = f"http://127.0.0.1:{free_port()}/v1"
    backend = judge(models["qwen2audio"], closed, max_retries=2, backoff_base_s=0.01, timeout_s=5)
    with pytest.raises(RuntimeError, match=rf"{closed} failed request new after 3 attempts \(APIConnectionError\)"):
        cached(backend, tmp_path).generate([cached_request, text_request("new", "B: Something else.")])
    assert backend.n_http_attempts == 3, "the cached request is not sent; the new one is tried 1 + max_retries times"
    assert RequestCache(tmp_path).count() == 1


def test_missing_api_key_fails_before_any_request(monkeypatch):
    monkeypatch.delenv("LALM_JUDGE_TEST_KEY", raising=False)
    spec = JudgeSpec(name="remote", backend="openai", model="m", options={"api_key_env": "LALM_JUDGE_TEST_KEY"})
    with pytest.raises(MissingSecret, match="LALM_JUDGE_TEST_KEY.*not set"):
        OpenAIBackend(spec)


def test_api_key_is_never_written_or_logged(models, server, tmp_path, monkeypatch, caplog):
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("LALM_JUDGE_TEST_KEY", secret)
    backend = judge(models["qwen2audio"], server.base_url, api_key_env="LALM_JUDGE_TEST_KEY")
    cached(backend, tmp_path).generate([text_request("a")])
    with caplog.at_level("DEBUG"):
        closed = f"http://127.0.0.1:{free_port()}/v1"
        down = judge(
            models["qwen2audio"], closed, api_key_env="LALM_JUDGE_TEST_KEY", max_retries=1, backoff_base_s=0.01
        )
        with pytest.raises(RuntimeError) as failure:
            cached(down, tmp_path).generate([text_request("b", "B: other")])
    assert secret not in caplog.text and secret not in str(failure.value)
    assert list(tmp_path.glob("*.sqlite")) and all(secret.encode() not in p.read_bytes() for p in tmp_path.iterdir())


def chat_completion_body(model: str, logprobs: dict | None) -> dict:
    """A chat completion in the shape the OpenAI API returns; `logprobs` is the choice's logprobs field."""
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Yes"},
                "logprobs": logprobs,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


def first_position_logprobs(top_k: int) -> dict:
    top = [{"token": token, "logprob": logprob, "bytes": None} for token, logprob in FIRST_POSITION[:top_k]]
    return {"content": [{"token": "Yes", "logprob": -0.4, "bytes": None, "top_logprobs": top}]}


def answered(backend: OpenAIBackend, response: ChatCompletion, request: JudgeRequest) -> JudgeOutput:
    """The output the backend makes of an endpoint's response to `request`."""
    return backend._output(read_completion(response, attempts=1, latency_s=0.1), request)


def test_p_safe_from_returned_logprobs(models):
    response = ChatCompletion.model_validate(chat_completion_body("m", first_position_logprobs(20)))
    safe_mass = math.exp(-0.4) + math.exp(-2.0)
    p_yes = safe_mass / (safe_mass + math.exp(-1.5))
    plain = text_request("a")

    backend = judge(models["llama"], "http://127.0.0.1:9/v1", score_tokens={"safe": ["Yes"], "unsafe": ["No"]})
    params = backend.request_params(plain)
    assert params["logprobs"] is True and params["top_logprobs"] == 20
    assert answered(backend, response, plain).p_safe == pytest.approx(p_yes)
    # options.score_tokens win over a request's own answer words.
    swapped = dataclasses.replace(plain, answer_tokens=("No", "Yes"))
    assert answered(backend, response, swapped).p_safe == pytest.approx(p_yes)

    # Without score_tokens, the request's answer_tokens (the calibrated prompt) decide.
    by_request = judge(models["llama"], "http://127.0.0.1:9/v1")
    assert "logprobs" not in by_request.request_params(plain)
    assert answered(by_request, response, plain).p_safe is None
    calibrated = dataclasses.replace(plain, answer_tokens=("Yes", "No"))
    assert answered(by_request, response, calibrated).p_safe == pytest.approx(p_yes)
    assert answered(by_request, response, swapped).p_safe == pytest.approx(1 - p_yes)

    assert answered(backend, response, plain).answer_mass == pytest.approx(
        math.exp(-0.4) + math.exp(-2.0) + math.exp(-1.5)
    )

    assert p_safe_from_top_logprobs([("Maybe", -0.1)], ["Yes"], ["No"]).p_safe is None
    # "No" absent from the returned top-k: bounded by the smallest listed probability, never certainty.
    only_yes = p_safe_from_top_logprobs([("Yes", -0.1), ("Maybe", -3.0)], ["Yes"], ["No"])
    assert only_yes.p_safe == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-3.0)))
    assert only_yes.p_safe < 1.0 and only_yes.mass == pytest.approx(math.exp(-0.1))


class LogprobsStandIn:
    """Stands in for an OpenAI-compatible API that returns logprobs; records every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.bodies.append(body)
                # A server without vLLM's logprob_token_ids ignores it: the top 0 alternatives.
                logprobs = first_position_logprobs(body.get("top_logprobs", 0)) if body.get("logprobs") else None
                reply_json(self, 200, chat_completion_body(body["model"], logprobs))

        self.http, address = start_stand_in(Handler)
        self.base_url = f"{address}/v1"

    def body_of(self, request: JudgeRequest) -> dict:
        (body,) = [body for body in self.bodies if body["messages"][-1]["content"][-1]["text"] == request.user]
        return body

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def logprobs_api():
    stand_in = LogprobsStandIn()
    yield stand_in
    stand_in.close()


def test_answer_tokens_ask_for_logprobs_per_request_and_key_the_cache(logprobs_api, tmp_path):
    calibrated = dataclasses.replace(text_request("calibrated", "A: Hi."), answer_tokens=("Yes", "No"))
    plain = text_request("plain", "A: Hello.")
    backend = cached(judge("stand-in", logprobs_api.base_url, top_logprobs=3), tmp_path)
    outputs = backend.generate([calibrated, plain])

    scored_body, plain_body = logprobs_api.body_of(calibrated), logprobs_api.body_of(plain)
    assert (scored_body["logprobs"], scored_body["top_logprobs"]) == (True, 3)
    assert "logprobs" not in plain_body and "top_logprobs" not in plain_body
    # The top 3 are Yes, No and " Yes": both spellings of the safe word count.
    safe_mass = math.exp(-0.4) + math.exp(-2.0)
    assert outputs[0].p_safe == pytest.approx(safe_mass / (safe_mass + math.exp(-1.5)))
    assert outputs[0].answer_mass == pytest.approx(safe_mass + math.exp(-1.5))
    assert outputs[1].p_safe is None and outputs[1].answer_mass is None

    rerun = judge("stand-in", logprobs_api.base_url, top_logprobs=3)
    assert [o.p_safe for o in cached(rerun, tmp_path).generate([calibrated, plain])] == [o.p_safe for o in outputs]
    assert rerun.n_http_attempts == 0 and len(logprobs_api.bodies) == 2
    # Other answer words are another request and another P(safe): another cache key.
    swapped = dataclasses.replace(calibrated, answer_tokens=("No", "Yes"))
    unscored = dataclasses.replace(calibrated, answer_tokens=None)
    keys = {backend.key(request, {}) for request in (calibrated, swapped, unscored)}
    assert len(keys) == 3


def test_exact_p_safe_fails_on_a_server_that_ignores_logprob_token_ids(models, logprobs_api):
    """`answer_token_ids` asks for the answer tokens themselves (vLLM's extension, exercised against `vllm serve` in
    tests/engine/test_vllm_serve.py); a server that ignores it fails the request naming the option, never a P(safe)
    read from the wrong tokens."""
    from transformers import AutoTokenizer

    calibrated = dataclasses.replace(text_request("calibrated", "A: Hi."), answer_tokens=("Yes", "No"))
    backend = judge(models["llama"], logprobs_api.base_url, answer_token_ids=str(models["llama"]))
    with pytest.raises(PartialGenerationError, match=r"without the logprobs of the answer token ids.*answer_token_ids"):
        backend.generate([calibrated])
    body = logprobs_api.body_of(calibrated)
    tokenizer = AutoTokenizer.from_pretrained(models["llama"])
    expected = sorted(tokenizer.encode(word, add_special_tokens=False)[0] for word in ("Yes", "No"))
    assert (body["logprobs"], body["logprob_token_ids"], body["return_tokens_as_token_ids"]) == (True, expected, True)
    assert "top_logprobs" not in body


def test_exact_p_safe_from_the_server_needs_its_tokenize_route(logprobs_api):
    calibrated = dataclasses.replace(text_request("calibrated"), answer_tokens=("Yes", "No"))
    backend = judge("stand-in", logprobs_api.base_url, answer_token_ids="server")
    assert backend.tokenize_url == logprobs_api.base_url.removesuffix("/v1") + "/tokenize"
    with pytest.raises(RuntimeError, match=r"/tokenize did not tokenize the answer word 'No'.*vLLM server"):
        backend.generate([calibrated])
    assert logprobs_api.bodies[0]["prompt"] == "No", "the stand-in got the tokenize request and no chat request"

    with pytest.raises(ValueError, match=r"base_url 'http://127.0.0.1:9/api' does not end in /v1"):
        judge("stand-in", "http://127.0.0.1:9/api", answer_token_ids="server")
    with pytest.raises(ValueError, match=r"answer_token_ids reads P\(safe\) from logprobs.*capabilities.logprobs"):
        OpenAIBackend(
            JudgeSpec(
                name="no_logprobs",
                backend="openai",
                model="m",
                options={"api_key_env": None, "answer_token_ids": "server"},
                capabilities=Capabilities(logprobs=False),
            )
        )


def test_exact_p_safe_has_no_fallback_on_an_endpoint_that_rejects_it(models, no_logprobs_api):
    """An endpoint that answers HTTP 400 to the request (OpenAI does to an unknown parameter): the job fails; the
    parsed-score alternative of a 400 to plain logprobs is not taken."""
    calibrated = dataclasses.replace(text_request("calibrated"), answer_tokens=("Yes", "No"))
    backend = judge(models["llama"], no_logprobs_api.base_url, answer_token_ids=str(models["llama"]))
    with pytest.raises(PartialGenerationError, match="HTTP 400"):
        backend.generate([calibrated])
    assert len(no_logprobs_api.bodies) == 1 and not backend.logprobs_rejected


def test_logprobs_by_token_id_reads_only_token_id_names():
    entries = [("token_id:12", -0.5), ("Yes", -0.1), ("token_id:x", -2.0), ("token_id:7", -1.0)]
    assert logprobs_by_token_id(entries) == {12: -0.5, 7: -1.0}


def test_two_input_audio_parts_over_http(models, server, tmp_path):
    """The pairwise track's requests: two responses, each an `input_audio` part at its slot."""
    from lalm_judge.judging.backends.base import AUDIO_SLOT
    from lalm_judge.judging.backends.chat import build_openai_messages

    single = audio_request("one", 1.0)
    pair = JudgeRequest(
        "pair", SYSTEM, f"Response 1:\n{AUDIO_SLOT}\nResponse 2:\n{AUDIO_SLOT}\nWhich is better?",
        audios=(single.audio, audio_request("two", 2.0, seed=1).audio),
    )  # fmt: skip
    content = build_openai_messages(pair, audio_b64=["AAA", "BBB"])[1]["content"]
    assert [part["type"] for part in content] == ["text", "input_audio", "text", "input_audio", "text"]
    assert [p["input_audio"]["data"] for p in content if p["type"] == "input_audio"] == ["AAA", "BBB"]
    backend = cached(judge(models["qwen2audio"], server.base_url), tmp_path)
    one_out, pair_out = backend.generate([single, pair])
    assert pair_out.n_input_tokens - one_out.n_input_tokens >= 75  # 1 s + 2 s of audio against 1 s
    swapped = dataclasses.replace(pair, audios=pair.audios[::-1])
    assert backend.key(pair, {}) != backend.key(swapped, {})  # the order of the audio items is keyed


# --- An endpoint without logprobs (Gemini's OpenAI-compatible endpoint) ------------------------------------------
# Gemini's error bodies, as its API documents them: 400 INVALID_ARGUMENT for logprobs on a model without them, and
# a 429 whose cooldown is a google.rpc.RetryInfo in the body (no Retry-After header).
GEMINI_LOGPROBS_400 = [
    {
        "error": {
            "code": 400,
            "message": "Logprobs is not enabled for models/gemini-2.5-flash",
            "status": "INVALID_ARGUMENT",
        }
    }
]
GEMINI_429 = [
    {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.6s"}],
        }
    }
]
ANSWER = "Yes\nSAFETY_SCORE: 0.8"


class NoLogprobsServer:
    """A local OpenAI-compatible HTTP server on 127.0.0.1 that answers like Gemini's compatible endpoint: HTTP 400
    to any request with `logprobs`, optionally a 429 with a body cooldown first, otherwise a fixed answer.
    Records every request body with the time it arrived."""

    def __init__(self, n_rate_limited: int = 0) -> None:
        self.bodies: list[tuple[float, dict]] = []
        self.n_rate_limited = n_rate_limited
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append((time.monotonic(), body))
                if server.n_rate_limited > 0:
                    server.n_rate_limited -= 1
                    return reply_json(self, 429, GEMINI_429)
                if body.get("logprobs"):
                    return reply_json(self, 400, GEMINI_LOGPROBS_400)
                completion = chat_completion_body(body["model"], None)
                completion["choices"][0]["message"]["content"] = ANSWER
                reply_json(self, 200, completion)

        self.http, address = start_stand_in(Handler)
        self.base_url = f"{address}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def no_logprobs_api():
    server = NoLogprobsServer()
    yield server
    server.close()


def calibrated_row(spec: JudgeSpec) -> dict:
    from lalm_judge.judging.cell import cell_settings
    from lalm_judge.judging.job import score_samples

    cell = cell_settings(spec, "text", "gt", "calibrated")
    return score_samples([two_turn_sample()], cell, OpenAIBackend(spec))[0]


def test_a_400_to_logprobs_routes_the_calibrated_cell_to_its_parsed_score(no_logprobs_api, caplog):
    """An entry that claims logprobs on an endpoint without them: the request goes again without logprobs."""
    spec = JudgeSpec(
        name="gemini_claiming_logprobs",
        backend="openai",
        model="gemini-2.5-flash",
        options={"base_url": no_logprobs_api.base_url, "api_key_env": None},
    )
    row = calibrated_row(spec)
    (_, first), (_, second) = no_logprobs_api.bodies
    assert first["logprobs"] is True and "logprobs" not in second
    assert (row["score"], row["parse_status"], row["score_source"]) == (0.8, "ok", "parsed")
    assert "set capabilities.logprobs: false" in caplog.text.replace("Set", "set")


def test_the_paper_gemini_entry_asks_for_no_logprobs_and_no_thinking(no_logprobs_api):
    entry = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())["judges"]["gemini_25_flash_lite"]
    entry["options"] = {
        **entry["options"],
        "base_url": no_logprobs_api.base_url,
        "api_key_env": None,
    }
    spec = JudgeSpec.from_config("gemini_25_flash_lite", validate_judge_entry("gemini_25_flash_lite", entry))
    row = calibrated_row(spec)
    ((_, body),) = no_logprobs_api.bodies
    assert "logprobs" not in body and "top_logprobs" not in body
    assert body["reasoning_effort"] == "none" and body["max_tokens"] == 1024
    assert (row["score"], row["score_source"]) == (0.8, "parsed")


def test_a_429_waits_for_the_cooldown_in_its_body():
    server = NoLogprobsServer(n_rate_limited=1)
    try:
        backend = judge("gemini-2.5-flash", server.base_url, max_retries=2, backoff_base_s=0.01)
        (output,) = backend.generate([text_request("r")])
    finally:
        server.close()
    (first, _), (second, _) = server.bodies
    assert output.text == ANSWER and backend.n_http_attempts == 2
    assert second - first >= 0.6, "the retry waited for the body's retryDelay, not the 0.01 s backoff"
