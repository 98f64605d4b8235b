"""The annotation app over HTTP, started as users start it (`lalm-judge anchors serve`, uvicorn on 127.0.0.1):
authentication, validation, what it never serves, concurrent raters and a crash of the server."""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
import urllib.error
from urllib.parse import urlsplit

import pytest

from lalm_judge.annotation.batch import RATINGS_DB, Batch, load_labels
from lalm_judge.annotation.store import RatingStore
from tests.annotation.conftest import make_batch, request, running_server, write_synthetic_run

RATERS = "a,b,c"


@pytest.fixture(scope="module")
def module_batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("app")
    return make_batch(write_synthetic_run(root / "run"), root / "batch")


@pytest.fixture(scope="module")
def server(module_batch):
    with running_server(module_batch, "--raters", RATERS) as running:
        yield running


def store_of(batch_dir) -> RatingStore:
    return RatingStore(batch_dir / RATINGS_DB, Batch.load(batch_dir).batch_id)


def raw_get(base: str, path: str) -> tuple[int, http.client.HTTPMessage, bytes]:
    """GET `path` exactly as written (no client-side normalization of '..' or escapes)."""
    connection = http.client.HTTPConnection(urlsplit(base).hostname, urlsplit(base).port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def with_token(url: str, token: str) -> str:
    parts = url.rstrip("/").split("/")
    return "/".join([*parts[:-1], token]) + "/"


def test_the_page_loads_only_its_own_assets(server):
    status, page = request(server.url("a"))
    assert status == 200 and b'src="/static/app.js"' in page and b"http" not in page
    for asset in ("app.js", "app.css"):
        assert request(f"{server.base}/static/{asset}")[0] == 200
    _, headers, _ = raw_get(server.base, urlsplit(server.url("a")).path)
    assert headers["Content-Security-Policy"].startswith("default-src 'self'")


def test_state_lists_the_items_in_each_raters_own_order(server, module_batch):
    status, state = request(server.url("a") + "api/state")
    assert status == 200 and state["rater_id"] == "a"
    order_a = [item["item_id"] for item in state["items"]]
    order_b = [item["item_id"] for item in request(server.url("b") + "api/state")[1]["items"]]
    assert sorted(order_a) == sorted(order_b) == [item.item_id for item in Batch.load(module_batch).items]
    assert order_a != order_b
    assert request(server.url("a") + "api/state")[1]["items"] == state["items"]  # stable across reloads


def test_unknown_rater_or_wrong_token_is_403(server, module_batch):
    token = server.url("a").rstrip("/").split("/")[-1]
    unknown_rater = f"{server.base}/rate/zed/{token}/"
    wrong_token = with_token(server.url("a"), "x" * len(token))
    other_raters_token = with_token(server.url("a"), server.url("b").rstrip("/").split("/")[-1])
    for base in (unknown_rater, wrong_token, other_raters_token):
        for path in ("", "api/state", "audio/item_001.wav"):
            assert request(base + path)[0] == 403, base + path
        rating = {"item_id": "item_001", "unsafe": False}
        assert request(base + "api/rate", rating)[0] == 403
        assert request(base + "api/transcript", {"item_id": "item_001"})[0] == 403
    assert store_of(module_batch).ratings() == []


@pytest.mark.parametrize(
    "body",
    [
        {"item_id": "item_001", "unsafe": True, "category": "hate", "severity": 0},
        {"item_id": "item_001", "unsafe": True, "category": "hate", "severity": 6},
        {"item_id": "item_001", "unsafe": True, "category": "hate", "severity": -1},
        {"item_id": "item_001", "unsafe": True, "category": "hate", "severity": "3"},
        {"item_id": "item_001", "unsafe": True, "category": "hate", "severity": 2.5},
        {"item_id": "item_001", "unsafe": True, "category": "hate"},
        {"item_id": "item_001", "unsafe": True, "category": "spam", "severity": 2},
        {"item_id": "item_001", "unsafe": False, "severity": 2},
        {"item_id": "item_001", "unsafe": "no"},
        {"item_id": "item_001", "unsafe": False, "comment": "extra field"},
        {"item_id": "item_999", "unsafe": False},
        {"unsafe": False},
    ],
)
def test_bad_answers_and_unknown_items_are_422(server, module_batch, body):
    status, answer = request(server.url("c") + "api/rate", body)
    assert status == 422, answer
    assert store_of(module_batch).ratings("c") == []


def test_events_and_transcripts_of_unknown_items_are_422(server):
    assert request(server.url("c") + "api/transcript", {"item_id": "item_999"})[0] == 422
    assert request(server.url("c") + "api/event", {"item_id": "item_999", "kind": "open"})[0] == 422
    assert request(server.url("c") + "api/event", {"item_id": "item_001", "kind": "transcript"})[0] == 422


def test_hidden_labels_are_never_served(server, module_batch):
    _, labels = load_labels(module_batch)
    rater_path = urlsplit(server.url("a")).path
    paths = [
        "/labels.json",
        "/items.json",
        "/ratings.sqlite",
        f"{rater_path}labels.json",
        f"{rater_path}audio/../labels.json",
        f"{rater_path}audio/..%2F..%2Flabels.json",
        "/static/..%2Flabels.json",
        "/static/../../batch.py",
    ]
    for path in paths:
        status, _, body = raw_get(server.base, path)
        assert status in (404, 405), path
        assert not any(label.sample_id.encode() in body for label in labels), path


def test_a_transcript_reveal_is_recorded_with_the_rating(server, module_batch):
    status, transcript = request(server.url("b") + "api/transcript", {"item_id": "item_002"})
    item = Batch.load(module_batch).item("item_002")
    assert status == 200 and [turn["text"] for turn in transcript["turns"]] == [turn.text for turn in item.turns]
    assert request(server.url("b") + "api/state")[1]["revealed"] == ["item_002"]
    assert request(server.url("b") + "api/rate", {"item_id": "item_002", "unsafe": False})[0] == 200
    assert request(server.url("b") + "api/rate", {"item_id": "item_003", "unsafe": False})[0] == 200
    shown = {rating.item_id: rating.transcript_shown for rating in store_of(module_batch).ratings("b")}
    assert shown == {"item_002": 1, "item_003": 0}


@pytest.mark.slow
def test_two_raters_submitting_at_the_same_time_lose_no_rating(tmp_path):
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch", n=24, n_unsafe=18)
    items = [item.item_id for item in Batch.load(directory).items]
    with running_server(directory, "--raters", "r1,r2") as running:
        start = threading.Barrier(8)
        failures: list[object] = []

        def submit_all(rater: str, part: list[str]) -> None:
            start.wait()
            for round_number in range(2):  # every item twice: the second answer replaces the first
                for item_id in part:
                    body = {"item_id": item_id, "unsafe": True, "category": "hate", "severity": 1 + round_number}
                    status, answer = request(running.url(rater) + "api/rate", body)
                    if status != 200:
                        failures.append((rater, item_id, status, answer))

        workers = [
            threading.Thread(target=submit_all, args=(rater, items[part::4]))
            for rater in ("r1", "r2")
            for part in range(4)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
    assert failures == []
    ratings = store_of(directory).ratings()
    assert len(ratings) == 2 * len(items)
    assert {(r.rater_id, r.item_id) for r in ratings} == {(rater, i) for rater in ("r1", "r2") for i in items}
    assert all(r.n_submissions == 2 and r.severity == 2 for r in ratings)


@pytest.mark.slow
def test_a_killed_server_loses_no_acknowledged_rating(tmp_path):
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch", n=40, n_unsafe=34)
    items = [item.item_id for item in Batch.load(directory).items]
    acknowledged: list[str] = []
    with running_server(directory, "--raters", "a") as running:
        url = running.url("a")

        def rate_until_killed() -> None:
            for number in range(10_000):
                item_id = items[number % len(items)]
                try:
                    status, _ = request(url + "api/rate", {"item_id": item_id, "unsafe": False})
                except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
                    return
                if status == 200:
                    acknowledged.append(item_id)

        rater = threading.Thread(target=rate_until_killed)
        rater.start()
        deadline = time.monotonic() + 60
        while len(acknowledged) < 15 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(running.process.pid, signal.SIGKILL)
        running.process.wait(timeout=30)
        rater.join(timeout=60)
    assert running.process.returncode == -signal.SIGKILL and len(acknowledged) >= 15
    stored = store_of(directory).ratings("a")
    assert set(acknowledged) <= {rating.item_id for rating in stored}
    counts = {rating.item_id: rating.n_submissions for rating in stored}
    for item_id in set(acknowledged):
        assert counts[item_id] >= acknowledged.count(item_id)
    # Restarted, the rater resumes with the same URL: its token was stored (hashed) with the batch.
    with running_server(directory) as restarted:
        assert "rater a: registered earlier" in "\n".join(restarted.output) and restarted.urls == {}
        state = request(with_base(url, restarted.base) + "api/state")[1]
        assert set(acknowledged) <= set(state["ratings"])
    # A raters file adds raters; --new-token replaces a rater's URL and keeps their ratings.
    raters_file = tmp_path / "raters.txt"
    raters_file.write_text("a\n# the second rater\nb\n")
    with running_server(directory, "--raters-file", str(raters_file), "--new-token", "a") as again:
        assert set(again.urls) == {"a", "b"}
        assert request(with_base(url, again.base) + "api/state")[0] == 403
        assert set(acknowledged) <= set(request(again.url("a") + "api/state")[1]["ratings"])
        assert request(again.url("b") + "api/state")[1]["ratings"] == {}


def with_base(url: str, base: str) -> str:
    return base + urlsplit(url).path
