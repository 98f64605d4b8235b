"""Paired comparisons of judge cells (docs/metrics.md, "Paired comparisons"): is cell A more sensitive than cell B
on the same dialogues?

For every pair of cells of one condition, on the dialogues both cells have a parsed variant in, the difference
A - B of sensitivity, specificity and AvgAbsPB (of sensitivity and of specificity), with a paired cluster-bootstrap
interval: both cells are recomputed on the same resampled dialogues (one count matrix per set of common dialogues,
drawn from default_rng(seed) as every interval of the metrics stage), and the percentile interval and two-sided
p-value of the resampled differences are taken. The values of A and B are theirs on the common dialogues (equal to
cells.parquet where both cells rest on the same dialogues). AvgAbsPB averages each cell's included (L, k) of
position_bias.parquet.

Support: a difference rests on the dialogues paired in both cells (sensitivity: the fewest over the severities of
the dialogues with a paired variant in both; specificity: of those with a parsed variant in both; AvgAbsPB: the
dialogues with a paired variant in both); below `min_dialogues`, or where either AvgAbsPB is not estimable, it is
`not_estimable` without interval. Two cells are `separated` on a metric when the difference's interval excludes 0;
`better` then names the better one (higher sensitivity and specificity, lower AvgAbsPB). The guide, the decision
flow and the Pareto front read this table: one cell is recommended over another only where they are separated.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import (
    BOOTSTRAP_BATCH,
    CELL_KEYS,
    TARGET_METRICS,
    DenseStatistics,
    MetricSettings,
    contributing_dialogues,
)
from lalm_judge.analysis.position import CELL_BATCH, PositionBias, resampled_pb
from lalm_judge.analysis.support import NOT_ESTIMABLE, WITH_INTERVAL, fewest_present, with_min_support

AVG_ABS_PB = tuple(f"avg_abs_pb_{metric}" for metric in TARGET_METRICS)
COMPARED = (*TARGET_METRICS, *AVG_ABS_PB)
LOWER_IS_BETTER = frozenset(AVG_ABS_PB)
FIRST, SECOND = "a", "b"
# Pairs whose differences are resampled at once (memory: n_boot x this many per metric).
PAIR_BATCH = 1024

COMPARISON_SCHEMA: dict[str, pl.DataType] = {
    **{f"{key}_{side}": pl.String for side in (FIRST, SECOND) for key in CELL_KEYS},
    "metric": pl.String,
    "value_a": pl.Float64,
    "value_b": pl.Float64,
    "difference": pl.Float64,
    "difference_lo": pl.Float64,
    "difference_hi": pl.Float64,
    "p_value": pl.Float64,
    "n_dialogues": pl.Int64,
    "status": pl.String,
    "separated": pl.Boolean,
    "better": pl.String,
}


def _pairs(cells: pl.DataFrame, slice_of: dict[int, int]) -> list[tuple[int, int]]:
    """(slice a, slice b) for every pair of measured cells of one condition, a before b in cell order."""
    pairs = []
    for _, members in cells.filter(pl.col("cell").is_in(list(slice_of))).group_by("condition", maintain_order=True):
        measured = sorted(slice_of[c] for c in members["cell"].to_list())
        pairs += [(a, b) for i, a in enumerate(measured) for b in measured[i + 1 :]]
    return pairs


def _support(arrays: st.SeverityStatistics, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """The dialogues each difference of the pairs (a[k], b[k]) rests on, per compared metric."""
    paired = ((arrays.diff_n[:, a] > 0) & (arrays.diff_n[:, b] > 0)).sum(axis=0)  # (n_pairs, 5)
    scored = ((arrays.score_n[:, a] > 0) & (arrays.score_n[:, b] > 0)).sum(axis=0)
    either = ((arrays.diff_n[:, a].sum(axis=2) > 0) & (arrays.diff_n[:, b].sum(axis=2) > 0)).sum(axis=0)
    return {
        "sensitivity": fewest_present(paired),
        "specificity": fewest_present(scored),
        **dict.fromkeys(AVG_ABS_PB, either),
    }


def _values(
    arrays: st.SeverityStatistics,
    involved: np.ndarray,
    cell_of_slice: np.ndarray,
    position: PositionBias,
    dialogues: np.ndarray,
    weights: np.ndarray,
) -> dict[str, np.ndarray]:
    """Every compared metric of the involved slices on `dialogues`, in every resample of weights: (n_boot, n). Cells
    are taken in batches (the engine's and the position bias's), which bounds the memory at paper scale."""
    values = {name: np.full((weights.shape[0], involved.size), np.nan) for name in COMPARED}
    subset = arrays.take_dialogues(dialogues)
    for start in range(0, involved.size, BOOTSTRAP_BATCH):
        batch = slice(start, start + BOOTSTRAP_BATCH)
        resampled = st.bootstrap_metrics(subset.take_slices(involved[batch]), weights)
        for metric, samples in zip(TARGET_METRICS, resampled):
            values[metric][:, batch] = samples
    if position.slices is not None:
        for start in range(0, involved.size, CELL_BATCH):
            batch = slice(start, start + CELL_BATCH)
            _, _, averages = resampled_pb(position.slices, cell_of_slice[involved[batch]], dialogues, weights)
            for metric, name in zip(TARGET_METRICS, AVG_ABS_PB):
                values[name][:, batch] = averages[metric]
    return values


def paired_comparisons(
    dense: DenseStatistics, cells: pl.DataFrame, position: PositionBias, settings: MetricSettings
) -> pl.DataFrame:
    """The comparisons table (COMPARISON_SCHEMA) of the cells of `dense` (slices keyed by `cell`), whose keys and
    AvgAbsPB statuses are in `cells` (one row per `cell` with CELL_KEYS)."""
    cell_of_slice = dense.slices["cell"].to_numpy()
    slice_of = {int(c): i for i, c in enumerate(cell_of_slice)}
    pairs = _pairs(cells, slice_of)
    if not pairs:
        return pl.DataFrame(schema=COMPARISON_SCHEMA)
    present = contributing_dialogues(dense.arrays)
    groups: dict[bytes, list[int]] = defaultdict(list)
    for k, (a, b) in enumerate(pairs):
        groups[np.packbits(present[:, a] & present[:, b]).tobytes()].append(k)
    first, second = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
    columns = {name: np.full((len(pairs), len(COMPARED)), np.nan) for name in ("a", "b", "lo", "hi", "p")}
    support = np.zeros((len(pairs), len(COMPARED)), dtype=np.int64)
    for members in groups.values():
        members = np.asarray(members)
        dialogues = np.flatnonzero(present[:, first[members[0]]] & present[:, second[members[0]]])
        if dialogues.size == 0:
            continue
        involved = np.unique(np.concatenate([first[members], second[members]]))
        column_of = {int(s): i for i, s in enumerate(involved)}
        weights = st.bootstrap_weights(dialogues.size, settings.n_boot, settings.seed)
        args = (dense.arrays, involved, cell_of_slice, position, dialogues)
        point, resampled = _values(*args, np.ones((1, dialogues.size))), _values(*args, weights)
        subset = dense.arrays.take_dialogues(dialogues)
        counts = _support(subset, first[members], second[members])
        for m, metric in enumerate(COMPARED):
            support[members, m] = counts[metric]
        for start in range(0, members.size, PAIR_BATCH):
            batch = members[start : start + PAIR_BATCH]
            a = np.array([column_of[int(s)] for s in first[batch]])
            b = np.array([column_of[int(s)] for s in second[batch]])
            for m, metric in enumerate(COMPARED):
                columns["a"][batch, m] = point[metric][0, a]
                columns["b"][batch, m] = point[metric][0, b]
                differences = resampled[metric][:, a] - resampled[metric][:, b]
                columns["lo"][batch, m], columns["hi"][batch, m] = st.percentile_interval(differences)
                columns["p"][batch, m] = st.percentile_p_two_sided(differences)
    return _table(pairs, cell_of_slice, cells, columns, support, settings.min_dialogues)


def _table(
    pairs: list[tuple[int, int]],
    cell_of_slice: np.ndarray,
    cells: pl.DataFrame,
    columns: dict[str, np.ndarray],
    support: np.ndarray,
    minimum: int,
) -> pl.DataFrame:
    keyed = cells.select(
        "cell", *CELL_KEYS, *(f"{name}_status" for name in AVG_ABS_PB if f"{name}_status" in cells.columns)
    )
    n_pairs = len(pairs)
    frame = pl.DataFrame(
        {
            "cell_a": np.repeat(cell_of_slice[[a for a, _ in pairs]], len(COMPARED)),
            "cell_b": np.repeat(cell_of_slice[[b for _, b in pairs]], len(COMPARED)),
            "metric": np.tile(np.array(COMPARED, dtype=object), n_pairs),
            "value_a": columns["a"].reshape(-1),
            "value_b": columns["b"].reshape(-1),
            "difference_lo": columns["lo"].reshape(-1),
            "difference_hi": columns["hi"].reshape(-1),
            "p_value": columns["p"].reshape(-1),
            "n_dialogues": support.reshape(-1),
        },
        schema_overrides={"metric": pl.String},
    ).with_columns(pl.col(pl.Float64).fill_nan(None))
    frame = frame.with_columns(difference=pl.col("value_a") - pl.col("value_b"))
    for side in (FIRST, SECOND):
        renamed = keyed.rename({name: f"{name}_{side}" for name in keyed.columns})
        frame = frame.join(renamed, on=f"cell_{side}", how="left", maintain_order="left")
    # A difference of an AvgAbsPB that is itself not estimable rests on too little, whatever the pair shares.
    unsupported = pl.lit(False)
    for name in AVG_ABS_PB:
        if f"{name}_status_a" in frame.columns:
            either = (pl.col(f"{name}_status_a") == NOT_ESTIMABLE) | (pl.col(f"{name}_status_b") == NOT_ESTIMABLE)
            unsupported = unsupported | ((pl.col("metric") == name) & either.fill_null(False))
    frame = frame.with_columns(_support=pl.when(unsupported).then(0).otherwise(pl.col("n_dialogues")))
    frame = with_min_support(frame, "difference", "_support", minimum, status="status")
    frame = frame.with_columns(
        p_value=pl.when(pl.col("status").is_in(WITH_INTERVAL)).then(pl.col("p_value")),
    )
    lower_better = pl.col("metric").is_in(list(LOWER_IS_BETTER))
    above, below = pl.col("difference_lo") > 0, pl.col("difference_hi") < 0
    separated = pl.col("status").is_in(WITH_INTERVAL) & (above | below).fill_null(False)
    a_better = pl.when(lower_better).then(below).otherwise(above)
    return (
        frame.with_columns(
            separated=separated,
            better=pl.when(~separated).then(None).when(a_better).then(pl.lit(FIRST)).otherwise(pl.lit(SECOND)),
        )
        .select(list(COMPARISON_SCHEMA))
        .cast(COMPARISON_SCHEMA)
        .sort(["condition_a", *(f"{k}_{s}" for s in (FIRST, SECOND) for k in CELL_KEYS), "metric"], nulls_last=True)
    )


def comparison_lookup(comparisons: pl.DataFrame | None) -> dict[tuple, dict]:
    """The comparisons by (cell a keys, cell b keys, metric), both orders: the row seen from the first cell (a
    difference of the second against the first has its sign and `better` flipped)."""
    lookup: dict[tuple, dict] = {}
    if comparisons is None:
        return lookup
    for row in comparisons.iter_rows(named=True):
        a = tuple(row[f"{key}_{FIRST}"] for key in CELL_KEYS)
        b = tuple(row[f"{key}_{SECOND}"] for key in CELL_KEYS)
        lookup[(a, b, row["metric"])] = row
        flipped = dict(row)
        flipped["value_a"], flipped["value_b"] = row.get("value_b"), row.get("value_a")
        if row.get("difference") is not None:
            flipped["difference"] = -row["difference"]
        if row.get("difference_lo") is not None and row.get("difference_hi") is not None:
            flipped["difference_lo"], flipped["difference_hi"] = -row["difference_hi"], -row["difference_lo"]
        flipped["better"] = {FIRST: SECOND, SECOND: FIRST}.get(row["better"])
        lookup[(b, a, row["metric"])] = flipped
    return lookup
