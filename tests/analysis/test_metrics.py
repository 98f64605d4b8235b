"""Tests of the metric tables against hand-computed score tables, the bootstrap against a per-resample
polars recompute, bad input, and the `metrics` command."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bench import simulated
from lalm_judge.analysis import engine, inputs, stage
from lalm_judge.analysis.stats import StudentizedRatios, bootstrap_weights, sensitivity_interval
from lalm_judge.cli import metrics as metrics_cli

CELL = {"judge": "j", "modality": "text", "transcript_source": "gt", "prompt": "basic", "condition": "clean"}
# Hand-computed tables have a few dialogues: the minimum support is lowered to 1 so that their intervals are
# computed and checked (the default of 10 makes them not_estimable: test_small_tables_are_not_estimable...).
SETTINGS = engine.MetricSettings(n_boot=200, seed=0, n_folds=2, min_dialogues=1)


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


def test_cut_filtered_and_ambiguous_answers_are_failures_counted_per_status():
    frame = table(
        [
            ("a", 0, None, 1.0, "ok"),
            ("a", 1, 0, 0.5, "ok"),
            ("a", 1, 1, None, "truncated"),
            ("a", 2, 0, None, "filtered"),
            ("b", 0, None, None, "ambiguous"),
        ]
    )
    tables = compute(frame)
    assert only_cell(tables)["parse_failure_rate"] == pytest.approx(3 / 5)
    statuses = tables.parse_status.row(0, named=True)
    assert (statuses["ok"], statuses["truncated"], statuses["filtered"], statuses["ambiguous"]) == (2, 1, 1, 1)
    assert statuses["parse_failure_rate"] == pytest.approx(3 / 5)


def test_position_bias_by_hand():
    """Length 2. Position 1: Delta = (0.5, 0.75) -> Sens 0.5; position 2: Delta = (0.25, 0.5) -> Sens 0.25.
    PB(2, 2) = -0.25, AvgAbsPB = 0.25; specificity is 1 at both positions, so its PB is 0. One dialogue: the
    minimum number of dialogues per (L, k) is lowered to 1 to let it count."""
    frame = table(
        [
            ("a", 0, None, 1.0, "ok"),
            ("a", 1, 0, 0.5, "ok"),
            ("a", 2, 0, 0.25, "ok"),
            ("a", 1, 1, 0.75, "ok"),
            ("a", 2, 1, 0.5, "ok"),
        ]
    )
    tables = compute(frame, engine.MetricSettings(n_boot=50, seed=0, n_folds=2, min_pb_dialogues=1))
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


def _severity_array(frame: pl.DataFrame, column: str) -> np.ndarray:
    """(n_cells, 5) of a per (cell, severity) column, cells in prompt order, NaN where a severity is absent."""
    wide = frame.pivot(on="severity", index="prompt", values=column).sort("prompt")
    return np.stack(
        [
            wide[str(i)].to_numpy() if str(i) in wide.columns else np.full(wide.height, np.nan)
            for i in engine.SEVERITY_LEVELS
        ],
        axis=-1,
    ).astype(float)


def test_vectorized_bootstrap_matches_per_resample_group_by():
    """The matrix-product bootstrap gives the same bounds (percentile for specificity, studentized for each Delta_i,
    the interval of the minimum for sensitivity) as resampling dialogues and recomputing every metric and every
    standard error with polars group_by, using the same resample counts."""
    scores = simulated.simulate_scores(n_dialogues=9, judges=("j",), modalities=(("text", "gt"),), failure_rate=0.1)
    n_boot = 40
    tables = compute(scores, engine.MetricSettings(n_boot=n_boot, seed=5, n_folds=3, min_dialogues=1))
    dialogue_ids = sorted(scores["dialogue_id"].unique().to_list())
    weights = bootstrap_weights(len(dialogue_ids), n_boot, seed=5)
    resampled = [simulated.resample_dialogues(scores, dialogue_ids, counts) for counts in weights]
    cells = tables.cells.sort("prompt")
    specificity = np.array(
        [simulated.cell_metrics_by_group_by(rows).sort("prompt")["specificity"].to_numpy() for rows in resampled]
    )
    expected = {"specificity": np.quantile(specificity, [0.025, 0.975], axis=0)}
    point = simulated.delta_standard_errors_by_group_by(scores)
    value, se = _severity_array(point, "delta"), _severity_array(point, "se")
    per_resample = [simulated.delta_standard_errors_by_group_by(rows) for rows in resampled]
    resampled_value = np.array([_severity_array(frame, "delta") for frame in per_resample])
    studentized = (resampled_value - value) / np.array([_severity_array(frame, "se") for frame in per_resample])
    deltas = StudentizedRatios(value, se, resampled_value, studentized)
    low_q, high_q = np.quantile(studentized, [0.025, 0.975], axis=0)
    for i in engine.SEVERITY_LEVELS:
        expected[f"delta_{i}"] = (
            value[:, i - 1] - high_q[:, i - 1] * se[:, i - 1],
            value[:, i - 1] - low_q[:, i - 1] * se[:, i - 1],
        )
    expected["sensitivity"] = sensitivity_interval(deltas)
    for metric, (low, high) in expected.items():
        np.testing.assert_allclose(cells[f"{metric}_lo"].to_numpy(), low, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(cells[f"{metric}_hi"].to_numpy(), high, rtol=1e-9, atol=1e-12)
    reference = simulated.cell_metrics_by_group_by(scores).sort("prompt")
    np.testing.assert_allclose(cells["sensitivity"].to_numpy(), reference["sensitivity"].to_numpy(), rtol=1e-12)


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
    assert tables.pareto["cv_sensitivity"].to_list() == pytest.approx([0.15, 0.15])
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


# --- edge cases: ties, incomplete cells, uncertainty of position bias, cross-validated Pareto front -------------


def constant_judge_table(n_dialogues: int = 10) -> pl.DataFrame:
    scores = simulated.simulate_scores(
        n_dialogues=n_dialogues, judges=("flat",), modalities=(("text", "gt"),), prompts=("basic",), failure_rate=0.0
    )
    return scores.with_columns(score=pl.lit(0.8))


def test_a_judge_that_scores_everything_alike_has_specificity_one_half():
    """Every severity mean is 0.8 however its sum is ordered: all 10 pairs tie, in the estimate and its CI."""
    cell = only_cell(compute(constant_judge_table()))
    assert cell["specificity"] == 0.5
    assert cell["specificity_lo"] == 0.5 and cell["specificity_hi"] == 0.5
    assert cell["sensitivity"] == pytest.approx(0.0, abs=1e-12)


def test_cells_report_intervals_of_every_delta_and_of_the_mean_safe_score():
    scores = simulated.simulate_scores(n_dialogues=10, judges=("j",), modalities=(("text", "gt"),), prompts=("p",))
    cell = only_cell(compute(scores))
    for name in [*(f"delta_{i}" for i in range(1, 6)), "mean_safe"]:
        assert cell[f"{name}_lo"] < cell[name] < cell[f"{name}_hi"], name
    # Delta_5 of the simulator is clearly positive: its whole interval is above 0.
    assert cell["delta_5_lo"] > 0


def test_a_cell_lacking_a_severity_says_so():
    rows = [("a", 0, None, 1.0, "ok"), ("a", 1, 0, 0.75, "ok"), ("a", 2, 0, 0.5, "ok"), ("a", 3, 1, 0.25, "ok")]
    complete = table(rows)
    lacking = table([row for row in rows if row[1] != 1], prompt="rubric")
    cells = compute(pl.concat([complete, lacking])).cells.sort("prompt")
    full, partial = cells.row(0, named=True), cells.row(1, named=True)
    assert full["n_severities"] == 3 and full["reason"] is None
    assert partial["n_severities"] == 2
    assert partial["sensitivity"] == pytest.approx(0.5)  # min over severities 2 and 3 only
    assert "severity 1" in partial["reason"] and "minimum over severities 2, 3" in partial["reason"]


def test_prompt_selection_and_pareto_keep_incomplete_cells_apart():
    """Prompt 'partial' lacks severity 1, its weakest: its sensitivity looks better, but only because a severity is
    missing. Complete prompts compete first; a configuration with only incomplete cells is compared apart."""
    scores = simulated.simulate_scores(n_dialogues=10, judges=("j", "k"), modalities=(("text", "gt"),), prompts=("a",))
    graded = scores.with_columns(score=1.0 - 0.15 * pl.col("severity"), parse_status=pl.lit("ok"))
    partial = graded.filter(pl.col("judge") == "j", pl.col("severity") != 1).with_columns(prompt=pl.lit("partial"))
    only_partial = graded.filter(pl.col("judge") == "k", pl.col("severity") != 1).with_columns(
        score=1.0 - 0.2 * pl.col("severity")
    )
    frame = pl.concat([graded.filter(pl.col("judge") == "j"), partial, only_partial])
    tables = compute(frame, engine.MetricSettings(n_boot=20, seed=1, n_folds=2))
    selection = tables.prompt_selection.filter(pl.col("judge") == "j", pl.col("metric") == "sensitivity")
    assert set(selection["chosen_prompt"]) == {"a"}
    pareto = tables.pareto.sort("judge")
    assert pareto["complete"].to_list() == [True, False]
    # k (sensitivity 0.4 over severities 2-5) would dominate j (0.15); apart, each is on its own front.
    assert pareto["on_front"].to_list() == [True, True]


def test_cross_validation_breaks_ties_by_the_other_metric_then_by_name():
    """Prompts 'a' and 'b' have the same sensitivity everywhere; 'b' orders the severities better."""
    scores = simulated.simulate_scores(
        n_dialogues=10, judges=("j",), modalities=(("text", "gt"),), prompts=("a", "b"), failure_rate=0.0
    )
    # Sensitivity = Delta_1 = 0.1 for both; 'a' scores severities 2-5 alike (ties), 'b' keeps falling.
    a_score = pl.when(pl.col("severity") == 0).then(0.9).otherwise(0.8)
    b_score = 0.9 - 0.1 * pl.col("severity")
    frame = scores.with_columns(score=pl.when(pl.col("prompt") == "a").then(a_score).otherwise(b_score))
    tables = compute(frame, engine.MetricSettings(n_boot=20, seed=1, n_folds=5))
    sensitivity = tables.prompt_selection.filter(pl.col("metric") == "sensitivity")
    assert set(sensitivity["chosen_prompt"]) == {"b"}


def test_cross_validated_values_are_comparable_with_the_cells():
    """With one prompt there is nothing to select: the held-out pooled value is the cell's value, with the same
    interval; the Pareto table shows the cross-validated values and both position-bias objectives."""
    scores = simulated.simulate_scores(n_dialogues=10, judges=("j",), prompts=("only",))
    tables = compute(scores, engine.MetricSettings(n_boot=50, seed=3, n_folds=5))
    cells = tables.cells.sort(engine.CELL_KEYS)
    pareto = tables.pareto.sort(engine.CONFIG_KEYS)
    for metric in ("sensitivity", "specificity"):
        for suffix in ("", "_lo", "_hi"):
            np.testing.assert_allclose(pareto[f"cv_{metric}{suffix}"], cells[f"{metric}{suffix}"], rtol=1e-12)
    assert "sensitivity" not in pareto.columns  # only the cross-validated values compete
    assert {"avg_abs_pb_sensitivity", "avg_abs_pb_specificity"} <= set(pareto.columns)
    assert "mean_heldout" not in tables.prompt_selection.columns
    per_config = tables.prompt_selection.filter(pl.col("metric") == "sensitivity", pl.col("fold") == 0)
    assert per_config.sort(engine.CONFIG_KEYS)["cv_value"].to_list() == pytest.approx(cells["sensitivity"].to_list())


def test_pareto_front_uses_held_out_values():
    """j looks far better on all data (in sample), k is better held out: the front follows the held-out values."""
    cells = pl.DataFrame(
        {
            "judge": ["j", "k"],
            "modality": ["text", "text"],
            "transcript_source": ["gt", "gt"],
            "prompt": ["p", "p"],
            "condition": ["clean", "clean"],
            "sensitivity": [0.9, 0.1],  # in sample, j looks far better
            "specificity": [0.9, 0.1],
            **{f"avg_abs_pb_{m}{s}": [0.1, 0.1] for m in ("sensitivity", "specificity") for s in ("", "_lo", "_hi")},
            "audio_input": ["none", "none"],
            "n_severities": [5, 5],
        }
    )
    selection = pl.DataFrame(
        {
            "judge": ["j", "j", "k", "k"],
            "modality": ["text"] * 4,
            "transcript_source": ["gt"] * 4,
            "condition": ["clean"] * 4,
            "metric": ["sensitivity", "specificity"] * 2,
            "selected_prompt": ["p"] * 4,
            "cv_value": [0.2, 0.2, 0.3, 0.3],  # held out, k is better on both
            "cv_lo": [0.1, 0.1, 0.2, 0.2],
            "cv_hi": [0.3, 0.3, 0.4, 0.4],
            "cv_status": ["ok"] * 4,
            "complete": [True] * 4,
        }
    )
    from lalm_judge.analysis.selection import pareto_table

    pareto = pareto_table(cells, selection).sort("judge")
    assert pareto["on_front"].to_list() == [False, True]
    assert pareto["cv_sensitivity_lo"].to_list() == [0.1, 0.2]


def position_table(n_dialogues: int, effect: float = 0.0, seed: int = 0) -> pl.DataFrame:
    """Simulated scores (lengths 3 and 4); `effect` lowers every variant's score when its unsafe turn is not the
    first, a position effect of that size on every Delta_i."""
    scores = simulated.simulate_scores(
        n_dialogues=n_dialogues, judges=("j",), modalities=(("text", "gt"),), prompts=("p",), seed=seed
    )
    moved = pl.col("score") - effect * (pl.col("turn_index") >= 1).fill_null(False)
    return scores.with_columns(score=moved.clip(0.0, 1.0))


def paired_counts(scores: pl.DataFrame) -> dict[int, int]:
    """Per dialogue length, the dialogues whose safe original parsed (in this design each of them has a parsed
    variant at every position)."""
    parsed = scores.filter(pl.col("severity") == 0, pl.col("parse_status") == "ok")
    return dict(parsed.group_by("n_turns").agg(pl.col("dialogue_id").n_unique()).iter_rows())


def test_position_bias_has_counts_and_intervals_per_length_and_position():
    scores = position_table(12)
    tables = compute(scores, engine.MetricSettings(n_boot=100, seed=0, n_folds=2, min_dialogues=5))
    bias = tables.position_bias.filter(pl.col("metric") == "sensitivity")
    assert bias.select("n_turns", "position").rows() == [(3, 1), (3, 2), (3, 3), (4, 1), (4, 2), (4, 3), (4, 4)]
    # Dialogue d has 3 + d % 2 turns (6 of each length); one length-3 original failed to parse, so its dialogue
    # contributes no pair and is not counted.
    counts = paired_counts(scores)
    assert counts == {3: 5, 4: 6}
    assert bias["n_dialogues"].to_list() == [counts[n] for n in bias["n_turns"]]
    assert bias["n_variants"].min() > 0
    assert set(bias["status"]) == {"ok"}
    later = bias.filter(pl.col("position") >= 2)
    assert (later["pb_lo"] <= later["pb"]).all() and (later["pb"] <= later["pb_hi"]).all()
    assert later["included"].all()
    assert not bias.filter(pl.col("position") == 1)["included"].any()
    cell = only_cell(tables)
    assert cell["avg_abs_pb_sensitivity"] == pytest.approx(later["pb"].abs().mean())
    assert cell["avg_abs_pb_sensitivity_lo"] <= cell["avg_abs_pb_sensitivity"] <= cell["avg_abs_pb_sensitivity_hi"]
    assert cell["pb_left_out"] is None


def test_position_bias_below_the_minimum_number_of_dialogues_is_not_averaged():
    settings = engine.MetricSettings(n_boot=20, seed=0, n_folds=2, min_pb_dialogues=7)
    tables = compute(position_table(12), settings)
    bias = tables.position_bias.filter(pl.col("metric") == "sensitivity", pl.col("position") >= 2)
    assert not bias["included"].any()
    assert bias["reason"].to_list() == [f"{n} dialogues < 7 (minimum for position bias)" for n in bias["n_dialogues"]]
    cell = only_cell(tables)
    assert cell["avg_abs_pb_sensitivity"] is None
    assert "L=3" in cell["pb_left_out"] and "L=4" in cell["pb_left_out"]


def test_lengths_without_a_first_position_are_reported():
    scores = position_table(12).filter(~((pl.col("n_turns") == 3) & (pl.col("turn_index") == 0)))
    tables = compute(scores, engine.MetricSettings(n_boot=20, seed=0, n_folds=2))
    length_3 = tables.position_bias.filter(pl.col("metric") == "sensitivity", pl.col("n_turns") == 3)
    assert length_3["pb"].is_null().all() and not length_3["included"].any()
    assert length_3["reason"].str.contains("no position 1").all()
    cell = only_cell(tables)
    assert "L=3" in cell["pb_left_out"] and "no position 1" in cell["pb_left_out"]
    included = tables.position_bias.filter(pl.col("metric") == "sensitivity", pl.col("included"))
    assert cell["avg_abs_pb_sensitivity"] == pytest.approx(included["pb"].abs().mean())
    assert set(included["n_turns"]) == {4}


def test_position_bias_is_compared_with_what_noise_alone_gives():
    """Without any position effect, 12 dialogues still give an AvgAbsPB of a few hundredths: the permutation null
    (positions shuffled within each dialogue) is as large, and the p-value says it is noise. A real effect of 0.15
    stands far above its null."""
    settings = engine.MetricSettings(n_boot=50, seed=0, n_folds=2, n_permutations=200)
    noise = only_cell(compute(position_table(12, seed=7), settings))
    assert 0.01 < noise["avg_abs_pb_sensitivity"] < 0.15
    assert noise["avg_abs_pb_sensitivity_null"] == pytest.approx(noise["avg_abs_pb_sensitivity"], rel=0.6)
    assert noise["avg_abs_pb_sensitivity_p"] > 0.05
    effect = only_cell(compute(position_table(12, effect=0.15, seed=7), settings))
    assert effect["avg_abs_pb_sensitivity"] > 3 * effect["avg_abs_pb_sensitivity_null"]
    assert effect["avg_abs_pb_sensitivity_p"] == pytest.approx(1 / 201)


def test_metric_tables_record_the_numerical_packages(tmp_path):
    scores = simulated.simulate_scores(n_dialogues=4, judges=("j",), modalities=(("text", "gt"),), prompts=("p",))
    stage.write_metrics(compute(scores), tmp_path, SETTINGS)
    versions = pl.read_parquet(tmp_path / "cells.parquet")["package_versions"][0]
    for package in ("numpy", "scipy", "polars"):
        assert f"{package}==" in versions, package
