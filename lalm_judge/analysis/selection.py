"""Choosing among prompts and configurations: dialogue-level cross-validated prompt selection per
configuration and target metric, and the Pareto front over configurations (docs/metrics.md).

Cross-validation. The dialogues of a configuration (a cell without its prompt) are dealt into k folds (a seeded
permutation of their sorted ids). In each fold the prompt with the best metric on the training dialogues is
chosen; a tie (values within `stats.TIE_TOLERANCE`) goes to the prompt better on the other target metric on the
same training dialogues, then to the first prompt in name order. Only prompts whose cell is complete (a Delta_i
for every severity of the table) compete, unless no prompt of the configuration is complete; `complete` says
which case applies. The cross-validated value `cv_value` is the metric of the held-out predictions pooled over
all dialogues: each dialogue scored by the prompt chosen without it. It has the definition of the cells.parquet
metric (a configuration with one prompt gets exactly its cell's value) and a cluster-bootstrap interval over the
configuration's dialogues with the fold choices held fixed (`cv_lo`, `cv_hi`; selection variability is not in
it). `selected_prompt` is the prompt chosen in most folds (ties: better full-data metric, then name).

Pareto front. One row per configuration: the cross-validated sensitivity and specificity with their intervals,
and AvgAbsPB of sensitivity and of specificity (with intervals and noise reference) at the prompts selected for
sensitivity and for specificity. `on_front` is decided among configurations of equal `complete` (a configuration
lacking a severity is compared only with others lacking one) on (cv_sensitivity up, cv_specificity up,
avg_abs_pb_sensitivity down, avg_abs_pb_specificity down), among the configurations whose cross-validated values are
estimable (`n_compared` of them); an AvgAbsPB objective is dropped from a comparison group where a configuration lacks
it or it is not estimable, and `front_objectives` names the objectives used. A configuration without both
cross-validated values is not on the front; one whose values are not estimable has `on_front` null. The front is a
set of point estimates, so `front_status` says which configurations off it are separable from it: `dominated` where
a front configuration beats it beyond the noise (on no objective worse and on one better by a paired difference whose
interval excludes 0, comparisons.parquet, at the prompts chosen for each objective; `dominated_by` names them),
`tied with the front` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.comparisons import SECOND, comparison_lookup
from lalm_judge.analysis.engine import (
    CONFIG_KEYS,
    TARGET_METRICS,
    DenseStatistics,
    MetricSettings,
    _key_schema,
    _nan_to_null,
    contributing_dialogues,
    metric_support,
)
from lalm_judge.analysis.support import WITH_INTERVAL, with_min_support
from lalm_judge.core.tables import TableSchema

PROMPT_SELECTION = TableSchema(
    "prompt selection",
    {
        **_key_schema(CONFIG_KEYS),
        "metric": pl.String,
        "fold": pl.Int64,
        "n_heldout_dialogues": pl.Int64,
        "chosen_prompt": pl.String,
        "train_value": pl.Float64,
        "heldout_value": pl.Float64,
        "cv_value": pl.Float64,
        "cv_lo": pl.Float64,
        "cv_hi": pl.Float64,
        "cv_status": pl.String,
        "cv_n_dialogues": pl.Int64,
        "selected_prompt": pl.String,
        "complete": pl.Boolean,
        "n_candidate_prompts": pl.Int64,
        "reason": pl.String,
    },
)


def choose_prompt(train: np.ndarray, other: np.ndarray, candidates: Sequence[int]) -> int | None:
    """Index of the best candidate prompt on the training metric; ties (within TIE_TOLERANCE) go to the better
    value of the other target metric, then to the first candidate (candidates are in name order). None when no
    candidate has a training value."""
    valued = [i for i in candidates if not np.isnan(train[i])]
    if not valued:
        return None
    best = max(train[i] for i in valued)
    tied = [i for i in valued if train[i] >= best - st.TIE_TOLERANCE]
    if len(tied) == 1:
        return tied[0]
    others = [-np.inf if np.isnan(other[i]) else other[i] for i in tied]
    best_other = max(others)
    return next(i for i, value in zip(tied, others) if value >= best_other - st.TIE_TOLERANCE)


def _pooled_heldout(
    subset: st.SeverityStatistics, folds: np.ndarray, chosen: Sequence[int | None]
) -> st.SeverityStatistics:
    """(n_dialogues, 1, 5) statistics of each dialogue under the prompt chosen for its fold (zeros: no choice)."""
    pooled = [np.zeros((subset.n_dialogues, 1, st.N_SEVERITIES)) for _ in range(4)]
    for fold, prompt in enumerate(chosen):
        if prompt is None:
            continue
        rows = np.flatnonzero(folds == fold)
        for target, source in zip(pooled, (subset.diff_sum, subset.diff_n, subset.score_sum, subset.score_n)):
            target[rows, 0] = source[rows, prompt]
    return st.SeverityStatistics(*pooled)


def prompt_selection_table(dense: DenseStatistics, complete: np.ndarray, settings: MetricSettings) -> pl.DataFrame:
    """Per configuration, target metric and fold: the prompt chosen and its held-out value, with the
    configuration's pooled cross-validated value and interval (module docstring).

    `dense.slices` holds the cell keys; `complete[i]`: slice i has a Delta_i for every severity of the table.
    """
    slices = dense.slices.with_row_index("slice_index")
    present = contributing_dialogues(dense.arrays)
    full = st.point_metrics(dense.arrays)
    rows = []
    for config, members in slices.sort([*CONFIG_KEYS, "prompt"], nulls_last=True).group_by(
        list(CONFIG_KEYS), maintain_order=True
    ):
        config_columns = dict(zip(CONFIG_KEYS, config))
        slice_index = members["slice_index"].to_numpy()
        prompts = members["prompt"].to_list()
        dialogue_index = np.flatnonzero(present[:, slice_index].any(axis=1))
        is_complete = complete[slice_index]
        if dialogue_index.size < settings.n_folds:
            reason = f"{dialogue_index.size} dialogues cannot fill {settings.n_folds} folds; lower --folds"
            known = {"complete": bool(is_complete.any()), "reason": reason}
            rows.extend({**config_columns, "metric": metric, **known} for metric in TARGET_METRICS)
            continue
        candidates = list(np.flatnonzero(is_complete)) if is_complete.any() else list(range(len(prompts)))
        folds = st.fold_assignment(dialogue_index.size, settings.n_folds, settings.seed)
        held_out = (folds[None, :] == np.arange(settings.n_folds)[:, None]).astype(float)
        subset = dense.arrays.take_dialogues(dialogue_index).take_slices(slice_index)
        # Fold membership matrices play the role of resample weights: sums over the chosen dialogues.
        train_values = dict(zip(TARGET_METRICS, st.bootstrap_metrics(subset, 1.0 - held_out)))
        test_values = dict(zip(TARGET_METRICS, st.bootstrap_metrics(subset, held_out)))
        weights = st.bootstrap_weights(dialogue_index.size, settings.n_boot, settings.seed)
        for metric in TARGET_METRICS:
            other = next(m for m in TARGET_METRICS if m != metric)
            train = train_values[metric]
            chosen = [
                choose_prompt(train[fold], train_values[other][fold], candidates) for fold in range(settings.n_folds)
            ]
            pooled = _pooled_heldout(subset, folds, chosen)
            cv_value = getattr(st.point_metrics(pooled), metric)[0]
            cv_lo, cv_hi = _cv_interval(pooled, weights, metric)
            valid_choices = np.array([c for c in chosen if c is not None], dtype=int)
            selected = _most_chosen(valid_choices, getattr(full, metric)[slice_index], prompts)
            for fold, prompt in enumerate(chosen):
                rows.append(
                    {
                        **config_columns,
                        "metric": metric,
                        "fold": fold,
                        "n_heldout_dialogues": int(held_out[fold].sum()),
                        "chosen_prompt": None if prompt is None else prompts[prompt],
                        "train_value": None if prompt is None else float(train[fold, prompt]),
                        "heldout_value": None if prompt is None else float(test_values[metric][fold, prompt]),
                        "cv_value": float(cv_value),
                        "cv_lo": float(cv_lo),
                        "cv_hi": float(cv_hi),
                        "cv_n_dialogues": int(metric_support(pooled)[metric][0]),
                        "selected_prompt": selected,
                        "complete": bool(is_complete.any()),
                        "n_candidate_prompts": len(candidates),
                        "reason": None if prompt is not None else f"no prompt has a {metric} on the training folds",
                    }
                )
    table = _nan_to_null(PROMPT_SELECTION.frame(rows))
    return with_min_support(
        table, "cv_value", "cv_n_dialogues", settings.min_dialogues, ("cv_lo", "cv_hi"), "cv_status"
    )


def _cv_interval(pooled: st.SeverityStatistics, weights: np.ndarray, metric: str) -> tuple[float, float]:
    """The 95 % interval of a pooled cross-validated metric, as the cells' interval of that metric is made."""
    if metric == "sensitivity":
        low, high = st.sensitivity_interval(st.studentized_deltas(pooled, weights))
    else:
        _, means = st.bootstrap_severity_arrays(pooled, weights)
        low, high = st.percentile_interval(st.specificity_from_means(means)[0])
    return float(low[0]), float(high[0])


def _most_chosen(chosen: np.ndarray, full_value: np.ndarray, prompts: list[str]) -> str | None:
    if chosen.size == 0:
        return None
    counts = np.bincount(chosen, minlength=len(prompts))
    value = np.where(np.isnan(full_value), -np.inf, full_value)
    best = min(range(len(prompts)), key=lambda i: (-counts[i], -value[i], prompts[i]))
    return prompts[best]


# objective -> maximize; the first two are required, the position-bias ones used where every member has them.
PARETO_OBJECTIVES = {
    "cv_sensitivity": True,
    "cv_specificity": True,
    "avg_abs_pb_sensitivity": False,
    "avg_abs_pb_specificity": False,
}
REQUIRED_OBJECTIVES = ("cv_sensitivity", "cv_specificity")
PB_SUFFIXES = ("", "_lo", "_hi", "_null", "_p", "_status")
# Per objective: the status column that says whether it is estimable, the comparisons' metric and the column of the
# prompt whose cell stands for the configuration in the paired comparison.
OBJECTIVE_SOURCES = {
    "cv_sensitivity": ("cv_sensitivity_status", "sensitivity", "prompt_sensitivity"),
    "cv_specificity": ("cv_specificity_status", "specificity", "prompt_specificity"),
    "avg_abs_pb_sensitivity": ("avg_abs_pb_sensitivity_status", "avg_abs_pb_sensitivity", "prompt_sensitivity"),
    "avg_abs_pb_specificity": ("avg_abs_pb_specificity_status", "avg_abs_pb_specificity", "prompt_specificity"),
}

ON_FRONT = "on the front"
TIED_WITH_FRONT = "tied with the front"
DOMINATED = "dominated"
FRONT_NOT_ESTIMABLE = "not estimable"


def _estimable(column: pl.Expr) -> pl.Expr:
    return column.is_in(WITH_INTERVAL).fill_null(False)


def _cell_keys(row: dict, prompt_column: str) -> tuple:
    return (*(row[k] for k in CONFIG_KEYS[:3]), row[prompt_column], row["condition"])


def _significantly_dominates(front: dict, other: dict, used: list[str], lookup: dict) -> bool:
    """Whether front configuration `front` beats `other` beyond the noise: on no used objective is it worse by a
    separated paired difference, and on at least one it is better by one (comparisons.parquet at the prompts chosen
    for each objective)."""
    better_somewhere = False
    for objective in used:
        _, metric, prompt = OBJECTIVE_SOURCES[objective]
        if (front["judge"], front["modality"], front["transcript_source"]) == (
            other["judge"],
            other["modality"],
            other["transcript_source"],
        ) and front[prompt] == other[prompt]:
            continue
        row = lookup.get((_cell_keys(front, prompt), _cell_keys(other, prompt), metric))
        if row is None or not row["separated"]:
            continue
        if row["better"] == SECOND:
            return False
        better_somewhere = True
    return better_somewhere


def pareto_table(
    cells: pl.DataFrame, prompt_selection: pl.DataFrame, comparisons: pl.DataFrame | None = None
) -> pl.DataFrame:
    """One row per configuration with its CV-selected prompts, cross-validated values, AvgAbsPB objectives,
    `on_front` and `front_status` (module docstring)."""
    per_metric = prompt_selection.group_by([*CONFIG_KEYS, "metric"]).agg(
        pl.col("selected_prompt", "cv_value", "cv_lo", "cv_hi", "cv_status", "complete").first()
    )
    table = cells.group_by(CONFIG_KEYS).agg(pl.col("audio_input").first())
    for metric in TARGET_METRICS:
        chosen = per_metric.filter(pl.col("metric") == metric).select(
            *CONFIG_KEYS,
            pl.col("selected_prompt").alias(f"prompt_{metric}"),
            pl.col("cv_value").alias(f"cv_{metric}"),
            pl.col("cv_lo").alias(f"cv_{metric}_lo"),
            pl.col("cv_hi").alias(f"cv_{metric}_hi"),
            pl.col("cv_status").alias(f"cv_{metric}_status"),
            pl.col("complete").alias(f"complete_{metric}"),
        )
        pb_columns = [
            f"avg_abs_pb_{metric}{suffix}" for suffix in PB_SUFFIXES if f"avg_abs_pb_{metric}{suffix}" in cells.columns
        ]
        at_prompt = cells.select(*CONFIG_KEYS, pl.col("prompt").alias(f"prompt_{metric}"), *pb_columns)
        table = table.join(chosen, on=CONFIG_KEYS, how="left", nulls_equal=True).join(
            at_prompt, on=[*CONFIG_KEYS, f"prompt_{metric}"], how="left", nulls_equal=True
        )
    columns = [
        *CONFIG_KEYS,
        "audio_input",
        "prompt_sensitivity",
        "prompt_specificity",
        *(f"cv_{metric}{suffix}" for metric in TARGET_METRICS for suffix in ("", "_lo", "_hi", "_status")),
        *(f"avg_abs_pb_{metric}{suffix}" for metric in TARGET_METRICS for suffix in PB_SUFFIXES),
    ]
    # Null when not known: a configuration without paired variants has no severity coverage to speak of.
    table = (
        table.with_columns(complete=pl.col("complete_sensitivity") & pl.col("complete_specificity"))
        .with_columns(
            pl.lit(None, pl.String if name.endswith("_status") else pl.Float64).alias(name)
            for name in columns
            if name not in table.columns
        )
        .sort(CONFIG_KEYS, nulls_last=True)
    )
    lookup = comparison_lookup(comparisons)
    on_front: list[bool | None] = [False] * table.height
    status: list[str | None] = [None] * table.height
    dominated_by: list[str | None] = [None] * table.height
    objectives_used: list[str | None] = [None] * table.height
    n_compared: list[int | None] = [None] * table.height
    measured = table.select(pl.all_horizontal(pl.col(REQUIRED_OBJECTIVES).is_not_null())).to_series().to_numpy()
    estimable = table.select(
        pl.all_horizontal(_estimable(pl.col(OBJECTIVE_SOURCES[name][0])) for name in REQUIRED_OBJECTIVES)
    ).to_series()
    for index in np.flatnonzero(measured & ~estimable.to_numpy()):
        on_front[index], status[index] = None, FRONT_NOT_ESTIMABLE
    for complete in (True, False):
        group = np.flatnonzero(
            table.select((pl.col("complete") == complete).fill_null(False)).to_series().to_numpy()
            & measured
            & estimable.to_numpy()
        )
        if group.size == 0:
            continue
        members = table[group]
        used = [
            name
            for name in PARETO_OBJECTIVES
            if name in REQUIRED_OBJECTIVES
            or (
                members[name].null_count() == 0
                and members.select(_estimable(pl.col(f"{name}_status"))).to_series().all()
            )
        ]
        points = members.select(used).fill_null(np.nan).to_numpy().reshape(group.size, -1)
        front = st.pareto_front(points, maximize=tuple(PARETO_OBJECTIVES[name] for name in used))
        rows = members.to_dicts()
        front_rows = [row for row, on in zip(rows, front) if on]
        for position, (index, row) in enumerate(zip(group, rows)):
            on_front[index] = bool(front[position])
            objectives_used[index] = ", ".join(used)
            n_compared[index] = int(group.size)
            if front[position]:
                status[index] = ON_FRONT
                continue
            beaten_by = [f for f in front_rows if _significantly_dominates(f, row, used, lookup)]
            status[index] = DOMINATED if beaten_by else TIED_WITH_FRONT
            dominated_by[index] = "; ".join(_config_name(f) for f in beaten_by) or None
    return table.select(
        *columns,
        "complete",
        pl.Series("front_objectives", objectives_used, dtype=pl.String),
        pl.Series("n_compared", n_compared, dtype=pl.Int64),
        pl.Series("on_front", on_front, dtype=pl.Boolean),
        pl.Series("front_status", status, dtype=pl.String),
        pl.Series("dominated_by", dominated_by, dtype=pl.String),
    )


def _config_name(row: dict) -> str:
    source = row["transcript_source"]
    shown = row["modality"] if source in (None, "none") else f"{row['modality']}/{source}"
    return f"{row['judge']} {shown}"
