"""The one endpoint client (`core.endpoints`) over real HTTP against `StandInServer` (tests/support/openai_standin.py,
a stdlib server on 127.0.0.1 standing in for a paid OpenAI-compatible API, answering the chat-completions
contract): the same faults give the same retries whichever caller sends the request, and a body that trickles in
is given up on at the total deadline."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import re
import time

import pytest
import yaml

from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.endpoints import (
    EndpointClient,
    EndpointCoolingDown,
    EndpointGaveUp,
    EndpointSettings,
    batch_job_end,
    endpoint_defaults,
    normalized_finish_reason,
)
from lalm_judge.data.generators import RewriteRequest
from lalm_judge.data.generators.llm import LLMGenerator
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.openai_backend import OpenAIBackend
from lalm_judge.workflow.config import SCHEMA_PATH
from tests.support.openai_standin import Reply, StandInServer, serving

pytestmark = pytest.mark.server

KEY_ENV = "LALM_JUDGE_ENDPOINT_TEST_KEY"
ANSWER = json.dumps({"text": "You never listen, you fool.", "emotion": "angry"})
# One request's attempts, in order: what each caller must meet and retry the same way.
FAULTS = [
    Reply(status=429, headers={"Retry-After": "0.05"}),
    Reply(status=503),
    Reply(
        status=429,
        error_body={"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.04s"}]},
    ),
    Reply(raw_body=b'{"id": "chatcmpl", "choices": [{'),
    Reply(content=ANSWER, trickle_s=0.2),
    Reply(status=500),
]
ENDPOINT = {"max_retries": len(FAULTS), "timeout_s": 1.0, "backoff_base_s": 0.01, "backoff_max_s": 0.5}


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-endpoint-test-0000")


def scripted() -> StandInServer:
    server = StandInServer(lambda body: ())
    server.script = lambda nth: FAULTS[nth - 1] if nth <= len(FAULTS) else Reply(content=ANSWER)
    return server


def rewrite_once(base_url: str, tmp_path) -> EndpointClient:
    config = {"name": "llm", "model": "stand-in", "base_url": base_url, "api_key_env": KEY_ENV, **ENDPOINT}
    generator = LLMGenerator(config, tmp_path / "rewrites")
    turns = [Turn(0, "Ana", "Shall we cook tonight?", "curious"), Turn(1, "Ben", "Yes, pasta please.", "happy")]
    dialogue = Dialogue("cooking_plan", turns, "jsonl", "memory", 16000)
    (result,) = generator.rewrite([RewriteRequest(dialogue, 1, "harassment", 2, seed=0)])
    assert result.status == "ok"
    return generator.chat.client


def judge_once(base_url: str) -> EndpointClient:
    options = {"base_url": base_url, "api_key_env": KEY_ENV, **ENDPOINT}
    backend = OpenAIBackend(JudgeSpec(name="api_judge", backend="openai", model="stand-in", options=options))
    (output,) = backend.generate([JudgeRequest("r0", "You are a judge.", "A: hi. B: hello.")])
    assert output.text == ANSWER and output.finish_reason == "stop"
    return backend.client


def test_the_same_faults_give_the_same_retries_through_the_rewrite_generator_and_the_judge(tmp_path):
    seen = {}
    for caller, ask in (("rewrite", lambda url: rewrite_once(url, tmp_path)), ("judge", judge_once)):
        with serving(scripted()) as server:
            client = ask(server.base_url)
        seen[caller] = [(retry.attempt, retry.problem, retry.delay_s) for retry in client.retries]
        assert server.total == len(FAULTS) + 1 == client.n_attempts
    assert seen["rewrite"] == seen["judge"]
    assert seen["judge"] == [
        (1, "HTTP 429", 0.05),  # Retry-After, longer than the backoff
        (2, "HTTP 503", 0.02),
        (3, "HTTP 429", 0.04),  # Gemini's retryDelay in the error body
        (4, "malformed answer (JSONDecodeError)", 0.08),
        (5, "no complete answer within the deadline of 1 s", 0.16),
        (6, "HTTP 500", 0.32),
    ]


def test_a_trickled_body_is_given_up_at_the_total_deadline():
    server = StandInServer(lambda body: ())
    # About 300 bytes at 0.25 s each: more than a minute to finish, though no read ever waits more than 0.25 s.
    server.script = lambda nth: Reply(content="SAFETY_SCORE: 0.5", trickle_s=0.25)
    with serving(server):
        values = {"base_url": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 2, "max_retries": 0}
        client = EndpointClient(EndpointSettings.from_config(values, "a test"), "a test")

        async def ask():
            session = client.session()
            async with session.client:
                return await client.complete(session, {"model": "m", "messages": []}, "r0")

        with pytest.raises(EndpointGaveUp, match=r"after 1 attempts \(no complete answer within the deadline of 2 s"):
            asyncio.run(ask())
        deadline = time.monotonic() + 60  # a safety net only: the server notices when it writes its next byte
        while not server.abandoned and time.monotonic() < deadline:
            time.sleep(0.05)
    assert server.abandoned == 1, "the client left before the body was complete"


def test_the_defaults_are_the_schemas_and_finish_reasons_are_normalized():
    endpoint = yaml.safe_load(SCHEMA_PATH.read_text())["$defs"]["endpoint"]["properties"]
    assert endpoint_defaults() == {name: spec["default"] for name, spec in endpoint.items()}
    settings = EndpointSettings.from_config({}, "a test")
    assert (settings.max_retries, settings.timeout_s, settings.url) == (5, 120.0, "https://api.openai.com/v1")
    assert [normalized_finish_reason(r) for r in ("stop", "length", "content_filter", "tool_calls", None)] == [
        "stop",
        "length",
        "content_filter",
        None,
        None,
    ]


def test_a_key_sent_in_another_header_comes_from_its_variable_and_is_redacted_from_answers(monkeypatch):
    """Azure OpenAI takes its key in an `api-key` header: `header_env` names the variable holding it."""
    monkeypatch.setenv("LALM_JUDGE_AZURE_TEST_KEY", "azure-key-4242-abcdef")
    server = StandInServer(lambda body: ())
    server.script = lambda nth: Reply("The key azure-key-4242-abcdef works.\nSAFETY_SCORE: 0.9")
    with serving(server):
        options = {
            "base_url": server.base_url,
            "api_key_env": None,
            "header_env": {"api-key": "LALM_JUDGE_AZURE_TEST_KEY"},
        }
        spec = JudgeSpec(name="azure", backend="openai", model="m", options=options, generation={"max_new_tokens": 8})
        (output,) = OpenAIBackend(spec).generate([JudgeRequest("r0", "You are a judge.", "A: hi.")])
    assert server.headers[0]["api-key"] == "azure-key-4242-abcdef"
    assert output.text == "The key *** works.\nSAFETY_SCORE: 0.9"


def test_the_generation_column_names_headers_without_their_values():
    spec = JudgeSpec(name="j", backend="openai", model="m", generation={"extra_headers": {"x-trace": "secret-ish"}})
    assert spec.generation_settings["generation"] == {"extra_headers": ["x-trace"]}


def ask_once(base_url: str, job_end=None, **settings) -> tuple[EndpointClient, float]:
    """One request through a fresh client; the client and the seconds the call took."""
    values = {"base_url": base_url, "api_key_env": KEY_ENV, "backoff_base_s": 0.01, **settings}
    client = EndpointClient(EndpointSettings.from_config(values, "a test"), "a test", job_end=job_end)

    async def ask():
        session = client.session()
        async with session.client:
            return await client.complete(session, {"model": "m", "messages": []}, "r0")

    started = time.monotonic()
    try:
        asyncio.run(ask())
    finally:
        elapsed = time.monotonic() - started
    return client, elapsed


def rate_limited(retry_after: str) -> StandInServer:
    server = StandInServer(lambda body: ())
    server.script = lambda nth: Reply(status=429, headers={"Retry-After": retry_after})
    return server


def named_time(message: str) -> datetime.datetime:
    found = re.search(r"asks to be asked again at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", message)
    assert found, message
    return datetime.datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.UTC)


def test_a_retry_after_longer_than_the_retries_can_wait_fails_at_once_naming_the_servers_time():
    """A 429 with `Retry-After: 3600` under the defaults (5 retries, at most 60 s apart): every retry would come
    before the server's time, so the request is given up on at once, naming it, not after 5 minutes of retries."""
    asked = datetime.datetime.now(datetime.UTC)
    with serving(rate_limited("3600")) as server, pytest.raises(EndpointCoolingDown) as raised:
        ask_once(server.base_url)
    message = str(raised.value)
    assert server.total == 1 and raised.value.attempts == 1
    assert "(Retry-After: 3600), 3600 s from now" in message and "its 5 remaining retries" in message
    assert abs((named_time(message) - asked).total_seconds() - 3600) < 30
    assert "rerun after that time" in message


def test_a_retry_after_date_is_read_and_named():
    until = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)).replace(microsecond=0)
    header = email.utils.format_datetime(until, usegmt=True)
    with serving(rate_limited(header)) as server, pytest.raises(EndpointCoolingDown) as raised:
        ask_once(server.base_url, max_retries=3, backoff_max_s=1)
    assert named_time(str(raised.value)) == until and f"Retry-After: {header}" in str(raised.value)
    assert server.total == 1


def test_a_retry_after_past_the_jobs_end_fails_at_once_naming_both_times():
    """Inside a SLURM job that ends in 20 s, a server asking for 40 s is given up on at once, though the retries
    alone (5 x 60 s) could wait that long; a shorter cooldown is waited for and retried."""
    ends = int(time.time()) + 20
    job_end = batch_job_end({"SLURM_JOB_END_TIME": str(ends)})
    assert job_end == datetime.datetime.fromtimestamp(ends, datetime.UTC)
    with serving(rate_limited("40")) as server, pytest.raises(EndpointCoolingDown) as raised:
        ask_once(server.base_url, job_end=job_end)
    message = str(raised.value)
    assert server.total == 1 and "the job ends at" in message and "SLURM_JOB_END_TIME" in message
    server = StandInServer(lambda body: ())
    server.script = lambda nth: Reply(status=429, headers={"Retry-After": "0.2"}) if nth == 1 else Reply("ok")
    with serving(server):
        client, elapsed = ask_once(server.base_url, job_end=job_end)
    assert server.total == 2 and elapsed >= 0.2 and [r.delay_s for r in client.retries] == [0.2]
    assert batch_job_end({}) is None and batch_job_end({"SLURM_JOB_END_TIME": "soon"}) is None
