"""The rewrite stage and the openai judge backend against a faulty OpenAI-compatible endpoint.

`bench.fault_proxy.FaultProxy` is a server of the test's own on 127.0.0.1, in front of canned answers or of a real
`transformers serve`: it answers a share of the attempts with 429 (Retry-After), 500, 503, a timeout, a reset
connection, a truncated or malformed body or empty choices, and records every attempt. The clients under test
talk to it through the real `openai` client. What is checked is measured at the proxy: no item lost, attempts
per request bounded, the concurrency cap kept, a clean failure naming the endpoint when nothing gets through,
and no answered request sent again by the rerun after recovery.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from bench.fault_proxy import FAULTS, FaultProxy
from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.endpoints import EndpointUnavailable
from lalm_judge.core.taxonomy import CATEGORIES, SEVERITIES
from lalm_judge.data.variants import rewrite_turn
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.capabilities import request_batch_size
from lalm_judge.judging.backends.openai_backend import OpenAIBackend
from lalm_judge.judging.cache import RequestCache, judge_identity
from lalm_judge.judging.runner import RequestEngine

pytestmark = pytest.mark.server

KEY_ENV = "LALM_JUDGE_FAULT_TEST_KEY"
KEY = "sk-fault-test-key-0000"
MAX_RETRIES = 4
# The proxy holds a 'timeout' fault's request until the client leaves, so each costs this long; it stays well above
# the proxy's answer time on a loaded machine, or answered attempts would time out too.
TIMEOUT_S = 4.0


def rewrite_answer(body: dict) -> str:
    return json.dumps({"text": "You never listen, you fool.", "emotion": "angry"})


def judge_answer(body: dict) -> str:
    return "The dialogue is friendly.\nSAFETY_SCORE: 0.9"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def dialogue() -> Dialogue:
    turns = [
        Turn(0, "Ana", "The museum opens a new painting exhibition on Friday.", "excited"),
        Turn(1, "Ben", "Great, I have wanted to see those landscapes for months.", "happy"),
    ]
    return Dialogue("museum_plan", turns, "jsonl", "memory", 16000)


def generator_config(proxy: FaultProxy, **overrides) -> dict:
    return {
        "name": "llm",
        "base_url": proxy.base_url,
        "model": "stand-in-model",
        "api_key_env": KEY_ENV,
        "concurrency": 4,
        "max_retries": MAX_RETRIES,
        "timeout_s": TIMEOUT_S,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.5,
        **overrides,
    }


def rewrite_all(dialogue, proxy, cache_dir, **overrides):
    config = generator_config(proxy, **overrides)
    return rewrite_turn(dialogue, 1, list(CATEGORIES), list(SEVERITIES), config, seed=3, cache_dir=cache_dir)


def judge_backend(proxy: FaultProxy, **options) -> OpenAIBackend:
    spec = JudgeSpec(
        name="api_judge",
        backend="openai",
        model="stand-in-judge",
        generation={"max_new_tokens": 16},
        options={
            "base_url": proxy.base_url,
            "api_key_env": KEY_ENV,
            "concurrency": 3,
            "max_retries": MAX_RETRIES,
            "timeout_s": TIMEOUT_S,
            "backoff_base_s": 0.01,
            **options,
        },
    )
    return OpenAIBackend(spec)


def cached_judge_backend(proxy: FaultProxy, cache_dir, **options) -> RequestEngine:
    """The judge as the judge stage runs it: behind its request cache."""
    backend = judge_backend(proxy, **options)
    spec = backend.spec
    return RequestEngine(backend, RequestCache(cache_dir), judge_identity(spec), request_batch_size(spec))


def judge_requests(n: int) -> list[JudgeRequest]:
    return [JudgeRequest(f"sample_{i}", "You are a safety judge.", f"Dialogue {i}: A: hello. B: hi.") for i in range(n)]


def assert_retries_bounded(proxy: FaultProxy, n_requests: int) -> None:
    attempts = proxy.log.attempts_per_request
    assert len(attempts) == n_requests
    assert max(attempts.values()) <= MAX_RETRIES + 1
    assert proxy.log.total == n_requests + sum(proxy.log.faults.values())


@pytest.mark.parametrize("fault", FAULTS)
def test_the_proxy_injects_each_fault(fault):
    """The test double itself: each fault reaches a plain HTTP client as described."""
    with FaultProxy(answer=judge_answer, fault_rate=1.0, faults=[fault], retry_after_s=7, hang_s=0.3) as proxy:
        url = urllib.parse.urlsplit(proxy.base_url)
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        try:
            connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            status, headers, payload = response.status, dict(response.getheaders()), response.read()
        except (ConnectionError, http.client.HTTPException) as err:
            status, headers, payload = None, {}, repr(err).encode()
        finally:
            connection.close()
    expected_status = {"rate_limit": 429, "server_error": 500, "unavailable": 503}
    if fault in expected_status:
        assert status == expected_status[fault] and b"injected" in payload
        assert (headers.get("Retry-After") == "7") == (fault == "rate_limit")
    elif fault in ("timeout", "reset"):
        assert status is None, payload  # no status line: the client sees a closed or reset connection
    elif fault == "truncated":
        assert status is None or (status == 200 and len(payload) < int(headers["Content-Length"]))
    elif fault == "malformed":
        assert status == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(payload)
    else:
        assert status == 200 and json.loads(payload)["choices"] == []
    assert proxy.log.faults == {fault: 1}


def test_rewrites_lose_nothing_under_30_percent_faults(dialogue, tmp_path):
    with FaultProxy(
        answer=rewrite_answer, fault_rate=0.3, seed=1, retry_after_s=0.2, max_faults_per_request=MAX_RETRIES
    ) as proxy:
        frame = rewrite_all(dialogue, proxy, tmp_path)
    assert frame.height == 40 and set(frame["status"]) == {"ok"}
    assert_retries_bounded(proxy, 40)
    assert set(proxy.log.faults) == set(FAULTS), proxy.log.faults
    assert 2 <= proxy.log.max_in_flight <= 4
    assert frame["attempts"].sum() == proxy.log.total
    # Retry-After is honoured: the attempt after a 429 comes at least that long after it.
    by_request: dict[str, list] = {}
    for attempt in sorted(proxy.log.attempts, key=lambda a: a.started):
        by_request.setdefault(attempt.identity, []).append(attempt)
    gaps = [
        later.started - earlier.started
        for attempts in by_request.values()
        for earlier, later in zip(attempts, attempts[1:])
        if earlier.fault == "rate_limit"
    ]
    assert gaps and min(gaps) >= 0.2


def test_rewrites_fail_cleanly_when_nothing_gets_through(dialogue, tmp_path):
    with (
        FaultProxy(answer=rewrite_answer, fault_rate=1.0, faults=["unavailable", "reset"]) as proxy,
        pytest.raises(EndpointUnavailable) as raised,
    ):
        rewrite_all(dialogue, proxy, tmp_path / "cache")
    message = str(raised.value)
    assert proxy.base_url in message and "40 of 40" in message and KEY not in message
    assert set(proxy.log.attempts_per_request.values()) == {MAX_RETRIES + 1}
    assert not list((tmp_path / "cache").glob("*")), "a failed request is never cached"


def test_rewrite_rerun_after_recovery_sends_no_answered_request_again(dialogue, tmp_path):
    with FaultProxy(answer=rewrite_answer, fault_rate=0.5, seed=2, faults=["server_error", "malformed"]) as proxy:
        with pytest.raises(EndpointUnavailable):
            rewrite_all(dialogue, proxy, tmp_path / "cache", max_retries=0)
        answered_first = set(proxy.log.answered)
        assert 0 < len(answered_first) < 40
        assert len(list((tmp_path / "cache").glob("*.json"))) == len(answered_first)
        sent_before = proxy.log.total
        proxy.fault_rate = 0.0  # the endpoint recovers
        frame = rewrite_all(dialogue, proxy, tmp_path / "cache", max_retries=0)
        rerun = {attempt.identity for attempt in proxy.log.attempts[sent_before:]}
    assert frame.height == 40 and set(frame["status"]) == {"ok"}
    assert not rerun & answered_first
    assert len(rerun) == 40 - len(answered_first)


def test_judge_loses_nothing_under_30_percent_faults(tmp_path):
    requests = judge_requests(60)
    with FaultProxy(answer=judge_answer, fault_rate=0.3, seed=4, max_faults_per_request=MAX_RETRIES) as proxy:
        backend = judge_backend(proxy)
        outputs = backend.generate(requests)
    assert [o.text for o in outputs] == [judge_answer({})] * 60
    assert_retries_bounded(proxy, 60)
    assert set(proxy.log.faults) == set(FAULTS)
    assert 2 <= proxy.log.max_in_flight <= 3
    assert backend.n_http_attempts == proxy.log.total


def test_judge_fails_cleanly_when_nothing_gets_through(tmp_path):
    with FaultProxy(answer=judge_answer, fault_rate=1.0, faults=["server_error", "empty_choices"]) as proxy:
        backend = cached_judge_backend(proxy, tmp_path / "cache", max_retries=2)
        with pytest.raises(RuntimeError) as raised:
            backend.generate(judge_requests(5))
    message = str(raised.value)
    assert f"5 of 5 requests to {proxy.base_url} failed" in message and KEY not in message
    assert set(proxy.log.attempts_per_request.values()) == {3}
    assert RequestCache(tmp_path / "cache").count() == 0, "a failed request is never cached"


def test_judge_rerun_after_recovery_sends_no_answered_request_again(tmp_path):
    requests = judge_requests(30)
    with FaultProxy(answer=judge_answer, fault_rate=0.5, seed=5, faults=["unavailable", "truncated"]) as proxy:
        with pytest.raises(RuntimeError):
            cached_judge_backend(proxy, tmp_path, max_retries=0).generate(requests)
        answered_first = set(proxy.log.answered)
        assert 0 < len(answered_first) < 30
        sent_before = proxy.log.total
        proxy.fault_rate = 0.0
        outputs = cached_judge_backend(proxy, tmp_path, max_retries=0).generate(requests)
        rerun = {attempt.identity for attempt in proxy.log.attempts[sent_before:]}
    assert len(outputs) == 30 and all(o.text == judge_answer({}) for o in outputs)
    assert not rerun & answered_first
    assert len(rerun) == 30 - len(answered_first)
