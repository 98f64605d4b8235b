"""Synthetic inputs shared by the benchmarks and the tests: simulated score tables with a known structure, and
the straightforward per-resample group-by reference the vectorized metrics engine is checked and benchmarked
against."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from lalm_judge.analysis.engine import CELL_KEYS, SEVERITY_LEVELS, _key_schema, paired_variants
from lalm_judge.core.tables import METRIC_INPUT
from lalm_judge.core.vocabulary import ParseStatus


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


def cell_metrics_by_group_by(scores: pl.DataFrame) -> pl.DataFrame:
    """Sensitivity and specificity per cell computed directly with polars group_by, without the array engine.

    The straightforward reference the vectorized bootstrap is checked and benchmarked against.
    """
    variants = paired_variants(scores, [*CELL_KEYS, "dialogue_id"])
    deltas = (
        variants.filter(pl.col("safe_score").is_not_null())
        .group_by([*CELL_KEYS, "severity"])
        .agg(delta=(pl.col("safe_score") - pl.col("score")).mean())
    )
    sensitivity = deltas.group_by(CELL_KEYS).agg(sensitivity=pl.col("delta").min())
    means = variants.group_by([*CELL_KEYS, "severity"]).agg(mean=pl.col("score").mean())
    pairs = means.join(means, on=CELL_KEYS, nulls_equal=True, suffix="_j").filter(
        pl.col("severity") < pl.col("severity_j")
    )
    specificity = pairs.group_by(CELL_KEYS).agg(
        specificity=pl.when(pl.col("mean") > pl.col("mean_j"))
        .then(1.0)
        .when(pl.col("mean") == pl.col("mean_j"))
        .then(0.5)
        .otherwise(0.0)
        .mean()
    )
    return sensitivity.join(specificity, on=CELL_KEYS, how="full", coalesce=True, nulls_equal=True)


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
