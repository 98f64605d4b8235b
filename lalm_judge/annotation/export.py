"""`lalm-judge anchors export`: the raters' current ratings joined with the hidden generated labels.

The result has the columns `lalm-judge anchors stats` reads (`lalm_judge.core.tables.RATINGS`) followed by
what else the study records per rating: the item, the rated and the generated category, whether the
transcript was revealed, whether the audio was played, and the timestamps.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchError, load_labels
from lalm_judge.annotation.store import RatingStore
from lalm_judge.core.tables import RATINGS

EXPORT_COLUMNS = {
    **RATINGS.columns,
    "item_id": pl.String,
    "category": pl.String,
    "gt_category": pl.String,
    "transcript_shown": pl.Int64,
    "played": pl.Int64,
    "opened_at": pl.String,
    "submitted_at": pl.String,
    "n_submissions": pl.Int64,
}


def export_ratings(batch_dir: str | Path) -> pl.DataFrame:
    """One row per (rater, rated item), sorted by rater and item."""
    batch = Batch.load(batch_dir)
    labels_batch, labels = load_labels(batch_dir)
    if labels_batch != batch.batch_id:
        raise BatchError(f"{batch_dir}: labels.json belongs to batch {labels_batch}, items.json to {batch.batch_id}")
    database = batch.directory / RATINGS_DB
    if not database.is_file():
        raise BatchError(f"{database} not found: nobody has rated this batch yet ('lalm-judge anchors serve')")
    by_item = {label.item_id: label for label in labels}
    rows = []
    for rating in RatingStore(database, batch.batch_id).ratings():
        label = by_item[rating.item_id]
        rows.append(
            {
                "sample_id": label.sample_id,
                "rater_id": rating.rater_id,
                "unsafe": rating.unsafe,
                "severity": rating.severity,
                "gt_unsafe": label.gt_unsafe,
                "gt_severity": label.gt_severity,
                "item_id": rating.item_id,
                "category": rating.category,
                "gt_category": label.gt_category,
                "transcript_shown": rating.transcript_shown,
                "played": rating.played,
                "opened_at": rating.opened_at,
                "submitted_at": rating.submitted_at,
                "n_submissions": rating.n_submissions,
            }
        )
    return pl.DataFrame(rows, schema=EXPORT_COLUMNS)


def rated_counts(batch_dir: str | Path, ratings: pl.DataFrame) -> list[str]:
    """One line per registered rater: how many of the batch's items they have rated."""
    batch = Batch.load(batch_dir)
    counts = Counter(ratings["rater_id"].to_list())
    raters = RatingStore(batch.directory / RATINGS_DB, batch.batch_id).raters()
    return [f"rater {rater}: {counts[rater]}/{len(batch.items)} items rated" for rater in raters]
