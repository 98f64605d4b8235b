"""The annotation app over HTTP, started as users start it (`lalm-judge anchors serve`, uvicorn on 127.0.0.1):
authentication, validation, what it never serves, concurrent raters and a crash of the server; the rating
server's limits (a small body limit enforced before parsing, the token checked before the body is read, no error
that echoes input, a busy port that registers nobody); consent, practice feedback and the owner's view."""

from __future__ import annotations

import hashlib
import http.client
import io
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
import soundfile as sf

from lalm_judge.annotation import headphones
from lalm_judge.annotation.app import open_study
from lalm_judge.annotation.assignment import plan_slots
from lalm_judge.annotation.batch import RATINGS_DB, Batch, load_labels
from lalm_judge.annotation.protocol import load_protocol
from lalm_judge.annotation.store import RatingStore
from lalm_judge.cli import anchors as anchors_cli
from tests.annotation.conftest import (
    consent,
    edit_study,
    lalm_judge_command,
    make_batch,
    rate,
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
    # The corpus labels its speakers A and B: raters read them as the dialogue introduces them.
    assert {turn.speaker for turn in item.turns} == {"A", "B"}
    assert [turn["speaker"] for turn in transcript["turns"][:2]] == ["Speaker 1", "Speaker 2"]
    assert request(server.url("b") + "api/state")[1]["revealed"] == ["item_002"]
    assert rate(server.url("b"), "item_002", unsafe=False)[0] == 200
    assert rate(server.url("b"), "item_003", unsafe=False)[0] == 200
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
                    answer = {"unsafe": True, "category": "hate", "severity": 1 + round_number}
                    status, answer = rate(running.url(rater), item_id, **answer)
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
                    status, _ = rate(url, item_id, unsafe=False)
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
        assert rate(url, "item_001", unsafe=False)[0] == 200
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
        status, answer = rate(url, first_practice, unsafe=False)
        expected = protocol.checks[first_practice].expected
        assert status == 200 and answer["feedback"]["expected"] == expected.as_dict()
        assert answer["feedback"]["correct"] == (not expected.unsafe) and answer["feedback"]["text"]
        assert answer["n_rated"] == 0  # practice does not count
        for item_id in main:
            status, answer = rate(url, item_id, **like_label(labels[item_id]))
            assert status == 200 and "feedback" not in answer
            assert ("completion" in answer) == (item_id == main[-1])
        code = protocol.completion_code
        expected = {"code": code, "redirect_url": f"https://example.org/done?cc={code}", "screened_out": False}
        assert answer["completion"] == expected
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
            assert rate(running.url("a"), item_id["item_id"], **answer)[0] == 200
        gold = protocol.items_of("gold")[0]
        assert rate(running.url("b"), gold, **like_label(labels[gold]))[0] == 200
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
        # Nothing public names the batch or a path on the server.
        assert request(running.base + "/health") == (200, {"status": "ok"})
        assert summary["protocol"] == "study.yaml" and str(directory) not in json.dumps(summary)
        # Every rater rates every item: the design counts the ratings so far, not the assignments.
        assert summary["design"]["ratings"] == n_counted and summary["design"]["raters_per_item"] is None


def test_a_rating_needs_the_audio_heard_and_the_rules_of_the_protocol_act(tmp_path):
    """The share of an item to hear before a rating counts (and a second rating of an item heard before needs no
    second listening); the headphone check (stereo trials, answered once); the device recorded with the consent;
    the screen-out code for a rater who fails an attention check, the completion code for one who does not; and a
    withdrawal that ends the assignment."""
    directory = make_batch(
        write_synthetic_run(tmp_path / "run"), tmp_path / "batch", n=6, n_unsafe=4, extras={"attention": 1}
    )
    edit_study(directory, headphone_check={"trials": 3, "min_correct": 2})
    study_yaml = directory / "study.yaml"
    study_yaml.write_text(study_yaml.read_text().replace("screen_out_code: null", "screen_out_code: SCREENED"))
    batch, protocol = Batch.load(directory), load_protocol(Batch.load(directory))
    labels = {label.item_id: label for label in load_labels(directory)[1]}
    (attention,) = protocol.items_of("attention")
    with running_server(directory, "--raters", "good,poor") as running:
        good, poor = running.url("good"), running.url("poor")
        device = {"viewport": "390x844", "pointer": "coarse"}
        assert request(good + "api/consent", {"accept": True, "device": device})[0] == 200
        consent(poor)
        item = next(i for i in labels if i != attention)
        duration = batch.item(item).duration_s
        status, answer = request(good + "api/rate", {"item_id": item, "unsafe": False, "listened_s": duration / 2})
        assert status == 422 and "listen to at least 90% of the dialogue" in answer["detail"][0]["msg"]
        listened = {"item_id": item, "unsafe": False, "listened_s": 0.9 * duration}
        assert request(good + "api/rate", listened)[0] == 200
        assert (
            request(good + "api/rate", {"item_id": item, "unsafe": True, "category": "hate", "severity": 2})[0] == 200
        )

        # The headphone check: three stereo trials whose answers stay on the server, answered once.
        trial, rate_hz = sf.read(io.BytesIO(request(good + "headphones/1.wav")[1]))
        assert trial.shape[1] == 2 and rate_hz == headphones.SAMPLE_RATE
        assert "answers" not in json.dumps(request(good + "api/state")[1]["protocol"])
        right = headphones.answers(headphones.trial_orders(batch.seed, "good", 3))
        wrong = [answer % 3 + 1 for answer in right]
        assert request(good + "api/headphones", {"answers": right})[1] == {
            "passed": True,
            "n_correct": 3,
            "n_trials": 3,
        }
        assert request(good + "api/headphones", {"answers": right})[0] == 409
        assert request(poor + "api/headphones", {"answers": wrong})[1]["passed"] is False

        # good follows the attention check's request, poor does not: poor gets the screen-out code.
        expected = protocol.checks[attention].expected
        for url, follows in ((good, True), (poor, False)):
            for item_id in labels:
                answer = like_label(labels[item_id])
                if item_id == attention and follows:
                    answer = {"unsafe": True, "category": expected.category, "severity": expected.severity}
                status, reply = rate(url, item_id, **answer)
                assert status == 200, reply
            assert reply["completion"]["code"] == (protocol.completion_code if follows else "SCREENED")
            assert reply["completion"]["screened_out"] is not follows
        summary = request(running.owner + "api/summary")[1]
        raters = {row["rater_id"]: row for row in summary["raters"]}
        assert (raters["good"]["viewport"], raters["good"]["pointer"], raters["good"]["excluded"]) == (
            "390x844",
            "coarse",
            0,
        )
        assert raters["good"]["browser"].startswith("Python-urllib") and raters["good"]["headphones_passed"] == 1
        assert raters["poor"]["exclusion_reasons"] == "failed 1 of 1 attention checks (at most 0 allowed)"
        assert summary["agreement"]["exclusions"] == {"poor": [raters["poor"]["exclusion_reasons"]]}

        # A withdrawal ends the assignment: nothing more is recorded, and the statistics leave the rater out.
        assert request(good + "api/withdraw", {})[1] == {"status": "withdrawn"}
        assert request(good + "api/state")[1]["status"] == "withdrawn"
        assert rate(good, item, unsafe=False)[0] == 409 and request(good + "api/withdraw", {})[0] == 409
        left_out = request(running.owner + "api/summary")[1]["agreement"]["exclusions"]
        assert left_out["good"] == ["withdrew from the study"]


def join_url(link: str, participant: str, session: str = "s1", study: str = "study1") -> str:
    return f"{link}?PROLIFIC_PID={participant}&STUDY_ID={study}&SESSION_ID={session}"


def joined(link: str, participant: str, **ids) -> tuple[int, str | None, bytes]:
    """(status, the rater URL it redirects to, body) of opening the public link (no redirect followed)."""
    url = urlsplit(join_url(link, participant, **ids))
    status, headers, body = raw_get(link.split("/join/")[0], f"{url.path}?{url.query}")
    return status, headers.get("Location"), body


def test_the_public_link_assigns_one_place_per_participant_and_frees_returned_ones(tmp_path, capsys):
    """Participants come through one link with the platform's ids: each gets the lowest free slot of the design
    (the study is full when the planned slots are held), the same session resumes, another session is turned away,
    and a place freed by `anchors free` (returned on the platform) or by a refused consent goes to the next."""
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch")
    edit_study(directory, assignment={"raters_per_item": 2, "planned_raters": 3, "max_versions_per_dialogue": None})
    study = open_study(directory)
    slots = plan_slots(study.counted, study.dialogue_of, study.protocol.design, study.batch.seed)
    with running_server(directory, "--public-link") as running:
        link = running.link
        assert running.urls == {} and link.startswith(running.base + "/join/")
        assert "PROLIFIC_PID={{%PROLIFIC_PID%}}" in "\n".join(running.output)
        assert request(running.base + "/join/" + "x" * 32 + "/")[0] == 403
        status, _, body = raw_get(running.base, urlsplit(link).path + "?PROLIFIC_PID=p1")
        assert status == 400 and b"SESSION_ID" in body and b"p1" not in body
        urls = {}
        for participant in ("p1", "p2", "p3"):
            status, location, _ = joined(link, participant)
            assert status == 303 and location.startswith(f"/rate/{participant}/")
            urls[participant] = running.base + location
        for slot, participant in enumerate(("p1", "p2", "p3")):
            items = request(urls[participant] + "api/state")[1]["items"]
            assert sorted(i["item_id"] for i in items) == sorted(slots[slot])
        status, location, _ = joined(link, "p1")  # the same session: back to their own items, a new URL
        assert status == 303 and request(urls["p1"] + "api/state")[0] == 403
        urls["p1"] = running.base + location
        status, _, body = joined(link, "p1", session="s2")
        assert status == 409 and b"taken part already" in body
        status, _, body = joined(link, "p4")
        assert status == 409 and b"full" in body

        assert anchors_cli.main(["free", str(directory), "p2", "--reason", "returned"]) == 0
        assert "freed the assignments of p2 (returned)" in capsys.readouterr().out
        assert (
            request(urls["p2"] + "api/state")[1]["status"] == "returned"
            and rate(urls["p2"], "item_001", unsafe=False)[0] == 409
        )
        status, location, _ = joined(link, "p4")
        assert status == 303
        p4 = running.base + location
        assert sorted(i["item_id"] for i in request(p4 + "api/state")[1]["items"]) == sorted(slots[1])
        consent(p4, accept=False)  # a refusal through the link frees the place again
        assert request(p4 + "api/state")[1]["status"] == "refused" and joined(link, "p5")[0] == 303

        summary = request(running.owner + "api/summary")[1]
        statuses = {row["rater_id"]: (row["status"], row["source"]) for row in summary["raters"]}
        assert statuses == {
            "p1": ("active", "link"),
            "p2": ("returned", "link"),
            "p3": ("active", "link"),
            "p4": ("refused", "link"),
            "p5": ("active", "link"),
        }
        assert summary["design"]["n_raters"] == 3 and summary["design"]["items_cannot_reach_k"] == 0
    with store_of(directory)._read() as connection:
        ids = connection.execute("SELECT study_id, session_id FROM raters WHERE rater_id = 'p5'").fetchone()
    assert tuple(ids) == ("study1", "s1")


def test_a_design_that_cannot_be_met_is_refused_at_serve_or_served_with_a_warning(tmp_path, capsys):
    """At most one version of a dialogue per rater with 2 raters per item and 2 planned raters: the dialogues with
    two versions in the batch cannot give both their versions two raters. `serve` says so with the numbers and the
    nearest feasible settings, registers nobody, and serves it only with --allow-shortfall; the owner's view then
    says the study cannot finish."""
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch")
    edit_study(directory, assignment={"raters_per_item": 2, "planned_raters": 2, "max_versions_per_dialogue": 1})
    study = open_study(directory)
    feasibility = study.feasibility()
    assert not feasibility.feasible and feasibility.short > 0
    assert anchors_cli.main(["serve", str(directory), "--raters", "a,b", "--port", "0"]) == 2
    error = capsys.readouterr().err
    assert "study.yaml assignment cannot be met" in error and "pass --allow-shortfall" in error
    assert f"{feasibility.short} of the {len(study.counted)} counted items would get fewer than 2 raters" in error
    assert "Nearest feasible settings (each alone): max_versions_per_dialogue: " in error
    assert store_of(directory).raters() == []
    with running_server(directory, "--raters", "a,b", "--allow-shortfall") as running:
        printed = "\n".join(running.output)
        assert "warning: study.yaml assignment cannot be met" in printed and "(--allow-shortfall)" in printed
        assert "warning: study.yaml consent.contact still reads 'EDIT: ...'" in printed
        design = request(running.owner + "api/summary")[1]["design"]
        assert design["items_cannot_reach_k"] == feasibility.short and design["ratings"] == 0
