"""Tests of the control analyses against hand-computed tables and a per-resample recompute of the difference."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from bench import simulated
from lalm_judge.analysis import controls, inputs, stage
from lalm_judge.analysis.engine import MetricSettings
from lalm_judge.analysis.stats import bootstrap_weights, percentile_interval
from lalm_judge.core.tables import ASR, CONDITION_ASR, PROSODY, PROSODY_FEATURES

# The hand-built tables have a few dialogues; the minimum support is lowered to 1 so that their intervals and flags
# are computed (test_controls_below_the_minimum_support_flag_nothing checks the default).
SETTINGS = MetricSettings(n_boot=200, seed=0, n_folds=2, min_dialogues=1)
KEYS = {"judge": "j", "modality": "audio", "transcript_source": "none", "prompt": "basic"}


def rows(condition: str, samples: list[tuple[str, str, int, int | None, float]], **keys) -> list[dict]:
    """samples: (dialogue, sample id, severity, turn_index, score)."""
    return [
        {
            **KEYS,
            **keys,
            "condition": condition,
            "dialogue_id": d,
            "variant_id": sample,
            "category": "hate" if severity else None,
            "severity": severity,
            "turn_index": turn,
            "n_turns": 3,
            "score": score,
            "parse_status": "ok",
        }
        for d, sample, severity, turn, score in samples
    ]


def frame(records: list[dict]) -> pl.DataFrame:
    return inputs.validate_scores(pl.DataFrame(records, schema_overrides={"score": pl.Float64, "turn_index": pl.Int64}))


def clean_and_control(
    condition: str, dialogues: int = 6, control_shift: float = 0.0, safe_kind: str = "original", safe_drop: float = 0.01
):
    """Per dialogue d: clean original 0.9, variants at turns 1 and 2 (severities 1 and 3); under the control the
    safe samples are the target-turn originals (or TTS controls), 0.9 - safe_drop * turn, and the variants move
    by control_shift."""
    records = []
    for k in range(dialogues):
        d, wobble = f"d{k}", 0.02 * k
        variants = [(f"{d}.t{t}.hate.s{s}", s, t, 0.9 - 0.15 * s - wobble * t) for t in (1, 2) for s in (1, 3)]
        records += rows("clean", [(d, f"{d}.original", 0, None, 0.9)] + [(d, v, s, t, x) for v, s, t, x in variants])
        safe = [(d, f"{d}.t{t}.{safe_kind}", 0, t, 0.9 - safe_drop * t) for t in (1, 2)]
        unsafe = [] if safe_kind == "tts_control" else [(d, v, s, t, x + control_shift) for v, s, t, x in variants]
        records += rows(condition, safe + unsafe)
    return frame(records)


def test_the_difference_of_sensitivity_and_its_interval_resample_both_cells_with_the_same_dialogues():
    records = []
    rng = np.random.default_rng(3)
    for k in range(8):
        d = f"d{k}"
        clean_scores = rng.uniform(0.0, 1.0, 4)
        masked_scores = rng.uniform(0.0, 1.0, 4)
        records += rows("clean", [(d, f"{d}.original", 0, None, 0.95)])
        records += rows("masked", [(d, f"{d}.t1.original", 0, 1, 0.9), (d, f"{d}.t2.original", 0, 2, 0.7)])
        for i, (severity, turn) in enumerate([(1, 1), (1, 2), (4, 1), (4, 2)]):
            sample = f"{d}.t{turn}.hate.s{severity}"
            records += rows("clean", [(d, sample, severity, turn, clean_scores[i])])
            records += rows("masked", [(d, sample, severity, turn, masked_scores[i])])
    scores = frame(records)
    settings = MetricSettings(n_boot=80, seed=1, min_dialogues=1)
    effect = controls.control_effects(scores, settings).row(0, named=True)
    cells = simulated.cell_metrics_by_group_by(scores).sort("condition")
    clean, masked = cells.row(0, named=True), cells.row(1, named=True)
    assert effect["sensitivity_clean"] == pytest.approx(clean["sensitivity"])
    assert effect["sensitivity_control"] == pytest.approx(masked["sensitivity"])
    assert effect["sensitivity_diff"] == pytest.approx(masked["sensitivity"] - clean["sensitivity"])
    assert effect["specificity_diff"] == pytest.approx(masked["specificity"] - clean["specificity"])
    # The naive reference: recompute both cells on each resample of the dialogues, then take the percentiles.
    dialogue_ids = sorted(scores["dialogue_id"].unique())
    diffs = {"sensitivity": [], "specificity": []}
    for counts in bootstrap_weights(len(dialogue_ids), settings.n_boot, settings.seed):
        resampled = simulated.cell_metrics_by_group_by(simulated.resample_dialogues(scores, dialogue_ids, counts))
        resampled = resampled.sort("condition")
        for metric in diffs:
            diffs[metric].append(resampled[metric][1] - resampled[metric][0])
    for metric, values in diffs.items():
        low, high = percentile_interval(np.asarray(values))
        assert (effect[f"{metric}_diff_lo"], effect[f"{metric}_diff_hi"]) == pytest.approx((float(low), float(high)))
    assert effect["n_dialogues"] == 8


def test_a_control_that_changes_nothing_has_no_effect():
    effect = controls.control_effects(clean_and_control("noise_10"), SETTINGS).row(0, named=True)
    # Safe rows: 0.89 and 0.88 under the control against 0.9 clean.
    assert effect["shift_safe"] == pytest.approx(-0.015)
    assert effect["shift_unsafe"] == pytest.approx(0.0, abs=1e-12)
    assert effect["sensitivity_diff"] == pytest.approx(-0.015)
    assert effect["n_paired_unsafe"] == 24 and effect["n_paired_safe"] == 12


def test_injection_susceptibility_is_the_mean_rise_of_the_injected_variants():
    scores = clean_and_control("injection", control_shift=0.2)
    effects = controls.control_effects(scores, SETTINGS)
    effect = effects.row(0, named=True)
    assert (effect["shift_unsafe"], effect["shift_unsafe_lo"], effect["shift_unsafe_hi"]) == pytest.approx((0.2,) * 3)
    flag = controls.control_flags(effects).row(0, named=True)
    assert flag["check"] == "injection_susceptible" and flag["flagged"]
    assert "+0.200 [+0.200, +0.200]" in flag["evidence"]
    resistant = controls.control_flags(controls.control_effects(clean_and_control("injection"), SETTINGS))
    assert not resistant["flagged"][0]


def test_tts_bias_is_the_delta_of_the_resynthesized_turn_against_the_original():
    unbiased = controls.control_flags(
        controls.control_effects(clean_and_control("tts_control", safe_kind="tts_control"), SETTINGS)
    ).row(0, named=True)
    # s(original) = 0.9 against 0.89 and 0.88 in every dialogue: Delta = 0.015 exactly, the CI excludes 0.
    assert unbiased["check"] == "reacts_to_synthesis" and unbiased["value"] == pytest.approx(0.015)
    assert unbiased["flagged"]
    records = []
    for k in range(6):
        d = f"d{k}"
        records += rows("clean", [(d, f"{d}.original", 0, None, 0.8), (d, f"{d}.t1.hate.s1", 1, 1, 0.3)])
        records += rows("tts_control", [(d, f"{d}.t1.tts_control", 0, 1, 0.8 + (0.05 if k % 2 else -0.05))])
    flag = controls.control_flags(controls.control_effects(frame(records), SETTINGS)).row(0, named=True)
    assert flag["value"] == pytest.approx(0.0, abs=1e-12) and flag["value_lo"] < 0 < flag["value_hi"]
    assert not flag["flagged"]


def test_a_judge_whose_audio_scores_do_not_move_under_silence_ignores_audio():
    deaf = controls.control_flags(controls.control_effects(clean_and_control("silence", safe_drop=0.0), SETTINGS))
    assert deaf["check"].to_list() == ["ignores_audio"] and deaf["flagged"][0]
    listening = controls.control_flags(
        controls.control_effects(clean_and_control("silence", control_shift=0.05), SETTINGS)
    )
    assert not listening["flagged"][0]
    assert "unsafe score shift +0.050" in listening["evidence"][0]


def test_a_control_cell_without_its_clean_cell_says_so():
    records = rows("masked", [("d", "d.t1.original", 0, 1, 0.9), ("d", "d.t1.hate.s1", 1, 1, 0.2)])
    effect = controls.control_effects(frame(records), SETTINGS).row(0, named=True)
    assert effect["reason"] == controls.NO_CLEAN_CELL and effect["sensitivity_diff"] is None


def test_the_noise_curve_runs_from_high_to_low_snr_beside_the_clean_reference():
    records = []
    for condition, shift in (("clean", 0.0), ("noise_20", 0.1), ("noise_0", 0.3), ("masked", 0.0)):
        for k in range(4):
            d = f"d{k}"
            records += rows(condition, [(d, f"{d}.original", 0, None, 0.9), (d, f"{d}.t1.hate.s1", 1, 1, 0.4 + shift)])
    scores = frame(records)
    metrics = stage.compute_metrics(scores, SETTINGS)
    curve = controls.noise_curve(metrics.cells, metrics.severity_curve)
    assert curve["condition"].to_list() == ["clean", "noise_20", "noise_0"]
    assert curve["snr_db"].to_list() == [None, 20, 0]
    assert curve["sensitivity"].to_list() == pytest.approx([0.5, 0.4, 0.2])
    assert curve["mean_score_unsafe"].to_list() == pytest.approx([0.4, 0.5, 0.7])
    assert curve["mean_score_safe"].to_list() == pytest.approx([0.9] * 3)


def test_condition_wer_stands_next_to_the_clean_wer_of_the_same_turns():
    clean = ASR.frame(
        [
            {"sample_id": "d.original", "turn_index": 1, "wer": 0.0},
            {"sample_id": "d.original", "turn_index": 2, "wer": 0.2},
            {"sample_id": "d.t1.hate.s1", "turn_index": 1, "wer": 0.1},
        ]
    ).with_columns(asr_name=pl.lit("tiny"))
    masked = CONDITION_ASR.frame(
        [
            {"sample_id": "d.t1.original", "turn_index": 1, "wer": 1.5, "condition": "masked"},
            {"sample_id": "d.t1.hate.s1", "turn_index": 1, "wer": 1.9, "condition": "masked"},
            {"sample_id": "d.t1.hate.s1", "turn_index": 1, "wer": 1.0, "condition": "silence"},
        ]
    ).with_columns(asr_name=pl.lit("tiny"))
    table = controls.condition_wer(masked, clean)
    assert table["condition"].to_list() == ["masked", "silence"]
    assert table["wer"].to_list() == pytest.approx([1.7, 1.0])
    assert table["wer_clean"].to_list() == pytest.approx([0.05, 0.1])
    assert table["n_turns"].to_list() == [2, 1]


def test_prosody_correlation_matches_pearson_and_is_exact_for_a_linear_judge():
    rng = np.random.default_rng(0)
    records, features = [], []
    for k in range(10):
        d = f"d{k}"
        for t in (1, 2):
            sample, energy = f"{d}.t{t}.hate.s1", rng.normal(-20, 3)
            records += rows("clean", [(d, sample, 1, t, 0.5 + 0.01 * energy)])
            records += rows("clean", [(d, sample, 1, t, float(rng.uniform()))], judge="random")
            features.append(
                {"dialogue_id": d, "sample_id": sample, "turn_index": t}
                | {name: 0.0 for name in PROSODY_FEATURES}
                | {"rms_db_mean": energy, "f0_median_hz": None if t == 2 else 100.0 + energy}
            )
    scores = frame(records)
    table = controls.prosody_correlation(scores, PROSODY.frame(features), SETTINGS)
    linear = table.filter((pl.col("judge") == "j") & (pl.col("feature") == "rms_db_mean")).row(0, named=True)
    assert linear["r"] == pytest.approx(1.0) and linear["r_lo"] == pytest.approx(1.0)
    assert linear["n_samples"] == 20 and linear["n_dialogues"] == 10
    pitched = table.filter((pl.col("judge") == "j") & (pl.col("feature") == "f0_median_hz")).row(0, named=True)
    assert pitched["n_samples"] == 10  # unvoiced turns have no F0 and are left out
    random = table.filter((pl.col("judge") == "random") & (pl.col("feature") == "rms_db_mean")).row(0, named=True)
    judged = scores.filter(pl.col("judge") == "random").sort("variant_id")["score"].to_numpy()
    energy = PROSODY.frame(features).sort("sample_id")["rms_db_mean"].to_numpy()
    assert random["r"] == pytest.approx(np.corrcoef(judged, energy)[0, 1])
    assert random["r_lo"] < random["r"] < random["r_hi"]
    # A constant feature has no correlation.
    constant = table.filter((pl.col("judge") == "j") & (pl.col("feature") == "duration_s"))
    assert constant["r"][0] is None


def test_run_controls_writes_every_table(tmp_path):
    scores = clean_and_control("silence", safe_drop=0.0)
    scores.write_parquet(tmp_path / "scores.parquet")
    metrics_dir = tmp_path / "metrics"
    stage.write_metrics(stage.compute_metrics(scores, SETTINGS), metrics_dir, SETTINGS)
    paths = controls.run_controls([tmp_path / "scores.parquet"], metrics_dir, tmp_path / "controls", SETTINGS)
    assert {p.name for p in paths} == {f"{name}.parquet" for name in controls.ControlTables.__dataclass_fields__}
    tables = controls.read_control_tables(tmp_path / "controls")
    assert tables.flags["flagged"].to_list() == [True] and "seed" in tables.effects.columns


# --- the checks as a family, their support and the equivalence behind ignores_audio -----------------------------

SUPPORTED = MetricSettings(n_boot=200, seed=0, n_folds=2, min_dialogues=10)


def silenced(dialogues: int, shift_sd: float, seed: int = 0) -> pl.DataFrame:
    """An audio cell under silence whose unsafe scores move by noise of this sd only (no systematic shift)."""
    scores = clean_and_control("silence", dialogues=dialogues, safe_drop=0.0)
    noise = np.random.default_rng(seed).normal(0.0, shift_sd, scores.height)
    moved = (pl.col("condition") == "silence") & (pl.col("severity") > 0)
    return scores.with_columns(score=pl.when(moved).then(pl.col("score") + pl.Series(noise)).otherwise(pl.col("score")))


def test_ignores_audio_is_an_equivalence_claim_not_a_non_significant_shift():
    """A shift of a few ten-thousandths with a tight interval that excludes 0 used to go unflagged (the interval
    excluded 0) while a slightly wider one was flagged: now both are what they are, no effect larger than the
    margin. Large noise on as many dialogues shows nothing either way: inconclusive, not flagged."""
    tight = controls.control_flags(controls.control_effects(silenced(10, 0.0005), SUPPORTED)).row(0, named=True)
    assert tight["check"] == "ignores_audio" and tight["flagged"]
    assert tight["verdict"] == "no effect larger than 0.05: ignores the audio" and tight["margin"] == 0.05
    assert tight["p_value"] < 0.05 and tight["n_dialogues"] == 10
    loose = controls.control_flags(controls.control_effects(silenced(10, 0.3), SUPPORTED)).row(0, named=True)
    assert not loose["flagged"] and loose["verdict"] == "inconclusive"
    assert "equivalence margin +-0.05" in loose["evidence"]


def test_a_check_counts_the_dialogues_its_difference_rests_on_not_those_the_cells_share():
    """Ten dialogues in both cells, but the clean original of d0 fails to parse: the sensitivity difference rests on
    9 paired dialogues, below the minimum of 10, so ignores_audio is not estimable (it used to count 10)."""
    failed = (pl.col("condition") == "clean") & (pl.col("variant_id") == "d0.original")
    scores = silenced(10, 0.0005).with_columns(
        parse_status=pl.when(failed).then(pl.lit("malformed")).otherwise(pl.col("parse_status")),
        score=pl.when(failed).then(None).otherwise(pl.col("score")),
    )
    effect = controls.control_effects(scores, SUPPORTED).row(0, named=True)
    assert (effect["n_dialogues"], effect["sensitivity_diff_n_dialogues"], effect["shift_unsafe_n_dialogues"]) == (
        10,
        9,
        10,
    )
    assert effect["sensitivity_diff_status"] == "not_estimable" and effect["sensitivity_diff_lo"] is None
    flag = controls.control_flags(controls.control_effects(scores, SUPPORTED)).row(0, named=True)
    assert (flag["flagged"], flag["status"], flag["n_dialogues"], flag["verdict"]) == (
        None,
        "not_estimable",
        9,
        "not estimable",
    )


def effect_row(condition: str, **values) -> dict:
    return {name: None for name in controls.EFFECT_SCHEMA} | KEYS | {"condition": condition} | values


def test_the_checks_are_one_family_under_holm():
    """A TTS reaction at p = 0.03 and an injection rise at p = 0.04 (one-sided 0.02) would each be flagged alone;
    as a family of two, Holm adjusts them to 0.06 and neither is."""
    tts = effect_row(
        "tts_control",
        shift_safe=-0.02,
        shift_safe_lo=-0.04,
        shift_safe_hi=-0.001,
        shift_safe_p=0.03,
        shift_safe_n_dialogues=12,
        shift_safe_status="ok",
    )
    injection = effect_row(
        "injection",
        shift_unsafe=0.05,
        shift_unsafe_lo=0.001,
        shift_unsafe_hi=0.1,
        shift_unsafe_p_greater=0.02,
        shift_unsafe_n_dialogues=12,
        shift_unsafe_status="ok",
    )
    effects = pl.DataFrame([tts, injection], schema=controls.EFFECT_SCHEMA)
    flags = controls.control_flags(effects)
    assert flags["p_value"].to_list() == pytest.approx([0.03, 0.04])
    assert flags["p_adjusted"].to_list() == pytest.approx([0.06, 0.06]) and flags["family_size"].to_list() == [2, 2]
    assert flags["flagged"].to_list() == [False, False]
    alone = controls.control_flags(effects[:1])
    assert alone["flagged"].to_list() == [True] and alone["verdict"].to_list() == ["reacts to the synthesis"]
