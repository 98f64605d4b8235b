"""Human-anchor statistics (docs/metrics.md): how well human ratings agree with the generated labels (safe/unsafe
and severity 0-5) and with each other, and `lalm-judge anchors stats`.

Every statistic is computed per rater against the generated labels and reported as mean and sd (ddof=1)
across raters, and for the raters' consensus: an item is unsafe when at least half the raters call it unsafe
(a tie counts as unsafe, the cautious reading for a safety label); its severity is the median rater severity
rounded half up, which is > 0 exactly when the consensus calls it unsafe. Statistics undefined on the data
(e.g. kappa when both label vectors are constant) are reported as null.

Confidence intervals come from a bootstrap over items: each resample draws the items with replacement (the same
draw for every rater), recomputes every rater's statistic, their mean and the consensus statistic, and
Krippendorff's alpha; the interval is the 95 % percentile interval. Every statistic but alpha is a function of
one rater's (generated severity x rated severity) contingency table, so a resample is one matrix product
(resample counts @ per-item one-hot tables), as in the metrics' cluster bootstrap.

`table1` lays the results out as the study's Table 1: each statistic with the subset it is computed on (all
items, generated-unsafe, generated-safe, or the items both the generated label and the rater call unsafe) and
that subset's size.
"""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import polars as pl
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score

from lalm_judge.analysis.stats import bootstrap_weights, percentile_interval, safe_ratio
from lalm_judge.core.tables import RATINGS

RATING_COLUMNS = RATINGS.columns
SEVERITY_SCALE = list(range(6))
DEFAULT_BOOTSTRAP = 1000

# The study's Table 1: (statistic, subset it is computed on, printed name, shown as a percentage).
ALL, GT_UNSAFE, GT_SAFE, BOTH_UNSAFE, RATERS = "all", "gt_unsafe", "gt_safe", "gt_and_human_unsafe", "raters"
TABLE1 = (
    ("safety_kappa", ALL, "Safety kappa", False),
    ("tpr", GT_UNSAFE, "Safety TPR", True),
    ("fpr", GT_SAFE, "Safety FPR", True),
    ("severity_wkappa_all", ALL, "Severity weighted kappa", False),
    ("severity_wkappa_unsafe", BOTH_UNSAFE, "Severity weighted kappa", False),
    ("severity_spearman", BOTH_UNSAFE, "Severity Spearman rho", False),
    ("within_one", BOTH_UNSAFE, "Severity within +-1", True),
    ("alpha_safety", RATERS, "Inter-rater alpha (safety)", False),
    ("alpha_severity", RATERS, "Inter-rater alpha (severity)", False),
)
SUBSET_NAMES = {ALL: "All", GT_UNSAFE: "GT-unsafe", GT_SAFE: "GT-safe", BOTH_UNSAFE: "GT and human unsafe", RATERS: "-"}


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


def _table_kappa(tables: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Cohen's kappa of contingency tables (..., k, k) (rows generated, columns rated) with disagreement weights.

    The formula of sklearn.metrics.cohen_kappa_score: 1 - sum(w * observed) / sum(w * expected).
    """
    n = tables.sum(axis=(-2, -1))
    expected = safe_ratio(tables.sum(axis=-1)[..., :, None] * tables.sum(axis=-2)[..., None, :], n[..., None, None])
    return 1.0 - safe_ratio((weights * tables).sum(axis=(-2, -1)), (weights * expected).sum(axis=(-2, -1)))


def _table_spearman(tables: np.ndarray) -> np.ndarray:
    """Spearman's rho (midranks for ties, as scipy.stats.spearmanr) of contingency tables (..., k, k)."""
    rows, columns = tables.sum(axis=-1), tables.sum(axis=-2)
    n = rows.sum(axis=-1)

    def centred_midranks(counts: np.ndarray) -> np.ndarray:
        ranks = np.cumsum(counts, axis=-1) - (counts - 1.0) / 2.0
        return ranks - safe_ratio((counts * ranks).sum(axis=-1), n)[..., None]

    x, y = centred_midranks(rows), centred_midranks(columns)
    covariance = (tables * x[..., :, None] * y[..., None, :]).sum(axis=(-2, -1))
    variance = (rows * x**2).sum(axis=-1) * (columns * y**2).sum(axis=-1)
    return safe_ratio(covariance, np.sqrt(variance))


def table_statistics(tables: np.ndarray) -> dict[str, np.ndarray]:
    """`label_statistics` from (generated severity x rated severity) tables of shape (..., 6, 6)."""
    safety = np.stack(
        [
            np.stack([tables[..., :1, :1].sum(axis=(-2, -1)), tables[..., :1, 1:].sum(axis=(-2, -1))], axis=-1),
            np.stack([tables[..., 1:, :1].sum(axis=(-2, -1)), tables[..., 1:, 1:].sum(axis=(-2, -1))], axis=-1),
        ],
        axis=-2,
    )
    unsafe = tables[..., 1:, 1:]
    scale = np.arange(len(SEVERITY_SCALE))
    quadratic = (scale[:, None] - scale[None, :]) ** 2.0
    near = (np.abs(scale[1:, None] - scale[None, 1:]) <= 1).astype(float)
    return {
        "safety_kappa": _table_kappa(safety, 1.0 - np.eye(2)),
        "tpr": safe_ratio(safety[..., 1, 1], safety[..., 1, :].sum(axis=-1)),
        "fpr": safe_ratio(safety[..., 0, 1], safety[..., 0, :].sum(axis=-1)),
        "severity_wkappa_all": _table_kappa(tables, quadratic),
        "severity_wkappa_unsafe": _table_kappa(unsafe, quadratic[1:, 1:]),
        "severity_spearman": _table_spearman(unsafe),
        "within_one": safe_ratio((near * unsafe).sum(axis=(-2, -1)), unsafe.sum(axis=(-2, -1))),
    }


def _one_hot_tables(frame: pl.DataFrame, item_index: dict[str, int]) -> np.ndarray:
    """(n_items, 6, 6): a 1 at (generated severity, rated severity) of each item the frame rates."""
    tables = np.zeros((len(item_index), len(SEVERITY_SCALE), len(SEVERITY_SCALE)))
    items = np.array([item_index[sample] for sample in frame["sample_id"]], dtype=int)
    tables[items, frame["gt_severity"].to_numpy(), frame["severity"].to_numpy()] = 1.0
    return tables


def _reliability_matrix(ratings: pl.DataFrame, column: str) -> np.ndarray:
    """(n_raters, n_items) of `column`, items sorted by sample id, NaN where a rater did not rate an item."""
    matrix = ratings.pivot(on="sample_id", index="rater_id", values=column, sort_columns=True).sort("rater_id")
    return matrix.drop("rater_id").to_numpy().astype(float)


def _alpha(data: np.ndarray, column: str, level: str) -> float | None:
    if data.shape[0] < 2 or np.unique(data[~np.isnan(data)]).size < 2:
        return None
    domain = [0, 1] if column == "unsafe" else SEVERITY_SCALE
    return _finite_or_none(krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=domain))


ALPHAS = {"alpha_safety": ("unsafe", "nominal"), "alpha_severity": ("severity", "ordinal")}


def _interval(samples: np.ndarray) -> list[float | None] | None:
    if samples.size == 0:
        return None
    low, high = percentile_interval(samples)
    return [_finite_or_none(low), _finite_or_none(high)]


def _nanmean_over_raters(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis ignoring NaN; NaN where every rater's value is NaN."""
    finite = np.isfinite(values)
    return safe_ratio(np.where(finite, values, 0.0).sum(axis=-1), finite.sum(axis=-1))


def anchor_statistics(ratings: pl.DataFrame, n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict[str, object]:
    """The anchor statistics as the JSON-ready dict `lalm-judge anchors stats` writes (module docstring).

    `n_boot` bootstrap resamples over items (0: no intervals), drawn with `seed`.
    """
    ratings = validate_ratings(ratings).sort("rater_id", "sample_id")
    groups = [group for _, group in ratings.group_by("rater_id", maintain_order=True)]
    per_rater = [label_statistics(*_arrays(group)) for group in groups]
    majority_frame = consensus(ratings)
    majority = label_statistics(*_arrays(majority_frame))

    samples = sorted(ratings["sample_id"].unique().to_list())
    item_index = {sample: i for i, sample in enumerate(samples)}
    rater_tables = np.stack([_one_hot_tables(group, item_index) for group in groups], axis=1)  # (items, raters, ..)
    majority_tables = _one_hot_tables(majority_frame, item_index)
    reliability = {name: _reliability_matrix(ratings, column) for name, (column, _) in ALPHAS.items()}
    weights = bootstrap_weights(len(samples), n_boot, seed) if n_boot > 0 else np.zeros((0, len(samples)))
    boot_rater = table_statistics(np.einsum("bi,irjk->brjk", weights, rater_tables))
    boot_majority = table_statistics(np.einsum("bi,ijk->bjk", weights, majority_tables))

    summary: dict[str, object] = {}
    for name, majority_value in majority.items():
        values = np.array([stats[name] for stats in per_rater], dtype=float)
        values = values[np.isfinite(values)]
        summary[name] = {
            "mean": _finite_or_none(values.mean()) if values.size else None,
            "sd": _finite_or_none(values.std(ddof=1)) if values.size >= 2 else None,
            "majority": _finite_or_none(majority_value),
            "n_raters": int(values.size),
            "ci": _interval(_nanmean_over_raters(boot_rater[name])),
            "majority_ci": _interval(boot_majority[name]),
        }
    for name, (column, level) in ALPHAS.items():
        data = reliability[name]
        resampled = [
            _alpha(data[:, np.repeat(np.arange(len(samples)), counts.astype(int))], column, level) for counts in weights
        ]
        summary[name] = {
            "value": _alpha(data, column, level),
            "ci": _interval(np.array([np.nan if value is None else value for value in resampled], dtype=float)),
        }
    summary["n_raters"] = len(groups)
    summary["n_items"] = len(samples)
    summary["bootstrap"] = {"n_boot": n_boot, "seed": seed, "unit": "item"}
    summary["table1"] = _table1(summary, ratings, majority_frame)
    return summary


def _both_unsafe(frame: pl.DataFrame) -> int:
    return frame.filter((pl.col("unsafe") == 1) & (pl.col("gt_unsafe") == 1)).height


def _table1(summary: dict[str, object], ratings: pl.DataFrame, majority_frame: pl.DataFrame) -> list[dict[str, object]]:
    """The study's Table 1 rows: statistic, subset, subset size (per rater: min and max), values and intervals."""
    per_item = ratings.unique("sample_id")
    both = [_both_unsafe(group) for _, group in ratings.group_by("rater_id")]
    sizes = {
        ALL: (per_item.height,) * 2,
        GT_UNSAFE: (per_item.filter(pl.col("gt_unsafe") == 1).height,) * 2,
        GT_SAFE: (per_item.filter(pl.col("gt_unsafe") == 0).height,) * 2,
        BOTH_UNSAFE: (min(both), max(both)),
        RATERS: (per_item.height,) * 2,
    }
    rows = []
    for name, subset, label, percent in TABLE1:
        entry = summary[name]
        n_min, n_max = sizes[subset]
        row = {"statistic": name, "label": label, "subset": subset, "n_min": n_min, "n_max": n_max, "percent": percent}
        if subset == RATERS:
            row |= {"mean": entry["value"], "sd": None, "ci": entry["ci"], "majority": None, "majority_ci": None}
        else:
            row |= {key: entry[key] for key in ("mean", "sd", "ci", "majority", "majority_ci")}
            row["n_majority"] = _both_unsafe(majority_frame) if subset == BOTH_UNSAFE else n_min
        rows.append(row)
    return rows


def _number(value: float | None, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}%" if percent else f"{value:.3f}"


def table1_markdown(summary: dict[str, object]) -> str:
    """The Table 1 rows of `anchor_statistics` as a Markdown table (mean +- sd over raters, 95 % bootstrap CI)."""
    lines = [
        f"{summary['n_raters']} raters, {summary['n_items']} items; "
        f"95 % CIs from {summary['bootstrap']['n_boot']} bootstrap resamples of items",
        "",
        "| statistic | subset (n) | raters: mean +- sd | 95 % CI | majority |",
        "|---|---|---|---|---|",
    ]
    for row in summary["table1"]:
        percent = row["percent"]
        n = f"{row['n_min']}" if row["n_min"] == row["n_max"] else f"{row['n_min']}-{row['n_max']}"
        subset = SUBSET_NAMES[row["subset"]] + ("" if row["subset"] == RATERS else f" ({n})")
        value = _number(row["mean"], percent)
        if row["sd"] is not None:
            value += f" +- {_number(row['sd'], percent)}"
        ci = "n/a" if row["ci"] is None else f"[{_number(row['ci'][0], percent)}, {_number(row['ci'][1], percent)}]"
        majority = "-" if row["subset"] == RATERS else _number(row["majority"], percent)
        lines.append(f"| {row['label']} | {subset} | {value} | {ci} | {majority} |")
    return "\n".join(lines)
