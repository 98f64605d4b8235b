"""API keys: read only from the environment variable a config names, sent to the endpoint, and found nowhere else.

The rewrite stage and the openai judge run with a sentinel key through the fault proxy (bench/fault_proxy.py),
which quotes the Authorization header back in every error body, as some servers quote a rejected key: transient
faults that are retried, requests the server rejects (rows with status 'error', a failed judge call) and an
endpoint that never answers (failed jobs); and through one that quotes the key in its 200 answers, whose texts
become variant rows, score outputs and cache entries (the key's value is redacted from them). Every file written
(tables, caches), every log record at DEBUG (the `openai` and `httpx` clients' included), everything printed and
every error message with its traceback is then searched for the key. The workflow-level search (results, logs,
Snakemake's metadata, the report) is in tests/reliability/test_workflow_runs.py.
"""

from __future__ import annotations

import copy
import json
import logging
import traceback

import polars as pl
import pytest
from snakemake.utils import validate as snakemake_validate

from bench.fault_proxy import FaultProxy
from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.files import write_parquet
from lalm_judge.core.secrets import MissingSecret
from lalm_judge.data.variants import rewrite_turn, write_variant_table
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.capabilities import request_batch_size
from lalm_judge.judging.backends.openai_backend import OpenAIBackend
from lalm_judge.judging.cache import RequestCache, judge_identity
from lalm_judge.judging.runner import RequestEngine
from lalm_judge.workflow.config import ConfigError, check_config, validate_config
from tests.support.workflow import ROOT, load_test_config

pytestmark = pytest.mark.server

KEY_ENV = "LALM_JUDGE_SENTINEL_KEY"
SENTINEL = "sk-sentinel-7f3a9c1e5b2d4068"


def quote_the_key(body: dict, authorization: str) -> str:
    return f"Incorrect API key provided: {authorization.removeprefix('Bearer ')}"


@pytest.fixture
def dialogue() -> Dialogue:
    turns = [Turn(0, "Ana", "Shall we cook tonight?", "curious"), Turn(1, "Ben", "Yes, pasta please.", "happy")]
    return Dialogue("cooking_plan", turns, "jsonl", "memory", 16000)


def answer(body: dict) -> str:
    return json.dumps({"text": "Cook it yourself, idiot.", "emotion": "angry"})


def answer_quoting_the_key(body: dict, authorization: str) -> str:
    key = authorization.removeprefix("Bearer ")
    return json.dumps({"text": f"Cook it yourself with key {key}, idiot.", "emotion": "angry"})


def proxy(fault_rate: float, faults: list[str] | None = None, answers=answer) -> FaultProxy:
    return FaultProxy(
        answer=answers,
        fault_rate=fault_rate,
        max_faults_per_request=2 if fault_rate < 1 else None,
        error_detail=quote_the_key,
        **({"faults": faults} if faults else {}),
    )


def generator(endpoint: FaultProxy) -> dict:
    return {
        "name": "llm",
        "base_url": endpoint.base_url,
        "model": "stand-in",
        "api_key_env": KEY_ENV,
        "concurrency": 4,
        "max_retries": 2,
        "timeout_s": 1.0,
        "backoff_base_s": 0.01,
    }


def judge(endpoint: FaultProxy, cache_dir) -> RequestEngine:
    """The judge as the judge stage runs it: behind its request cache, which must not hold the key either."""
    options = {"base_url": endpoint.base_url, "api_key_env": KEY_ENV}
    options |= {"max_retries": 2, "timeout_s": 1.0, "backoff_base_s": 0.01}
    spec = JudgeSpec(name="api_judge", backend="openai", model="stand-in", options=options)
    return RequestEngine(OpenAIBackend(spec), RequestCache(cache_dir), judge_identity(spec), request_batch_size(spec))


def requests() -> list[JudgeRequest]:
    return [JudgeRequest(f"r{i}", "You are a judge.", f"Dialogue {i}.") for i in range(8)]


def test_the_key_reaches_the_endpoint_and_nothing_else(dialogue, tmp_path, monkeypatch, caplog, capfd):
    monkeypatch.setenv(KEY_ENV, SENTINEL)
    for name in ("", "openai", "httpx2", "httpcore2", "httpx", "httpcore", "lalm_judge"):
        caplog.set_level(logging.DEBUG, logger=name or None)
    errors: list[BaseException] = []
    seen: set[str] = set()

    def run(endpoint: FaultProxy, action) -> None:
        with endpoint:
            try:
                action(endpoint)
            except Exception as err:  # noqa: BLE001  (every failure is kept and searched)
                errors.append(err)
            seen.update(endpoint.log.seen_authorization)

    def rewrite(name: str):
        def action(endpoint: FaultProxy) -> None:
            config = generator(endpoint)
            frame = rewrite_turn(dialogue, 1, ["harassment", "hate"], [1, 3], config, 0, tmp_path / f"{name}_cache")
            write_variant_table(frame, tmp_path / f"{name}.parquet")

        return action

    def score(name: str):
        def action(endpoint: FaultProxy) -> None:
            outputs = judge(endpoint, tmp_path / f"{name}_cache").generate(requests())
            write_parquet(tmp_path / f"{name}.parquet", pl.DataFrame({"text": [o.text for o in outputs]}))

        return action

    run(proxy(0.3), rewrite("variants_with_faults"))
    run(proxy(1.0, ["bad_request"]), rewrite("variants_rejected"))
    run(proxy(1.0, ["server_error", "rate_limit"]), rewrite("variants_unreachable"))
    run(proxy(0.0, answers=answer_quoting_the_key), rewrite("variants_quoting_the_key"))
    run(proxy(0.3), score("scores_with_faults"))
    run(proxy(0.0, answers=answer_quoting_the_key), score("scores_quoting_the_key"))
    run(proxy(1.0, ["bad_request"]), score("scores_rejected"))
    run(proxy(1.0, ["unavailable"]), score("scores_unreachable"))

    assert seen == {f"Bearer {SENTINEL}"}, "the key was sent as the bearer token"
    assert len(errors) == 3, errors  # the unreachable rewrite, the rejected and the unreachable judge calls
    quoted = pl.read_parquet(tmp_path / "variants_quoting_the_key.parquet")["text"].to_list()
    scored = pl.read_parquet(tmp_path / "scores_quoting_the_key.parquet")["text"].to_list()
    assert all("with key ***, idiot" in text for text in quoted + scored), "the quoted key was redacted"
    rejected = pl.read_parquet(tmp_path / "variants_rejected.parquet")
    assert set(rejected["status"]) == {"error"} and rejected["error"].str.contains("Incorrect API key").all()
    messages = [text for err in errors for text in traceback.format_exception(err)]
    assert all("127.0.0.1" in str(err) for err in errors), "the failures name the endpoint"
    printed = capfd.readouterr()
    places = {
        **{str(path): path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()},
        "log records": caplog.text.encode(),
        "stdout and stderr": (printed.out + printed.err).encode(),
        "error messages and tracebacks": "".join(messages).encode(),
    }
    assert len(places) > 10
    leaks = [place for place, data in places.items() if SENTINEL.encode() in data]
    assert leaks == []


def test_a_key_written_into_the_config_is_rejected_naming_its_place():
    config = load_test_config()
    config["judges"]["minilm"]["options"]["api_key"] = SENTINEL
    with pytest.raises(ConfigError, match=r"judges\.minilm\.options\.api_key: a config never holds a key") as raised:
        validate_config(config)
    assert SENTINEL not in str(raised.value)


def test_a_missing_key_variable_is_named_before_any_request(monkeypatch, tmp_path, dialogue):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with proxy(0.0) as endpoint:
        with pytest.raises(MissingSecret, match=KEY_ENV):
            judge(endpoint, tmp_path)
        with pytest.raises(MissingSecret, match=KEY_ENV):
            rewrite_turn(dialogue, 1, ["hate"], [1], generator(endpoint), 0, tmp_path)
        assert endpoint.log.total == 0


def run_check(config):
    """The run's check: the Snakefile validates against the schema (filling defaults), then rules/common.smk
    calls check_config."""
    config = copy.deepcopy(config)
    snakemake_validate(config, str(ROOT / "schemas" / "config.schema.yaml"))
    return check_config(config)


AUTH_HEADERS = ["Authorization", "authorization", "api-key", "X-API-Key", "x-goog-api-key", "Ocp-Apim-Subscription-Key"]


@pytest.mark.parametrize("header", AUTH_HEADERS)
def test_a_credential_in_an_auth_header_is_refused_naming_its_place(header):
    config = load_test_config()
    config["judges"]["minilm"]["generation"] = {"extra_headers": {header: f"Bearer {SENTINEL}"}}
    for check in (validate_config, run_check):
        with pytest.raises(
            ConfigError, match=rf"judges\.minilm\.generation\.extra_headers\.{header}: a credential in an HTTP header"
        ) as raised:
            check(config)
        assert "environment variable" in str(raised.value) and "api_key_env" in str(raised.value)
        assert SENTINEL not in str(raised.value)


def test_a_credential_as_a_header_value_is_refused_whatever_the_header_name():
    config = load_test_config()
    config["judges"]["minilm"]["generation"] = {"extra_headers": {"X-Trace": "keep", "X-Custom": f"Bearer {SENTINEL}"}}
    with pytest.raises(ConfigError, match=r"extra_headers\.X-Custom: a credential") as raised:
        validate_config(config)
    assert "X-Trace" not in str(raised.value) and SENTINEL not in str(raised.value)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"https://user:{SENTINEL}@api.example.com/v1", "the URL holds user credentials"),
        (f"https://{SENTINEL}@api.example.com/v1", "the URL holds user credentials"),
        (f"https://generativelanguage.googleapis.com/v1beta/openai/?key={SENTINEL}", "the URL's query parameter 'key'"),
        (f"https://api.example.com/v1/{SENTINEL}/", "the URL's path holds a credential (segment 2: it starts as API"),
        (
            f"https://api.example.com/key/{SENTINEL}/v1",
            "the URL's path holds a credential (segment 2: it follows 'key')",
        ),
        (f"https://api.example.com/v1/key={SENTINEL}", "the URL's path holds a credential (segment 2: it is the param"),
        (
            "https://api.example.com/v1/a81f3c09e27d44b6b1d5e0c97f2a6d13/",
            "the URL's path holds a credential (segment 2: it holds a long random token)",
        ),
    ],
    ids=["userinfo", "user_only", "query", "path_prefix", "path_after_key", "path_parameter", "path_token"],
)
def test_a_credential_in_a_url_is_refused_naming_its_place(url, problem):
    config = load_test_config()
    config["judges"]["api"] = {"backend": "openai", "model": "m", "options": {"base_url": url, "api_key_env": None}}
    config["variants"]["generator"] = {"name": "llm", "model": "m", "base_url": url}
    for check in (validate_config, run_check):
        with pytest.raises(ConfigError) as raised:
            check(config)
        message = str(raised.value)
        assert f"judges.api.options.base_url: {problem}" in message
        assert f"variants.generator.base_url: {problem}" in message
        assert "environment variable" in message and SENTINEL not in message


def test_a_key_in_place_of_a_variable_name_is_refused_without_quoting_it():
    config = load_test_config()
    config["judges"]["api"] = {"backend": "openai", "model": "m", "options": {"api_key_env": SENTINEL}}
    with pytest.raises(
        ConfigError, match=r"judges\.api\.options\.api_key_env: names an environment variable"
    ) as raised:
        validate_config(config)
    assert SENTINEL not in str(raised.value)


def test_a_key_free_config_with_headers_and_urls_passes():
    config = load_test_config()
    # Headers go to an endpoint (the openai backend's requests); header_env names the variable of a header's key.
    config["judges"]["api"] = {
        "backend": "openai",
        "model": "m",
        "generation": {"extra_headers": {"X-Request-Source": "lalm-judge"}},
        "options": {"base_url": "http://127.0.0.1:8000/v1", "header_env": {"api-key": "AZURE_OPENAI_KEY"}},
    }
    config["variants"]["generator"] = {"name": "llm", "model": "m", "base_url": "http://127.0.0.1:8000/v1?stream=0"}
    validate_config(config)
    # Paths with model and deployment names are no keys.
    for url in (
        "https://my-resource.openai.azure.com/openai/deployments/gpt-4o-2024-08-06",
        "https://api.example.com/models/Meta-Llama-3.1-8B-Instruct/v1",
        "https://generativelanguage.googleapis.com/v1beta/openai/",
    ):
        config["judges"]["api"]["options"]["base_url"] = url
        validate_config(config)
