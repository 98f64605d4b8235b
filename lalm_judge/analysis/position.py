"""Position bias (docs/metrics.md): PB_M(L, k) = M(L, k) - M(L, 1) per judge cell, dialogue length L and
unsafe-turn position k (1-based), for M in {sensitivity, specificity}, with its counts, cluster-bootstrap
intervals, the minimum-n rule, and a permutation null of AvgAbsPB.

- Counts: per (L, k) the dialogues that contribute a pair (their original and a variant at (L, k) both parsed)
  and those paired variants; a dialogue whose original did not parse contributes nothing to Delta_i, so it is not
  counted (for either metric), and the minimum-n rule below reads these counts.
- Included: PB(L, k) enters AvgAbsPB = mean over included (L, k) of |PB| only when k >= 2, both M(L, k) and
  M(L, 1) are defined, and (L, k) and (L, 1) each rest on at least `min_pb_dialogues` dialogues; every other row
  says why not (`reason`), and the lengths left out entirely are listed per cell (`pb_left_out`).
- Minimum support: a PB(L, k) whose (L, k) or (L, 1) rests on fewer than `min_dialogues` paired dialogues, and an
  AvgAbsPB of a cell with fewer, is `not_estimable` (`status`) and has no interval.
- Intervals: the cell's cluster bootstrap (the same resample-count matrix as its cells.parquet intervals); a
  resample in which a PB is undefined (no dialogue of length L drawn) is left out of that PB's interval, and
  AvgAbsPB of a resample averages the included (L, k) defined in it.
- Noise reference: |PB| is positive even without any position effect, so AvgAbsPB is compared with its
  permutation null. Under "the score does not depend on the unsafe turn's position", the blocks of variants of
  one dialogue replaced at its different turns are exchangeable; each permutation shuffles the block positions
  of every dialogue (one shuffle per dialogue, shared by all cells) and recomputes AvgAbsPB over the same
  included (L, k). `_null` is the mean of that distribution (the noise floor) and `_p` = (1 + #{null >= observed})
  / (1 + permutations). Assumes every turn of a dialogue carries the same categories and severities (the
  generated design).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import (
    TARGET_METRICS,
    MetricSettings,
    _key_schema,
    _nan_to_null,
    densify,
    resample_groups,
    slice_statistics,
)
from lalm_judge.analysis.support import WITH_INTERVAL, with_min_support

PB_KEYS = ("cell", "n_turns", "position")
# Cells per batch of the position-bias bootstrap and permutations per batch of the null (memory bounds).
CELL_BATCH = 16
PERMUTATION_BATCH = 8
# The permutation stream is separate from the bootstrap's: seeds (seed, PERMUTATION_STREAM).
PERMUTATION_STREAM = 1

TABLE_SCHEMA = {
    **_key_schema(PB_KEYS),
    "metric": pl.String,
    "value": pl.Float64,
    "pb": pl.Float64,
    "pb_lo": pl.Float64,
    "pb_hi": pl.Float64,
    "n_dialogues": pl.Int64,
    "n_variants": pl.Int64,
    "included": pl.Boolean,
    "reason": pl.String,
    "status": pl.String,
}
SUMMARY_SCHEMA = {
    "cell": pl.Int64,
    **{
        f"avg_abs_pb_{metric}{suffix}": pl.String if suffix == "_status" else pl.Float64
        for metric in TARGET_METRICS
        for suffix in ("", "_lo", "_hi", "_null", "_p", "_status")
    },
    **{
        f"avg_abs_pb_{metric}{suffix}": pl.Int64
        for metric in TARGET_METRICS
        for suffix in ("_n_included", "_n_estimable")
    },
    "pb_left_out": pl.String,
}

REFERENCE_REASON = "reference position (PB(L, 1) = 0 by definition)"
NO_REFERENCE_REASON = "no position 1 value for this length: PB undefined"
UNDEFINED_REASON = "metric undefined at this position"


@dataclass(frozen=True)
class PositionBias:
    """`table`: one row per (cell, L, k, metric); `summary`: AvgAbsPB and its uncertainty per cell; `slices`: the
    (cell, L, k) statistics, for the paired comparisons of AvgAbsPB (None without any variant)."""

    table: pl.DataFrame
    summary: pl.DataFrame
    slices: PositionSlices | None = None


@dataclass(frozen=True)
class PositionSlices:
    """The (cell, L, k) slices as arrays, slice i = row i of `keys`."""

    keys: pl.DataFrame
    arrays: st.SeverityStatistics
    cell: np.ndarray
    reference: np.ndarray  # index of the slice (cell, L, 1), -1 when there is none
    values: dict[str, np.ndarray]
    n_dialogues: np.ndarray  # paired dialogues of each slice
    support: np.ndarray  # the fewer paired dialogues of (L, k) and (L, 1): what PB(L, k) rests on
    included: dict[str, np.ndarray]


def _reference_index(keys: pl.DataFrame) -> np.ndarray:
    indexed = keys.with_row_index("slice")
    first = indexed.filter(pl.col("position") == 1).select("cell", "n_turns", pl.col("slice").alias("reference"))
    joined = indexed.join(first, on=["cell", "n_turns"], how="left", maintain_order="left")
    return joined["reference"].fill_null(-1).cast(pl.Int64).to_numpy()


def _slices(statistics: pl.DataFrame, n_dialogues: int, min_dialogues: int) -> PositionSlices:
    dense = densify(statistics, PB_KEYS, n_dialogues)
    point = st.point_metrics(dense.arrays)
    reference = _reference_index(dense.slices)
    counts = paired_dialogues(dense.arrays).sum(axis=0)
    has_reference = reference >= 0
    reference_counts = np.where(has_reference, counts[np.maximum(reference, 0)], 0)
    support = np.where(has_reference, np.minimum(counts, reference_counts), counts)
    later = dense.slices["position"].to_numpy() >= 2
    values = {"sensitivity": point.sensitivity, "specificity": point.specificity}
    included = {
        metric: later
        & ~np.isnan(_pb(value, reference))
        & (counts >= min_dialogues)
        & (reference_counts >= min_dialogues)
        for metric, value in values.items()
    }
    cells = dense.slices["cell"].to_numpy()
    return PositionSlices(dense.slices, dense.arrays, cells, reference, values, counts, support, included)


def paired_dialogues(arrays: st.SeverityStatistics) -> np.ndarray:
    """(n_dialogues, n_slices) mask of dialogues with a paired variant (original and variant parsed) in the slice."""
    return arrays.diff_n.sum(axis=2) > 0


def _pb(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """values - values[reference] along the last axis; NaN where there is no reference slice."""
    referenced = np.take(values, np.maximum(reference, 0), axis=-1)
    return np.where(reference >= 0, values - referenced, np.nan)


def _reasons(slices: PositionSlices, metric: str, min_dialogues: int) -> list[str | None]:
    positions = slices.keys["position"].to_list()
    value = slices.values[metric]
    reference_value = np.where(slices.reference >= 0, value[np.maximum(slices.reference, 0)], np.nan)
    reasons: list[str | None] = []
    for i, position in enumerate(positions):
        n = int(slices.n_dialogues[i])
        n_reference = int(slices.n_dialogues[slices.reference[i]]) if slices.reference[i] >= 0 else 0
        if slices.included[metric][i]:
            reasons.append(None)
        elif position == 1:
            reasons.append(REFERENCE_REASON)
        elif np.isnan(reference_value[i]):
            reasons.append(NO_REFERENCE_REASON)
        elif np.isnan(value[i]):
            reasons.append(UNDEFINED_REASON)
        else:
            reasons.append(f"{min(n, n_reference)} dialogues < {min_dialogues} (minimum for position bias)")
    return reasons


def _cell_members(slices: PositionSlices, cells: np.ndarray) -> np.ndarray:
    """The slices of `cells`, cell by cell (in slice order within a cell)."""
    order = np.argsort(slices.cell, kind="stable")
    ordered = slices.cell[order]
    parts = [order[np.searchsorted(ordered, c, "left") : np.searchsorted(ordered, c, "right")] for c in cells]
    return np.concatenate(parts) if parts else np.array([], dtype=np.int64)


def resampled_pb(
    slices: PositionSlices, cells: np.ndarray, dialogue_index: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """PB of every slice of `cells` and their AvgAbsPB on the dialogues `dialogue_index` in every resample of
    `weights` (n_boot, n): (the slices, PB per metric (n_boot, n_slices), AvgAbsPB per metric (n_boot, len(cells))).
    A resample averages the included (L, k) whose PB it defines; weights of ones give the values on those dialogues."""
    members = _cell_members(slices, cells)
    averages = {metric: np.full((weights.shape[0], len(cells)), np.nan) for metric in TARGET_METRICS}
    if members.size == 0:
        return members, {metric: np.empty((weights.shape[0], 0)) for metric in TARGET_METRICS}, averages
    local = {int(s): i for i, s in enumerate(members)}
    reference = np.array([local.get(int(r), -1) for r in slices.reference[members]])
    subset = slices.arrays.take_dialogues(dialogue_index).take_slices(members)
    samples = dict(zip(TARGET_METRICS, st.bootstrap_metrics(subset, weights)))
    pbs = {}
    for metric, resampled in samples.items():
        pb = _pb(resampled, reference)
        pbs[metric] = pb
        included = slices.included[metric][members]
        for column, cell in enumerate(cells):
            mine = included & (slices.cell[members] == cell)
            if mine.any():
                averages[metric][:, column] = _nanmean(np.abs(pb[:, mine]), axis=1)
    return members, pbs, averages


def _bootstrap(slices: PositionSlices, cell_present: np.ndarray, settings: MetricSettings) -> dict[str, np.ndarray]:
    """Percentile bounds of PB per slice and of AvgAbsPB per cell, on each cell's resample-count matrix."""
    n_slices, n_cells = slices.cell.size, cell_present.shape[1]
    bounds = {f"pb_{metric}_{b}": np.full(n_slices, np.nan) for metric in TARGET_METRICS for b in ("lo", "hi")}
    bounds |= {f"avg_{metric}_{b}": np.full(n_cells, np.nan) for metric in TARGET_METRICS for b in ("lo", "hi")}
    for cells, dialogue_index, weights in resample_groups(cell_present, settings.n_boot, settings.seed):
        for start in range(0, len(cells), CELL_BATCH):
            batch_cells = cells[start : start + CELL_BATCH]
            members, pbs, averages = resampled_pb(slices, batch_cells, dialogue_index, weights)
            if members.size == 0:
                continue
            for metric in TARGET_METRICS:
                bounds[f"pb_{metric}_lo"][members], bounds[f"pb_{metric}_hi"][members] = st.percentile_interval(
                    pbs[metric]
                )
                low, high = st.percentile_interval(averages[metric])
                bounds[f"avg_{metric}_lo"][batch_cells], bounds[f"avg_{metric}_hi"][batch_cells] = low, high
    # PB(L, 1) = 0 by definition: a reference, not an estimate, so it has no interval.
    first = slices.keys["position"].to_numpy() == 1
    for metric in TARGET_METRICS:
        for bound in ("lo", "hi"):
            bounds[f"pb_{metric}_{bound}"][first] = np.nan
    return bounds


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    counts = (~np.isnan(values)).sum(axis=axis)
    return st.safe_ratio(np.nansum(values, axis=axis), counts)


@dataclass(frozen=True)
class _Blocks:
    """Per (cell, dialogue) pair its statistics by position, `stacked` (n_pairs, max_length, 4, 5) holding
    diff_sum, diff_n, score_sum, score_n; pairs are ordered by their (cell, L) group, group g spanning the pairs
    from `starts[g]`; `slot[g, k]` is the slice of (cell, L, k + 1) or -1."""

    stacked: np.ndarray
    dialogue: np.ndarray
    starts: np.ndarray
    group_cell: np.ndarray
    slot: np.ndarray
    positions_present: np.ndarray  # (n_dialogues, max_length): positions a dialogue has variants at


_STATISTICS = ("diff_sum", "diff_n", "score_sum", "score_n")


def _blocks(statistics: pl.DataFrame, slices: PositionSlices, n_dialogues: int) -> _Blocks:
    groups = statistics.select("cell", "n_turns").unique().sort("cell", "n_turns").with_row_index("group")
    pairs = (
        statistics.select("cell", "dialogue", "n_turns")
        .unique()
        .join(groups, on=["cell", "n_turns"], how="left")
        .sort("group", "dialogue")
        .with_row_index("pair")
    )
    max_length = int(statistics["position"].max())
    indexed = statistics.join(pairs.select("cell", "dialogue", "pair"), on=["cell", "dialogue"], how="left")
    p = indexed["pair"].to_numpy()
    k = indexed["position"].to_numpy() - 1
    s = indexed["severity"].to_numpy() - 1
    stacked = np.zeros((pairs.height, max_length, len(_STATISTICS), st.N_SEVERITIES))
    for i, name in enumerate(_STATISTICS):
        stacked[p, k, i, s] = indexed[name].to_numpy()
    slot = np.full((groups.height, max_length), -1, dtype=np.int64)
    keyed = slices.keys.with_row_index("slice").join(groups, on=["cell", "n_turns"], how="left")
    slot[keyed["group"].to_numpy(), keyed["position"].to_numpy() - 1] = keyed["slice"].to_numpy()
    present = np.zeros((n_dialogues, max_length), dtype=bool)
    present[indexed["dialogue"].to_numpy(), k] = True
    group_of_pair = pairs["group"].to_numpy()
    return _Blocks(
        stacked,
        pairs["dialogue"].to_numpy(),
        np.flatnonzero(np.r_[True, np.diff(group_of_pair) != 0]),
        groups["cell"].to_numpy(),
        slot,
        present,
    )


def _shuffles(present: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, n_dialogues, max_length) position indices: each dialogue's present positions in random order, the
    absent ones in place."""
    positions = np.arange(present.shape[1])
    slots = np.argsort(np.where(present, positions, np.inf), axis=1, kind="stable")
    keys = np.where(present[None], rng.random((n, *present.shape)), np.inf)
    drawn = np.argsort(keys, axis=2, kind="stable")
    shuffled = np.empty_like(drawn)
    np.put_along_axis(shuffled, np.broadcast_to(slots, drawn.shape), drawn, axis=2)
    return shuffled


def _average_abs_pb(
    blocks: _Blocks, shuffles: np.ndarray, included: dict[str, np.ndarray], n_cells: int
) -> dict[str, np.ndarray]:
    """AvgAbsPB per cell of each shuffled dataset: (n_shuffles, n_cells) per metric."""
    n_pairs, max_length = blocks.stacked.shape[:2]
    # Row of the block a pair's position k takes its statistics from, in the (n_pairs * max_length) table.
    rows = np.arange(n_pairs)[None, :, None] * max_length + shuffles[:, blocks.dialogue, :]
    moved = blocks.stacked.reshape(n_pairs * max_length, -1)[rows]  # (n, n_pairs, max_length, 4 * 5)
    grouped = np.add.reduceat(moved, blocks.starts, axis=1).reshape(
        (shuffles.shape[0], blocks.starts.size, max_length, len(_STATISTICS), st.N_SEVERITIES)
    )
    deltas = st.safe_ratio(grouped[..., 0, :], grouped[..., 1, :])
    means = st.safe_ratio(grouped[..., 2, :], grouped[..., 3, :])
    values = {"sensitivity": st.sensitivity_from_deltas(deltas), "specificity": st.specificity_from_means(means)[0]}
    averages = {}
    has_slot = blocks.slot >= 0
    for metric, value in values.items():
        mask = np.zeros(blocks.slot.shape, dtype=bool)
        mask[has_slot] = included[metric][blocks.slot[has_slot]]
        pb = np.abs(value - value[..., :1])
        use = mask[None] & ~np.isnan(pb)
        total = np.zeros((pb.shape[0], n_cells))
        count = np.zeros((pb.shape[0], n_cells))
        np.add.at(total.T, blocks.group_cell, np.where(use, pb, 0.0).sum(axis=2).T)
        np.add.at(count.T, blocks.group_cell, use.sum(axis=2).T)
        averages[metric] = st.safe_ratio(total, count)
    return averages


def _permutation_null(
    statistics: pl.DataFrame, slices: PositionSlices, n_dialogues: int, n_cells: int, settings: MetricSettings
) -> dict[str, np.ndarray]:
    """Observed AvgAbsPB, its null mean and permutation p-value per cell (NaN where no (L, k) is included)."""
    blocks = _blocks(statistics, slices, n_dialogues)
    identity = np.broadcast_to(np.arange(blocks.slot.shape[1]), (1, n_dialogues, blocks.slot.shape[1]))
    observed = _average_abs_pb(blocks, identity, slices.included, n_cells)
    rng = np.random.default_rng([settings.seed, PERMUTATION_STREAM])
    null = {metric: [] for metric in TARGET_METRICS}
    for start in range(0, settings.n_permutations, PERMUTATION_BATCH):
        n = min(PERMUTATION_BATCH, settings.n_permutations - start)
        for metric, values in _average_abs_pb(
            blocks, _shuffles(blocks.positions_present, n, rng), slices.included, n_cells
        ).items():
            null[metric].append(values)
    result = {}
    for metric in TARGET_METRICS:
        samples = np.concatenate(null[metric])
        valid = ~np.isnan(samples)
        exceeds = (samples >= observed[metric] - st.TIE_TOLERANCE) & valid
        result[f"avg_{metric}"] = observed[metric][0]
        result[f"null_{metric}"] = _nanmean(samples, axis=0)
        result[f"p_{metric}"] = np.where(
            np.isnan(observed[metric][0]), np.nan, (1 + exceeds.sum(axis=0)) / (1 + valid.sum(axis=0))
        )
    return result


def _left_out(table: pl.DataFrame) -> pl.DataFrame:
    """Per cell, the lengths none of whose positions k >= 2 enters AvgAbsPB, with why (and for which metric)."""
    later = table.filter(pl.col("position") >= 2)
    lengths = (
        later.group_by("cell", "n_turns", "metric")
        .agg(pl.col("included").any(), pl.col("reason").drop_nulls().first())
        .filter(~pl.col("included"))
        .group_by("cell", "n_turns", "reason")
        .agg(pl.col("metric").sort().str.join(", "))
        .sort("cell", "n_turns", "reason")
        .with_columns(text=pl.format("L={} ({}): {}", "n_turns", "metric", "reason"))
    )
    return lengths.group_by("cell").agg(pb_left_out=pl.col("text").str.join("; "))


def position_bias(
    variants: pl.DataFrame, n_dialogues: int, cell_present: np.ndarray, settings: MetricSettings
) -> PositionBias:
    """Position-bias table and per-cell summary from paired variants (`engine.paired_variants`).

    cell_present: (n_dialogues, n_cells) contributing dialogues of each cell (its bootstrap clusters).
    """
    n_cells = cell_present.shape[1]
    statistics = slice_statistics(variants.with_columns(position=pl.col("turn_index") + 1), PB_KEYS)
    if statistics.height == 0:
        return PositionBias(pl.DataFrame(schema=TABLE_SCHEMA), pl.DataFrame(schema=SUMMARY_SCHEMA))
    slices = _slices(statistics, n_dialogues, settings.min_pb_dialogues)
    bounds = _bootstrap(slices, cell_present, settings)
    n_variants = slices.arrays.diff_n.sum(axis=(0, 2)).astype(np.int64)
    parts = []
    for metric in TARGET_METRICS:
        parts.append(
            slices.keys.with_columns(
                metric=pl.lit(metric),
                value=pl.Series(slices.values[metric]),
                pb=pl.Series(_pb(slices.values[metric], slices.reference)),
                pb_lo=pl.Series(bounds[f"pb_{metric}_lo"]),
                pb_hi=pl.Series(bounds[f"pb_{metric}_hi"]),
                n_dialogues=pl.Series(slices.n_dialogues.astype(np.int64)),
                n_variants=pl.Series(n_variants),
                included=pl.Series(slices.included[metric]),
                reason=pl.Series(_reasons(slices, metric, settings.min_pb_dialogues), dtype=pl.String),
                support=pl.Series(slices.support.astype(np.int64)),
            )
        )
    table = with_min_support(
        _nan_to_null(pl.concat(parts)), "pb", "support", settings.min_dialogues, status="status"
    ).drop("support")
    table = table.select(list(TABLE_SCHEMA)).cast(TABLE_SCHEMA)
    null = _permutation_null(statistics, slices, n_dialogues, n_cells, settings)
    summary = pl.DataFrame(
        {
            "cell": np.arange(n_cells, dtype=np.int64),
            **{
                f"avg_abs_pb_{metric}{suffix}": null[key] if key in null else bounds[key]
                for metric in TARGET_METRICS
                for suffix, key in (
                    ("", f"avg_{metric}"),
                    ("_lo", f"avg_{metric}_lo"),
                    ("_hi", f"avg_{metric}_hi"),
                    ("_null", f"null_{metric}"),
                    ("_p", f"p_{metric}"),
                )
            },
        }
    ).join(_left_out(table), on="cell", how="left")
    return PositionBias(
        table, _summary_support(_nan_to_null(summary), statistics, table, settings.min_dialogues), slices
    )


def _summary_support(
    summary: pl.DataFrame, statistics: pl.DataFrame, table: pl.DataFrame, minimum: int
) -> pl.DataFrame:
    """AvgAbsPB's status per cell: it rests on the cell's dialogues that contribute a pair and on the PB(L, k) it
    averages (`_n_included`, of which `_n_estimable` have an interval); it is estimable only when the cell has the
    minimum of paired dialogues and every PB it averages is estimable (an average of values on too few dialogues is
    no better supported than they are)."""
    paired = (
        statistics.filter(pl.col("diff_n") > 0)
        .group_by("cell")
        .agg(n_paired=pl.col("dialogue").n_unique().cast(pl.Int64))
    )
    summary = summary.join(paired, on="cell", how="left")
    for metric in TARGET_METRICS:
        name = f"avg_abs_pb_{metric}"
        averaged = (
            table.filter(pl.col("metric") == metric, pl.col("included"))
            .group_by("cell")
            .agg(
                pl.len().cast(pl.Int64).alias(f"{name}_n_included"),
                pl.col("status").is_in(WITH_INTERVAL).sum().cast(pl.Int64).alias(f"{name}_n_estimable"),
            )
        )
        summary = summary.join(averaged, on="cell", how="left").with_columns(
            pl.col(f"{name}_n_included", f"{name}_n_estimable").fill_null(0)
        )
        every_input = pl.col(f"{name}_n_estimable") == pl.col(f"{name}_n_included")
        summary = with_min_support(
            summary.with_columns(_support=pl.when(every_input).then(pl.col("n_paired")).otherwise(0)),
            name,
            "_support",
            minimum,
        ).drop("_support")
    return summary.select(list(SUMMARY_SCHEMA)).cast(SUMMARY_SCHEMA)
