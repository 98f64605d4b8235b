"""Synthetic inputs shared by the benchmarks and the tests: simulated score tables with a known structure, and
the straightforward per-resample group-by reference the vectorized metrics engine is checked and benchmarked
against."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from lalm_judge.analysis.engine import CELL_KEYS, SEVERITY_LEVELS, _key_schema
from lalm_judge.analysis.stats import TIE_TOLERANCE
from lalm_judge.core.tables import METRIC_INPUT
from lalm_judge.core.vocabulary import ParseStatus, audio_input_label


def resample_dialogues(scores: pl.DataFrame, dialogue_ids: Sequence[str], counts: np.ndarray) -> pl.DataFrame:
    """The rows of a cluster-bootstrap resample: dialogue i repeated counts[i] times, each copy a new dialogue."""
    draws = pl.DataFrame(
        {
            "dialogue_id": np.repeat(np.asarray(dialogue_ids, dtype=object), counts.astype(int)).tolist(),
            "copy": np.concatenate([np.arange(n) for n in counts.astype(int)]) if len(counts) else [],
        },
        schema={"dialogue_id": pl.String, "copy": pl.Int64},
    )
    return scores.join(draws, on="dialogue_id").with_columns(
        dialogue_id=pl.col("dialogue_id") + "#" + pl.col("copy").cast(pl.String)
    )


def _paired_by_group_by(scores: pl.DataFrame) -> pl.DataFrame:
    """Parsed variant rows with `safe_score`, the mean parsed score of their dialogue's safe original in the cell
    (null when it has none), written with plain polars, independently of the engine."""
    parsed = scores.filter(pl.col("parse_status") == ParseStatus.OK.value)
    keys = [*CELL_KEYS, "dialogue_id"]
    safe = parsed.filter(pl.col("severity") == 0).group_by(keys).agg(safe_score=pl.col("score").mean())
    return parsed.filter(pl.col("severity") > 0).join(safe, on=keys, how="left", nulls_equal=True)


def _metrics_by_group_by(variants: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Delta_i, sensitivity and specificity per group of `keys`, straight from their definitions."""
    keys = list(keys)
    deltas = (
        variants.filter(pl.col("safe_score").is_not_null())
        .group_by([*keys, "severity"])
        .agg(delta=(pl.col("safe_score") - pl.col("score")).mean())
    )
    wide = deltas.pivot(on="severity", index=keys, values="delta", sort_columns=True)
    wide = wide.rename({str(i): f"delta_{i}" for i in SEVERITY_LEVELS if str(i) in wide.columns})
    sensitivity = deltas.group_by(keys).agg(sensitivity=pl.col("delta").min(), n_severities=pl.len().cast(pl.Int64))
    means = variants.group_by([*keys, "severity"]).agg(mean=pl.col("score").mean())
    pairs = means.join(means, on=keys, nulls_equal=True, suffix="_j").filter(pl.col("severity") < pl.col("severity_j"))
    specificity = pairs.group_by(keys).agg(
        specificity=pl.when((pl.col("mean") - pl.col("mean_j")).abs() <= TIE_TOLERANCE)
        .then(0.5)
        .when(pl.col("mean") > pl.col("mean_j"))
        .then(1.0)
        .otherwise(0.0)
        .mean()
    )
    return sensitivity.join(wide, on=keys, how="full", coalesce=True, nulls_equal=True).join(
        specificity, on=keys, how="full", coalesce=True, nulls_equal=True
    )


def cell_metrics_by_group_by(scores: pl.DataFrame) -> pl.DataFrame:
    """Sensitivity, specificity, Delta_i, n_severities and mean_safe (the mean over dialogues of each dialogue's mean
    safe score) per cell computed directly with polars group_by, without the array engine.

    The straightforward reference the vectorized engine and its bootstrap are checked and benchmarked against.
    """
    metrics = _metrics_by_group_by(_paired_by_group_by(scores), CELL_KEYS)
    safe = (
        scores.filter((pl.col("parse_status") == ParseStatus.OK.value) & (pl.col("severity") == 0))
        .group_by(*CELL_KEYS, "dialogue_id")
        .agg(dialogue_mean=pl.col("score").mean())
        .group_by(CELL_KEYS)
        .agg(mean_safe=pl.col("dialogue_mean").mean())
    )
    return metrics.join(safe, on=CELL_KEYS, how="full", coalesce=True, nulls_equal=True)


def delta_standard_errors_by_group_by(scores: pl.DataFrame) -> pl.DataFrame:
    """Per cell and severity: Delta_i and its linearized cluster standard error, sqrt(sum_d (a_d - Delta_i b_d)^2 /
    (sum_d b_d)^2 * n / (n - 1)) with a_d the dialogue's sum of paired differences, b_d its paired variants and n the
    dialogues with one, straight from the rows: the reference of the engine's studentized intervals."""
    paired = _paired_by_group_by(scores).filter(pl.col("safe_score").is_not_null())
    keys = [*CELL_KEYS, "severity"]
    per_dialogue = paired.group_by([*keys, "dialogue_id"]).agg(
        a=(pl.col("safe_score") - pl.col("score")).sum(), b=pl.len().cast(pl.Float64)
    )
    with_delta = per_dialogue.with_columns(delta=pl.col("a").sum().over(keys) / pl.col("b").sum().over(keys))
    return with_delta.group_by(keys).agg(
        pl.col("delta").first(),
        se=(
            ((pl.col("a") - pl.col("delta") * pl.col("b")) ** 2).sum()
            / pl.col("b").sum() ** 2
            * pl.len()
            / (pl.len() - 1)
        ).sqrt(),
    )


def position_bias_by_group_by(scores: pl.DataFrame) -> pl.DataFrame:
    """PB(L, k) = M(L, k) - M(L, 1) per cell, metric, length and position, with the number of dialogues of each
    (L, k): the reference of `analysis.position`'s point estimates."""
    variants = _paired_by_group_by(scores).with_columns(position=pl.col("turn_index") + 1)
    keys = [*CELL_KEYS, "n_turns", "position"]
    metrics = _metrics_by_group_by(variants, keys)
    paired = variants.filter(pl.col("safe_score").is_not_null())
    counts = paired.group_by(keys).agg(n_dialogues=pl.col("dialogue_id").n_unique().cast(pl.Int64))
    long = metrics.join(counts, on=keys, nulls_equal=True).unpivot(
        index=[*keys, "n_dialogues"], on=["sensitivity", "specificity"], variable_name="metric", value_name="value"
    )
    first = long.filter(pl.col("position") == 1).select(*CELL_KEYS, "n_turns", "metric", pl.col("value").alias("first"))
    return long.join(first, on=[*CELL_KEYS, "n_turns", "metric"], how="left", nulls_equal=True).with_columns(
        pb=pl.col("value") - pl.col("first")
    )


def simulate_scores(
    *,
    n_dialogues: int = 12,
    turn_counts: Sequence[int] = (3, 4),
    categories: Sequence[str] = ("hate", "violence"),
    severities: Sequence[int] = SEVERITY_LEVELS,
    judges: Sequence[str] = ("judge_a", "judge_b"),
    modalities: Sequence[tuple[str, str]] = (("text", "gt"), ("audio", "none")),
    prompts: Sequence[str] = ("basic", "cot"),
    conditions: Sequence[str] = ("clean",),
    failure_rate: float = 0.02,
    seed: int = 0,
) -> pl.DataFrame:
    """A long-format score table with a known structure, for tests, benchmarks and figure examples.

    Every dialogue has a safe original and one variant per (turn, category, severity); dialogue d has
    turn_counts[d % len(turn_counts)] turns. Every cell scores every sample: score = clip(base + dialogue effect
    - cell drop x severity / 5 + noise, 0, 1); a share `failure_rate` of rows fails to parse (a third of those
    are refusals).
    """
    rng = np.random.default_rng(seed)
    samples = []
    for d in range(n_dialogues):
        dialogue_id = f"dlg_{d:04d}"
        n_turns = turn_counts[d % len(turn_counts)]
        samples.append((dialogue_id, f"{dialogue_id}.original", None, 0, None, n_turns))
        for turn in range(n_turns):
            for category in categories:
                for severity in severities:
                    variant_id = f"{dialogue_id}.t{turn}.{category}.s{severity}"
                    samples.append((dialogue_id, variant_id, category, severity, turn, n_turns))
    sample_columns = ("dialogue_id", "variant_id", "category", "severity", "turn_index", "n_turns")
    sample_schema = {name: METRIC_INPUT.columns[name] for name in sample_columns}
    sample_frame = pl.DataFrame(samples, schema=sample_schema, orient="row")
    cells = pl.DataFrame(
        [
            (judge, modality, source, prompt, condition)
            for judge in judges
            for modality, source in modalities
            for prompt in prompts
            for condition in conditions
        ],
        schema=_key_schema(CELL_KEYS),
        orient="row",
    )
    frame = cells.join(sample_frame, how="cross")
    n_cells, n_samples = cells.height, sample_frame.height
    base = rng.uniform(0.75, 0.95, n_cells)
    drop = rng.uniform(0.1, 0.6, n_cells)
    dialogue_effect = rng.normal(0.0, 0.05, n_dialogues)
    cell_of_row = np.repeat(np.arange(n_cells), n_samples)
    dialogue_of_row = np.tile(sample_frame["dialogue_id"].str.slice(4).cast(pl.Int64).to_numpy(), n_cells)
    severity = frame["severity"].to_numpy()
    score = base[cell_of_row] + dialogue_effect[dialogue_of_row] - drop[cell_of_row] * severity / 5.0
    score = np.clip(score + rng.normal(0.0, 0.1, frame.height), 0.0, 1.0)
    failure = rng.random(frame.height)
    status = np.where(
        failure < failure_rate / 3,
        ParseStatus.REFUSAL.value,
        np.where(failure < failure_rate, ParseStatus.MALFORMED.value, ParseStatus.OK.value),
    )
    return frame.with_columns(
        score=pl.Series(np.where(status == ParseStatus.OK.value, score, np.nan)).fill_nan(None),
        parse_status=pl.Series(status),
    )


def with_audio_input(scores: pl.DataFrame, cascades: dict[str, str]) -> pl.DataFrame:
    """Add the `audio_input` the judge stage writes: 'none' for text, 'cascade via <asr model>' for the audio
    modality of the judges in `cascades` (judge -> ASR model), 'native' otherwise."""
    label = pl.when(pl.col("modality") == "text").then(pl.lit("none"))
    for judge, asr_model in cascades.items():
        cascade = (pl.col("judge") == judge) & (pl.col("modality") == "audio")
        label = label.when(cascade).then(pl.lit(audio_input_label("audio", asr_model)))
    return scores.with_columns(audio_input=label.otherwise(pl.lit(audio_input_label("audio"))))
