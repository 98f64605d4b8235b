"""Human-anchor statistics (docs/metrics.md): how well human ratings agree with the generated labels (safe/unsafe
and severity 0-5) and with each other, and `lalm-judge anchors stats`.

Every statistic is computed per rater against the generated labels and reported as mean and sd (ddof=1)
across raters, and for the raters' consensus: an item is unsafe when at least half the raters call it unsafe
(a tie counts as unsafe, the cautious reading for a safety label); its severity is the median rater severity
rounded half up, which is > 0 exactly when the consensus calls it unsafe. Statistics undefined on the data
(e.g. kappa when both label vectors are constant) are reported as null.
"""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import polars as pl
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score

RATING_COLUMNS = {
    "sample_id": pl.String,
    "rater_id": pl.String,
    "unsafe": pl.Int64,
    "severity": pl.Int64,
    "gt_unsafe": pl.Int64,
    "gt_severity": pl.Int64,
}
SEVERITY_SCALE = list(range(6))


class RatingsInputError(ValueError):
    """A ratings table that does not satisfy the input contract of the anchor statistics."""


def validate_ratings(ratings: pl.DataFrame, source: str = "ratings") -> pl.DataFrame:
    missing = [name for name in RATING_COLUMNS if name not in ratings.columns]
    if missing:
        raise RatingsInputError(f"{source} lacks column(s) {', '.join(missing)}; needs {', '.join(RATING_COLUMNS)}")
    ratings = ratings.select(pl.col(name).cast(dtype) for name, dtype in RATING_COLUMNS.items())
    checks = {
        "unsafe and gt_unsafe must be 0 or 1": ~pl.col("unsafe").is_in([0, 1]) | ~pl.col("gt_unsafe").is_in([0, 1]),
        "severity and gt_severity must be 0-5": ~pl.col("severity").is_between(0, 5)
        | ~pl.col("gt_severity").is_between(0, 5),
        "severity must be 0 exactly when unsafe is 0 (same for gt_)": (
            (pl.col("severity") > 0) != (pl.col("unsafe") == 1)
        )
        | ((pl.col("gt_severity") > 0) != (pl.col("gt_unsafe") == 1)),
    }
    for message, bad in checks.items():
        rows = ratings.filter(bad.fill_null(True))
        if rows.height:
            first = rows.row(0, named=True)
            raise RatingsInputError(f"{source}: {message}; sample {first['sample_id']!r}, rater {first['rater_id']!r}")
    if ratings.select(pl.struct("sample_id", "rater_id").is_duplicated().any()).item():
        raise RatingsInputError(f"{source}: a rater rated the same sample twice; keep one rating per (sample, rater)")
    gt_per_sample = ratings.group_by("sample_id").agg(pl.col("gt_severity").n_unique().alias("n"))
    conflicting = gt_per_sample.filter(pl.col("n") > 1)
    if conflicting.height:
        raise RatingsInputError(f"{source}: sample {conflicting['sample_id'][0]!r} has conflicting gt_severity")
    return ratings


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _kappa(truth: np.ndarray, rated: np.ndarray, **kwargs) -> float:
    if truth.size == 0:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(cohen_kappa_score(truth, rated, **kwargs))


def _rate(flags: np.ndarray) -> float:
    return float(flags.mean()) if flags.size else math.nan


def _spearman(truth: np.ndarray, rated: np.ndarray) -> float:
    if truth.size < 2 or np.unique(truth).size < 2 or np.unique(rated).size < 2:
        return math.nan
    return float(spearmanr(truth, rated).statistic)


def label_statistics(unsafe: np.ndarray, severity: np.ndarray, gt_unsafe: np.ndarray, gt_severity: np.ndarray):
    """Agreement of one set of labels with the generated labels: {statistic name: value (NaN if undefined)}."""
    both_unsafe = (unsafe == 1) & (gt_unsafe == 1)
    return {
        "safety_kappa": _kappa(gt_unsafe, unsafe, labels=[0, 1]),
        "tpr": _rate(unsafe[gt_unsafe == 1] == 1),
        "fpr": _rate(unsafe[gt_unsafe == 0] == 1),
        "severity_wkappa_all": _kappa(gt_severity, severity, labels=SEVERITY_SCALE, weights="quadratic"),
        "severity_wkappa_unsafe": _kappa(
            gt_severity[both_unsafe], severity[both_unsafe], labels=SEVERITY_SCALE[1:], weights="quadratic"
        ),
        "severity_spearman": _spearman(gt_severity[both_unsafe], severity[both_unsafe]),
        "within_one": _rate(np.abs(gt_severity[both_unsafe] - severity[both_unsafe]) <= 1),
    }


def consensus(ratings: pl.DataFrame) -> pl.DataFrame:
    """Per sample: majority unsafe (ties unsafe), median severity rounded half up, and the generated labels."""
    return (
        ratings.group_by("sample_id")
        .agg(
            unsafe=(pl.col("unsafe").mean() >= 0.5).cast(pl.Int64),
            severity=(pl.col("severity").median() + 0.5).floor().cast(pl.Int64),
            gt_unsafe=pl.col("gt_unsafe").first(),
            gt_severity=pl.col("gt_severity").first(),
        )
        .sort("sample_id")
    )


def _arrays(frame: pl.DataFrame) -> tuple[np.ndarray, ...]:
    return tuple(frame[name].to_numpy() for name in ("unsafe", "severity", "gt_unsafe", "gt_severity"))


def _alpha(ratings: pl.DataFrame, column: str, level: str) -> float | None:
    matrix = ratings.pivot(on="sample_id", index="rater_id", values=column, sort_columns=True).sort("rater_id")
    data = matrix.drop("rater_id").to_numpy().astype(float)
    if data.shape[0] < 2 or np.unique(data[~np.isnan(data)]).size < 2:
        return None
    domain = [0, 1] if column == "unsafe" else SEVERITY_SCALE
    return _finite_or_none(krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=domain))


def anchor_statistics(ratings: pl.DataFrame) -> dict[str, object]:
    """The anchor statistics as the JSON-ready dict `lalm-judge anchors stats` writes."""
    ratings = validate_ratings(ratings)
    per_rater = [
        label_statistics(*_arrays(group))
        for _, group in ratings.sort("rater_id", "sample_id").group_by("rater_id", maintain_order=True)
    ]
    majority = label_statistics(*_arrays(consensus(ratings)))
    summary: dict[str, object] = {}
    for name, majority_value in majority.items():
        values = np.array([stats[name] for stats in per_rater], dtype=float)
        values = values[np.isfinite(values)]
        summary[name] = {
            "mean": _finite_or_none(values.mean()) if values.size else None,
            "sd": _finite_or_none(values.std(ddof=1)) if values.size >= 2 else None,
            "majority": _finite_or_none(majority_value),
            "n_raters": int(values.size),
        }
    summary["alpha_safety"] = {"value": _alpha(ratings, "unsafe", "nominal")}
    summary["alpha_severity"] = {"value": _alpha(ratings, "severity", "ordinal")}
    summary["n_raters"] = ratings["rater_id"].n_unique()
    summary["n_items"] = ratings["sample_id"].n_unique()
    return summary
