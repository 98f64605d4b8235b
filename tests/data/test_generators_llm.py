"""The `llm` rewrite generator over real HTTP.

`StandInServer` (tests/support/openai_standin.py) stands in for a paid OpenAI-compatible API (GPT-4o,
Gemini), which cannot be reached from the test machine: a stdlib HTTP server on 127.0.0.1, scripted here per
(category, severity), that counts requests and the largest number of requests in flight. The generator talks
to it through the real `openai` client. The last test runs against a real `transformers serve` with a tiny
random-weight Llama: its random output must end as a status row, not a crash.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest

from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.endpoints import EndpointConfigError, EndpointUnavailable
from lalm_judge.core.refusals import opens_with_refusal
from lalm_judge.core.secrets import MissingSecret
from lalm_judge.core.taxonomy import CATEGORIES, SEVERITIES
from lalm_judge.data.generators.llm import RewritePrompt, interpret_reply
from lalm_judge.data.variants import rewrite_turn, write_variant_table
from tests.support.openai_standin import Reply, StandInServer, serving

pytestmark = pytest.mark.server

KEY_ENV = "LALM_JUDGE_TEST_REWRITE_KEY"
SECRET = "sk-test-do-not-write-0123456789"
_TARGET = re.compile(r"category=(\w+), severity=(\d)")


def ok_json(text: str = "You are useless at this.", emotion: str = "angry") -> Reply:
    return Reply(json.dumps({"text": text, "emotion": emotion}))


def rewrite_cell(body: dict) -> tuple[str, int]:
    """The (category, severity) a rewrite request asks for."""
    category, severity = _TARGET.search(body["messages"][1]["content"]).groups()
    return category, int(severity)


@pytest.fixture
def server():
    stand_in = StandInServer(rewrite_cell)
    stand_in.script = lambda category, severity, nth: ok_json()
    with serving(stand_in):
        yield stand_in


@pytest.fixture
def dialogue() -> Dialogue:
    turns = [
        Turn(0, "Ana", "The museum opens a new painting exhibition on Friday.", "excited"),
        Turn(1, "Ben", "Great, I have wanted to see those landscapes for months.", "happy"),
        Turn(2, "Ana", "Let's get tickets early, it will be crowded.", "enthusiastic"),
    ]
    return Dialogue("museum_plan", turns, "jsonl", "memory", 16000)


TIMEOUT_S = 5.0


def llm_config(server: StandInServer, **overrides) -> dict:
    config = {
        "name": "llm",
        "base_url": server.base_url,
        "model": "stand-in-model",
        "api_key_env": KEY_ENV,
        "concurrency": 4,
        "max_retries": 2,
        # Far above what an answer takes on a loaded machine: only the reply scripted to outlast it times out.
        "timeout_s": TIMEOUT_S,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    return config | overrides


def run_all(dialogue, server, tmp_path, **overrides) -> pl.DataFrame:
    return rewrite_turn(
        dialogue, 1, list(CATEGORIES), list(SEVERITIES), llm_config(server, **overrides), seed=11, cache_dir=tmp_path
    )


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


def mixed_script(category: str, severity: int, nth: int) -> Reply:
    """One scripted behaviour per cell; every cell not listed answers valid JSON."""
    behaviours = {
        ("harassment", 1): lambda: Reply("Sure, here it is: you fool.") if nth == 1 else ok_json("Fixed."),
        ("harassment", 2): lambda: Reply("Sure, here it is: you fool."),
        ("hate", 1): lambda: Reply(json.dumps({"refused": True, "reason": "policy"})),
        ("hate", 2): lambda: Reply("I'm sorry, but I can't help with that request."),
        ("violence", 1): lambda: Reply(status=429) if nth <= 2 else ok_json("Third time."),
        ("sexual", 1): lambda: Reply(json.dumps({"text": "Hey.", "emotion": "furious"})),
        ("deception", 1): lambda: Reply('```json\n{"text": "Trust me.", "emotion": "neutral"}\n```'),
        ("dangerous", 1): lambda: Reply("", finish_reason="content_filter"),
        ("self_harm", 1): lambda: Reply(None, refusal="I can't help with that."),
        ("overall", 1): lambda: Reply(delay_s=TIMEOUT_S + 1.0) if nth == 1 else ok_json("After a timeout."),
        ("overall", 2): lambda: Reply(status=400),
        ("overall", 3): lambda: Reply(status=400, error_body={"code": "content_policy_violation"}),
    }
    return behaviours.get((category, severity), ok_json)()


EXPECTED_MIXED = {  # (category, severity): (status, attempts, text)
    ("harassment", 1): ("ok", 2, "Fixed."),
    ("harassment", 2): ("invalid_json", 3, None),
    ("hate", 1): ("refusal", 1, None),
    ("hate", 2): ("refusal", 1, None),
    ("violence", 1): ("ok", 3, "Third time."),
    ("sexual", 1): ("schema_error", 3, None),
    ("deception", 1): ("ok", 1, "Trust me."),
    ("dangerous", 1): ("refusal", 1, None),
    ("self_harm", 1): ("refusal", 1, None),
    ("overall", 1): ("ok", 2, "After a timeout."),
    ("overall", 2): ("error", 1, None),
    ("overall", 3): ("refusal", 1, None),
}


def test_valid_answers_become_ok_rows(dialogue, server, tmp_path):
    frame = run_all(dialogue, server, tmp_path)
    assert frame.height == 40 and server.total == 40
    assert set(frame["status"]) == {"ok"} and set(frame["attempts"]) == {1}
    assert set(frame["text"]) == {"You are useless at this."} and set(frame["emotion"]) == {"angry"}
    assert frame.select("generator", "model", "prompt_version").unique().rows() == [("llm", "stand-in-model", "1")]
    assert server.auth_headers == {f"Bearer {SECRET}"}
    sent = server.requests[0]
    assert sent["seed"] == 11 and sent["response_format"] == {"type": "json_object"}
    assert all(turn.text in sent["messages"][1]["content"] for turn in dialogue.turns)
    assert all(f"- {category}:" in sent["messages"][0]["content"] for category in CATEGORIES)


def test_every_failure_mode_becomes_its_status(dialogue, server, tmp_path):
    server.script = mixed_script
    frame = run_all(dialogue, server, tmp_path)
    by_cell = {(r["category"], r["severity"]): r for r in frame.iter_rows(named=True)}
    for cell, (status, attempts, text) in EXPECTED_MIXED.items():
        row = by_cell[cell]
        assert (row["status"], row["attempts"], row["text"]) == (status, attempts, text), cell
        assert server.per_cell[cell] == attempts, cell
        assert (row["error"] is None) == (status == "ok"), cell
        assert (row["emotion"] is None) == (status != "ok"), cell
    assert "furious" in by_cell["sexual", 1]["error"]
    others = [r for cell, r in by_cell.items() if cell not in EXPECTED_MIXED]
    assert {(r["status"], r["attempts"]) for r in others} == {("ok", 1)}


def test_reask_sends_the_previous_answer_and_the_problem(dialogue, server, tmp_path):
    server.script = mixed_script
    run_all(dialogue, server, tmp_path)
    reasks = [r for r in server.requests if _TARGET.search(r["messages"][1]["content"]).groups() == ("harassment", "1")]
    assert [len(r["messages"]) for r in reasks] == [2, 4]
    assert reasks[1]["messages"][2] == {"role": "assistant", "content": "Sure, here it is: you fool."}
    assert "not a JSON object" in reasks[1]["messages"][3]["content"]


def test_rerun_reads_the_cache_and_retries_only_endpoint_errors(dialogue, server, tmp_path):
    server.script = mixed_script
    first = run_all(dialogue, server, tmp_path / "cache")
    sent = server.total
    again = run_all(dialogue, server, tmp_path / "cache")
    # Only the 'error' cell (a rejected request) is asked again; everything else comes from disk.
    assert server.total - sent == 1
    assert again.equals(first)


def test_fully_cached_rerun_sends_nothing_and_writes_identical_bytes(dialogue, server, tmp_path):
    first = run_all(dialogue, server, tmp_path / "cache")
    write_variant_table(first, tmp_path / "a.parquet")
    sent = server.total
    again = run_all(dialogue, server, tmp_path / "cache")
    write_variant_table(again, tmp_path / "b.parquet")
    assert server.total == sent == 40
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert len(list((tmp_path / "cache").glob("*.json"))) == 40


def test_a_new_seed_is_a_new_cache_key(dialogue, server, tmp_path):
    config = llm_config(server)
    rewrite_turn(dialogue, 1, ["hate"], [3], config, seed=1, cache_dir=tmp_path)
    rewrite_turn(dialogue, 1, ["hate"], [3], config, seed=2, cache_dir=tmp_path)
    rewrite_turn(dialogue, 1, ["hate"], [3], config, seed=1, cache_dir=tmp_path)
    assert server.total == 2


def test_an_endpoint_that_keeps_failing_fails_the_job_after_the_others_are_cached(dialogue, server, tmp_path):
    server.script = lambda category, severity, nth: (
        Reply(status=503) if (category, severity) == ("hate", 4) else ok_json()
    )
    with pytest.raises(EndpointUnavailable, match=r"did not answer 1 of 40 .*museum_plan\.t1\.hate\.s4.*HTTP 503"):
        run_all(dialogue, server, tmp_path)
    assert server.per_cell["hate", 4] == 3 and len(list(tmp_path.glob("*.json"))) == 39


def test_concurrency_cap_is_respected(dialogue, server, tmp_path):
    server.script = lambda category, severity, nth: Reply(ok_json().content, delay_s=0.05)
    run_all(dialogue, server, tmp_path, concurrency=3)
    assert server.max_in_flight == 3


def test_missing_key_fails_before_any_request(dialogue, server, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(MissingSecret, match=KEY_ENV):
        run_all(dialogue, server, tmp_path)
    assert server.total == 0


def test_rejected_key_stops_the_job_without_revealing_it(dialogue, server, tmp_path):
    server.script = lambda category, severity, nth: Reply(status=401)
    with pytest.raises(EndpointConfigError, match="HTTP 401") as raised:
        run_all(dialogue, server, tmp_path)
    assert SECRET not in str(raised.value)
    assert server.total <= 4  # the first wave of the concurrency cap, then the job stops


def test_the_key_is_never_written(dialogue, server, tmp_path):
    server.script = mixed_script
    frame = run_all(dialogue, server, tmp_path / "cache")
    write_variant_table(frame, tmp_path / "variants.parquet")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_prompt_version_mismatch_is_a_config_error(dialogue, server, tmp_path):
    with pytest.raises(ValueError, match="prompt version '9'"):
        run_all(dialogue, server, tmp_path, prompt_version="9")
    with pytest.raises(ValueError, match="'temprature'"):
        run_all(dialogue, server, tmp_path, temprature=0.1)


@pytest.mark.parametrize(
    ("reply", "refusal"),
    [
        ("I'm sorry, but I can't help with that.", True),
        ("Sorry, I cannot assist with this request.", True),
        ("I won't write that.", True),
        ("As an AI, I must decline.", True),
        ("I must decline to rewrite this turn.", True),
        ("I can't stand you and your stupid plans.", False),
        ("I won't stop until you pay for this.", False),
        ("Sorry not sorry, you deserved it.", False),
    ],
)
def test_refusal_heuristic(reply, refusal):
    assert opens_with_refusal(reply) is refusal


def test_interpret_reply_classifies_answers():
    schema = RewritePrompt.load().response_schema
    assert interpret_reply('{"text": " Go away. ", "emotion": "angry"}', schema).text == "Go away."
    assert interpret_reply('Here: {"text": "Go away.", "emotion": "angry"} done', schema).status == "ok"
    assert interpret_reply('{"text": "Go away."}', schema).status == "schema_error"
    assert interpret_reply('{"text": "", "emotion": "angry"}', schema).status == "schema_error"
    assert interpret_reply('["Go away."]', schema).status == "schema_error"
    assert interpret_reply('{"text": "I cannot help with that.", "emotion": "sad"}', schema).status == "refusal"
    cut = interpret_reply('{"text": "Go aw', schema, finish_reason="length")
    assert cut.status == "invalid_json" and "max_tokens" in cut.error


@pytest.fixture(scope="module")
def transformers_server(tmp_path_factory):
    """A real `transformers serve` on 127.0.0.1 serving a tiny random-weight Llama (built here, offline)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from bench.models import build_tiny_llama

    model_dir = build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cli = Path(sys.executable).with_name("transformers")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [str(cli), "serve", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=sink, stderr=sink
        )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                if process.poll() is not None:
                    pytest.fail(f"transformers serve exited: {log.read_text()[-2000:]}")
                time.sleep(0.3)
        else:
            pytest.fail(f"transformers serve did not answer /health in 90 s: {log.read_text()[-2000:]}")
        yield f"http://127.0.0.1:{port}/v1", str(model_dir)
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.slow
def test_random_model_output_ends_as_invalid_json_not_a_crash(dialogue, transformers_server, tmp_path):
    base_url, model_dir = transformers_server
    config = {
        "name": "llm",
        "base_url": base_url,
        "model": model_dir,
        "api_key_env": None,
        "max_tokens": 16,
        "max_retries": 1,
        "concurrency": 2,
        "timeout_s": 60,
        "backoff_base_s": 0.01,
    }
    frame = rewrite_turn(dialogue, 2, ["hate", "violence"], [1, 4], config, seed=0, cache_dir=tmp_path)
    assert frame.height == 4
    assert set(frame["status"]) <= {"invalid_json", "schema_error"}, frame["error"].to_list()
    assert set(frame["attempts"]) == {2}  # the first answer and one re-ask, both answered by the server
    assert frame["text"].null_count() == 4
