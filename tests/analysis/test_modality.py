"""The modality analysis against a table computed by hand, its intervals against a naive resampling of the rows,
and each behaviour pattern produced by a score table made for it."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest

from bench import simulated
from lalm_judge.analysis import modality
from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import MetricSettings
from lalm_judge.analysis.inputs import validate_scores

ASR = "asr:whisper_base"
SETTINGS = MetricSettings(n_boot=200, seed=0, n_folds=2)


def supported(min_dialogues: int) -> MetricSettings:
    """The test's settings with this minimum support (metrics.min_dialogues)."""
    return dataclasses.replace(SETTINGS, min_dialogues=min_dialogues)


# (original, severity 1, severity 2) of dialogues d1 and d2 per (modality, transcript source).
HAND = {
    ("text", "gt"): ((0.9, 0.7, 0.5), (0.8, 0.7, 0.4)),
    ("text", ASR): ((0.9, 0.85, 0.6), (0.8, 0.75, 0.5)),
    ("audio_text", "gt"): ((0.9, 0.6, 0.3), (0.8, 0.5, 0.3)),
    ("audio_text", ASR): ((0.9, 0.8, 0.5), (0.8, 0.7, 0.5)),
    ("audio", "none"): ((0.9, 0.8, 0.85), (0.8, 0.75, 0.7)),
}


def score_rows(cells: dict, judge: str = "j", prompt: str = "basic") -> pl.DataFrame:
    """A score table: per cell and dialogue the scores of the original and of one variant per severity 1..k."""
    rows = []
    for (modality_name, source), dialogues in cells.items():
        for d, scores in enumerate(dialogues):
            dialogue_id = f"d{d + 1:02d}"
            for severity, score in enumerate(scores):
                rows.append(
                    {
                        "dialogue_id": dialogue_id,
                        "variant_id": f"{dialogue_id}.original"
                        if severity == 0
                        else f"{dialogue_id}.t0.hate.s{severity}",
                        "category": None if severity == 0 else "hate",
                        "severity": severity,
                        "turn_index": None if severity == 0 else 0,
                        "n_turns": 2,
                        "judge": judge,
                        "modality": modality_name,
                        "transcript_source": source,
                        "prompt": prompt,
                        "condition": "clean",
                        "score": float(score),
                        "parse_status": "ok",
                    }
                )
    return validate_scores(pl.DataFrame(rows))


def effect(effects: pl.DataFrame, name: str, metric: str) -> dict:
    return effects.filter(pl.col("name") == name, pl.col("metric") == metric).row(0, named=True)


@pytest.fixture(scope="module")
def hand() -> modality.ModalityTables:
    return modality.compute_modality(score_rows(HAND), supported(1))


def test_every_quantity_equals_the_hand_computation(hand):
    # By hand: sensitivity = min(Delta_1, Delta_2); text/gt (0.15, 0.40) -> 0.15, text/asr (0.05, 0.30) -> 0.05,
    # audio_text/gt (0.30, 0.55) -> 0.30, audio_text/asr (0.10, 0.35) -> 0.10, audio (0.075, 0.075) -> 0.075.
    # Specificity: S_1 > S_2 in every cell but the audio one, whose means tie (0.775): 0.5.
    expected = {
        ("gain_gt", "sensitivity"): 0.30 - 0.15,
        ("gain_gt", "specificity"): 0.0,
        (f"gain_{ASR}", "sensitivity"): 0.10 - 0.05,
        (f"asr_loss_{ASR}", "sensitivity"): 0.15 - 0.05,
        (f"asr_loss_{ASR}", "specificity"): 0.0,
        (f"rescue_{ASR}", "sensitivity"): (0.10 - 0.05) / (0.15 - 0.05),
        ("audio_text_vs_audio_gt", "sensitivity"): 0.30 - 0.075,
        ("audio_text_vs_audio_gt", "specificity"): 1.0 - 0.5,
    }
    for (name, metric), value in expected.items():
        row = effect(hand.effects, name, metric)
        assert row["value"] == pytest.approx(value, abs=1e-12), (name, metric)
        assert row["n_dialogues"] == 2
    terms = effect(hand.effects, f"rescue_{ASR}", "sensitivity")
    assert (terms["term_1"], terms["term_2"], terms["term_3"]) == pytest.approx((0.10, 0.05, 0.15))
    assert terms["formula"] == f"(M(audio_text, {ASR}) - M(text, {ASR})) / (M(text, gt) - M(text, {ASR}))"


def test_rescue_is_reported_only_where_the_loss_excludes_zero(hand):
    # The sensitivity loss is 0.15 on d1 and 0.05 on d2: every resample is above 0, so its rescue is reported.
    loss = effect(hand.effects, f"asr_loss_{ASR}", "sensitivity")
    assert loss["status"] == "ok" and loss["value_lo"] > 0
    rescue = effect(hand.effects, f"rescue_{ASR}", "sensitivity")
    # Resampled gain and loss: d1 (0.10, 0.15), d2 (0.0, 0.05); the share of a resample with d1 drawn k of 2 times
    # is 0.1k / (0.05 + 0.05k): 0 (k = 0), 2/3 (k = 1), 1 (k = 2). Fieller's set of shares r with 0 inside the
    # percentile interval of gain* - r loss* is [1/3, 1] up to the grid's step.
    assert rescue["status"] == "ok" and rescue["value"] == pytest.approx(0.5)
    assert rescue["value_lo"] == pytest.approx(1 / 3, abs=modality.SHARE_GRID[1] - modality.SHARE_GRID[0])
    assert rescue["value_hi"] == 1.0
    # No specificity is lost (1 in both text cells): there is nothing to rescue.
    none_lost = effect(hand.effects, f"rescue_{ASR}", "specificity")
    assert none_lost["value"] is None and none_lost["status"] in ("not_measured", "not_reported")


def test_a_rescue_of_more_than_the_loss_is_bounded_to_one():
    """audio_text/asr is more sensitive (0.20) than text/gt (0.15): the audio wins back 0.15 of a loss of 0.10, a
    ratio of 1.5 (2.84 was reported as a 'share'), which is no share: the rescue is 1. Every resample recovers more
    than its loss (ratios 2, 1.5 and 4/3), so the bounded interval is [1, 1], marked zero width."""
    cells = HAND | {("audio_text", ASR): ((0.9, 0.65, 0.5), (0.8, 0.65, 0.5))}
    rescue = effect(modality.compute_modality(score_rows(cells), supported(1)).effects, f"rescue_{ASR}", "sensitivity")
    assert rescue["term_1"] == pytest.approx(0.20) and rescue["term_3"] == pytest.approx(0.15)
    assert rescue["value"] == 1.0 and rescue["value_lo"] == rescue["value_hi"] == 1.0
    assert rescue["status"] == "zero_width"


def test_a_negative_loss_is_no_loss_to_rescue_and_says_so():
    """text/asr is more sensitive (0.30) than text/gt (0.15) in every resample: the loss's interval lies below 0, the
    rescue is not reported and its reason says the ASR transcript does better (it used to say 'the loss is 0')."""
    cells = HAND | {("text", ASR): ((0.9, 0.6, 0.3), (0.8, 0.5, 0.2))}
    effects = modality.compute_modality(score_rows(cells), supported(1)).effects
    loss = effect(effects, f"asr_loss_{ASR}", "sensitivity")
    assert loss["value"] == pytest.approx(-0.15) and loss["value_hi"] < 0
    rescue = effect(effects, f"rescue_{ASR}", "sensitivity")
    assert rescue["status"] == "not_reported" and rescue["value"] is None
    assert "interval below 0" in rescue["reason"] and "no loss to rescue" in rescue["reason"]


def test_the_share_interval_divides_no_resample_and_keeps_every_sign_of_the_loss():
    """With a loss of exactly 1 in every resample the share's interval is the gain's percentile interval; with a
    loss whose resamples straddle 0 (a ratio that can be anything) every share is accepted: [0, 1], not the interval
    of the ratios of the resamples whose loss happens to be positive."""
    rng = np.random.default_rng(0)
    gains = rng.normal(0.4, 0.1, 400)
    low, high = modality.share_interval(gains, np.ones(400))
    expected = np.percentile(gains, [2.5, 97.5])
    step = modality.SHARE_GRID[1] - modality.SHARE_GRID[0]
    assert low == pytest.approx(expected[0], abs=step) and high == pytest.approx(expected[1], abs=step)
    straddling = rng.normal(0.0, 0.05, 400)
    assert modality.share_interval(gains * 0.05, straddling) == (0.0, 1.0)


def naive_interval(scores: pl.DataFrame, comparison: modality.Comparison, metric: str) -> tuple[float, float]:
    """The percentile interval from the rows themselves: each resample's rows rebuilt (a dialogue drawn twice is two
    dialogues), every cell's metric recomputed from its definition, the comparison formed."""
    dialogues = sorted(scores["dialogue_id"].unique().to_list())
    weights = st.bootstrap_weights(len(dialogues), SETTINGS.n_boot, SETTINGS.seed)
    values = []
    for counts in weights:
        metrics = simulated.cell_metrics_by_group_by(simulated.resample_dialogues(scores, dialogues, counts))
        by_cell = {(r["modality"], r["transcript_source"]): r[metric] for r in metrics.iter_rows(named=True)}
        values.append(float(modality.combine([np.asarray(by_cell[t]) for t in comparison.terms])))
    low, high = np.percentile(np.asarray(values)[np.isfinite(values)], [2.5, 97.5])
    return float(low), float(high)


@pytest.mark.parametrize("metric", ["sensitivity", "specificity"])
def test_intervals_resample_every_cell_of_a_quantity_with_the_same_dialogues(hand, metric):
    scores = score_rows(HAND)
    for comparison in modality.comparisons(["gt", ASR]):
        row = effect(hand.effects, comparison.name, metric)
        if row["value_lo"] is None or comparison.quantity == modality.RESCUE:
            continue  # the rescue's interval is Fieller's (test_rescue_is_reported_only_where_the_loss_excludes_zero)
        assert (row["value_lo"], row["value_hi"]) == pytest.approx(naive_interval(scores, comparison, metric))


def test_below_the_minimum_support_a_value_has_no_interval_and_no_pattern():
    tables = modality.compute_modality(score_rows(HAND), supported(3))
    measured = tables.effects.filter(pl.col("value").is_not_null())
    assert set(measured["status"]) == {"not_estimable"}
    assert measured["value_lo"].null_count() == measured.height
    assert "fewer than the minimum of 3" in measured["reason"][0]
    pattern = tables.patterns.row(0, named=True)
    assert pattern["pattern"] is None and "not_estimable" in pattern["reason"]


def test_a_judge_without_an_audio_text_cell_has_no_gain_and_says_why():
    cells = {key: value for key, value in HAND.items() if key[0] != "audio_text"}
    tables = modality.compute_modality(score_rows(cells), supported(1))
    gain = effect(tables.effects, "gain_gt", "sensitivity")
    assert (
        gain["status"] == "not_measured"
        and gain["reason"] == "no audio_text/gt cell of this judge, prompt and condition"
    )
    assert effect(tables.effects, f"asr_loss_{ASR}", "sensitivity")["value"] == pytest.approx(0.10)
    pattern = tables.patterns.row(0, named=True)
    assert pattern["pattern"] is None and "gain_gt of sensitivity is not_measured" in pattern["reason"]


def test_an_asr_cascade_is_not_the_audio_only_cell():
    scores = score_rows(HAND).with_columns(
        audio_input=pl.when(pl.col("modality") == "audio").then(pl.lit("cascade via whisper_base")).otherwise(None)
    )
    tables = modality.compute_modality(scores, supported(1))
    assert effect(tables.effects, "audio_text_vs_audio_gt", "sensitivity")["status"] == "not_measured"


# --- one table per pattern --------------------------------------------------------------------------------

N_DIALOGUES = 12
SEVERITIES = (1, 2, 3)


def text_scores() -> np.ndarray:
    """(dialogue, severity 0..3) scores of a text cell that drops 0.15 per severity, with dialogue-level noise."""
    rng = np.random.default_rng(7)
    dialogue = rng.normal(0.0, 0.02, (N_DIALOGUES, 1))
    noise = rng.normal(0.0, 0.01, (N_DIALOGUES, len(SEVERITIES) + 1))
    return 0.9 + dialogue + noise - 0.15 * np.arange(len(SEVERITIES) + 1)


def pattern_of(audio_text: np.ndarray, audio: np.ndarray | None = None) -> dict:
    cells = {("text", "gt"): text_scores(), ("audio_text", "gt"): audio_text}
    if audio is not None:
        cells[("audio", "none")] = audio
    tables = modality.compute_modality(score_rows(cells), supported(10))
    return tables.patterns.row(0, named=True)


SEVERITY = np.arange(len(SEVERITIES) + 1)


@pytest.mark.parametrize(
    ("pattern", "audio_text", "audio"),
    [
        # Audio + transcript scores as the transcript alone.
        ("text_anchored", lambda text: text, None),
        # The audio deepens the drop of the variants (0.1 per severity), and the audio alone drops as the text does.
        ("balanced", lambda text: text - 0.1 * SEVERITY, lambda text: text),
        # Every score 0.2 lower: the drops and the order are the text's, the level is not.
        ("conservative", lambda text: text - 0.2, None),
        # Audio + transcript hardly reacts to the harm.
        ("interference", lambda text: text[:, :1] - 0.01 * SEVERITY, None),
        # Deeper drops than the transcript alone, but the audio alone drops deeper still.
        ("unclassified", lambda text: text - 0.06 * SEVERITY, lambda text: text - 0.12 * SEVERITY),
    ],
)
def test_each_pattern_comes_from_the_table_made_for_it(pattern, audio_text, audio):
    text = text_scores()
    found = pattern_of(audio_text(text), None if audio is None else audio(text))
    assert found["pattern"] == pattern, found["rule"]
    assert found["n_dialogues"] == N_DIALOGUES and found["reason"] is None
    if pattern == "conservative":
        assert found["shift_safe"] == pytest.approx(-0.2) and found["shift_unsafe_hi"] < 0
    if pattern == "balanced":
        assert "not below the audio-only cell" in found["rule"]


# --- the uncertainty of a pattern ----------------------------------------------------------------------------


def noisy(scale: float, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, scale, (N_DIALOGUES, len(SEVERITIES) + 1))


@pytest.mark.parametrize(
    ("case", "audio_text", "stated", "data_pattern"),
    [
        # No audio effect, little noise: the gains stay within the margin in nearly every resample.
        ("no effect", lambda text: text + noisy(0.03), "text_anchored", "text_anchored"),
        # No audio effect, more noise: the data say text-anchored, but a quarter of the resamples do not (it used to
        # be labelled text-anchored whatever the resamples said).
        ("no effect, noisy", lambda text: text + noisy(0.05), "undetermined", "text_anchored"),
        # A true gain at the margin (0.05 per severity): the data fall on either side of it, the resamples on both.
        ("gain at the margin", lambda text: text - 0.05 * SEVERITY + noisy(0.02), "undetermined", None),
        # Every score a little lower (0.03, within the margin): no conservative label without a shift beyond it.
        ("small shift", lambda text: text - 0.03 + noisy(0.01), "text_anchored", "text_anchored"),
    ],
)
def test_a_pattern_is_stated_only_where_the_resamples_give_it(case, audio_text, stated, data_pattern):
    found = pattern_of(np.clip(audio_text(text_scores()), 0.0, 1.0))
    assert found["pattern"] == stated, found
    if data_pattern is None:
        assert found["data_pattern"] in ("text_anchored", "balanced")
        assert found["share_text_anchored"] > 0.1 and found["share_balanced"] > 0.1
    else:
        assert found["data_pattern"] == data_pattern
    shares = [found[f"share_{p}"] for p in modality.RULE_ORDER]
    assert sum(shares) == pytest.approx(1.0) and found["pattern_share"] == found[f"share_{found['data_pattern']}"]
    assert (found["pattern_share"] >= SETTINGS.pattern_min_share) == (stated == data_pattern)
    if stated == "undetermined":
        assert f"only {found['pattern_share']:.0%} of the 200 resamples" in found["reason"]
