"""OpenAI's reasoning models (gpt-6-luna, the configs' successor of the study's gpt-4o) through the rewrite generator
and the openai judge backend, against a stand-in of the Chat Completions route that refuses what OpenAI refuses of
such a model: the paid API cannot be called here.

The stand-in follows OpenAI's documented contract for reasoning models (API reference, chat/create: `max_tokens` "is
not compatible with o-series models", `max_completion_tokens` bounds visible and reasoning tokens; the GPT-5 family's
guide: a temperature other than 1 only with `reasoning_effort: none`), answering HTTP 400 with the API's
`invalid_request_error` body, and refuses `reasoning_effort` from gpt-4o, which is not a reasoning model. What runs
for real: the shipped entries (paper.yaml's generator, pairwise.yaml's `gpt6_luna` judge) with only the endpoint
replaced, the generator, the backend, the endpoint client and the parse-time check of the configs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.endpoints import completion_token_limit, reasoning_sampling_problem
from lalm_judge.data.generators import RewriteRequest
from lalm_judge.data.generators.llm import LLMGenerator
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.openai_backend import OpenAIBackend
from lalm_judge.workflow.config import ConfigError, validate_config, validate_judge_entry
from tests.support.openai_standin import Reply, StandInServer, serving

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "LALM_JUDGE_REASONING_TEST_KEY"
REWRITE = json.dumps({"text": "You never listen, you fool.", "emotion": "angry"})


def openai_refusal(body: dict) -> Reply | None:
    """What OpenAI answers HTTP 400 for, of the sampling a request asks (None: the request is served)."""
    reasoning = body["model"].startswith(("gpt-6", "gpt-5", "o"))
    if reasoning and "max_tokens" in body:
        return invalid_request(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
            "instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    if reasoning and body.get("temperature", 1) != 1 and body.get("reasoning_effort") != "none":
        return invalid_request(
            f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. Only the "
            "default (1) value is supported.",
            "temperature",
            "unsupported_value",
        )
    if not reasoning and "reasoning_effort" in body:
        return invalid_request(
            "Unrecognized request argument supplied: reasoning_effort", "reasoning_effort", "unsupported_parameter"
        )
    return None


def invalid_request(message: str, param: str, code: str) -> Reply:
    return Reply(
        status=400, error_body={"message": message, "type": "invalid_request_error", "param": param, "code": code}
    )


def openai_stand_in(answer: str) -> StandInServer:
    server = StandInServer(lambda body: (json.dumps(body, sort_keys=True),))
    server.script = lambda body, nth: openai_refusal(json.loads(body)) or Reply(content=answer)
    return server


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-reasoning-test-0000")


def shipped(config: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / config).read_text())


def rewrite_with(generator_config: dict, base_url: str, cache_dir: Path) -> str:
    config = {**generator_config, "base_url": base_url, "api_key_env": KEY_ENV, "max_retries": 0}
    generator = LLMGenerator(config, cache_dir)
    turns = [Turn(0, "Ana", "Shall we cook tonight?", "curious"), Turn(1, "Ben", "Yes, pasta please.", "happy")]
    dialogue = Dialogue("cooking_plan", turns, "jsonl", "memory", 16000)
    (result,) = generator.rewrite([RewriteRequest(dialogue, 1, "harassment", 2, seed=0)])
    return result.status


@pytest.mark.parametrize(
    ("model", "limit"),
    [("gpt-6-luna", "max_completion_tokens"), ("gpt-5.6-luna", "max_completion_tokens"),
     ("o3-mini", "max_completion_tokens"), ("gpt-4o-2024-08-06", "max_tokens"), ("gpt-audio-1.5", "max_tokens"),
     ("gemini-2.5-flash-lite", "max_tokens"), ("Qwen/Qwen2.5-32B-Instruct", "max_tokens")],
)  # fmt: skip
def test_only_reasoning_models_get_their_cap_as_max_completion_tokens(model, limit):
    assert completion_token_limit(model) == limit


def test_the_papers_generator_rewrites_through_a_reasoning_model(tmp_path):
    generator = shipped("paper.yaml")["variants"]["generator"]
    assert generator["model"] == "gpt-6-luna"
    with serving(openai_stand_in(REWRITE)) as server:
        status = rewrite_with(generator, server.base_url, tmp_path / "rewrites")
    (body,) = server.requests
    assert status == "ok"
    assert body["max_completion_tokens"] == 400 and "max_tokens" not in body
    assert (body["temperature"], body["reasoning_effort"]) == (0.7, "none")


def test_the_as_published_generator_sends_gpt_4o_no_reasoning_effort(tmp_path):
    generator = {
        **shipped("paper.yaml")["variants"]["generator"],
        **shipped("paper_as_published.yaml")["variants"]["generator"],
    }
    assert generator["reasoning_effort"] is None  # the overlay's null, as Snakemake merges it
    with serving(openai_stand_in(REWRITE)) as server:
        assert rewrite_with(generator, server.base_url, tmp_path / "rewrites") == "ok"
    (body,) = server.requests
    assert body["model"] == "gpt-4o-2024-08-06" and "reasoning_effort" not in body and body["max_tokens"] == 400


def test_without_reasoning_off_the_generator_is_refused_before_any_request(tmp_path):
    generator = {**shipped("paper.yaml")["variants"]["generator"]}
    del generator["reasoning_effort"]
    with serving(openai_stand_in(REWRITE)) as server, pytest.raises(ValueError, match="reasoning_effort: none"):
        rewrite_with(generator, server.base_url, tmp_path / "rewrites")
    assert server.total == 0


def test_the_pairwise_cascade_judge_answers_through_a_reasoning_model():
    entry = copy.deepcopy(shipped("pairwise.yaml")["judges"]["gpt6_luna"])
    with serving(openai_stand_in("Response 1")) as server:
        entry["options"].update(base_url=server.base_url, api_key_env=KEY_ENV, max_retries=0)
        backend = OpenAIBackend(JudgeSpec.from_config("gpt6_luna", validate_judge_entry("gpt6_luna", entry)))
        (output,) = backend.generate([JudgeRequest("r0", "You are a judge.", "Which response is better?")])
    (body,) = server.requests
    assert output.text == "Response 1"
    assert body["max_completion_tokens"] == 1024 and "max_tokens" not in body
    assert (body["temperature"], body["reasoning_effort"]) == (0.0, "none")


@pytest.mark.parametrize(
    ("config", "path", "change", "named"),
    [
        ("paper.yaml", ("variants", "generator"), {"reasoning_effort": None}, "variants.generator"),
        ("paper.yaml", ("variants", "generator"), {"reasoning_effort": "medium"}, "reasoning_effort 'medium'"),
        ("pairwise.yaml", ("judges", "gpt6_luna", "generation"), {"reasoning_effort": None}, "judges.gpt6_luna"),
        ("paper.yaml", ("variants", "generator"), {"model": "gpt-4o-2024-08-06", "reasoning_effort": "none"},
         "gpt-4o-2024-08-06 is not a reasoning model"),
    ],
)  # fmt: skip
def test_the_parse_refuses_sampling_the_model_would_refuse(config, path, change, named):
    loaded = shipped(config)
    validate_config(loaded)  # as shipped: accepted
    block = loaded
    for key in path:
        block = block[key]
    for key, value in change.items():
        if value is None:
            block.pop(key, None)
        else:
            block[key] = value
    with pytest.raises(ConfigError, match=named):
        validate_config(loaded)


def test_a_reasoning_model_at_temperature_1_needs_no_setting():
    assert reasoning_sampling_problem("gpt-6-luna", 1, None, "here") is None
    assert reasoning_sampling_problem("gpt-6-luna", 0.0, "none", "here") is None
    assert "refuses any temperature but 1" in reasoning_sampling_problem("gpt-6-luna", 0.0, "low", "here")
