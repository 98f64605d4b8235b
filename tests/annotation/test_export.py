"""Exporting ratings joined with the hidden labels, in the table `lalm-judge anchors stats` reads."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lalm_judge.analysis.anchors import RATING_COLUMNS, validate_ratings
from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchError, load_labels
from lalm_judge.annotation.export import export_ratings
from lalm_judge.annotation.store import Answer, RatingStore
from lalm_judge.cli import anchors as anchors_cli


def rate_like_the_labels(batch_dir, rater: str, flip: set[str] = frozenset()) -> None:
    """A rater who gives every item its generated label, except the safe/unsafe call of the items in `flip`."""
    store = RatingStore(batch_dir / RATINGS_DB, Batch.load(batch_dir).batch_id)
    store.add_rater(rater)
    for label in load_labels(batch_dir)[1]:
        unsafe = bool(label.gt_unsafe) != (label.item_id in flip)
        answer = Answer(True, label.gt_category or "hate", label.gt_severity or 2) if unsafe else Answer(False)
        store.record(rater, label.item_id, "open")
        store.submit(rater, label.item_id, answer)


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


def test_export_needs_ratings(batch):
    with pytest.raises(BatchError, match="nobody has rated"):
        export_ratings(batch)
    RatingStore(batch / RATINGS_DB, Batch.load(batch).batch_id)
    assert anchors_cli.main(["export", str(batch), "--out", str(batch / "x.csv")]) == 2


def test_export_then_stats_commands(batch, tmp_path, capsys):
    rate_like_the_labels(batch, "a")
    rate_like_the_labels(batch, "b", flip={"item_002"})
    csv = tmp_path / "ratings.csv"
    assert anchors_cli.main(["export", str(batch), "--out", str(csv)]) == 0
    assert "rater a: 12/12 items rated" in capsys.readouterr().err
    assert pl.read_csv(csv).height == 24
    out = tmp_path / "anchors.json"
    assert anchors_cli.main(["stats", str(csv), "--out", str(out), "--bootstrap", "50"]) == 0
    printed = capsys.readouterr().out
    assert "| Safety TPR | GT-unsafe (8) |" in printed and "| Safety FPR | GT-safe (4) |" in printed
    result = json.loads(out.read_text())
    assert result["n_raters"] == 2 and result["n_items"] == 12
    assert [row["subset"] for row in result["table1"][:3]] == ["all", "gt_unsafe", "gt_safe"]
