"""`lalm-judge anchors export`: the raters' current ratings joined with the hidden generated labels, and a summary
per rater.

The ratings table has the columns `lalm-judge anchors stats` reads (`lalm_judge.core.tables.RATINGS`) followed by
what else the study records per rating: the item's role (`item`, counted; `practice`, `gold`, `attention`), the
item, the rated and the generated category, the rater's "unsure" mark and comment, whether the transcript was
revealed and the audio played, seconds listened and whether the audio was heard to its end, whether a gold or
attention item passed its check, and the times: `opened_at` (first shown), `started_at` (last shown before the
rating) and `time_s` (from `started_at` to the rating), so that a page opened long before the rater started does
not count as rating time.

Each row also carries the rater's status (`rater_status`: `active`, or why their assignment was freed), so that
`anchors stats` can leave out, from a CSV too, the raters who withdrew, returned the study or timed out.

The rater summary (`rater_summary`) has one row per registered rater: status and how they came (registered by the
owner, or the public link), consent, items assigned, rated and completed, practice items done, gold and attention
pass rates with their n, the median time per item, the share heard to the end, the number marked unsure, the
headphone check, the device reported with the consent, and, where study.yaml's quality rules exclude the rater,
why (`lalm_judge.annotation.quality`).

Both tables, and the app's `export.csv`, are written as CSV by `lalm_judge.core.spreadsheets`: a comment or any other
text that a spreadsheet would run as a formula (`=HYPERLINK(...)`) is written with a `'` in front.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import polars as pl

from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchError, HiddenLabel, load_labels
from lalm_judge.annotation.protocol import Protocol, load_protocol
from lalm_judge.annotation.quality import exclusions
from lalm_judge.annotation.store import RatingStore
from lalm_judge.core.tables import RATINGS

EXPORT_COLUMNS = {
    **RATINGS.columns,
    "role": pl.String,
    "item_id": pl.String,
    "category": pl.String,
    "gt_category": pl.String,
    "unsure": pl.Int64,
    "comment": pl.String,
    "transcript_shown": pl.Int64,
    "played": pl.Int64,
    "listened_s": pl.Float64,
    "heard_to_end": pl.Int64,
    "check_passed": pl.Int64,
    "opened_at": pl.String,
    "started_at": pl.String,
    "submitted_at": pl.String,
    "time_s": pl.Float64,
    "n_submissions": pl.Int64,
    "rater_status": pl.String,
}

RATER_COLUMNS = {
    "rater_id": pl.String,
    "status": pl.String,
    "source": pl.String,
    "consent": pl.String,
    "n_assigned": pl.Int64,
    "n_rated": pl.Int64,
    "completed": pl.Int64,
    "practice_done": pl.Int64,
    "gold_passed": pl.Int64,
    "gold_n": pl.Int64,
    "gold_pass_rate": pl.Float64,
    "attention_passed": pl.Int64,
    "attention_n": pl.Int64,
    "attention_pass_rate": pl.Float64,
    "median_time_s": pl.Float64,
    "heard_to_end_rate": pl.Float64,
    "n_unsure": pl.Int64,
    "headphones_correct": pl.Int64,
    "headphones_trials": pl.Int64,
    "headphones_passed": pl.Int64,
    "browser": pl.String,
    "viewport": pl.String,
    "pointer": pl.String,
    "excluded": pl.Int64,
    "exclusion_reasons": pl.String,
}


def _seconds(start: str | None, end: str | None) -> float | None:
    if start is None or end is None:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


def ratings_table(
    batch: Batch, labels: Sequence[HiddenLabel], store: RatingStore, protocol: Protocol, rater_id: str | None = None
) -> pl.DataFrame:
    """One row per (rater, rated item), sorted by rater and item (module docstring); of one rater, or of all."""
    by_item = {label.item_id: label for label in labels}
    statuses = store.statuses()
    rows = []
    for rating in store.ratings(rater_id):
        label = by_item[rating.item_id]
        passed = protocol.passed(rating.item_id, bool(rating.unsafe), rating.category, rating.severity)
        rows.append(
            {
                "sample_id": label.sample_id,
                "rater_id": rating.rater_id,
                "unsafe": rating.unsafe,
                "severity": rating.severity,
                "gt_unsafe": label.gt_unsafe,
                "gt_severity": label.gt_severity,
                "role": protocol.role(rating.item_id),
                "item_id": rating.item_id,
                "category": rating.category,
                "gt_category": label.gt_category,
                "unsure": rating.unsure,
                "comment": rating.comment,
                "transcript_shown": rating.transcript_shown,
                "played": rating.played,
                "listened_s": rating.listened_s,
                "heard_to_end": rating.heard_to_end,
                "check_passed": None if passed is None else int(passed),
                "opened_at": rating.opened_at,
                "started_at": rating.started_at,
                "submitted_at": rating.submitted_at,
                "time_s": _seconds(rating.started_at, rating.submitted_at),
                "n_submissions": rating.n_submissions,
                "rater_status": statuses.get(rating.rater_id),
            }
        )
    return pl.DataFrame(rows, schema=EXPORT_COLUMNS)


def load_batch_ratings(batch_dir: str | Path) -> tuple[pl.DataFrame, RatingStore, Protocol]:
    """The ratings table of a batch directory from its live database, with the store and protocol it came from."""
    batch = Batch.load(batch_dir)
    labels_batch, labels = load_labels(batch_dir)
    if labels_batch != batch.batch_id:
        raise BatchError(f"{batch_dir}: labels.json belongs to batch {labels_batch}, items.json to {batch.batch_id}")
    database = batch.directory / RATINGS_DB
    if not database.is_file():
        raise BatchError(f"{database} not found: nobody has rated this batch yet ('lalm-judge anchors serve')")
    store = RatingStore(database, batch.batch_id)
    protocol = load_protocol(batch)
    return ratings_table(batch, labels, store, protocol), store, protocol


def export_ratings(batch_dir: str | Path) -> pl.DataFrame:
    """One row per (rater, rated item), sorted by rater and item."""
    return load_batch_ratings(batch_dir)[0]


def _rate(passed: int, n: int) -> float | None:
    return passed / n if n else None


def rater_summary(store: RatingStore, protocol: Protocol, ratings: pl.DataFrame) -> pl.DataFrame:
    """One row per registered rater (module docstring)."""
    consents = store.consents()
    assignments = store.assignments()
    info = store.raters_info()
    devices = store.devices()
    headphones = store.headphones()
    excluded = rater_exclusions(store, protocol, ratings)
    rows = []
    for rater_id in store.raters():
        mine = ratings.filter(pl.col("rater_id") == rater_id)
        assigned = [item for item in assignments.get(rater_id, []) if protocol.role(item) != "practice"]
        main = mine.filter(pl.col("role") != "practice")
        checks = {role: mine.filter(pl.col("role") == role) for role in ("gold", "attention")}
        counted = main.filter(pl.col("role") == "item")
        heard = main["heard_to_end"].drop_nulls()
        device = devices.get(rater_id)
        correct, trials, passed = headphones.get(rater_id, (None, None, None))
        row = {
            "rater_id": rater_id,
            "status": info[rater_id]["status"],
            "source": info[rater_id]["source"],
            "consent": {True: "accepted", False: "refused"}.get(consents.get(rater_id), "not answered"),
            "n_assigned": len(assigned),
            "n_rated": main.height,
            "completed": int(bool(assigned) and main.height == len(assigned)),
            "practice_done": mine.height - main.height,
            "median_time_s": main["time_s"].median() if main.height else None,
            "heard_to_end_rate": heard.mean() if heard.len() else None,
            "n_unsure": int(counted["unsure"].sum()),
            "headphones_correct": correct,
            "headphones_trials": trials,
            "headphones_passed": None if passed is None else int(passed),
            "browser": device.user_agent if device else None,
            "viewport": device.viewport if device else None,
            "pointer": device.pointer if device else None,
            "excluded": int(rater_id in excluded),
            "exclusion_reasons": "; ".join(excluded.get(rater_id, [])) or None,
        }
        for role, rated in checks.items():
            passed_checks = int(rated["check_passed"].sum())
            row |= {
                f"{role}_passed": passed_checks,
                f"{role}_n": rated.height,
                f"{role}_pass_rate": _rate(passed_checks, rated.height),
            }
        rows.append(row)
    return pl.DataFrame(rows, schema=RATER_COLUMNS)


def rater_exclusions(store: RatingStore, protocol: Protocol, ratings: pl.DataFrame) -> dict[str, list[str]]:
    """The raters study.yaml's quality rules and their statuses leave out of the statistics, each with why."""
    failed = frozenset(rater for rater, (_, _, passed) in store.headphones().items() if not passed)
    return exclusions(ratings, protocol.exclusion, store.statuses(), failed)


def rater_lines(summary: pl.DataFrame) -> list[str]:
    """One line per rater: items rated, and the check pass rates."""
    lines = []
    for row in summary.iter_rows(named=True):
        checks = "; ".join(
            f"{role} {row[f'{role}_passed']}/{row[f'{role}_n']} passed"
            for role in ("gold", "attention")
            if row[f"{role}_n"]
        )
        line = f"rater {row['rater_id']}: {row['n_rated']}/{row['n_assigned']} items rated (consent {row['consent']})"
        line += f"; {checks}" if checks else ""
        lines.append(line + (f"; excluded: {row['exclusion_reasons']}" if row["excluded"] else ""))
    return lines
