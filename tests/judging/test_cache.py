"""The request cache: what its keys cover, its SQLite store under concurrent writers and SIGKILL, its claims, and the
request engine (`judging.runner.RequestEngine`) around a recording test double of the JudgeBackend interface (no
model; the judge-job tests drive real tiny models through it): how it sizes its calls, two engines sharing one cache,
a claim whose holder died, and a job that stops at a commit before its time limit."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing

import numpy as np
import pytest

from lalm_judge.core import signals
from lalm_judge.judging import runner
from lalm_judge.judging.backends.base import JudgeOutput, JudgeRequest, JudgeSpec, PartialGenerationError
from lalm_judge.judging.cache import (
    RequestCache,
    entry_checksum,
    holder_is_gone,
    is_servable,
    judge_identity,
    request_key,
)
from lalm_judge.judging.runner import CallSizes, RequestEngine
from tests.support.workflow import ROOT

SPEC = JudgeSpec(
    name="lalm",
    backend="transformers",
    model="org/model",
    revision="abc123",
    modalities=("audio", "text"),
    generation={"max_new_tokens": 32},
    options={"score_tokens": {"safe": ["Yes"], "unsafe": ["No"]}, "concurrency": 4, "device": "cpu"},
)
CONTEXT = {"prompt_version": "basic-v1", "prompt_content": "c0ffee", "modality": "audio_text"}


def request(request_id="r1", user="Rate this dialogue.", seconds=0.5, seed=0, **changes) -> JudgeRequest:
    waveform = np.random.default_rng(seed).standard_normal(int(16000 * seconds)).astype(np.float32)
    base = JudgeRequest(request_id, "You are a judge.", user, audio=(waveform, 16000), transcript=(("A", "hi"),))
    return dataclasses.replace(base, **changes)


def output(text="SAFETY_SCORE: 0.25", **changes) -> JudgeOutput:
    return dataclasses.replace(JudgeOutput(text, latency_s=0.123456789, n_input_tokens=7, n_output_tokens=3), **changes)


def key(spec=SPEC, context=CONTEXT, req=None) -> str:
    return request_key(judge_identity(spec), context, req or request())


def test_equal_inputs_are_one_key_whatever_their_id():
    assert key(req=request("a")) == key(req=request("b#w0"))


@pytest.mark.parametrize(
    "change",
    [
        {"model": "org/other"},
        {"revision": "def456"},
        {"dtype": "bfloat16"},
        {"backend": "vllm"},
        {"generation": {"max_new_tokens": 64}},
        {"options": {**SPEC.options, "score_tokens": {"safe": ["Safe"], "unsafe": ["No"]}}},
    ],
)
def test_what_determines_answers_changes_the_key(change):
    assert key(dataclasses.replace(SPEC, **change)) != key()


@pytest.mark.parametrize(
    "change",
    [
        {"name": "renamed"},
        {"batch_size": 64},
        {"gpus": 2},
        {"max_audio_s": 30.0},
        {
            "options": {
                **SPEC.options,
                "concurrency": 32,
                "device": "cuda",
                "cache_dir": "/x",
                "base_url": "http://h/v1",
            }
        },
    ],
)
def test_where_and_how_fast_requests_run_keeps_the_key(change):
    assert key(dataclasses.replace(SPEC, **change)) == key()


def test_context_and_every_input_are_in_the_key():
    base = key()
    assert key(context={**CONTEXT, "prompt_version": "basic-v2"}) != base
    assert key(context={**CONTEXT, "prompt_content": "d00d"}) != base
    assert key(context={**CONTEXT, "modality": "audio"}) != base
    assert key(req=request(user="Rate it.")) != base
    assert key(req=request(system="Be strict.")) != base
    assert key(req=request(transcript=(("A", "hello"),))) != base
    assert key(req=request(answer_tokens=("Yes", "No"))) != base
    changed = request().audio[0].copy()
    changed[1000] += 1e-6  # one sample of the audio
    assert key(req=request(audio=(changed, 16000))) != base
    assert key(req=request(audio=(request().audio[0], 8000))) != base
    assert key(req=request(audio=None)) != base


def test_entries_round_trip_exactly_and_are_only_added(tmp_path):
    cache = RequestCache(tmp_path)
    first = output(p_safe=0.1 + 0.2, extra={"finish_reason": "stop"})
    assert cache.store("dialogue_a", [("k1", first)], {"model": "m"}) == 1
    assert cache.store("dialogue_a", [("k1", output("SAFETY_SCORE: 0.9"))], {"model": "m"}) == 0
    entry = cache.lookup("dialogue_a", ["k1", "unknown"])["k1"]
    assert entry.output == first  # floats and all, so cached rows equal computed rows byte for byte
    assert entry.provenance["model"] == "m" and entry.provenance["created"]
    assert cache.lookup("dialogue_b", ["k1"]) == {}
    assert not (tmp_path / "dialogue_b.sqlite").exists(), "a lookup creates no file"


def test_empty_failed_or_incomplete_outputs_are_never_served(tmp_path):
    cache = RequestCache(tmp_path)
    empty, aborted = output(""), output("partial", extra={"raw_finish_reason": "abort"})
    assert not is_servable(empty) and not is_servable(aborted) and is_servable(output("", p_safe=0.7))
    assert cache.store("d", [("empty", empty), ("aborted", aborted), ("good", output())], {}) == 1
    # An empty record written by other means (with a valid checksum) is not a hit either.
    with closing(sqlite3.connect(cache.path("d"))) as connection, connection:
        record = json.dumps(dataclasses.asdict(output("  ")))
        connection.execute(
            "INSERT INTO outputs VALUES ('blank', ?, '{}', ?)", (record, entry_checksum("blank", record, "{}"))
        )
        # An entry written before JudgeOutput had all its present fields is not a complete answer.
        older = json.dumps({k: v for k, v in dataclasses.asdict(output()).items() if k != "finish_reason"})
        connection.execute(
            "INSERT INTO outputs VALUES ('older', ?, '{}', ?)", (older, entry_checksum("older", older, "{}"))
        )
    assert set(cache.lookup("d", ["empty", "aborted", "good", "blank", "older"])) == {"good"}
    assert cache.moved_aside == []


def test_no_shared_memory_file_and_no_log_left_after_a_write(tmp_path):
    cache = RequestCache(tmp_path)
    cache.store("d", [("k", output())], {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.sqlite"]


def test_a_database_of_another_format_is_an_error_naming_it(tmp_path):
    with closing(sqlite3.connect(tmp_path / "d.sqlite")) as connection:
        connection.execute("PRAGMA user_version = 99")
    with pytest.raises(RuntimeError, match=r"d\.sqlite has format 99"):
        RequestCache(tmp_path).lookup("d", ["k"])


def _stored_answers(cache: RequestCache, n: int = 200) -> list[str]:
    """Keys of n stored answers of a few hundred bytes each, in 20 transactions: a database of several pages."""
    keys = [f"k{i:03d}" for i in range(n)]
    for start in range(0, n, n // 20):
        chunk = keys[start : start + n // 20]
        cache.store(
            "d", [(k, output(f"Turn 2 is a threat. {'reasons ' * 30}SAFETY_SCORE: 0.{k[-1]}")) for k in chunk], {}
        )
    return keys


def _truncate_at_a_page_boundary(path):
    pages = path.stat().st_size // 4096
    with open(path, "r+b") as stream:
        stream.truncate(pages // 2 * 4096)


def _truncate_inside_a_page(path):
    pages = path.stat().st_size // 4096
    with open(path, "r+b") as stream:
        stream.truncate(pages // 2 * 4096 + 1234)


def _flip_a_byte_of_an_answer(path):
    data = bytearray(path.read_bytes())
    at = data.index(b"SAFETY_SCORE: 0.7") + len("SAFETY_SCORE: 0.")
    data[at] = ord("2")  # the stored answer now says 0.2: still a valid page, a valid row, a readable score
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncate_at_a_page_boundary, _truncate_inside_a_page, _flip_a_byte_of_an_answer])
def test_a_damaged_database_is_named_moved_aside_and_its_requests_recomputed(tmp_path, caplog, damage):
    keys = _stored_answers(RequestCache(tmp_path))
    path = RequestCache(tmp_path).path("d")
    damage(path)
    damaged = path.read_bytes()
    cache = RequestCache(tmp_path)  # a rerun: a new process
    with caplog.at_level("WARNING", logger="lalm_judge.judging.cache"):
        assert cache.lookup("d", keys) == {}  # nothing of it is served: every request is computed again
    (moved,) = cache.moved_aside
    assert moved.name.startswith("d.sqlite.corrupt-") and moved.read_bytes() == damaged  # nothing written into it
    assert str(path) in caplog.text and moved.name in caplog.text and "failed its check" in caplog.text
    # The recomputed answers go to a new database, which passes every check.
    assert cache.store("d", [(keys[0], output())], {}) == 1
    assert integrity(path) == "ok" and RequestCache(tmp_path).lookup("d", keys).keys() == {keys[0]}
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith("-wal")) == ["d.sqlite", moved.name]


def test_a_store_into_a_damaged_database_goes_to_a_new_one(tmp_path, caplog):
    keys = _stored_answers(RequestCache(tmp_path))
    _truncate_inside_a_page(RequestCache(tmp_path).path("d"))
    cache = RequestCache(tmp_path)
    with caplog.at_level("WARNING", logger="lalm_judge.judging.cache"):
        assert cache.store("d", [("new", output())], {}) == 1
    assert len(cache.moved_aside) == 1 and "d.sqlite failed its check" in caplog.text
    assert cache.count("d") == 1 and cache.lookup("d", [*keys, "new"]).keys() == {"new"}


def _format_1(path):
    """A database of format 1 (before checksums): its entries cannot be verified, and lack finish_reason anyway."""
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE outputs (key TEXT PRIMARY KEY, output TEXT, provenance TEXT) WITHOUT ROWID")
        connection.execute("PRAGMA user_version = 1")


@pytest.mark.parametrize(
    "make", [lambda path: path.write_bytes(b"this is not a database" * 300), _format_1], ids=["not_a_database", "v1"]
)
def test_a_file_that_is_not_a_checked_database_is_moved_aside(tmp_path, make):
    path = RequestCache(tmp_path).path("d")
    make(path)
    cache = RequestCache(tmp_path)
    assert cache.lookup("d", ["k"]) == {} and len(cache.moved_aside) == 1
    assert cache.store("d", [("k", output())], {}) == 1 and cache.lookup("d", ["k"]).keys() == {"k"}


def integrity(path) -> str:
    with closing(sqlite3.connect(path)) as connection:
        return connection.execute("PRAGMA integrity_check").fetchone()[0]


def _write_many(root: str, tag: str, n_transactions: int, start) -> None:
    cache = RequestCache(root)
    start.wait()
    for i in range(n_transactions):
        cache.store("shared", [(f"{tag}-{i}-{j}", output(f"SAFETY_SCORE: 0.{j}")) for j in range(5)], {"writer": tag})


def test_two_processes_writing_one_database_at_once(tmp_path):
    # Both start on the same new database at the same moment: each sets it up while the other does.
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    writers = [
        context.Process(target=_write_many, args=(str(tmp_path), tag, 40, start), daemon=True) for tag in ("a", "b")
    ]
    try:
        for writer in writers:
            writer.start()
        deadline = time.monotonic() + 60
        for writer in writers:
            writer.join(timeout=max(0.0, deadline - time.monotonic()))
        assert [writer.exitcode for writer in writers] == [0, 0]
    finally:
        for writer in writers:
            writer.kill()
    cache = RequestCache(tmp_path)
    assert cache.count("shared") == 2 * 40 * 5
    assert integrity(cache.path("shared")) == "ok"


WRITER = """
import sys
from lalm_judge.judging.backends.base import JudgeOutput
from lalm_judge.judging.cache import RequestCache
cache, i = RequestCache(sys.argv[1]), 0
print("ready", flush=True)
while True:
    cache.store("killed", [(f"k{i}-{j}", JudgeOutput("SAFETY_SCORE: 1", 0.1)) for j in range(20)], {})
    i += 1
"""


@pytest.mark.slow
def test_sigkill_while_writing_leaves_whole_transactions(tmp_path):
    cache, counts = RequestCache(tmp_path), []
    for delay in (0.05, 0.2, 0.35, 0.5):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        counts.append(cache.count("killed"))
        assert integrity(cache.path("killed")) == "ok"
    # Every transaction of 20 is there whole or not at all, whenever the kill came.
    assert all(count % 20 == 0 for count in counts) and counts == sorted(counts) and counts[-1] > 0


class RecordingBackend:
    """Recording test double of the JudgeBackend interface: answers each request with its user text, records
    each call's size, and fails the call numbered `fail_on_call` (with its first `finished` outputs done)."""

    def __init__(self, fail_on_call=None, finished=0, seconds_per_request=0.0):
        self.calls, self.fail_on_call, self.finished = [], fail_on_call, finished
        self.seconds_per_request = seconds_per_request

    def generate(self, requests):
        time.sleep(self.seconds_per_request * len(requests))
        self.calls.append(len(requests))
        outputs = [output(f"{r.user} SAFETY_SCORE: 0.5") for r in requests]
        if len(self.calls) == self.fail_on_call:
            done = [*outputs[: self.finished], *[None] * (len(requests) - self.finished)]
            raise PartialGenerationError("call failed", done)
        return outputs

    def describe(self):
        return {"model": "recording-double", "model_revision": "r0"}


def text_requests(n):
    return [JudgeRequest(f"r{i}", "sys", f"dialogue {i}") for i in range(n)]


def test_cached_backend_stores_each_call_and_builds_the_backend_only_when_needed(tmp_path):
    builds = []

    def build():
        builds.append(RecordingBackend())
        return builds[-1]

    cache = RequestCache(tmp_path)
    first = RequestEngine(build, cache, judge_identity(SPEC), requests_per_call=4)
    outputs = first.generate([*text_requests(10), text_requests(1)[0]], context=CONTEXT)
    assert builds[0].calls == [4, 4, 2], "the repeated request is computed once"
    assert (first.n_computed, first.n_cached, first.n_loads) == (10, 0, 1)
    assert outputs[-1] == outputs[0] and outputs[0].extra["cached"] is False

    again = RequestEngine(build, cache, judge_identity(SPEC), requests_per_call=4)
    cached = again.generate(text_requests(10), context=CONTEXT)
    assert len(builds) == 1 and again.n_loads == 0, "nothing to compute: no backend is built"
    assert [o.text for o in cached] == [o.text for o in outputs[:10]] and all(o.extra["cached"] for o in cached)
    assert again.describe() == {"model": "recording-double", "model_revision": "r0"}


def test_a_failed_call_keeps_the_calls_before_it_and_its_finished_outputs(tmp_path):
    cache = RequestCache(tmp_path)
    failing = RequestEngine(RecordingBackend(fail_on_call=3, finished=2), cache, judge_identity(SPEC), 4)
    with pytest.raises(PartialGenerationError):
        failing.generate(text_requests(12), context=CONTEXT)
    assert cache.count() == 4 + 4 + 2

    rerun_backend = RecordingBackend()
    rerun = RequestEngine(rerun_backend, cache, judge_identity(SPEC), 4)
    rerun.generate(text_requests(12), context=CONTEXT)
    assert rerun_backend.calls == [2] and (rerun.n_cached, rerun.n_computed) == (10, 2)


def test_a_claim_is_granted_once_left_to_a_live_holder_and_taken_over_once_expired(tmp_path):
    cache, keys = RequestCache(tmp_path), ["a", "b", "c"]
    assert cache.claim("p", keys, "one").granted == keys
    assert cache.claim("p", keys, "one").granted == keys, "a holder's own claims stay its own"
    held = cache.claim("p", keys, "two")
    assert (held.granted, held.stored, held.held) == ([], [], keys)
    cache.store("p", [("a", output())], {"model": "m"})
    assert cache.claim("p", keys, "two").stored == ["a"], "a stored answer needs no claim"
    assert cache.renew("p", "one") == 2
    # A claim not renewed within the time to live (its holder died) is taken over.
    expired = cache.claim("p", ["b", "c"], "two", ttl_s=0.0)
    assert expired.granted == ["b", "c"] and cache.renew("p", "one") == 0
    cache.release("p", "two")
    assert cache.claim("p", ["b", "c"], "three").granted == ["b", "c"]


def test_a_claim_of_a_process_of_this_host_that_no_longer_runs_is_taken_over_at_once(tmp_path):
    """A SIGKILLed job's claims: its retry on the same host takes them over without waiting for their age."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_holder = f"{socket.gethostname()}:{gone.stdout.strip()}:0000"
    live_holder = f"{socket.gethostname()}:{os.getpid()}:0000"
    assert holder_is_gone(dead_holder) and not holder_is_gone(live_holder)
    assert not holder_is_gone(f"another-host:{gone.stdout.strip()}:0000"), "another host's holder expires by age"
    cache = RequestCache(tmp_path)
    cache.claim("p", ["a"], dead_holder)
    cache.claim("p", ["b"], live_holder)
    claimed = cache.claim("p", ["a", "b"], "me")
    assert (claimed.granted, claimed.held) == (["a"], ["b"])


def test_call_sizes_follow_the_measured_rate_between_one_step_and_the_most():
    vllm = CallSizes.of(dataclasses.replace(SPEC, backend="vllm"))
    assert vllm.size(None) == runner.FIRST_CALL
    assert vllm.size(8.0) == 8 * runner.CALL_S, "a few minutes of work at the measured rate"
    assert vllm.size(0.001) == 1 and vllm.size(1e6) == vllm.most
    padded = CallSizes.of(dataclasses.replace(SPEC, batch_size=8))
    assert padded.size(None) == padded.size(100.0) == 8, "one padded batch per call"
    endpoint = CallSizes.of(dataclasses.replace(SPEC, backend="openai", batch_size=1))
    assert (endpoint.concurrency, endpoint.most) == (4, 16), "one request per call, four in flight"


def test_calls_grow_from_the_first_to_the_measured_rate(tmp_path):
    backend = RecordingBackend(seconds_per_request=0.01)
    sizes = CallSizes(first=2, most=50, call_s=0.1)
    RequestEngine(backend, RequestCache(tmp_path), judge_identity(SPEC), sizes).generate(text_requests(60), CONTEXT)
    assert backend.calls[0] == 2 and sum(backend.calls) == 60
    # About 100 requests/s at most: a tenth of a second is about 10 requests.
    assert 2 < max(backend.calls[1:]) <= 12, backend.calls


def test_two_engines_sharing_a_cache_compute_each_request_once(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "POLL_S", 0.02)
    backends = [RecordingBackend(seconds_per_request=0.01) for _ in range(2)]
    engines = [
        RequestEngine(backend, RequestCache(tmp_path), judge_identity(SPEC), 3, claim_renew_s=0.05)
        for backend in backends
    ]
    answers = [None, None]

    def run(index):
        answers[index] = [o.text for o in engines[index].generate(text_requests(40), context=CONTEXT)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers[0] == answers[1] == [f"dialogue {i} SAFETY_SCORE: 0.5" for i in range(40)]
    assert sum(sum(b.calls) for b in backends) == sum(e.n_computed for e in engines) == 40, "each request once"
    assert all(e.n_computed for e in engines), "both computed a share"
    assert RequestCache(tmp_path).count() == 40


def test_requests_a_dead_holder_claimed_are_computed_once_its_claim_expires(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "POLL_S", 0.02)
    cache = RequestCache(tmp_path)
    keyed = [request_key(judge_identity(SPEC), CONTEXT, r) for r in text_requests(6)]
    # The claim expires 0.3 s after it was made; the clock starts before it (the cache's clock: wall time), so that
    # however long the set-up below takes on a loaded machine, finishing sooner means it did not wait.
    started = time.time()
    cache.claim("requests", keyed[:4], "a job that was killed")
    backend = RecordingBackend()
    engine = RequestEngine(backend, cache, judge_identity(SPEC), 2, claim_ttl_s=0.3, claim_renew_s=0.05)
    engine.generate(text_requests(6), context=CONTEXT)
    assert time.time() - started >= 0.3, "it waited for the claim to expire"
    assert sum(backend.calls) == engine.n_computed == 6 and cache.count() == 6


def test_a_job_that_cannot_finish_before_its_limit_stops_at_a_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(signals, "DEADLINE_MARGIN_S", 0.0)
    backend = RecordingBackend(seconds_per_request=0.05)
    engine = RequestEngine(backend, RequestCache(tmp_path), judge_identity(SPEC), 2)
    with pytest.raises(SystemExit) as stopped, signals.stop_on_sigterm("the test job", time_left_s=0.45):
        engine.generate(text_requests(40), context=CONTEXT)
    assert stopped.value.code == signals.EXIT_STATUS
    # Calls of 0.1 s in 0.45 s: it stopped before the call that would have ended past the limit, at a commit.
    assert 0 < RequestCache(tmp_path).count() == sum(backend.calls) < 40

    rerun_backend = RecordingBackend()
    RequestEngine(rerun_backend, RequestCache(tmp_path), judge_identity(SPEC), 2).generate(
        text_requests(40), context=CONTEXT
    )
    assert sum(rerun_backend.calls) == 40 - sum(backend.calls)
