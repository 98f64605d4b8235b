"""Human-anchor statistics (docs/metrics.md): how well human ratings agree with the generated labels (safe/unsafe
and severity 0-5) and with each other, and `lalm-judge anchors stats`.

Every statistic is computed per rater against the generated labels, on the items of that rater that support it
(its subset: all rated items, the generated-unsafe ones, the generated-safe ones, or those both the generated
label and the rater call unsafe), and reported with that n, as mean and sd (ddof=1) across the raters for whom it
is estimable, and for the raters' consensus: an item is unsafe when more than half its raters call it unsafe; an
item exactly half its raters call unsafe (a tie) counts as `ties` says: unsafe (the default, the cautious reading
for a safety label), safe, or dropped from the consensus (`drop`); `majority_rule` reports the rule and the number
of ties. The consensus severity is the median rater severity rounded half up (0 for a tie counted safe), which is
> 0 exactly when the consensus calls the item unsafe. Krippendorff's alpha rests on the items that at least two
raters rated (its n); with fewer than `MIN_ALPHA_ITEMS` of them it is `too_few_items` (its value on those items is
kept, without an interval, and the table says so instead of printing it). A statistic is `not_estimable` where no
item supports it or it is undefined on the items that do (e.g. kappa when both label vectors are constant); the
entry then says why, with its n. This holds at any point of a study: with no overlap between raters yet, alpha is
not estimable and the rest is computed.

Confidence intervals come from a bootstrap over items: each resample draws the items with replacement (the same
draw for every rater), recomputes every rater's statistic, their mean and the consensus statistic, and
Krippendorff's alpha; the interval is the 95 % percentile interval of the resamples that support the statistic.
A resample that does not (it drew no doubly rated item, say) is counted, reported as `unsupported`, and left out.
Every statistic but alpha is a function of one rater's (generated severity x rated severity) contingency table,
so a resample is one matrix product (resample counts @ per-item one-hot tables), as in the metrics' cluster
bootstrap; alpha is computed by the krippendorff package from each resample's per-item value counts.

An optional `role` column (the export of a batch writes one) marks practice items, gold items and attention checks;
only rows whose role is `item` are counted, and `select_counted` says how many others it left out.

`table1` lays the results out as the study's Table 1: each statistic with its subset and that subset's size.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import krippendorff
import numpy as np
import polars as pl
from scipy.stats import spearmanr
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import cohen_kappa_score

from lalm_judge.analysis.stats import bootstrap_weights, percentile_interval, safe_ratio
from lalm_judge.core.tables import RATINGS

RATING_COLUMNS = RATINGS.columns
SEVERITY_SCALE = list(range(6))
DEFAULT_BOOTSTRAP = 1000
ESTIMABLE, NOT_ESTIMABLE, TOO_FEW_ITEMS = "ok", "not_estimable", "too_few_items"
# Krippendorff's alpha on fewer doubly rated items says little (on 2 items that agree it is 1.000, and most
# resamples cannot support it): below this many it is reported as too few.
MIN_ALPHA_ITEMS = 10
TIE_RULES = ("unsafe", "safe", "drop")
TIE_WORDS = {"unsafe": "unsafe", "safe": "safe", "drop": "out (dropped)"}
COUNTED_ROLE = "item"

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
SUBSET_NAMES = {
    ALL: "All",
    GT_UNSAFE: "GT-unsafe",
    GT_SAFE: "GT-safe",
    BOTH_UNSAFE: "GT and human unsafe",
    RATERS: "rated by 2+",
}
SUBSET_OF = {name: subset for name, subset, _, _ in TABLE1}
ALPHAS = {"alpha_safety": ("unsafe", "nominal", [0, 1]), "alpha_severity": ("severity", "ordinal", SEVERITY_SCALE)}


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


def select_counted(ratings: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """The rows that count (role `item`, or every row of a table without a role column) and, per other role,
    how many rows were left out."""
    if "role" not in ratings.columns:
        return ratings, {}
    left_out = ratings.filter(pl.col("role") != COUNTED_ROLE)["role"].value_counts()
    return ratings.filter(pl.col("role") == COUNTED_ROLE), dict(sorted(left_out.iter_rows()))


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _kappa(truth: np.ndarray, rated: np.ndarray, **kwargs) -> float:
    if truth.size == 0:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)  # undefined: NaN, reported as not estimable
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


def consensus(ratings: pl.DataFrame, ties: str = "unsafe") -> pl.DataFrame:
    """Per sample: majority unsafe (a tie as `ties` says: unsafe, safe, or the sample dropped), median severity
    rounded half up (0 for a tie counted safe), the generated labels, and whether the sample was a tie."""
    if ties not in TIE_RULES:
        raise RatingsInputError(f"ties {ties!r}: one of {', '.join(TIE_RULES)}")
    share = pl.col("unsafe").mean()
    tie = share == 0.5
    frame = (
        ratings.group_by("sample_id")
        .agg(
            unsafe=((share > 0.5) | (tie & (ties == "unsafe"))).cast(pl.Int64),
            severity=pl.when(tie & (ties != "unsafe"))
            .then(0)
            .otherwise((pl.col("severity").median() + 0.5).floor())
            .cast(pl.Int64),
            gt_unsafe=pl.col("gt_unsafe").first(),
            gt_severity=pl.col("gt_severity").first(),
            tie=tie,
        )
        .sort("sample_id")
    )
    return frame.filter(~pl.col("tie")) if ties == "drop" else frame


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


def table_support(tables: np.ndarray) -> dict[str, np.ndarray]:
    """How many items of (..., 6, 6) tables fall in each Table 1 subset."""
    return {
        ALL: tables.sum(axis=(-2, -1)),
        GT_UNSAFE: tables[..., 1:, :].sum(axis=(-2, -1)),
        GT_SAFE: tables[..., :1, :].sum(axis=(-2, -1)),
        BOTH_UNSAFE: tables[..., 1:, 1:].sum(axis=(-2, -1)),
    }


def _one_hot_tables(frame: pl.DataFrame, item_index: dict[str, int]) -> np.ndarray:
    """(n_items, 6, 6): a 1 at (generated severity, rated severity) of each item the frame rates."""
    tables = np.zeros((len(item_index), len(SEVERITY_SCALE), len(SEVERITY_SCALE)))
    items = np.array([item_index[sample] for sample in frame["sample_id"]], dtype=int)
    tables[items, frame["gt_severity"].to_numpy(), frame["severity"].to_numpy()] = 1.0
    return tables


def _value_counts(ratings: pl.DataFrame, column: str, domain: Sequence[int], item_index: dict[str, int]) -> np.ndarray:
    """(n_items, len(domain)): how many raters gave each item each value of `column`."""
    counts = np.zeros((len(item_index), len(domain)))
    items = np.array([item_index[sample] for sample in ratings["sample_id"]], dtype=int)
    np.add.at(counts, (items, ratings[column].to_numpy()), 1.0)
    return counts


def _alpha(value_counts: np.ndarray, level: str) -> float:
    """Krippendorff's alpha of per-item value counts; NaN where no item has two ratings or all values agree
    trivially (one value observed: no expected disagreement)."""
    pairable = value_counts[value_counts.sum(axis=1) >= 2]
    if pairable.shape[0] == 0 or np.count_nonzero(pairable.sum(axis=0)) < 2:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(krippendorff.alpha(value_counts=pairable, level_of_measurement=level))


def _interval(samples: np.ndarray) -> list[float | None] | None:
    """The percentile interval of the finite resamples; None with fewer than two."""
    finite = samples[np.isfinite(samples)]
    if finite.size < 2:
        return None
    low, high = percentile_interval(finite)
    return [_finite_or_none(low), _finite_or_none(high)]


def _nanmean_over_raters(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis ignoring NaN; NaN where every rater's value is NaN."""
    finite = np.isfinite(values)
    return safe_ratio(np.where(finite, values, 0.0).sum(axis=-1), finite.sum(axis=-1))


def _reason(n: int, what: str = "items") -> str:
    if n == 0:
        return f"no {what} support it yet"
    return f"undefined on its {n} {what} (e.g. a single class on both sides)"


def _unsupported(samples: np.ndarray) -> int:
    return int((~np.isfinite(samples)).sum())


def _label_entry(
    raters: Sequence[str],
    values: np.ndarray,
    support: np.ndarray,
    majority: tuple[float, int],
    boot_mean: np.ndarray,
    boot_majority: np.ndarray,
) -> dict[str, object]:
    """One label statistic: per rater (value, n), mean and sd over the raters for whom it is estimable, the
    consensus value with its n, intervals from the supporting resamples and the count of the others."""
    finite = np.isfinite(values)
    majority_value, majority_n = majority
    entry: dict[str, object] = {
        "status": ESTIMABLE if finite.any() else NOT_ESTIMABLE,
        "mean": _finite_or_none(values[finite].mean()) if finite.any() else None,
        "sd": _finite_or_none(values[finite].std(ddof=1)) if finite.sum() >= 2 else None,
        "n_raters": int(finite.sum()),
        "n_min": int(support.min()) if support.size else 0,
        "n_max": int(support.max()) if support.size else 0,
        "per_rater": {
            rater: {"value": _finite_or_none(value), "n": int(n)} for rater, value, n in zip(raters, values, support)
        },
        "majority": _finite_or_none(majority_value),
        "n_majority": majority_n,
        "ci": _interval(boot_mean) if finite.any() else None,
        "majority_ci": _interval(boot_majority) if math.isfinite(majority_value) else None,
        "bootstrap_unsupported": _unsupported(boot_mean),
        "majority_bootstrap_unsupported": _unsupported(boot_majority),
    }
    if not finite.any():
        entry["reason"] = _reason(int(support.max()) if support.size else 0)
    return entry


def _alpha_entry(value_counts: np.ndarray, level: str, weights: np.ndarray) -> dict[str, object]:
    value = _alpha(value_counts, level)
    pairable = value_counts.sum(axis=1) >= 2
    n = int(pairable.sum())
    enough = math.isfinite(value) and n >= MIN_ALPHA_ITEMS
    resampled = np.array([_alpha(np.repeat(value_counts, counts.astype(int), axis=0), level) for counts in weights])
    entry: dict[str, object] = {
        "value": _finite_or_none(value),
        "status": ESTIMABLE if enough else TOO_FEW_ITEMS if math.isfinite(value) else NOT_ESTIMABLE,
        "n": n,
        "n_ratings": int(value_counts[pairable].sum()),
        "ci": _interval(resampled) if enough else None,
        "bootstrap_unsupported": _unsupported(resampled),
    }
    if not math.isfinite(value):
        entry["reason"] = _reason(n, "items rated by two or more raters")
    elif not enough:
        entry["reason"] = f"only {n} items rated by two or more raters; alpha needs at least {MIN_ALPHA_ITEMS}"
    return entry


def anchor_statistics(
    ratings: pl.DataFrame, n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0, ties: str = "unsafe"
) -> dict[str, object]:
    """The anchor statistics as the JSON-ready dict `lalm-judge anchors stats` writes (module docstring).

    `n_boot` bootstrap resamples over items (0: no intervals), drawn with `seed`; `ties`: how the majority counts
    a tie. Any table that passes `validate_ratings` gives a result, an empty one included: what cannot be
    estimated says so.
    """
    ratings = validate_ratings(ratings).sort("rater_id", "sample_id")
    raters = ratings["rater_id"].unique(maintain_order=True).to_list()
    samples = sorted(ratings["sample_id"].unique().to_list())
    item_index = {sample: i for i, sample in enumerate(samples)}
    groups = [ratings.filter(pl.col("rater_id") == rater) for rater in raters]
    n_ties = int(consensus(ratings)["tie"].sum())
    majority_frame = consensus(ratings, ties)
    per_rater = [label_statistics(*_arrays(group)) for group in groups]
    majority = label_statistics(*_arrays(majority_frame))

    shape = (len(samples), len(raters), len(SEVERITY_SCALE), len(SEVERITY_SCALE))
    rater_tables = np.stack([_one_hot_tables(g, item_index) for g in groups], axis=1) if raters else np.zeros(shape)
    majority_tables = _one_hot_tables(majority_frame, item_index)
    rater_support = table_support(rater_tables.sum(axis=0))
    majority_support = table_support(majority_tables.sum(axis=0))
    weights = bootstrap_weights(len(samples), n_boot, seed) if n_boot > 0 and samples else np.zeros((0, len(samples)))
    boot_rater = table_statistics(np.einsum("bi,irjk->brjk", weights, rater_tables))
    boot_majority = table_statistics(np.einsum("bi,ijk->bjk", weights, majority_tables))

    summary: dict[str, object] = {}
    for name, majority_value in majority.items():
        subset = SUBSET_OF[name]
        summary[name] = _label_entry(
            raters,
            np.array([stats[name] for stats in per_rater], dtype=float),
            rater_support[subset].astype(int),
            (majority_value, int(majority_support[subset])),
            _nanmean_over_raters(boot_rater[name]),
            boot_majority[name],
        )
    for name, (column, level, domain) in ALPHAS.items():
        summary[name] = _alpha_entry(_value_counts(ratings, column, domain, item_index), level, weights)
    summary["n_raters"] = len(raters)
    summary["n_items"] = len(samples)
    summary["n_ratings"] = ratings.height
    summary["bootstrap"] = {"n_boot": n_boot, "seed": seed, "unit": "item"}
    summary["majority_rule"] = {"ties": ties, "n_ties": n_ties}
    summary["table1"] = _table1(summary)
    return summary


def _table1(summary: dict[str, object]) -> list[dict[str, object]]:
    """The study's Table 1 rows: statistic, subset, subset size (per rater: min and max), values and intervals."""
    rows = []
    for name, subset, label, percent in TABLE1:
        entry = summary[name]
        row = {"statistic": name, "label": label, "subset": subset, "percent": percent, "status": entry["status"]}
        if subset == RATERS:
            value = entry["value"] if entry["status"] == ESTIMABLE else None
            row |= {"n_min": entry["n"], "n_max": entry["n"], "mean": value, "sd": None}
            row |= {"ci": entry["ci"], "majority": None, "majority_ci": None}
        else:
            row |= {key: entry[key] for key in ("n_min", "n_max", "mean", "sd", "ci", "majority", "majority_ci")}
            row["n_majority"] = entry["n_majority"]
        row["bootstrap_unsupported"] = entry["bootstrap_unsupported"]
        rows.append(row)
    return rows


def _number(value: float | None, percent: bool) -> str:
    if value is None:
        return "not estimable"
    return f"{100 * value:.1f}%" if percent else f"{value:.3f}"


def _sizes(row: dict[str, object]) -> str:
    return f"{row['n_min']}" if row["n_min"] == row["n_max"] else f"{row['n_min']}-{row['n_max']}"


def _ci_text(row: dict[str, object], n_boot: int) -> str:
    if row["ci"] is None:
        return "-" if n_boot == 0 or row["status"] == TOO_FEW_ITEMS else "not estimable"
    low, high = (_number(bound, row["percent"]) for bound in row["ci"])
    unsupported = row["bootstrap_unsupported"]
    return f"[{low}, {high}]" + (f" ({unsupported} of {n_boot} resamples unsupported)" if unsupported else "")


def table1_markdown(summary: dict[str, object]) -> str:
    """The Table 1 rows of `anchor_statistics` as a Markdown table (mean +- sd over raters, 95 % bootstrap CI);
    every subset with its n, and "not estimable" where the items do not support a statistic."""
    n_boot = summary["bootstrap"]["n_boot"]
    rule = summary["majority_rule"]
    lines = [
        f"{summary['n_raters']} raters, {summary['n_items']} items, {summary['n_ratings']} ratings; "
        + (f"95 % CIs from {n_boot} bootstrap resamples of items" if n_boot else "no bootstrap")
        + f"; majority: {rule['n_ties']} tie(s) counted {TIE_WORDS[rule['ties']]}",
        "",
        "| statistic | subset (n) | raters: mean +- sd | 95 % CI | majority (n) |",
        "|---|---|---|---|---|",
    ]
    for row in summary["table1"]:
        percent = row["percent"]
        value = _number(row["mean"], percent)
        if row["status"] == TOO_FEW_ITEMS:
            value = f"too few items ({row['n_min']} rated by 2+, {MIN_ALPHA_ITEMS} needed)"
        if row["sd"] is not None:
            value += f" +- {_number(row['sd'], percent)}"
        majority = "-" if row["subset"] == RATERS else f"{_number(row['majority'], percent)} ({row['n_majority']})"
        subset = f"{SUBSET_NAMES[row['subset']]} ({_sizes(row)})"
        lines.append(f"| {row['label']} | {subset} | {value} | {_ci_text(row, n_boot)} | {majority} |")
    return "\n".join(lines)
