"""The quality rules of a listening study (study.yaml `quality.exclude`): which raters the statistics leave out,
and why.

A rater is excluded when their assignment was freed (they withdrew, returned the study on the recruiting platform,
timed out or, coming through the public link, refused consent: `rater_status` other than `active`), or when
their ratings break a rule:
- `max_attention_failures`: more attention checks failed than this;
- `min_gold_accuracy`: a share of gold items passed below this (with at least one gold item rated);
- `min_heard_to_end`: a share of rated items (counted, gold and attention) heard to the end below this;
- `min_median_time_s`: a median time per rated item below this many seconds;
- `failed_headphone_check`: true excludes raters who failed the headphone check.

Every rule reads the export table (`lalm_judge.annotation.export`), so it applies to a CSV as to a live database;
a rule whose column or items are missing excludes nobody. A rater excluded is reported with every reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import polars as pl

ACTIVE = "active"
FREED_REASONS = {
    "withdrawn": "withdrew from the study",
    "returned": "returned the study on the recruiting platform",
    "timed_out": "timed out (assignment freed)",
    "refused": "refused consent",
}


@dataclass(frozen=True)
class ExclusionRules:
    """study.yaml `quality.exclude` (module docstring); None: no such rule."""

    max_attention_failures: int | None = None
    min_gold_accuracy: float | None = None
    min_heard_to_end: float | None = None
    min_median_time_s: float | None = None
    failed_headphone_check: bool = False

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def rater_quality(ratings: pl.DataFrame) -> pl.DataFrame:
    """Per rater, from the export table: attention checks failed and rated, gold items passed and rated, the share
    of rated items heard to the end and the median time per rated item (practice items left out)."""
    # A CSV column of nothing but empty cells reads as text: the types come from the export's.
    types = {"check_passed": pl.Int64, "heard_to_end": pl.Float64, "time_s": pl.Float64}
    ratings = ratings.with_columns(pl.col(name).cast(kind) for name, kind in types.items() if name in ratings.columns)
    rated = ratings.filter(pl.col("role") != "practice") if "role" in ratings.columns else ratings
    columns = set(rated.columns)
    missing = pl.lit(None, pl.Int64)

    def checks(role: str) -> pl.Expr:
        return pl.col("check_passed").filter(pl.col("role") == role)

    has_checks = {"role", "check_passed"} <= columns
    aggregations = [
        ((checks("attention") == 0).sum() if has_checks else missing).alias("attention_failed"),
        (checks("attention").count() if has_checks else missing).alias("attention_n"),
        (checks("gold").sum() if has_checks else missing).alias("gold_passed"),
        (checks("gold").count() if has_checks else missing).alias("gold_n"),
        (pl.col("heard_to_end").mean() if "heard_to_end" in columns else missing).alias("heard_to_end_rate"),
        (pl.col("time_s").median() if "time_s" in columns else missing).alias("median_time_s"),
    ]
    return rated.group_by("rater_id").agg(aggregations).sort("rater_id")


def _rule_reasons(row: Mapping[str, object], rules: ExclusionRules) -> list[str]:
    reasons = []
    failed, n = row.get("attention_failed"), row.get("attention_n")
    if rules.max_attention_failures is not None and n and failed > rules.max_attention_failures:
        reasons.append(f"failed {failed} of {n} attention checks (at most {rules.max_attention_failures} allowed)")
    passed, n = row.get("gold_passed"), row.get("gold_n")
    if rules.min_gold_accuracy is not None and n and passed / n < rules.min_gold_accuracy:
        reasons.append(f"passed {passed} of {n} gold items (below {rules.min_gold_accuracy:.0%})")
    heard = row.get("heard_to_end_rate")
    if rules.min_heard_to_end is not None and heard is not None and heard < rules.min_heard_to_end:
        reasons.append(f"heard {heard:.0%} of the items to the end (below {rules.min_heard_to_end:.0%})")
    median = row.get("median_time_s")
    if rules.min_median_time_s is not None and median is not None and median < rules.min_median_time_s:
        reasons.append(f"median {median:.1f} s per item (below {rules.min_median_time_s:g} s)")
    return reasons


def exclusions(
    ratings: pl.DataFrame,
    rules: ExclusionRules,
    statuses: Mapping[str, str] | None = None,
    headphones_failed: frozenset[str] = frozenset(),
) -> dict[str, list[str]]:
    """The raters to leave out, each with every reason (module docstring). `statuses`: rater id -> status (else the
    table's `rater_status` column, where it has one); `headphones_failed`: raters who failed the headphone check."""
    if statuses is None and "rater_status" in ratings.columns:
        statuses = dict(ratings.select("rater_id", "rater_status").unique().iter_rows())
    out: dict[str, list[str]] = {}
    for rater, status in (statuses or {}).items():
        if status != ACTIVE:
            out.setdefault(rater, []).append(FREED_REASONS.get(status, status))
    for row in rater_quality(ratings).iter_rows(named=True):
        reasons = _rule_reasons(row, rules)
        if reasons:
            out.setdefault(row["rater_id"], []).extend(reasons)
    if rules.failed_headphone_check:
        for rater in headphones_failed:
            out.setdefault(rater, []).append("failed the headphone check")
    return dict(sorted(out.items()))
