"""Paired comparisons of judge cells on the same dialogues: the difference and its paired interval against a hand
computation, the support of a difference, and the guide and Pareto front reading them."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bench import simulated
from lalm_judge.analysis import engine, inputs, stage
from lalm_judge.analysis.guide import TEXT_ONLY, practitioner_guide
from lalm_judge.analysis.stats import bootstrap_weights

# Per dialogue: (safe, severity 1, severity 2) of judges a and b.
SCORES = {
    "a": [(0.9, 0.7, 0.4), (0.8, 0.7, 0.3), (0.95, 0.6, 0.5), (0.7, 0.65, 0.2)],
    "b": [(0.9, 0.8, 0.6), (0.8, 0.75, 0.7), (0.95, 0.9, 0.5), (0.7, 0.6, 0.6)],
}
SETTINGS = engine.MetricSettings(n_boot=50, seed=3, n_folds=2, min_dialogues=1, n_permutations=5)


def score_table(scores: dict[str, list[tuple[float, ...]]]) -> pl.DataFrame:
    rows = []
    for judge, dialogues in scores.items():
        for d, values in enumerate(dialogues):
            for severity, score in enumerate(values):
                dialogue = f"d{d}"
                rows.append(
                    {
                        "dialogue_id": dialogue,
                        "variant_id": f"{dialogue}.original" if severity == 0 else f"{dialogue}.t1.hate.s{severity}",
                        "category": None if severity == 0 else "hate",
                        "severity": severity,
                        "turn_index": None if severity == 0 else 1,
                        "n_turns": 2,
                        "judge": judge,
                        "modality": "text",
                        "transcript_source": "gt",
                        "prompt": "basic",
                        "condition": "clean",
                        "score": score,
                        "parse_status": "ok",
                    }
                )
    return inputs.validate_scores(pl.DataFrame(rows, schema_overrides={"turn_index": pl.Int64}))


def by_hand(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sensitivity and specificity of one cell in every resample: values (dialogue, safe/s1/s2), weights (B, n)."""
    drops = values[:, :1] - values[:, 1:]  # (n, 2): one variant per dialogue and severity
    deltas = weights @ drops / weights.sum(axis=1, keepdims=True)
    means = weights @ values[:, 1:] / weights.sum(axis=1, keepdims=True)
    specificity = np.where(np.abs(means[:, 0] - means[:, 1]) <= 1e-9, 0.5, (means[:, 0] > means[:, 1]) * 1.0)
    return deltas.min(axis=1), specificity


def test_the_paired_difference_and_its_interval_equal_a_hand_computation():
    tables = stage.compute_metrics(score_table(SCORES), SETTINGS)
    weights = bootstrap_weights(4, SETTINGS.n_boot, SETTINGS.seed)
    a, b = (by_hand(np.asarray(SCORES[j]), weights) for j in ("a", "b"))
    point_a, point_b = (by_hand(np.asarray(SCORES[j]), np.ones((1, 4))) for j in ("a", "b"))
    for k, metric in enumerate(("sensitivity", "specificity")):
        row = tables.comparisons.filter(pl.col("metric") == metric).row(0, named=True)
        assert (row["judge_a"], row["judge_b"]) == ("a", "b")
        assert row["difference"] == pytest.approx(point_a[k][0] - point_b[k][0])
        assert (row["value_a"], row["value_b"]) == pytest.approx((point_a[k][0], point_b[k][0]))
        low, high = np.percentile(a[k] - b[k], [2.5, 97.5])
        assert (row["difference_lo"], row["difference_hi"]) == pytest.approx((low, high))
        assert row["n_dialogues"] == 4
    # By hand: a's Delta_1 = (0.2 + 0.1 + 0.35 + 0.05) / 4 = 0.175 < Delta_2; b's = (0.1 + 0.05 + 0.05 + 0.1) / 4.
    sensitivity = tables.comparisons.filter(pl.col("metric") == "sensitivity").row(0, named=True)
    assert sensitivity["difference"] == pytest.approx(0.175 - 0.075)


def test_a_difference_rests_on_the_dialogues_paired_in_both_cells():
    """b's original of d3 fails to parse: b's Delta_i rest on 3 dialogues, and so does the difference (4 dialogues
    are shared); with a minimum of 4 the difference is not estimable and separates nothing."""
    scores = score_table(SCORES).with_columns(
        parse_status=pl.when((pl.col("judge") == "b") & (pl.col("variant_id") == "d3.original"))
        .then(pl.lit("malformed"))
        .otherwise(pl.col("parse_status")),
        score=pl.when((pl.col("judge") == "b") & (pl.col("variant_id") == "d3.original"))
        .then(None)
        .otherwise(pl.col("score")),
    )
    settings = engine.MetricSettings(n_boot=50, seed=3, n_folds=2, min_dialogues=4, n_permutations=5)
    row = (
        stage.compute_metrics(scores, settings).comparisons.filter(pl.col("metric") == "sensitivity").row(0, named=True)
    )
    assert (row["n_dialogues"], row["status"], row["difference_lo"], row["separated"]) == (
        3,
        "not_estimable",
        None,
        False,
    )


@pytest.fixture(scope="module")
def three_judges() -> pl.DataFrame:
    """j, k (j up to noise) and f (every score 0.7) on 16 dialogues."""
    j = simulated.simulate_scores(
        n_dialogues=16, judges=("j",), modalities=(("text", "gt"),), prompts=("basic",), seed=4, failure_rate=0.0
    )
    noise = np.random.default_rng(1).normal(0.0, 0.03, j.height)
    k = j.with_columns(judge=pl.lit("k"), score=(pl.col("score") + pl.Series(noise)).clip(0.0, 1.0))
    return inputs.validate_scores(pl.concat([j, k, j.with_columns(judge=pl.lit("f"), score=pl.lit(0.7))]))


def test_two_judges_that_score_alike_are_tied_and_the_guide_says_so(three_judges):
    """Judge k scores as judge j up to noise: their paired sensitivity difference includes 0, so the guide lists one
    first and names the other as tied; judge f, which scores everything alike, is separated from both."""
    table = three_judges
    tables = stage.compute_metrics(table, engine.MetricSettings(n_boot=200, seed=0, n_folds=2, min_dialogues=10))
    guide = practitioner_guide(tables.cells, tables.pareto, comparisons=tables.comparisons)
    row = guide.filter(
        pl.col("available_input") == TEXT_ONLY,
        pl.col("transcript_quality") == "gt",
        pl.col("priority") == "sensitivity",
    ).row(0, named=True)
    sensitivity = tables.comparisons.filter(pl.col("metric") == "sensitivity")
    pair = sensitivity.filter(pl.col("judge_a") == "j", pl.col("judge_b") == "k").row(0, named=True)
    assert not pair["separated"] and pair["difference_lo"] < 0 < pair["difference_hi"]
    flat_pairs = sensitivity.filter((pl.col("judge_a") == "f") | (pl.col("judge_b") == "f"))
    assert flat_pairs["separated"].all()
    assert row["judge"] in ("j", "k") and row["n_tied"] == 1 and row["n_separated"] == 1
    assert row["tied_with"] == ("k" if row["judge"] == "j" else "j") + " text/gt basic"
    # The Pareto front marks the judge off the front as tied with it, not as dominated.
    pareto = tables.pareto.filter(pl.col("judge") != "f")
    assert sorted(pareto["front_status"].to_list()) in (["on the front", "tied with the front"], ["on the front"] * 2)


def test_the_pareto_front_marks_what_it_cannot_separate_and_what_it_beats(three_judges):
    tables = stage.compute_metrics(three_judges, engine.MetricSettings(n_boot=200, seed=0, n_folds=2))
    by_judge = {row["judge"]: row for row in tables.pareto.iter_rows(named=True)}
    assert by_judge["f"]["front_status"] == "dominated" and by_judge["f"]["on_front"] is False
    front = [j for j in ("j", "k") if by_judge[j]["on_front"]]
    assert front and by_judge["f"]["dominated_by"] in {f"{j} text/gt" for j in front} | {"j text/gt; k text/gt"}
    assert {by_judge[j]["front_status"] for j in ("j", "k")} <= {"on the front", "tied with the front"}
    assert by_judge["j"]["n_compared"] == 3


def test_a_configuration_whose_values_are_not_estimable_is_not_placed_on_or_off_the_front(three_judges):
    """16 dialogues against a minimum of 20: every cross-validated value is not estimable, so no front is drawn from
    them (it used to be drawn from their point values)."""
    settings = engine.MetricSettings(n_boot=50, seed=0, n_folds=2, min_dialogues=20)
    pareto = stage.compute_metrics(three_judges, settings).pareto
    assert pareto["on_front"].is_null().all() and set(pareto["front_status"]) == {"not estimable"}
