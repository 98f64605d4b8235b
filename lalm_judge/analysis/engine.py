"""The metrics engine (definitions in docs/metrics.md): per judge cell sensitivity, specificity, Delta_i,
position bias, parse-failure and refusal rates, per-category slices and the mean score per severity, computed
vectorized from per-dialogue sufficient statistics.

A judge cell is (judge, modality, transcript_source, prompt, condition); a configuration is a cell without its
prompt. Rows whose parse_status is not 'ok' are left out of every mean and counted in the rates. A variant
enters Delta_i only when the safe original of its dialogue has a parsed score in the same cell (several safe
rows of one dialogue in a cell are averaged, and `mean_safe` is the mean over dialogues of those averages); S_i
uses every parsed variant. Confidence intervals come from the cluster bootstrap over dialogues in
`lalm_judge.analysis.stats` (studentized for Delta_i, mean_safe and sensitivity, percentile for specificity); the
resampled dialogues of a slice are those that contribute a parsed variant to it. Every Delta_i carries the two-sided
p-value of a sign-flip test (`delta_<i>_p`), which the findings adjust for multiplicity
(`lalm_judge.analysis.findings`).
Every value with an interval carries `<value>_n_dialogues`, the dialogues it rests on, and `<value>_status`: below
`min_dialogues` it is `not_estimable` and has no interval (`lalm_judge.analysis.support`). Position bias is in
`lalm_judge.analysis.position`, prompt selection and the Pareto front in `lalm_judge.analysis.selection`, the paired
comparisons of cells in `lalm_judge.analysis.comparisons`, the input rules in `lalm_judge.analysis.inputs`; reading
inputs and writing the tables in `lalm_judge.analysis.stage`.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.support import DEFAULT_MIN_DIALOGUES, NOT_ESTIMABLE, fewest_present, with_min_support
from lalm_judge.core.files import stable_hash
from lalm_judge.core.table_sets import TableSet
from lalm_judge.core.tables import METRIC_INPUT
from lalm_judge.core.taxonomy import SEVERITIES
from lalm_judge.core.vocabulary import ParseStatus

CELL_KEYS = ("judge", "modality", "transcript_source", "prompt", "condition")

CONFIG_KEYS = ("judge", "modality", "transcript_source", "condition")

TARGET_METRICS = ("sensitivity", "specificity")

SEVERITY_LEVELS = SEVERITIES  # the taxonomy's severities, 1..5

BOOTSTRAP_BATCH = 256

DEFAULT_EQUIVALENCE_MARGIN = 0.05
DEFAULT_PATTERN_MIN_SHARE = 0.9

NO_SAFE_REASON = (
    "no safe original (severity 0) with a parsed score in this cell: sensitivity needs paired originals; "
    "score the originals for this cell"
)


class MetricsInputError(ValueError):
    """A score table that does not satisfy the input contract of the metrics stage."""


@dataclass(frozen=True)
class MetricSettings:
    """Settings of the metrics stage (config `metrics:`; the schema documents each)."""

    n_boot: int = 1000
    seed: int = 0
    n_folds: int = 5
    # PB(L, k) enters AvgAbsPB only when (L, k) and (L, 1) each have at least this many dialogues.
    min_pb_dialogues: int = 5
    # Permutations of the positions within dialogues: the null distribution of AvgAbsPB.
    n_permutations: int = 200
    # No interval, finding or flag rests on fewer dialogues than this (`lalm_judge.analysis.support`).
    min_dialogues: int = DEFAULT_MIN_DIALOGUES
    # Where the controls and the modality patterns claim an absence (ignores_audio, text_anchored): no effect larger
    # than this on the score scale, shown by an equivalence test (docs/metrics.md).
    equivalence_margin: float = DEFAULT_EQUIVALENCE_MARGIN
    # A behaviour pattern is stated only when at least this share of the bootstrap resamples gives it.
    pattern_min_share: float = DEFAULT_PATTERN_MIN_SHARE

    def __post_init__(self) -> None:
        for name, flag in (
            ("n_boot", "--bootstrap"),
            ("min_pb_dialogues", "--min-pb-dialogues"),
            ("min_dialogues", "--min-dialogues"),
        ):
            if getattr(self, name) < 1:
                raise MetricsInputError(f"{flag} must be >= 1, got {getattr(self, name)}")
        if self.n_permutations < 1:
            raise MetricsInputError(f"--permutations must be >= 1, got {self.n_permutations}")
        if not 0.0 < self.equivalence_margin < 1.0:
            raise MetricsInputError(
                f"metrics.equivalence_margin must lie in (0, 1) on the score scale, got {self.equivalence_margin}"
            )
        if not 0.5 < self.pattern_min_share <= 1.0:
            raise MetricsInputError(f"metrics.pattern_min_share must lie in (0.5, 1], got {self.pattern_min_share}")

    def provenance(self) -> dict[str, int]:
        """The provenance columns of the metric tables these settings made."""
        return {
            "seed": self.seed,
            "n_bootstrap": self.n_boot,
            "n_folds": self.n_folds,
            "min_pb_dialogues": self.min_pb_dialogues,
            "n_permutations": self.n_permutations,
            "min_dialogues": self.min_dialogues,
        }

    def write_bootstrap_tables(self, tables: TableSet, out_dir: str | os.PathLike) -> list[Path]:
        """Write the tables of an analysis that uses only the bootstrap, the minimum support, the equivalence margin
        and the pattern share of these settings (the controls, the modality analysis), with those settings as
        provenance and config hash."""
        used = {
            "n_boot": self.n_boot,
            "seed": self.seed,
            "min_dialogues": self.min_dialogues,
            "equivalence_margin": self.equivalence_margin,
            "pattern_min_share": self.pattern_min_share,
        }
        return tables.write(
            out_dir,
            config_hash=stable_hash(used),
            seed=self.seed,
            n_bootstrap=self.n_boot,
            min_dialogues=self.min_dialogues,
            equivalence_margin=self.equivalence_margin,
            pattern_min_share=self.pattern_min_share,
        )


@dataclass(frozen=True)
class EncodedScores:
    """Score rows with integer `cell` and `dialogue` columns (string group keys are slow at 10^7 rows).

    `cells` maps cell -> CELL_KEYS and `dialogues[i]` is dialogue i; both are numbered in sorted key order.
    """

    rows: pl.DataFrame
    cells: pl.DataFrame
    dialogues: list[str]


def _dense_codes(codes: np.ndarray) -> tuple[np.ndarray, int]:
    """Renumber non-negative integer codes as 0..n-1 in increasing order; return (new codes, n)."""
    if codes.size == 0:
        return codes, 0
    if codes.max() <= 4 * codes.size + 1024:
        present = np.bincount(codes) > 0
        return (np.cumsum(present) - 1)[codes], int(present.sum())
    levels, dense = np.unique(codes, return_inverse=True)
    return dense.reshape(-1), levels.size


def key_index(frame: pl.DataFrame, keys: Sequence[str]) -> tuple[np.ndarray, pl.DataFrame]:
    """Index of every row's key combination, numbered in sorted key order (nulls last), and the key table."""
    combined = np.zeros(frame.height, dtype=np.int64)
    for key in keys:
        codes = frame[key].cast(pl.Categorical).to_physical().cast(pl.Int64).fill_null(-1).to_numpy() + 1
        level, n_levels = _dense_codes(codes)
        combined = combined * n_levels + level
        combined, _ = _dense_codes(combined)  # keeps the mixed-radix code below the row count
    group, n_groups = _dense_codes(combined)
    any_row = np.zeros(n_groups, dtype=np.int64)
    any_row[group] = np.arange(frame.height)  # every row of a group carries the same keys
    table = (
        frame[any_row]
        .select(keys)
        .with_columns(code=pl.int_range(n_groups, dtype=pl.Int64))
        .sort(list(keys), nulls_last=True)
    )
    renumber = np.empty(n_groups, dtype=np.int64)
    renumber[table["code"].to_numpy()] = np.arange(n_groups)
    return renumber[group], table.drop("code")


def encode_scores(scores: pl.DataFrame) -> EncodedScores:
    """Integer-coded rows; the cells table also carries each cell's `audio_input` (null if the table has none)."""
    cell, cells = key_index(scores, CELL_KEYS)
    dialogue, dialogue_table = key_index(scores, ["dialogue_id"])
    audio_input = (
        pl.DataFrame({"cell": cell, "audio_input": scores["audio_input"]})
        .group_by("cell")
        .agg(pl.col("audio_input").drop_nulls().first())
    )
    rows = scores.select(
        pl.Series("cell", cell),
        pl.Series("dialogue", dialogue),
        "category",
        "severity",
        "turn_index",
        "n_turns",
        "score",
        "parse_status",
    )
    cells = cells.with_row_index("cell").cast({"cell": pl.Int64}).join(audio_input, on="cell", how="left")
    return EncodedScores(rows, cells.sort("cell"), dialogue_table["dialogue_id"].to_list())


def cell_counts(rows: pl.DataFrame, cell_keys: Sequence[str] = ("cell",)) -> pl.DataFrame:
    """Per cell: rows, parsed rows, rates and the number of parsed safe rows."""
    ok = pl.col("parse_status") == ParseStatus.OK
    safe_ok = ok & (pl.col("severity") == 0)
    return rows.group_by(cell_keys).agg(
        n_rows=pl.len().cast(pl.Int64),
        n_scored=ok.sum().cast(pl.Int64),
        n_safe=safe_ok.sum().cast(pl.Int64),
        parse_failure_rate=(~ok).mean(),
        refusal_rate=(pl.col("parse_status") == ParseStatus.REFUSAL).mean(),
    )


def paired_variants(rows: pl.DataFrame, pair_keys: Sequence[str] = ("cell", "dialogue")) -> pl.DataFrame:
    """Parsed variant rows with `safe_score`: the mean parsed score of their dialogue's safe original in the cell.

    pair_keys: the cell key(s) followed by the dialogue key.
    """
    parsed = rows.filter(pl.col("parse_status") == ParseStatus.OK)
    safe = parsed.filter(pl.col("severity") == 0).group_by(pair_keys).agg(safe_score=pl.col("score").mean())
    return parsed.filter(pl.col("severity") > 0).join(safe, on=pair_keys, how="left", nulls_equal=True)


def slice_statistics(variants: pl.DataFrame, slice_keys: Sequence[str]) -> pl.DataFrame:
    """One polars pass: per (slice, dialogue, severity) the sums the metrics and the bootstrap need."""
    return variants.group_by([*slice_keys, "dialogue", "severity"]).agg(
        diff_sum=(pl.col("safe_score") - pl.col("score")).sum(),
        diff_n=pl.col("safe_score").is_not_null().sum().cast(pl.Int64),
        score_sum=pl.col("score").sum(),
        score_n=pl.len().cast(pl.Int64),
    )


def coarsen(statistics: pl.DataFrame, slice_keys: Sequence[str]) -> pl.DataFrame:
    """Add up finer slice statistics (e.g. per category) into coarser slices (e.g. per cell)."""
    return statistics.group_by([*slice_keys, "dialogue", "severity"]).agg(
        pl.col("diff_sum", "diff_n", "score_sum", "score_n").sum()
    )


@dataclass(frozen=True)
class DenseStatistics:
    """Slice statistics as arrays; `slices` holds the slice keys in array order (row i = slice i)."""

    slices: pl.DataFrame
    arrays: st.SeverityStatistics


def densify(statistics: pl.DataFrame, slice_keys: Sequence[str], n_dialogues: int) -> DenseStatistics:
    """Arrays (n_dialogues, n_slices, 5) from slice statistics whose `dialogue` column indexes 0..n_dialogues-1."""
    slice_keys = list(slice_keys)
    slices = statistics.select(slice_keys).unique().sort(slice_keys, nulls_last=True)
    indexed = statistics.join(slices.with_row_index("slice_index"), on=slice_keys, how="left", nulls_equal=True)
    d = indexed["dialogue"].to_numpy()
    s = indexed["slice_index"].to_numpy()
    k = indexed["severity"].to_numpy() - 1
    arrays = []
    for name in ("diff_sum", "diff_n", "score_sum", "score_n"):
        array = np.zeros((n_dialogues, slices.height, st.N_SEVERITIES))
        array[d, s, k] = indexed[name].to_numpy()
        arrays.append(array)
    return DenseStatistics(slices, st.SeverityStatistics(*arrays))


def contributing_dialogues(arrays: st.SeverityStatistics) -> np.ndarray:
    """(n_dialogues, n_slices) mask of dialogues with at least one parsed variant in the slice."""
    return arrays.score_n.sum(axis=2) > 0


def resample_groups(present: np.ndarray, n_boot: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(slices, their dialogues, resample-count matrix) per distinct set of contributing dialogues.

    present: (n_dialogues, n_slices) mask. The resampled clusters of a slice are its contributing dialogues, in
    sorted id order; slices sharing one dialogue set share one matrix drawn from default_rng(seed), so a slice's
    interval depends only on its own data, B and the seed, and slices over the same dialogues (the cells of one
    run, a cell and its position-bias slices) are resampled together.
    """
    groups: dict[bytes, list[int]] = defaultdict(list)
    for slice_index in range(present.shape[1]):
        groups[np.packbits(present[:, slice_index]).tobytes()].append(slice_index)
    for members in groups.values():
        dialogue_index = np.flatnonzero(present[:, members[0]])
        if dialogue_index.size:
            yield np.asarray(members), dialogue_index, st.bootstrap_weights(dialogue_index.size, n_boot, seed)


def bootstrap_intervals(arrays: st.SeverityStatistics, n_boot: int, seed: int) -> dict[str, np.ndarray]:
    """95 % bounds per slice (see `resample_groups`): every Delta_i's studentized interval and the two-sided p-value of
    its sign-flip test (`delta_<i>_p`, `stats.sign_flip_p_values`), sensitivity's interval
    (`stats.sensitivity_interval`, from the studentized Delta_i) and specificity's percentile interval."""
    bounds = {name: np.full(arrays.n_slices, np.nan) for name in _CI_COLUMNS}
    for members, dialogue_index, weights in resample_groups(contributing_dialogues(arrays), n_boot, seed):
        subset = arrays.take_dialogues(dialogue_index)
        signs = st.sign_flips(dialogue_index.size, n_boot, seed)
        for start in range(0, len(members), BOOTSTRAP_BATCH):
            batch = members[start : start + BOOTSTRAP_BATCH]
            sliced = subset.take_slices(batch)
            deltas = st.studentized_deltas(sliced, weights)
            _, means = st.bootstrap_severity_arrays(sliced, weights)
            low, high = st.studentized_interval(deltas)
            p_values, _ = st.sign_flip_p_values(sliced.diff_sum, sliced.diff_n, signs)
            intervals = {
                "sensitivity": st.sensitivity_interval(deltas),
                "specificity": st.percentile_interval(st.specificity_from_means(means)[0]),
                **{f"delta_{i}": (low[:, i - 1], high[:, i - 1]) for i in SEVERITY_LEVELS},
            }
            for metric, (lower, upper) in intervals.items():
                bounds[f"{metric}_lo"][batch] = lower
                bounds[f"{metric}_hi"][batch] = upper
            for i in SEVERITY_LEVELS:
                bounds[f"delta_{i}_p"][batch] = p_values[:, i - 1]
    return bounds


@dataclass(frozen=True)
class RatioIntervals:
    """Studentized 95 % bounds of sum/count per column, the p-values of its sign-flip test against 0 (two-sided, and
    one-sided for a value above 0) and the bootstrap-t TOST p-value of |value| < margin (NaN without a margin)."""

    low: np.ndarray
    high: np.ndarray
    p_value: np.ndarray
    p_greater: np.ndarray
    p_equivalent: np.ndarray


def ratio_intervals(
    sums: np.ndarray, counts: np.ndarray, n_boot: int, seed: int, margin: float | None = None
) -> RatioIntervals:
    """Studentized 95 % bounds and p-values of sum/count per slice from per-dialogue (n_dialogues, n_slices) sums and
    counts, resampling (and flipping) each slice's dialogues with count > 0 (`resample_groups`)."""
    columns = {name: np.full(sums.shape[1], np.nan) for name in RatioIntervals.__dataclass_fields__}
    for members, dialogue_index, weights in resample_groups(counts > 0, n_boot, seed):
        part_sums, part_counts = sums[np.ix_(dialogue_index, members)], counts[np.ix_(dialogue_index, members)]
        ratios = st.studentized_ratios(part_sums, part_counts, weights)
        columns["low"][members], columns["high"][members] = st.studentized_interval(ratios)
        signs = st.sign_flips(dialogue_index.size, n_boot, seed)
        columns["p_value"][members], columns["p_greater"][members] = st.sign_flip_p_values(
            part_sums, part_counts, signs
        )
        if margin is not None:
            columns["p_equivalent"][members] = st.p_equivalent(ratios, margin)
    return RatioIntervals(**columns)


_INTERVAL_METRICS = ("sensitivity", "specificity", *(f"delta_{i}" for i in SEVERITY_LEVELS))
_CI_COLUMNS = (
    *(f"{metric}_{bound}" for metric in _INTERVAL_METRICS for bound in ("lo", "hi")),
    *(f"delta_{i}_p" for i in SEVERITY_LEVELS),
)
# A value, its interval, its support status and the dialogues it rests on.
INTERVAL_SUFFIXES = ("", "_lo", "_hi", "_status", "_n_dialogues")

# The two-sided sign-flip p-value of every Delta_i against 0 (`stats.sign_flip_p_values`): the findings' tests.
DELTA_P_COLUMNS = tuple(f"delta_{i}_p" for i in SEVERITY_LEVELS)

METRIC_COLUMNS = (
    *(f"{metric}{suffix}" for metric in _INTERVAL_METRICS for suffix in INTERVAL_SUFFIXES),
    *DELTA_P_COLUMNS,
    "n_pairs",
    "n_severities",
    "n_dialogues",
)


def _nan_to_null(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.col(pl.Float64).fill_nan(None))


def metric_support(arrays: st.SeverityStatistics) -> dict[str, np.ndarray]:
    """The dialogues each value of each slice rests on, (n_slices,) each: Delta_i the dialogues with a paired
    severity-i variant (original and variant parsed); sensitivity, the minimum over the Delta_i, the fewest of
    those; specificity, which compares every severity's mean, the fewest dialogues with a parsed variant of a
    severity."""
    paired = (arrays.diff_n > 0).sum(axis=0).astype(np.int64)
    scored = (arrays.score_n > 0).sum(axis=0).astype(np.int64)
    return {
        "sensitivity": fewest_present(paired),
        "specificity": fewest_present(scored),
        **{f"delta_{i}": paired[:, i - 1] for i in SEVERITY_LEVELS},
    }


def apply_min_support(table: pl.DataFrame, metrics: Sequence[str], minimum: int) -> pl.DataFrame:
    """`<metric>_status` of every metric from its `<metric>_n_dialogues`, intervals (and p-values) nulled below the
    minimum."""
    for metric in metrics:
        table = with_min_support(table, metric, f"{metric}_n_dialogues", minimum)
        p_value = f"{metric}_p"
        if p_value in table.columns:
            below = pl.col(f"{metric}_status") == NOT_ESTIMABLE
            table = table.with_columns(pl.when(below).then(None).otherwise(pl.col(p_value)).alias(p_value))
    return table


def slice_metric_table(dense: DenseStatistics, settings: MetricSettings | None) -> pl.DataFrame:
    """Point metrics (and, given settings, bootstrap intervals and support statuses) per slice, one row each."""
    point = st.point_metrics(dense.arrays)
    columns: dict[str, np.ndarray] = {
        "sensitivity": point.sensitivity,
        "specificity": point.specificity,
        **{f"delta_{i}": point.deltas[:, i - 1] for i in SEVERITY_LEVELS},
        **{f"{metric}_n_dialogues": n for metric, n in metric_support(dense.arrays).items()},
        "n_pairs": point.n_pairs.astype(np.int64),
        "n_severities": (~np.isnan(point.deltas)).sum(axis=1).astype(np.int64),
        "n_dialogues": contributing_dialogues(dense.arrays).sum(axis=0).astype(np.int64),
    }
    if settings is not None:
        columns |= bootstrap_intervals(dense.arrays, settings.n_boot, settings.seed)
    table = _nan_to_null(dense.slices.with_columns(pl.Series(name, values) for name, values in columns.items()))
    if settings is not None:
        table = apply_min_support(table, _INTERVAL_METRICS, settings.min_dialogues)
    return table.select(*dense.slices.columns, *(name for name in METRIC_COLUMNS if name in table.columns))


def with_cell_keys(frame: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """Replace the integer `cell` column by the cell key columns and the cell's `audio_input`."""
    rest = [name for name in frame.columns if name not in ("cell", "audio_input")]
    joined = frame.drop("audio_input", strict=False).join(cells, on="cell", how="left", maintain_order="left")
    return joined.select(*CELL_KEYS, "audio_input", *rest)


def _key_schema(keys: Sequence[str]) -> dict[str, pl.DataType]:
    extra = {"position": pl.Int64, "cell": pl.Int64}
    return {key: extra.get(key, METRIC_INPUT.columns.get(key, pl.String)) for key in keys}


POSITION_BIAS_SUMMARY = tuple(
    f"avg_abs_pb_{metric}{suffix}"
    for metric in TARGET_METRICS
    for suffix in ("", "_lo", "_hi", "_null", "_p", "_status", "_n_included", "_n_estimable")
)

CELL_COLUMNS = (
    *CELL_KEYS,
    "audio_input",
    *(f"{metric}{suffix}" for metric in _INTERVAL_METRICS for suffix in INTERVAL_SUFFIXES),
    *DELTA_P_COLUMNS,
    *(f"mean_safe{suffix}" for suffix in INTERVAL_SUFFIXES),
    *POSITION_BIAS_SUMMARY,
    "n_dialogues",
    "n_scored",
    "n_rows",
    "n_pairs",
    "n_severities",
    "parse_failure_rate",
    "refusal_rate",
    "pb_left_out",
    "reason",
)

NO_VARIANTS_REASON = "no parsed variant (severity 1-5) in this cell; nothing to compare with the originals"

SINGLE_SEVERITY_REASON = "fewer than two severity levels present: specificity needs at least one pair"


def incomplete_reason(present: Sequence[int], expected: Sequence[int]) -> str | None:
    """Why a cell whose Delta_i exist only for `present` of the table's `expected` severities is set apart."""
    missing = [s for s in expected if s not in present]
    if not missing or not present:
        return None
    return (
        f"severity {', '.join(map(str, missing))} has no paired parsed variant in this cell: sensitivity is the "
        f"minimum over severities {', '.join(map(str, present))} only; compared only with cells that also lack "
        "severities (prompt selection, Pareto front)"
    )


def severity_completeness(cell_metrics: pl.DataFrame, expected: Sequence[int]) -> pl.DataFrame:
    """Per cell of `cell_metrics` (a slice_metric_table): `complete` (a Delta_i for every expected severity)
    and the reason of an incomplete one."""
    rows = []
    for row in cell_metrics.iter_rows(named=True):
        present = [i for i in SEVERITY_LEVELS if row[f"delta_{i}"] is not None]
        reason = incomplete_reason(present, expected)
        rows.append({"cell": row["cell"], "complete": reason is None and bool(present), "incomplete_reason": reason})
    return pl.DataFrame(rows, schema={"cell": pl.Int64, "complete": pl.Boolean, "incomplete_reason": pl.String})


def cells_table(
    counts: pl.DataFrame, cell_metrics: pl.DataFrame, completeness: pl.DataFrame, *extra: pl.DataFrame
) -> pl.DataFrame:
    """One row per cell; cells that could not be scored keep their counts, null metrics and a `reason`, and cells
    lacking a severity of the table say so in `reason`. `extra`: further per-cell columns keyed by `cell`."""
    table = counts.join(cell_metrics, on="cell", how="left").join(completeness, on="cell", how="left")
    for frame in extra:
        table = table.join(frame, on="cell", how="left")
    return table.with_columns(
        reason=pl.when(pl.col("n_safe") == 0)
        .then(pl.lit(NO_SAFE_REASON))
        .when(pl.col("n_pairs").is_null())
        .then(pl.lit(NO_VARIANTS_REASON))
        .when(pl.col("n_pairs") == 0)
        .then(pl.lit(SINGLE_SEVERITY_REASON))
        .otherwise(pl.col("incomplete_reason")),
        n_dialogues=pl.col("n_dialogues").fill_null(0),
        n_pairs=pl.col("n_pairs").fill_null(0),
        n_severities=pl.col("n_severities").fill_null(0),
    )


def safe_score_table(rows: pl.DataFrame, n_dialogues: int, n_cells: int, settings: MetricSettings) -> pl.DataFrame:
    """Per cell `mean_safe`, the mean over dialogues of each dialogue's mean parsed safe score (the safe score
    Delta_i pairs its variants with), its studentized 95 % interval resampling the dialogues with a parsed safe
    sample, the number of those dialogues and the support status."""
    safe = (
        rows.filter((pl.col("parse_status") == ParseStatus.OK) & (pl.col("severity") == 0))
        .group_by("cell", "dialogue")
        .agg(dialogue_mean=pl.col("score").mean())
    )
    sums, counts = np.zeros((n_dialogues, n_cells)), np.zeros((n_dialogues, n_cells))
    d, c = safe["dialogue"].to_numpy(), safe["cell"].to_numpy()
    sums[d, c], counts[d, c] = safe["dialogue_mean"].to_numpy(), 1.0
    intervals = ratio_intervals(sums, counts, settings.n_boot, settings.seed)
    low, high = intervals.low, intervals.high
    table = _nan_to_null(
        pl.DataFrame(
            {
                "cell": np.arange(n_cells, dtype=np.int64),
                "mean_safe": st.safe_ratio(sums.sum(axis=0), counts.sum(axis=0)),
                "mean_safe_lo": low,
                "mean_safe_hi": high,
                "mean_safe_n_dialogues": counts.sum(axis=0).astype(np.int64),
            }
        )
    )
    return with_min_support(table, "mean_safe", "mean_safe_n_dialogues", settings.min_dialogues)


def severity_curve(rows: pl.DataFrame, cell_keys: Sequence[str] = ("cell",)) -> pl.DataFrame:
    """Mean parsed score per (cell, severity), severity 0 being the safe originals."""
    return (
        rows.filter(pl.col("parse_status") == ParseStatus.OK)
        .group_by([*cell_keys, "severity"])
        .agg(mean_score=pl.col("score").mean(), n=pl.len().cast(pl.Int64))
    )
