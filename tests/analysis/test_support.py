"""Minimum support (values on too few dialogues are not_estimable, without interval, finding or flag), position
bias counted on paired dialogues, mean_safe as the dialogue mean, and one category rule for every command."""

from __future__ import annotations

import polars as pl
import pytest

from bench import simulated
from lalm_judge.analysis import controls, engine, inputs, stage
from lalm_judge.analysis.findings import delta_findings
from lalm_judge.analysis.support import NOT_ESTIMABLE, ZERO_WIDTH
from lalm_judge.cli import metrics as metrics_cli
from lalm_judge.core.taxonomy import InvalidIdentifier, VariantKey

CELL = {"judge": "j", "modality": "audio", "transcript_source": "none", "prompt": "basic", "condition": "clean"}
DEFAULTS = engine.MetricSettings(n_boot=100, seed=0, n_folds=2)  # min_dialogues: the default, 10
INTERVAL_VALUES = ("sensitivity", "specificity", *(f"delta_{i}" for i in range(1, 6)), "mean_safe")


def rows(dialogue: str, safe: float, variants: dict[tuple[int, int], float], status: str = "ok", **cell) -> list[dict]:
    """The rows of one dialogue of 2 turns: its original (score `safe`, parse status `status`) and one hate
    variant per (turn, severity)."""
    base = {**CELL, **cell, "dialogue_id": dialogue, "n_turns": 2}
    records = [
        {
            **base,
            "variant_id": f"{dialogue}.original",
            "category": None,
            "severity": 0,
            "turn_index": None,
            "score": safe if status == "ok" else None,
            "parse_status": status,
        }
    ]
    for (turn, severity), score in variants.items():
        variant_id = VariantKey(dialogue, turn, "hate", severity).variant_id
        records.append(
            {
                **base,
                "variant_id": variant_id,
                "category": "hate",
                "severity": severity,
                "turn_index": turn,
                "score": score,
                "parse_status": "ok",
            }
        )
    return records


def frame(records: list[dict]) -> pl.DataFrame:
    return inputs.validate_scores(pl.DataFrame(records, schema_overrides={"score": pl.Float64, "turn_index": pl.Int64}))


def harsh_dialogues(n: int) -> pl.DataFrame:
    """n dialogues whose every variant scores far below its original: large, clear-cut Delta_i."""
    return frame(
        [
            row
            for d in range(n)
            for row in rows(
                f"d{d}", 0.95 - 0.01 * d, {(t, s): 0.8 - 0.15 * s + 0.01 * d for t in (0, 1) for s in range(1, 6)}
            )
        ]
    )


@pytest.mark.parametrize("n_dialogues", [1, 2])
def test_one_and_two_dialogues_are_not_estimable_and_give_no_findings(n_dialogues):
    """With 1 dialogue every interval had zero width and every cell-severity was a finding; now each value keeps
    its point estimate and n, has the status not_estimable, no interval, and no finding comes from it."""
    tables = stage.compute_metrics(harsh_dialogues(n_dialogues), DEFAULTS)
    (cell,) = tables.cells.iter_rows(named=True)
    assert cell["delta_5"] == pytest.approx(0.9 - 0.01 * (n_dialogues - 1))  # safe 0.95 - 0.01 d, s5 0.05 + 0.01 d
    for name in INTERVAL_VALUES:
        assert cell[f"{name}_status"] == NOT_ESTIMABLE, name
        assert cell[f"{name}_n_dialogues"] == n_dialogues, name
        assert cell[f"{name}_lo"] is None and cell[f"{name}_hi"] is None, name
        assert cell[name] is not None, name
    for suffix in ("sensitivity", "specificity"):
        assert cell[f"avg_abs_pb_{suffix}_lo"] is None
    assert delta_findings(tables.cells).height == 0
    bias = tables.position_bias
    assert set(bias["status"]) == {NOT_ESTIMABLE} and bias["pb_lo"].is_null().all()
    assert set(tables.categories["delta_5_status"]) == {NOT_ESTIMABLE}
    selection = tables.prompt_selection.drop_nulls("cv_value")
    assert selection.height == 0 or (
        set(selection["cv_status"]) == {NOT_ESTIMABLE} and selection["cv_lo"].is_null().all()
    )


def test_at_the_minimum_every_value_has_its_interval_and_the_findings_come_back():
    """Every value has its interval; the specificity, 1 in every resample (the severities are ordered in every
    dialogue), has one of zero width, kept and marked `zero_width` (it used to be `ok`)."""
    tables = stage.compute_metrics(harsh_dialogues(10), DEFAULTS)
    (cell,) = tables.cells.iter_rows(named=True)
    for name in INTERVAL_VALUES:
        expected = ZERO_WIDTH if name == "specificity" else "ok"
        assert cell[f"{name}_status"] == expected and cell[f"{name}_lo"] is not None, name
    assert cell["specificity_lo"] == cell["specificity_hi"] == 1.0
    assert delta_findings(tables.cells)["severity"].to_list() == [5, 4, 3, 2, 1]
    assert delta_findings(tables.cells)["n_dialogues"].to_list() == [10] * 5


def test_a_delta_with_too_few_paired_dialogues_is_no_finding_while_the_others_are():
    """Severity 5 parses in 3 of 12 dialogues only (a judge refusing the severe ones): Delta_5 rests on 3 dialogues
    and is not estimable, and so is sensitivity (a minimum over it); Delta_1 rests on 12 and is a finding."""
    records = []
    for d in range(12):
        variants = {(t, s): 0.9 - 0.15 * s for t in (0, 1) for s in (1, 5) if s == 1 or d < 3}
        records += rows(f"d{d}", 0.95 - 0.01 * d, variants)
    (cell,) = stage.compute_metrics(frame(records), DEFAULTS).cells.iter_rows(named=True)
    assert (cell["delta_1_n_dialogues"], cell["delta_5_n_dialogues"], cell["sensitivity_n_dialogues"]) == (12, 3, 3)
    assert cell["delta_5_status"] == NOT_ESTIMABLE and cell["delta_5_lo"] is None
    assert cell["sensitivity_status"] == NOT_ESTIMABLE
    assert cell["delta_1_status"] == "ok"
    findings = delta_findings(stage.compute_metrics(frame(records), DEFAULTS).cells)
    assert findings.select("severity", "n_dialogues").rows() == [(1, 12)]


def test_position_bias_counts_only_dialogues_whose_original_parsed():
    """Dialogues a and b are paired; c's original failed to parse, so its variants enter no Delta_i (they still
    count in the severity means). PB(2, k) rests on 2 dialogues, not 3: below --min-pb-dialogues 3 it is left out
    of AvgAbsPB, and the counts and the reason say 2."""
    scores = {(0, 1): 0.6, (0, 2): 0.4, (1, 1): 0.7, (1, 2): 0.5}
    records = rows("a", 0.9, scores) + rows("b", 0.8, scores) + rows("c", 0.0, scores, status="malformed")
    settings = engine.MetricSettings(n_boot=50, seed=0, n_folds=2, min_pb_dialogues=3, min_dialogues=1)
    tables = stage.compute_metrics(frame(records), settings)
    bias = tables.position_bias.sort("metric", "position")
    assert bias["n_dialogues"].to_list() == [2, 2, 2, 2]
    assert bias["n_variants"].to_list() == [4, 4, 4, 4]  # 2 paired dialogues x 2 severities per position
    assert not bias["included"].any()
    later = bias.filter(pl.col("position") == 2)
    assert later["reason"].to_list() == ["2 dialogues < 3 (minimum for position bias)"] * 2
    (cell,) = tables.cells.iter_rows(named=True)
    assert cell["avg_abs_pb_sensitivity"] is None and "L=2" in cell["pb_left_out"]
    # With c's original parsed all three count, and PB enters AvgAbsPB.
    paired = rows("a", 0.9, scores) + rows("b", 0.8, scores) + rows("c", 0.85, scores)
    again = stage.compute_metrics(frame(paired), settings).position_bias
    assert again["n_dialogues"].to_list() == [3, 3, 3, 3] and again.filter(pl.col("position") == 2)["included"].all()


def test_avg_abs_pb_is_no_better_supported_than_the_pb_it_averages():
    """12 dialogues, 6 of each length: the cell has the minimum of 10 paired dialogues, but every PB(L, k) it averages
    rests on 6 or fewer. AvgAbsPB used to be `ok` with an interval; now it is not estimable, keeps its value, and says
    on how many estimable inputs it rests (none of its five)."""
    scores = inputs.validate_scores(
        simulated.simulate_scores(
            n_dialogues=12, judges=("j",), modalities=(("text", "gt"),), prompts=("p",), seed=0, failure_rate=0.0
        )
    )
    settings = engine.MetricSettings(n_boot=50, seed=0, n_folds=2, n_permutations=20)
    tables = stage.compute_metrics(scores, settings)
    (cell,) = tables.cells.iter_rows(named=True)
    included = tables.position_bias.filter(pl.col("metric") == "sensitivity", pl.col("included"))
    assert included.height == 5 and (included["n_dialogues"] <= 6).all()
    assert set(included["status"]) == {NOT_ESTIMABLE}
    assert cell["avg_abs_pb_sensitivity_status"] == NOT_ESTIMABLE and cell["avg_abs_pb_sensitivity_lo"] is None
    assert cell["avg_abs_pb_sensitivity"] is not None
    assert (cell["avg_abs_pb_sensitivity_n_included"], cell["avg_abs_pb_sensitivity_n_estimable"]) == (5, 0)
    assert cell["sensitivity_status"] == "ok"  # the cell's own values rest on its 12 dialogues
    # With the PB minimum met for every (L, k) (min_dialogues 6), AvgAbsPB is estimable again.
    lowered = stage.compute_metrics(scores, engine.MetricSettings(n_boot=50, seed=0, n_folds=2, min_dialogues=6))
    (again,) = lowered.cells.iter_rows(named=True)
    assert again["avg_abs_pb_sensitivity_status"] == "ok" and again["avg_abs_pb_sensitivity_lo"] is not None


def test_mean_safe_is_the_mean_over_dialogues_of_their_safe_scores():
    """A control cell has several safe rows per dialogue: a's three target-turn originals score 0.9, 0.6 and 0.6
    (their mean 0.7 is what a's variants are paired with), b's one 1.0. mean_safe = (0.7 + 1.0) / 2 = 0.85 (the
    row mean would be 0.775); with one variant per dialogue, Delta_1 = mean_safe - S_1 exactly."""
    records = []
    for dialogue, safe_scores in (("a", [0.9, 0.6, 0.6]), ("b", [1.0])):
        for turn, score in enumerate(safe_scores):
            records.append(
                {
                    **CELL,
                    "condition": "masked",
                    "dialogue_id": dialogue,
                    "variant_id": f"{dialogue}.t{turn}.original",
                    "category": None,
                    "severity": 0,
                    "turn_index": None,
                    "n_turns": 3,
                    "score": score,
                    "parse_status": "ok",
                }
            )
        variant = rows(dialogue, 0.0, {(0, 1): 0.5}, condition="masked")[1] | {"n_turns": 3}
        records.append(variant)
    settings = engine.MetricSettings(n_boot=50, seed=0, n_folds=2, min_dialogues=1)
    (cell,) = stage.compute_metrics(frame(records), settings).cells.iter_rows(named=True)
    assert cell["mean_safe"] == pytest.approx(0.85)
    assert cell["delta_1"] == pytest.approx(cell["mean_safe"] - 0.5)
    assert cell["mean_safe_n_dialogues"] == 2
    reference = simulated.cell_metrics_by_group_by(frame(records))
    assert reference["mean_safe"].item() == pytest.approx(0.85)


def test_controls_below_the_minimum_support_flag_nothing():
    """An injection control on 2 dialogues whose variants all rise by 0.3: with the default minimum support the
    rise has no interval, the check is not flagged (null) and says it is not estimable."""
    records = []
    for d in range(2):
        variants = {(t, s): 0.5 for t in (0, 1) for s in (1, 5)}
        records += rows(f"d{d}", 0.9, variants)
        records += rows(f"d{d}", 0.9, {key: score + 0.3 for key, score in variants.items()}, condition="injection")
    effects = controls.control_effects(frame(records), DEFAULTS)
    (flag,) = controls.control_flags(effects).iter_rows(named=True)
    assert flag["check"] == "injection_susceptible"
    assert flag["value"] == pytest.approx(0.3)
    assert (flag["status"], flag["n_dialogues"], flag["flagged"]) == (NOT_ESTIMABLE, 2, None)
    assert flag["value_lo"] is None and flag["evidence"].startswith("not estimable: 2 dialogue(s)")
    (effect,) = effects.iter_rows(named=True)
    assert effect["status"] == NOT_ESTIMABLE and effect["sensitivity_diff_lo"] is None


def with_category(records: list[dict], category: str) -> list[dict]:
    return [r | {"category": category} if r["severity"] else r for r in records]


def test_an_unknown_category_is_one_error_naming_it_in_metrics_and_controls(tmp_path, capsys):
    records = with_category(rows("a", 0.9, {(0, 1): 0.5}), "weapons")
    with pytest.raises(engine.MetricsInputError, match=r"category must be one of overall, .*category='weapons'"):
        frame(records)
    path = tmp_path / "scores.parquet"
    pl.DataFrame(records, schema_overrides={"score": pl.Float64, "turn_index": pl.Int64}).write_parquet(path)
    assert metrics_cli.main([str(path), "--out", str(tmp_path / "metrics")]) == 2
    assert "category='weapons'" in capsys.readouterr().err
    with pytest.raises(engine.MetricsInputError, match="category='weapons'"):
        controls.run_controls([path], tmp_path / "metrics", tmp_path / "controls", DEFAULTS)
    with pytest.raises(engine.MetricsInputError, match="category=None"):
        frame(with_category(rows("a", 0.9, {(0, 1): 0.5}), None))  # a variant needs a category


def test_a_sample_id_with_an_unknown_category_names_the_category():
    with pytest.raises(InvalidIdentifier, match="unknown harm category 'weapons'; use one of overall, dangerous"):
        VariantKey.parse("d.t0.weapons.s1")
