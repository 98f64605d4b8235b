"""The annotation app over HTTP, started as users start it (`lalm-judge anchors serve`, uvicorn on 127.0.0.1):
authentication, validation, what it never serves, concurrent raters and a crash of the server; the rating
server's limits (a small body limit enforced before parsing, the token checked before the body is read, no error
that echoes input, a busy port that registers nobody); consent, practice feedback and the owner's view."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
from urllib.parse import urlsplit

import pytest

from lalm_judge.annotation.batch import RATINGS_DB, Batch, load_labels
from lalm_judge.annotation.protocol import load_protocol
from lalm_judge.annotation.store import RatingStore
from tests.annotation.conftest import (
    consent,
    lalm_judge_command,
    make_batch,
    request,
    running_server,
    write_synthetic_run,
)

RATERS = "a,b,c"


@pytest.fixture(scope="module")
def module_batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("app")
    return make_batch(write_synthetic_run(root / "run"), root / "batch")


@pytest.fixture(scope="module")
def server(module_batch):
    with running_server(module_batch, "--raters", RATERS) as running:
        for rater in RATERS.split(","):
            consent(running.url(rater))
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
        {"item_id": "item_001", "unsafe": False, "colour": "extra field"},
        {"item_id": "item_001", "unsafe": False, "comment": "x" * 2001},
        {"item_id": "item_001", "unsafe": False, "listened_s": -1},
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
        "/study.yaml",
        "/static/study.yaml",
        f"{rater_path}study.yaml",
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
        consent(running.url("r1"))
        consent(running.url("r2"))
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
        consent(url)

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


def raw_post(base: str, path: str, headers: dict[str, str], chunks=None, body: bytes = b"") -> tuple[int, bytes]:
    """POST with exactly these headers; `chunks` (an iterable of bytes) is sent chunked as the body."""
    connection = http.client.HTTPConnection(urlsplit(base).hostname, urlsplit(base).port, timeout=120)
    try:
        connection.putrequest("POST", path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        if chunks is not None:
            for chunk in chunks:
                connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            connection.send(b"0\r\n\r\n")
        elif body:
            connection.send(body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in kB."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def test_an_oversized_body_is_refused_before_it_is_read(server):
    """The token is checked before the body is read: with a wrong token, a request whose body (within the limit) is
    never sent is answered 403 at once. A Content-Length over the limit is answered 413 without any of the body.
    A chunked body of 96 MB is refused after the limit, and the server's peak memory stays where it was."""
    rate = urlsplit(server.url("a")).path + "api/rate"
    wrong = urlsplit(with_token(server.url("a"), "x" * 32)).path + "api/rate"
    unsent = {"Content-Type": "application/json", "Content-Length": "10000"}
    assert raw_post(server.base, wrong, unsent)[0] == 403
    huge = {"Content-Type": "application/json", "Content-Length": str(200_000_000)}
    for path in (rate, wrong):
        status, body = raw_post(server.base, path, huge)
        assert status == 413 and body == b"Content Too Large"
    before = peak_rss_kb(server.process.pid)
    chunked = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    megabyte = b'{"item_id": "' + b"x" * (1 << 20)
    assert raw_post(server.base, rate, chunked, chunks=[megabyte] * 96)[0] == 413
    assert raw_post(server.base, wrong, chunked, chunks=[megabyte] * 8)[0] == 403
    assert peak_rss_kb(server.process.pid) - before < 32 * 1024  # far below the 96 MB sent
    assert request(server.base + "/health")[0] == 200
    # A body within the limit is read as usual.
    assert request(server.url("a") + "api/event", {"item_id": "item_001", "kind": "open"})[0] == 200


@pytest.mark.parametrize(
    "body",
    [
        b'{"item_id": "item_001", "unsafe": "MARKER-1234"}',
        b'{"item_id": "item_001", "unsafe": false, "MARKER-1234": 1}',
        b'{"item_id": "MARKER-1234", "unsafe": false}',
        b'{"item_id": "item_001", "unsafe": true, "category": "MARKER-1234", "severity": 2}',
        b'{"item_id": "item_001", MARKER-1234',
        b"MARKER-1234",
    ],
)
def test_no_error_echoes_the_request(server, body):
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    status, answer = raw_post(server.base, urlsplit(server.url("b")).path + "api/rate", headers, body=body)
    assert status == 422 and b"MARKER" not in answer, answer
    assert b'"msg"' in answer  # still says what is wrong


def test_errors_outside_the_api_do_not_echo_either(server):
    for path in ("/static/MARKER-1234.js", urlsplit(server.url("a")).path + "audio/MARKER-1234.wav"):
        status, _, body = raw_get(server.base, path)
        assert status == 404 and b"MARKER" not in body, path


def test_items_need_an_accepted_consent_and_a_refusal_is_recorded(module_batch):
    with running_server(module_batch, "--raters", "nina") as running:
        url = running.url("nina")
        assert request(url + "api/state")[1]["consent"] is None
        rating = {"item_id": "item_001", "unsafe": False}
        assert request(url + "api/rate", rating)[0] == 409
        assert request(url + "audio/item_001.wav")[0] == 409
        consent(url, accept=False)
        assert request(url + "api/state")[1]["consent"] is False and request(url + "api/rate", rating)[0] == 409
        consent(url, accept=True)
        assert request(url + "api/rate", rating)[0] == 200
    with store_of(module_batch)._read() as connection:
        answers = connection.execute("SELECT accepted, protocol_sha256 FROM consents WHERE rater_id = 'nina'")
        answers = [tuple(row) for row in answers]
    sha = hashlib.sha256((module_batch / "study.yaml").read_bytes()).hexdigest()
    assert answers == [(0, sha), (1, sha)]


def test_a_busy_port_registers_nobody(tmp_path):
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        failed = subprocess.run(
            [*lalm_judge_command(), "anchors", "serve", str(directory), "--port", str(port), "--raters", "a,b"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert failed.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in failed.stderr
    assert "no rater was registered" in failed.stderr and "http://" not in failed.stdout
    assert store_of(directory).raters() == []
    with running_server(directory, "--raters", "a,b") as running:  # the next start prints both URLs
        assert set(running.urls) == {"a", "b"} and running.owner
        assert not any("registered earlier" in line for line in running.output)


def practice_batch(tmp_path):
    return make_batch(
        write_synthetic_run(tmp_path / "run"), tmp_path / "batch", extras={"practice": 2, "gold": 2, "attention": 1}
    )


def test_practice_feedback_checks_and_the_completion_code(tmp_path):
    directory = practice_batch(tmp_path)
    study_yaml = directory / "study.yaml"
    study_yaml.write_text(
        study_yaml.read_text().replace("redirect_url: null", "redirect_url: https://example.org/done?cc={code}")
    )
    protocol = load_protocol(Batch.load(directory))
    labels = {label.item_id: label for label in load_labels(directory)[1]}
    with running_server(directory, "--raters", "pia") as running:
        url = running.url("pia")
        consent(url)
        state = request(url + "api/state")[1]
        assert [item["item_id"] for item in state["practice"]] == protocol.items_of("practice")
        main = [item["item_id"] for item in state["items"]]
        assert set(protocol.items_of("gold") + protocol.items_of("attention")) <= set(main) and len(main) == 15
        assert '"unsafe"' not in json.dumps(state) and state["completion"] is None  # no answer of a check
        first_practice = state["practice"][0]["item_id"]
        status, answer = request(url + "api/rate", {"item_id": first_practice, "unsafe": False})
        expected = protocol.checks[first_practice].expected
        assert status == 200 and answer["feedback"]["expected"] == expected.as_dict()
        assert answer["feedback"]["correct"] == (not expected.unsafe) and answer["feedback"]["text"]
        assert answer["n_rated"] == 0  # practice does not count
        for item_id in main:
            status, answer = request(url + "api/rate", {"item_id": item_id, **like_label(labels[item_id])})
            assert status == 200 and "feedback" not in answer
            assert ("completion" in answer) == (item_id == main[-1])
        code = protocol.completion_code
        assert answer["completion"] == {"code": code, "redirect_url": f"https://example.org/done?cc={code}"}
        assert request(url + "api/state")[1]["completion"]["code"] == protocol.completion_code


def like_label(label) -> dict:
    if label.gt_unsafe:
        return {"unsafe": True, "category": label.gt_category, "severity": label.gt_severity}
    return {"unsafe": False}


def test_the_owners_view_has_its_own_token(tmp_path):
    directory = practice_batch(tmp_path)
    protocol = load_protocol(Batch.load(directory))
    labels = {label.item_id: label for label in load_labels(directory)[1]}
    with running_server(directory, "--raters", "a,b") as running:
        owner = running.owner
        assert request(with_token(owner, "x" * 32) + "api/summary")[0] == 403
        assert request(running.url("a").replace("/rate/a/", "/owner/") + "api/summary")[0] in (403, 404)
        for rater in ("a", "b"):
            consent(running.url(rater))
        for item_id in request(running.url("a") + "api/state")[1]["items"][:6]:
            answer = like_label(labels[item_id["item_id"]])
            assert request(running.url("a") + "api/rate", {"item_id": item_id["item_id"], **answer})[0] == 200
        gold = protocol.items_of("gold")[0]
        assert request(running.url("b") + "api/rate", {"item_id": gold, **like_label(labels[gold])})[0] == 200
        status, summary = request(owner + "api/summary")
        assert status == 200
        raters = {row["rater_id"]: row for row in summary["raters"]}
        assert raters["a"]["n_rated"] == 6 and raters["a"]["n_assigned"] == 15
        assert raters["b"]["gold_passed"] == raters["b"]["gold_n"] == 1 and raters["b"]["gold_pass_rate"] == 1.0
        rows = {row["statistic"]: row for row in summary["agreement"]["table1"]}
        n_counted = sum(
            labels[i["item_id"]].role == "item" for i in request(running.url("a") + "api/state")[1]["items"][:6]
        )
        assert rows["safety_kappa"]["n_max"] == n_counted and rows["alpha_safety"]["status"] == "not_estimable"
        assert summary["design"]["n_raters"] == 2
        status, csv = request(owner + "export.csv")
        assert status == 200 and csv.startswith(b"sample_id,rater_id,unsafe,severity,gt_unsafe,gt_severity,role")
        assert csv.count(b"\n") == 1 + 7
