"""Choosing among prompts and configurations: dialogue-level cross-validated prompt selection per
configuration and target metric, and the Pareto front over configurations (docs/metrics.md)."""

from __future__ import annotations

import numpy as np
import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import (
    CONFIG_KEYS,
    TARGET_METRICS,
    DenseStatistics,
    MetricSettings,
    _key_schema,
    _nan_to_null,
    contributing_dialogues,
)


def prompt_selection_table(dense: DenseStatistics, settings: MetricSettings) -> pl.DataFrame:
    """Per configuration and target metric: dialogue-level k-fold CV choice of prompt and its held-out value.

    `dense.slices` holds the cell keys. In each fold the prompt with the highest metric on the training
    dialogues is chosen (ties: first prompt in name order) and evaluated on the held-out dialogues. Folds
    come from a seeded permutation of the configuration's dialogues (sorted ids). `selected_prompt` is the
    prompt chosen in most folds (ties: better full-data metric, then name).
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
        if dialogue_index.size < settings.n_folds:
            reason = f"{dialogue_index.size} dialogues cannot fill {settings.n_folds} folds; lower --folds"
            rows.extend({**config_columns, "metric": metric, "reason": reason} for metric in TARGET_METRICS)
            continue
        folds = st.fold_assignment(dialogue_index.size, settings.n_folds, settings.seed)
        held_out = (folds[None, :] == np.arange(settings.n_folds)[:, None]).astype(float)
        subset = dense.arrays.take_dialogues(dialogue_index).take_slices(slice_index)
        # Fold membership matrices play the role of resample weights: sums over the chosen dialogues.
        train_values = dict(zip(TARGET_METRICS, st.bootstrap_metrics(subset, 1.0 - held_out)))
        test_values = dict(zip(TARGET_METRICS, st.bootstrap_metrics(subset, held_out)))
        for metric in TARGET_METRICS:
            train = np.where(np.isnan(train_values[metric]), -np.inf, train_values[metric])
            chosen = train.argmax(axis=1)
            valid = np.isfinite(train.max(axis=1))
            heldout = np.where(valid, test_values[metric][np.arange(settings.n_folds), chosen], np.nan)
            mean_heldout = float(np.nanmean(heldout)) if np.isfinite(heldout).any() else None
            selected = _most_chosen(chosen[valid], getattr(full, metric)[slice_index], prompts)
            for fold in range(settings.n_folds):
                rows.append(
                    {
                        **config_columns,
                        "metric": metric,
                        "fold": fold,
                        "n_heldout_dialogues": int(held_out[fold].sum()),
                        "chosen_prompt": prompts[chosen[fold]] if valid[fold] else None,
                        "train_value": float(train[fold, chosen[fold]]) if valid[fold] else None,
                        "heldout_value": float(heldout[fold]),
                        "mean_heldout": mean_heldout,
                        "selected_prompt": selected,
                        "reason": None if valid[fold] else f"no prompt has a {metric} on the training folds",
                    }
                )
    schema = {
        **_key_schema(CONFIG_KEYS),
        "metric": pl.String,
        "fold": pl.Int64,
        "n_heldout_dialogues": pl.Int64,
        "chosen_prompt": pl.String,
        "train_value": pl.Float64,
        "heldout_value": pl.Float64,
        "mean_heldout": pl.Float64,
        "selected_prompt": pl.String,
        "reason": pl.String,
    }
    return _nan_to_null(pl.DataFrame([{name: row.get(name) for name in schema} for row in rows], schema=schema))


def _most_chosen(chosen: np.ndarray, full_value: np.ndarray, prompts: list[str]) -> str | None:
    if chosen.size == 0:
        return None
    counts = np.bincount(chosen, minlength=len(prompts))
    value = np.where(np.isnan(full_value), -np.inf, full_value)
    best = min(range(len(prompts)), key=lambda i: (-counts[i], -value[i], prompts[i]))
    return prompts[best]


PARETO_OBJECTIVES = {"sensitivity": True, "specificity": True, "avg_abs_pb_sensitivity": False}


def pareto_table(cells: pl.DataFrame, prompt_selection: pl.DataFrame) -> pl.DataFrame:
    """Configurations with their CV-selected prompts and `on_front` over (Sens up, Spec up, AvgAbsPB down).

    Sensitivity and AvgAbsPB come from the cell of the prompt selected for sensitivity, specificity from the
    cell of the prompt selected for specificity (full-data point estimates, comparable with cells.parquet);
    cv_sensitivity and cv_specificity are the mean held-out values of the cross-validation.
    """
    per_metric = prompt_selection.group_by([*CONFIG_KEYS, "metric"]).agg(
        pl.col("selected_prompt").first(), pl.col("mean_heldout").first()
    )
    selected = cells.select(CONFIG_KEYS).unique()
    for metric in TARGET_METRICS:
        chosen = per_metric.filter(pl.col("metric") == metric).select(
            *CONFIG_KEYS,
            pl.col("selected_prompt").alias(f"prompt_{metric}"),
            pl.col("mean_heldout").alias(f"cv_{metric}"),
        )
        selected = selected.join(chosen, on=CONFIG_KEYS, how="left", nulls_equal=True)
    by_sensitivity = cells.select(
        *CONFIG_KEYS, pl.col("prompt").alias("prompt_sensitivity"), "sensitivity", "avg_abs_pb_sensitivity"
    )
    by_specificity = cells.select(*CONFIG_KEYS, pl.col("prompt").alias("prompt_specificity"), "specificity")
    table = (
        selected.join(by_sensitivity, on=[*CONFIG_KEYS, "prompt_sensitivity"], how="left", nulls_equal=True)
        .join(by_specificity, on=[*CONFIG_KEYS, "prompt_specificity"], how="left", nulls_equal=True)
        .sort(CONFIG_KEYS, nulls_last=True)
    )
    objectives = table.select(list(PARETO_OBJECTIVES)).fill_null(np.nan).to_numpy().reshape(table.height, -1)
    on_front = st.pareto_front(objectives, maximize=tuple(PARETO_OBJECTIVES.values()))
    return table.select(
        *CONFIG_KEYS,
        "prompt_sensitivity",
        "prompt_specificity",
        *PARETO_OBJECTIVES,
        "cv_sensitivity",
        "cv_specificity",
    ).with_columns(on_front=pl.Series(on_front, dtype=pl.Boolean))
