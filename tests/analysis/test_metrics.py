"""Tests of the metric tables against hand-computed score tables, the bootstrap against a per-resample
polars recompute, bad input, and the `metrics` command."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bench import simulated
from lalm_judge.analysis import engine, inputs, stage
from lalm_judge.analysis.stats import bootstrap_weights
from lalm_judge.cli import metrics as metrics_cli

CELL = {"judge": "j", "modality": "text", "transcript_source": "gt", "prompt": "basic", "condition": "clean"}
SETTINGS = engine.MetricSettings(n_boot=200, seed=0, n_folds=2)


def table(rows: list[tuple], **cell) -> pl.DataFrame:
    """rows: (dialogue, severity, turn_index, score, parse_status[, category]); severity 0 = safe original."""
    records = []
    for number, row in enumerate(rows):
        dialogue, severity, turn, score, status, *category = row
        records.append(
            {
                **CELL,
                **cell,
                "dialogue_id": dialogue,
                "variant_id": f"{dialogue}.original" if severity == 0 else f"{dialogue}.t{turn}.x{number}.s{severity}",
                "category": None if severity == 0 else (category[0] if category else "hate"),
                "severity": severity,
                "turn_index": None if severity == 0 else turn,
                "n_turns": 2,
                "score": score,
                "parse_status": status,
            }
        )
    return pl.DataFrame(records, schema_overrides={"score": pl.Float64, "turn_index": pl.Int64})


def compute(frame: pl.DataFrame, settings: engine.MetricSettings = SETTINGS) -> stage.MetricTables:
    return stage.compute_metrics(inputs.validate_scores(frame), settings)


def only_cell(tables: stage.MetricTables) -> dict:
    assert tables.cells.height == 1
    return tables.cells.row(0, named=True)


def test_unequal_variants_per_dialogue_pool_over_variants():
    """A: safe 0.9, s1 0.7 and 0.5, s2 0.2; B: safe 0.8, s1 0.8, s2 0.4 and 0.6.
    Delta_1 = (0.2 + 0.4 + 0.0) / 3 = 0.2; Delta_2 = (0.7 + 0.4 + 0.2) / 3; S_1 = 2.0/3 > S_2 = 0.4."""
    frame = table(
        [
            ("a", 0, None, 0.9, "ok"),
            ("a", 1, 0, 0.7, "ok"),
            ("a", 1, 1, 0.5, "ok"),
            ("a", 2, 0, 0.2, "ok"),
            ("b", 0, None, 0.8, "ok"),
            ("b", 1, 0, 0.8, "ok"),
            ("b", 2, 0, 0.4, "ok"),
            ("b", 2, 1, 0.6, "ok"),
        ]
    )
    cell = only_cell(compute(frame))
    assert cell["delta_1"] == pytest.approx(0.2)
    assert cell["delta_2"] == pytest.approx(1.3 / 3)
    assert cell["delta_3"] is None
    assert cell["sensitivity"] == pytest.approx(0.2)
    assert cell["specificity"] == 1.0
    assert cell["n_pairs"] == 1
    assert cell["mean_safe"] == pytest.approx(0.85)
    assert cell["n_dialogues"] == 2
    assert cell["reason"] is None
    assert cell["sensitivity_lo"] <= cell["sensitivity"] <= cell["sensitivity_hi"]


def test_ties_in_severity_means_count_half():
    """S_1 = S_2 = 0.5, S_3 = 0.75: pairs (1,2) tie 0.5, (1,3) 0, (2,3) 0 -> specificity 0.5/3."""
    frame = table([("a", 0, None, 1.0, "ok"), ("a", 1, 0, 0.5, "ok"), ("a", 2, 0, 0.5, "ok"), ("a", 3, 1, 0.75, "ok")])
    cell = only_cell(compute(frame))
    assert cell["specificity"] == pytest.approx(0.5 / 3)
    assert cell["n_pairs"] == 3
    assert cell["sensitivity"] == pytest.approx(0.25)  # min(0.5, 0.5, 0.25)


def test_missing_severity_uses_available_pairs():
    """Severities 1, 2, 4 only: pairs (1,2) 1, (1,4) 1, (2,4) 0 -> 2/3 over n_pairs = 3."""
    frame = table(
        [("a", 0, None, 1.0, "ok"), ("a", 1, 0, 0.75, "ok"), ("a", 2, 0, 0.5, "ok"), ("a", 4, 1, 0.625, "ok")]
    )
    cell = only_cell(compute(frame))
    assert cell["n_pairs"] == 3
    assert cell["specificity"] == pytest.approx(2 / 3)
    assert cell["delta_3"] is None and cell["delta_5"] is None
    assert cell["sensitivity"] == pytest.approx(0.25)


def test_parse_failures_are_excluded_from_means_and_counted_in_rates():
    """7 rows, 3 not ok (1 refusal). B's safe original failed: its variant enters S_1 but not Delta_1.
    Delta_1 = 1.0 - 0.5, Delta_2 = 0.75; S_1 = (0.5 + 0.1) / 2 = 0.3 > S_2 = 0.25."""
    frame = table(
        [
            ("a", 0, None, 1.0, "ok"),
            ("a", 1, 0, 0.5, "ok"),
            ("a", 1, 1, None, "refusal"),
            ("a", 1, 1, None, "malformed"),
            ("a", 2, 0, 0.25, "ok"),
            ("b", 0, None, None, "malformed"),
            ("b", 1, 0, 0.1, "ok"),
        ]
    )
    cell = only_cell(compute(frame))
    assert cell["delta_1"] == pytest.approx(0.5)
    assert cell["delta_2"] == pytest.approx(0.75)
    assert cell["sensitivity"] == pytest.approx(0.5)
    assert cell["specificity"] == 1.0
    assert cell["parse_failure_rate"] == pytest.approx(3 / 7)
    assert cell["refusal_rate"] == pytest.approx(1 / 7)
    assert cell["n_scored"] == 4 and cell["n_rows"] == 7
    assert cell["mean_safe"] == pytest.approx(1.0)
    assert cell["n_dialogues"] == 2


def test_position_bias_by_hand():
    """Length 2. Position 1: Delta = (0.5, 0.75) -> Sens 0.5; position 2: Delta = (0.25, 0.5) -> Sens 0.25.
    PB(2, 2) = -0.25, AvgAbsPB = 0.25; specificity is 1 at both positions, so its PB is 0."""
    frame = table(
        [
            ("a", 0, None, 1.0, "ok"),
            ("a", 1, 0, 0.5, "ok"),
            ("a", 2, 0, 0.25, "ok"),
            ("a", 1, 1, 0.75, "ok"),
            ("a", 2, 1, 0.5, "ok"),
        ]
    )
    tables = compute(frame)
    sensitivity = tables.position_bias.filter(pl.col("metric") == "sensitivity").sort("position")
    assert sensitivity["position"].to_list() == [1, 2]
    assert sensitivity["value"].to_list() == pytest.approx([0.5, 0.25])
    assert sensitivity["pb"].to_list() == pytest.approx([0.0, -0.25])
    cell = only_cell(tables)
    assert cell["avg_abs_pb_sensitivity"] == pytest.approx(0.25)
    assert cell["avg_abs_pb_specificity"] == pytest.approx(0.0)
    assert cell["sensitivity"] == pytest.approx(0.375)  # pooled: Delta_1 = (0.5 + 0.25) / 2


def test_categories_slice_the_variants():
    """hate: Delta_1 = 0.5, violence: Delta_1 = 0.25 (same safe original)."""
    frame = table(
        [
            ("a", 0, None, 1.0, "ok"),
            ("a", 1, 0, 0.5, "ok", "hate"),
            ("a", 1, 0, 0.75, "ok", "violence"),
            ("a", 2, 0, 0.25, "ok", "hate"),
        ]
    )
    categories = compute(frame).categories.sort("category")
    assert categories["category"].to_list() == ["hate", "violence"]
    assert categories["delta_1"].to_list() == pytest.approx([0.5, 0.25])
    assert categories["specificity"][0] == 1.0 and categories["specificity"][1] is None
    assert categories["n_pairs"].to_list() == [1, 0]


def test_cell_without_safe_originals_is_skipped_with_a_reason():
    scored = table([("a", 0, None, 1.0, "ok"), ("a", 1, 0, 0.5, "ok"), ("a", 2, 0, 0.25, "ok")])
    unpaired = table([("a", 1, 0, 0.5, "ok"), ("a", 2, 0, 0.25, "ok")], judge="k")
    cells = compute(pl.concat([scored, unpaired])).cells.sort("judge")
    skipped = cells.row(1, named=True)
    assert skipped["judge"] == "k"
    assert "no safe original" in skipped["reason"]
    assert skipped["sensitivity"] is None and skipped["specificity"] is None
    assert skipped["n_scored"] == 2
    assert cells["reason"][0] is None and cells["sensitivity"][0] == pytest.approx(0.5)


def test_missing_column_is_named(tmp_path):
    frame = table([("a", 0, None, 1.0, "ok")]).drop("parse_status")
    with pytest.raises(engine.MetricsInputError, match="parse_status"):
        inputs.validate_scores(frame)
    path = tmp_path / "scores.parquet"
    frame.write_parquet(path)
    with pytest.raises(engine.MetricsInputError, match=r"scores\.parquet.*parse_status"):
        inputs.read_scores([path])


def test_vectorized_bootstrap_matches_per_resample_group_by():
    """The matrix-product bootstrap gives the same percentile bounds as resampling dialogues and recomputing
    every metric with polars group_by, using the same resample counts."""
    scores = simulated.simulate_scores(n_dialogues=9, judges=("j",), modalities=(("text", "gt"),), failure_rate=0.1)
    n_boot = 40
    tables = compute(scores, engine.MetricSettings(n_boot=n_boot, seed=5, n_folds=3))
    dialogue_ids = sorted(scores["dialogue_id"].unique().to_list())
    resampled = [
        simulated.cell_metrics_by_group_by(simulated.resample_dialogues(scores, dialogue_ids, counts)).sort("prompt")
        for counts in bootstrap_weights(len(dialogue_ids), n_boot, seed=5)
    ]
    cells = tables.cells.sort("prompt")
    for metric in ("sensitivity", "specificity"):
        samples = np.array([frame[metric].to_numpy() for frame in resampled])
        low, high = np.quantile(samples, [0.025, 0.975], axis=0)
        np.testing.assert_allclose(cells[f"{metric}_lo"].to_numpy(), low, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(cells[f"{metric}_hi"].to_numpy(), high, rtol=1e-10, atol=1e-12)
    point = simulated.cell_metrics_by_group_by(scores).sort("prompt")
    np.testing.assert_allclose(cells["sensitivity"].to_numpy(), point["sensitivity"].to_numpy(), rtol=1e-12)


def test_prompt_selection_picks_the_informative_prompt_and_pareto_uses_it():
    """Prompt 'flat' gives every sample the same score (sensitivity 0); 'graded' drops with severity."""
    scores = simulated.simulate_scores(n_dialogues=10, judges=("j",), prompts=("flat", "graded"), failure_rate=0.0)
    scores = scores.with_columns(
        score=pl.when(pl.col("prompt") == "flat").then(pl.lit(0.8)).otherwise(1.0 - 0.15 * pl.col("severity"))
    )
    tables = compute(scores, engine.MetricSettings(n_boot=20, seed=1, n_folds=5))
    selection = tables.prompt_selection.filter(pl.col("metric") == "sensitivity")
    assert selection.height == 2 * 5  # two configurations (text/gt, audio) x five folds
    assert set(selection["chosen_prompt"]) == {"graded"}
    assert selection["heldout_value"].to_list() == pytest.approx([0.15] * 10)
    assert selection["n_heldout_dialogues"].sum() == 2 * 10
    assert set(tables.pareto["prompt_sensitivity"]) == {"graded"}
    assert tables.pareto["sensitivity"].to_list() == pytest.approx([0.15, 0.15])
    assert tables.pareto["on_front"].all()


def test_metrics_command_writes_every_table_with_provenance(tmp_path, capsys):
    scores = simulated.simulate_scores(n_dialogues=6)
    paths = []
    for judge in ("judge_a", "judge_b"):
        path = tmp_path / f"{judge}.parquet"
        scores.filter(pl.col("judge") == judge).write_parquet(path)
        paths.append(str(path))
    out = tmp_path / "metrics"
    options = ["--bootstrap", "30", "--seed", "2", "--folds", "3"]
    assert metrics_cli.main([*paths, "--out", str(out), *options]) == 0
    names = ["cells", "position_bias", "prompt_selection", "pareto", "categories", "severity_curve"]
    for name in names:
        frame = pl.read_parquet(out / f"{name}.parquet")
        assert frame.height > 0
        assert frame["seed"].unique().to_list() == [2]
        assert frame["n_bootstrap"].unique().to_list() == [30]
        assert "package_versions" in frame.columns
    cells = pl.read_parquet(out / "cells.parquet")
    assert cells.height == scores.select(engine.CELL_KEYS).n_unique()
    curve = pl.read_parquet(out / "severity_curve.parquet")
    assert sorted(curve["severity"].unique().to_list()) == [0, 1, 2, 3, 4, 5]
    # Deterministic: the same command gives the same tables.
    first = pl.read_parquet(out / "cells.parquet")
    assert metrics_cli.main([*paths, "--out", str(tmp_path / "again"), *options]) == 0
    assert first.equals(pl.read_parquet(tmp_path / "again" / "cells.parquet"))

    bad = tmp_path / "bad.parquet"
    scores.drop("severity").write_parquet(bad)
    assert metrics_cli.main([str(bad), "--out", str(tmp_path / "x")]) == 2
    assert "severity" in capsys.readouterr().err
