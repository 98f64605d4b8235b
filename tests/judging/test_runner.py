"""The request engine (`judging.runner`) under the judge job, with the `openai` backend against `StandInServer`
(tests/support/openai_standin.py: a stdlib server on 127.0.0.1 standing in for a paid OpenAI-compatible API, which
cannot be reached here; it answers the chat-completions contract): why generation stopped and which model
answered reach every score row and survive the request cache; a content that is not a string is kept, not a
crash; a served model other than the configured one fails the job naming both, unless the judge accepts it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading

import polars as pl
import pytest

from bench.judge_stage import job_cells, job_out_paths, run_job
from bench.manifests import write_tone_manifests
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.runner import ServedModelCheck, ServedModelMismatch
from tests.support.openai_standin import Reply, StandInServer, serving

pytestmark = pytest.mark.server

KEY_ENV = "LALM_JUDGE_RUNNER_TEST_KEY"
CELLS = job_cells([("text", "gt")], ["basic"])
# What the stand-in answers, by a hash of the request: (finish_reason sent, content sent).
KINDS = {
    "stop": ("stop", "kind=stop\nSAFETY_SCORE: 0.8"),
    "length": ("length", "kind=length\nSAFETY_SCORE: 0"),
    "filtered": ("content_filter", "kind=filtered"),
    "list": ("stop", [{"type": "text", "text": "kind=list\nSAFETY_SCORE: 0.7"}]),
}


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    return write_tone_manifests(tmp_path_factory.mktemp("manifests"), n_dialogues=2, variants_per_turn=3)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-runner-test-0000")


class KindOfRequest:
    """Gives each distinct request a kind of answer, the kinds in turn as requests first arrive."""

    def __init__(self):
        self.kinds: dict[str, str] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> tuple[str]:
        digest = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()
        with self.lock:
            return (self.kinds.setdefault(digest, sorted(KINDS)[len(self.kinds) % len(KINDS)]),)


def spec_for(server: StandInServer, **changes) -> JudgeSpec:
    options = {"base_url": server.base_url, "api_key_env": KEY_ENV, "max_retries": 0, "concurrency": 2}
    return dataclasses.replace(
        JudgeSpec(name="api_judge", backend="openai", model="stand-in", options=options), **changes
    )


def test_finish_reasons_and_the_served_model_are_recorded_per_row_and_kept_by_the_cache(manifests, tmp_path):
    server = StandInServer(KindOfRequest())
    server.script = lambda kind, nth: Reply(KINDS[kind][1], finish_reason=KINDS[kind][0], model="stand-in-2024-08-06")
    with serving(server):
        spec = spec_for(server)
        first = run_job(manifests, spec, CELLS, tmp_path)
        written = job_out_paths(tmp_path, CELLS)[0].read_bytes()
        again = run_job(manifests, spec, CELLS, tmp_path)
    table = first.tables[0]
    distinct = first.stats.distinct_requests  # samples whose transcripts are equal are one request
    assert first.stats.computed == server.total == distinct == again.stats.cached and table.height == 14
    assert job_out_paths(tmp_path, CELLS)[0].read_bytes() == written, "the cache keeps what the rows record"
    kinds = table["raw_output"].str.extract(r"kind=(\w+)").to_list()
    assert set(kinds) == set(KINDS), "every kind of answer occurs"
    expected = {"stop": "stop", "length": "length", "filtered": "content_filter", "list": "stop"}
    assert table["finish_reason"].to_list() == [expected[kind] for kind in kinds]
    assert set(table["served_model"]) == {"stand-in-2024-08-06"} and set(table["model"]) == {"stand-in"}
    listed = table.filter(pl.Series(kinds) == "list")["raw_output"].to_list()
    assert all(json.loads(raw)[0]["text"].startswith("kind=list") for raw in listed), "a list content is kept whole"


def test_another_served_model_fails_the_job_naming_both_unless_the_judge_accepts_it(manifests, tmp_path):
    server = StandInServer(lambda body: ())
    server.script = lambda nth: Reply("SAFETY_SCORE: 0.5", model="gpt-4o-mini")
    with serving(server):
        with pytest.raises(ServedModelMismatch, match=r"model 'gpt-4o-mini'.*configured with model 'stand-in'"):
            run_job(manifests, spec_for(server), CELLS, tmp_path)
        asked = server.total
        accepted = run_job(manifests, spec_for(server, accept_served_models=("gpt-4o-mini",)), CELLS, tmp_path)
    stats = accepted.stats
    assert asked > 0 and (stats.cached, stats.computed) == (asked, stats.distinct_requests - asked)
    assert set(accepted.tables[0]["served_model"]) == {"gpt-4o-mini"}


def test_what_names_the_configured_model():
    check = ServedModelCheck("j", "gpt-4o", "main", ("azure-gpt4o",))
    assert all(map(check.allows, ["gpt-4o", "gpt-4o-2024-08-06", "gpt-4o@main", "azure-gpt4o", None]))
    assert not any(map(check.allows, ["gpt-4o-mini", "gpt-4o-2024-08-06-x", "gpt-4", "gpt-4o@dev"]))


def test_a_request_the_providers_content_policy_refuses_is_a_filtered_answer(manifests, tmp_path):
    """Azure OpenAI answers HTTP 400 with code content_filter when its policy withholds the answer."""
    server = StandInServer(lambda body: ())
    policy = {"code": "content_filter", "message": "The response was filtered by the content management policy."}
    server.script = lambda nth: Reply(status=400, error_body=policy)
    with serving(server):
        first = run_job(manifests, spec_for(server), CELLS, tmp_path)
        again = run_job(manifests, spec_for(server), CELLS, tmp_path)
    table = first.tables[0]
    assert set(table["finish_reason"]) == {"content_filter"} and set(table["raw_output"]) == {""}
    assert server.total == first.stats.distinct_requests == again.stats.cached, "asked once, then cached"
