"""The LLM rationale rewriter over real HTTP, against `StandInServer` (tests/support/openai_standin.py), which
stands in for the OpenAI-compatible endpoints it is meant for (GPT-4o, a `vllm serve`d Qwen2.5-32B-Instruct),
neither of which runs here; the client is the real `openai` one."""

from __future__ import annotations

import json
import re

import pytest

from lalm_judge.core.endpoints import EndpointUnavailable
from lalm_judge.core.secrets import MissingSecret
from lalm_judge.preference.rationales import LLMRationales, PairNotes, RationalePrompt, interpret_answer
from tests.support.openai_standin import Reply, StandInServer, serving

pytestmark = pytest.mark.server
KEY_ENV = "LALM_JUDGE_TEST_RATIONALE_KEY"
_AT = re.compile(r"Instruction:\n(\S+)")


def notes(key: str, label: str) -> PairNotes:
    return PairNotes(
        key=key,
        instruction=key,
        responses=("Keep the basil in water.", "Freeze it."),
        aspect="helpfulness",
        ratings=(5, 2) if label == "1" else (2, 5) if label == "2" else (4, 4),
        notes=("Practical.", "Too short."),
        label=label,
    )


def answer(text: str) -> Reply:
    return Reply(json.dumps({"rationale": text}))


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-rationale")
    stand_in = StandInServer(lambda body: (_AT.search(body["messages"][1]["content"]).group(1),))
    with serving(stand_in):
        yield stand_in


def rewriter(server, tmp_path, **overrides) -> LLMRationales:
    config = {
        "model": "stand-in",
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "max_retries": 2,
        "backoff_base_s": 0.01,
        "timeout_s": 2,
        **overrides,
    }
    return LLMRationales(config, tmp_path / "cache", seed=3)


def test_answers_are_checked_against_the_label_and_asked_again(server, tmp_path):
    def script(key, nth):
        return {
            "good": lambda: answer("Response 1 is more helpful than Response 2: it keeps the basil fresh."),
            # argues for the wrong response first, then gets it right
            "flip": lambda: answer("Response 1 is better.") if nth == 1 else answer("Response 2 is better here."),
            "never": lambda: answer("Response 2 is clearly better."),
            "prose": lambda: Reply("Response 1 wins."),
            "refuse": lambda: Reply(None, refusal="I can't help with that."),
        }[key]()

    server.script = script
    results = rewriter(server, tmp_path).rewrite(
        [notes("good", "1"), notes("flip", "2"), notes("never", "1"), notes("prose", "1"), notes("refuse", "Tie")]
    )
    assert [(r.status, r.attempts) for r in results] == [
        ("ok", 1),
        ("ok", 2),
        ("inconsistent", 3),
        ("invalid_json", 3),
        ("refusal", 1),
    ]
    assert results[1].rationale == "Response 2 is better here." and results[2].rationale is None
    asked_again = [body for body in server.requests if _AT.search(body["messages"][1]["content"]).group(1) == "flip"]
    assert "argues for Response 1 but the verdict is Response 2" in asked_again[1]["messages"][-1]["content"]


def test_a_rerun_reads_the_cache(server, tmp_path):
    server.script = lambda key, nth: answer("Response 1 is better than Response 2.")
    first = rewriter(server, tmp_path).rewrite([notes("a", "1"), notes("b", "1")])
    sent = server.total
    again = rewriter(server, tmp_path).rewrite([notes("a", "1"), notes("b", "1")])
    assert server.total == sent == 2 and again == first


def test_an_endpoint_that_keeps_failing_fails_the_job_after_the_others_are_cached(server, tmp_path):
    server.script = lambda key, nth: Reply(status=503) if key == "down" else answer("Response 1 is better.")
    pairs = [notes("a", "1"), notes("down", "1"), notes("b", "1")]
    with pytest.raises(EndpointUnavailable, match=r"did not answer 1 of 3 rationale requests \(down: .*HTTP 503"):
        rewriter(server, tmp_path).rewrite(pairs)
    assert server.per_cell["down",] == 3 and len(list((tmp_path / "cache").glob("*.json"))) == 2
    server.script = lambda key, nth: answer("Response 1 is better.")
    sent = server.total
    assert [r.status for r in rewriter(server, tmp_path).rewrite(pairs)] == ["ok"] * 3
    assert server.total == sent + 1, "the rerun asks only the unanswered request"


def test_the_key_comes_from_the_environment(server, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(MissingSecret, match=KEY_ENV):
        rewriter(server, tmp_path)


def test_the_prompt_states_the_verdict_to_support():
    messages = RationalePrompt.load().messages(notes("q", "Tie"))
    assert "the two responses are about equally good (Tie)" in messages[1]["content"]
    assert "Aspect: helpfulness" in messages[1]["content"]
    assert interpret_answer('{"rationale": "Both responses are equally helpful."}', "Tie").status == "ok"
    assert interpret_answer('{"answer": "x"}', "1").status == "invalid_json"


def test_rationales_argue_from_the_responses_never_from_the_ratings():
    """The prompt shows the annotators' notes but not their ratings, and an answer that quotes ratings is refused."""
    content = RationalePrompt.load().messages(notes("q", "1"))[1]["content"]
    assert "out of 5" not in content and "rated" not in content
    for quoting in (
        "Response 1 is better: it was rated 4 against 2.",
        "Response 1 earns 4 out of 5 for helpfulness.",
        "Response 1 (4/5) beats Response 2 (2/5).",
    ):
        result = interpret_answer(json.dumps({"rationale": quoting}), "1")
        assert result.status == "quotes_ratings" and "argue from the responses" in result.error
    argued = "Response 1 is more helpful because it answers the question, while Response 2 changes the subject."
    assert interpret_answer(json.dumps({"rationale": argued}), "1").status == "ok"
