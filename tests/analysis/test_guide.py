"""The practitioner guide on hand-made cells and Pareto tables whose right answers are known."""

from __future__ import annotations

import polars as pl
import pytest

from lalm_judge.analysis import guide
from lalm_judge.analysis.guide import AUDIO_AND_TRANSCRIPT, AUDIO_ONLY, TEXT_ONLY, practitioner_guide

ASR = "asr:whisper_tiny_en"
CELL_SCHEMA = {
    "judge": pl.String,
    "modality": pl.String,
    "transcript_source": pl.String,
    "prompt": pl.String,
    "condition": pl.String,
    "sensitivity": pl.Float64,
    "sensitivity_lo": pl.Float64,
    "sensitivity_hi": pl.Float64,
    "specificity": pl.Float64,
    "specificity_lo": pl.Float64,
    "specificity_hi": pl.Float64,
    "avg_abs_pb_sensitivity": pl.Float64,
}


def cell(judge, modality, source, prompt="basic", sens=0.1, spec=0.5, pb=0.1, condition="clean") -> dict:
    return {
        "judge": judge,
        "modality": modality,
        "transcript_source": source,
        "prompt": prompt,
        "condition": condition,
        "sensitivity": sens,
        "sensitivity_lo": None if sens is None else sens - 0.05,
        "sensitivity_hi": None if sens is None else sens + 0.05,
        "specificity": spec,
        "specificity_lo": None if spec is None else spec - 0.1,
        "specificity_hi": None if spec is None else min(1.0, spec + 0.1),
        "avg_abs_pb_sensitivity": pb,
    }


def cells_table(*rows: dict) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=CELL_SCHEMA)


def pick(table: pl.DataFrame, available_input: str, quality: str, priority: str) -> dict:
    rows = table.filter(
        (pl.col("available_input") == available_input)
        & (pl.col("transcript_quality") == quality)
        & (pl.col("priority") == priority)
    )
    assert rows.height == 1, (available_input, quality, priority)
    return rows.row(0, named=True)


@pytest.fixture
def mixed_cells() -> pl.DataFrame:
    return cells_table(
        cell("a", "text", "gt", sens=0.9, spec=0.6, pb=0.30),
        cell("a", "audio", None, sens=0.2, spec=0.9, pb=0.05),
        cell("b", "text", ASR, sens=0.5, spec=0.4, pb=0.20),
        cell("b", "audio_text", ASR, sens=0.4, spec=0.7, pb=0.02),
    )


def test_grid_has_one_row_per_input_quality_and_priority(mixed_cells):
    table = practitioner_guide(mixed_cells)
    assert table.columns == list(guide.GUIDE_SCHEMA)
    # text only and audio + transcript: gt, asr; audio only: none, asr; three priorities each.
    assert table.height == 3 * 2 * 3
    audio_only = table.filter(pl.col("available_input") == AUDIO_ONLY)["transcript_quality"].unique().sort()
    assert audio_only.to_list() == [ASR, "none"]


def test_text_only_uses_only_text_cells_of_that_transcript(mixed_cells):
    table = practitioner_guide(mixed_cells)
    gt = pick(table, TEXT_ONLY, "gt", "sensitivity")
    assert (gt["judge"], gt["modality"], gt["transcript_source"], gt["prompt"]) == ("a", "text", "gt", "basic")
    assert gt["value"] == pytest.approx(0.9)
    assert (gt["ci_lo"], gt["ci_hi"]) == pytest.approx((0.85, 0.95))
    # Audio 'a' has the best specificity, but text only cannot use audio.
    spec = pick(table, TEXT_ONLY, "gt", "specificity")
    assert (spec["modality"], spec["value"]) == ("text", pytest.approx(0.6))
    asr = pick(table, TEXT_ONLY, ASR, "sensitivity")
    assert (asr["judge"], asr["transcript_source"], asr["value"]) == ("b", ASR, pytest.approx(0.5))


def test_audio_only_uses_audio_cells_or_an_asr_cascade_never_ground_truth(mixed_cells):
    table = practitioner_guide(mixed_cells)
    alone = pick(table, AUDIO_ONLY, "none", "sensitivity")
    assert (alone["judge"], alone["modality"], alone["value"]) == ("a", "audio", pytest.approx(0.2))
    cascade = pick(table, AUDIO_ONLY, ASR, "sensitivity")
    # text/gt (0.9) is out of reach without a transcript; the ASR text cascade (0.5) beats audio (0.2).
    assert (cascade["judge"], cascade["modality"], cascade["transcript_source"]) == ("b", "text", ASR)
    assert cascade["n_candidates"] == 3
    assert pick(table, AUDIO_ONLY, ASR, "specificity")["modality"] == "audio"


def test_audio_and_transcript_combine_audio_cells_with_that_transcript(mixed_cells):
    table = practitioner_guide(mixed_cells)
    assert pick(table, AUDIO_AND_TRANSCRIPT, "gt", "sensitivity")["modality"] == "text"
    assert pick(table, AUDIO_AND_TRANSCRIPT, "gt", "specificity")["modality"] == "audio"
    stable = pick(table, AUDIO_AND_TRANSCRIPT, ASR, "stability")
    assert (stable["modality"], stable["value"]) == ("audio_text", pytest.approx(0.02))
    assert stable["ci_lo"] is None and stable["metric"] == "avg_abs_pb_sensitivity"


def test_stability_prefers_the_lowest_position_bias(mixed_cells):
    table = practitioner_guide(mixed_cells)
    stable = pick(table, AUDIO_ONLY, "none", "stability")
    assert (stable["judge"], stable["value"]) == ("a", pytest.approx(0.05))
    stable_text = pick(table, TEXT_ONLY, "gt", "stability")
    assert stable_text["value"] == pytest.approx(0.30)


def test_cross_validated_prompt_is_used_over_a_better_in_sample_prompt():
    cells = cells_table(
        cell("a", "text", "gt", prompt="basic", sens=0.3, spec=0.8),
        cell("a", "text", "gt", prompt="cot", sens=0.6, spec=0.7),
    )
    pareto = pl.DataFrame(
        {
            "judge": ["a"],
            "modality": ["text"],
            "transcript_source": ["gt"],
            "condition": ["clean"],
            "prompt_sensitivity": ["basic"],
            "prompt_specificity": ["cot"],
        }
    )
    with_cv = practitioner_guide(cells, pareto)
    sens = pick(with_cv, TEXT_ONLY, "gt", "sensitivity")
    assert (sens["prompt"], sens["value"], sens["prompt_choice"]) == ("basic", pytest.approx(0.3), guide.CV_CHOICE)
    assert pick(with_cv, TEXT_ONLY, "gt", "specificity")["prompt"] == "cot"
    without_cv = practitioner_guide(cells)
    sens = pick(without_cv, TEXT_ONLY, "gt", "sensitivity")
    assert (sens["prompt"], sens["value"], sens["prompt_choice"]) == ("cot", pytest.approx(0.6), guide.IN_SAMPLE_CHOICE)


def test_configuration_without_a_cv_choice_competes_with_every_prompt():
    cells = cells_table(
        cell("a", "text", "gt", prompt="basic", sens=0.3),
        cell("b", "text", "gt", prompt="basic", sens=0.2),
        cell("b", "text", "gt", prompt="cot", sens=0.7),
    )
    pareto = pl.DataFrame(
        {
            "judge": ["a", "b"],
            "modality": ["text", "text"],
            "transcript_source": ["gt", "gt"],
            "condition": ["clean", "clean"],
            "prompt_sensitivity": ["basic", None],
            "prompt_specificity": ["basic", None],
        }
    )
    best = pick(practitioner_guide(cells, pareto), TEXT_ONLY, "gt", "sensitivity")
    assert (best["judge"], best["prompt"], best["prompt_choice"]) == ("b", "cot", guide.IN_SAMPLE_CHOICE)
    assert best["n_candidates"] == 3


def test_ties_are_broken_by_the_other_priorities_then_by_name():
    cells = cells_table(
        cell("z", "text", "gt", sens=0.5, spec=0.9, pb=0.3),
        cell("a", "text", "gt", sens=0.5, spec=0.8, pb=0.1),
        cell("m", "text", "gt", sens=0.5, spec=0.8, pb=0.1),
    )
    # Without paired comparisons nothing separates the candidates: every other one is tied with the first listed
    # (the guide used to call z the best specificity outright, on point estimates 0.9 against 0.8).
    table = practitioner_guide(cells)
    sens = pick(table, TEXT_ONLY, "gt", "sensitivity")
    assert (sens["judge"], sens["n_tied"]) == ("z", 2)  # equal sensitivity: higher specificity is listed first
    assert "tied with 2 other candidate(s)" in sens["note"]
    spec = pick(table, TEXT_ONLY, "gt", "specificity")
    assert (spec["judge"], spec["n_tied"], spec["n_separated"]) == ("z", 2, 0)
    stable = pick(table, TEXT_ONLY, "gt", "stability")
    # a and m tie on everything: the name decides.
    assert (stable["judge"], stable["n_tied"]) == ("a", 2)


def comparison(a: dict, b: dict, metric: str, difference: float, low: float, high: float) -> dict:
    """A comparisons.parquet row of cell a against cell b."""
    separated = low > 0 or high < 0
    better = None
    if separated:
        a_better = (high < 0) if metric.startswith("avg_abs_pb") else (low > 0)
        better = "a" if a_better else "b"
    return {
        **{f"{k}_a": a[k] for k in ("judge", "modality", "transcript_source", "prompt", "condition")},
        **{f"{k}_b": b[k] for k in ("judge", "modality", "transcript_source", "prompt", "condition")},
        "metric": metric,
        "difference": difference,
        "difference_lo": low,
        "difference_hi": high,
        "status": "ok",
        "separated": separated,
        "better": better,
    }


def test_the_guide_says_tied_where_the_paired_interval_includes_zero():
    """a (0.6) is listed first; its paired difference with b (0.5) has an interval that includes 0, so the two are
    tied; with c (0.2) it excludes 0, so a is recommended over c. Seen from the other order (b against a), the
    comparison is read with its sign flipped."""
    a, b, c = cell("a", "text", "gt", sens=0.6), cell("b", "text", "gt", sens=0.5), cell("c", "text", "gt", sens=0.2)
    comparisons = pl.DataFrame(
        [
            comparison(b, a, "sensitivity", -0.1, -0.25, 0.05),
            comparison(a, c, "sensitivity", 0.4, 0.2, 0.6),
            comparison(b, c, "sensitivity", 0.3, 0.1, 0.5),
        ]
    )
    row = pick(practitioner_guide(cells_table(a, b, c), comparisons=comparisons), TEXT_ONLY, "gt", "sensitivity")
    assert (row["judge"], row["n_candidates"], row["n_tied"], row["n_separated"]) == ("a", 3, 1, 1)
    assert row["tied_with"] == "b text/gt basic"
    assert row["note"].startswith("tied with 1 other candidate(s): their paired 95 % interval")
    # Separated from both: recommended over both, no tie.
    clear = comparisons.with_columns(
        difference_hi=pl.when(pl.col("judge_a") == "b").then(-0.02).otherwise(pl.col("difference_hi")),
        separated=pl.lit(True),
        better=pl.when(pl.col("judge_a") == "b").then(pl.lit("b")).otherwise(pl.col("better")),
    )
    row = pick(practitioner_guide(cells_table(a, b, c), comparisons=clear), TEXT_ONLY, "gt", "sensitivity")
    assert (row["n_tied"], row["n_separated"], row["tied_with"], row["note"]) == (0, 2, None, None)


def test_missing_combination_gets_a_no_usable_configuration_row():
    cells = cells_table(
        cell("a", "audio", "none", sens=0.4),
        cell("b", "text", "gt", sens=0.3, spec=None),
    )
    table = practitioner_guide(cells)
    spec = pick(table, TEXT_ONLY, "gt", "specificity")  # the only text cell has no specificity
    assert spec["judge"] is None and spec["value"] is None and spec["n_candidates"] == 0
    assert spec["note"].startswith(guide.NO_USABLE_CONFIGURATION)
    assert pick(table, TEXT_ONLY, "gt", "sensitivity")["judge"] == "b"
    # The string 'none' (score files) marks audio-only cells just as null does.
    assert pick(table, AUDIO_ONLY, "none", "sensitivity")["judge"] == "a"
    assert set(table["transcript_quality"]) == {"gt", "none"}  # no ASR source was measured


def test_only_the_requested_condition_is_recommended():
    cells = cells_table(
        cell("a", "text", "gt", sens=0.2),
        cell("b", "text", "gt", sens=0.9, condition="noise_10"),
    )
    assert pick(practitioner_guide(cells), TEXT_ONLY, "gt", "sensitivity")["judge"] == "a"
    noisy = practitioner_guide(cells, condition="noise_10")
    assert pick(noisy, TEXT_ONLY, "gt", "sensitivity")["judge"] == "b"


def test_an_asr_cascade_is_never_offered_as_an_audio_native_judge():
    """The embedding baseline's 'audio' cell reads a Whisper transcript: it competes where that transcript is the
    input (audio only via that ASR model), never among the audio-native judges, and its row says what it is."""
    cascade = {**cell("m", "audio", "none", sens=0.9, spec=0.9, pb=0.01), "audio_input": "cascade via whisper_tiny_en"}
    native = {**cell("q", "audio", "none", sens=0.1, spec=0.5, pb=0.2), "audio_input": "native"}
    text = {**cell("m", "text", ASR, sens=0.5, spec=0.5, pb=0.1), "audio_input": "none"}
    cells = pl.DataFrame([cascade, native, text], schema={**CELL_SCHEMA, "audio_input": pl.String})
    table = practitioner_guide(cells)
    audio_native = pick(table, AUDIO_ONLY, "none", "sensitivity")
    assert (audio_native["judge"], audio_native["audio_input"]) == ("q", "native")
    via_asr = pick(table, AUDIO_ONLY, ASR, "sensitivity")
    assert (via_asr["judge"], via_asr["modality"], via_asr["audio_input"]) == (
        "m",
        "audio",
        "cascade via whisper_tiny_en",
    )
    assert pick(table, TEXT_ONLY, ASR, "sensitivity")["judge"] == "m"  # the text cell
    assert pick(table, TEXT_ONLY, ASR, "sensitivity")["modality"] == "text"


def test_complete_cells_rank_before_cells_lacking_a_severity():
    complete = {**cell("a", "text", "gt", sens=0.2), "n_severities": 5}
    lacking = {**cell("b", "text", "gt", sens=0.6), "n_severities": 4}
    cells = pl.DataFrame([complete, lacking], schema={**CELL_SCHEMA, "n_severities": pl.Int64})
    row = pick(practitioner_guide(cells), TEXT_ONLY, "gt", "sensitivity")
    assert row["judge"] == "a"


def test_a_cell_that_ignores_audio_is_not_recommended():
    cells = cells_table(
        cell("deaf", "audio", "none", sens=0.9),
        cell("listens", "audio", "none", sens=0.2),
    )
    flags = pl.DataFrame(
        {
            "judge": ["deaf", "listens"],
            "modality": ["audio", "audio"],
            "transcript_source": ["none", "none"],
            "prompt": ["basic", "basic"],
            "check": ["ignores_audio", "ignores_audio"],
            "flagged": [True, False],
        }
    )
    assert pick(practitioner_guide(cells), AUDIO_ONLY, "none", "sensitivity")["judge"] == "deaf"
    best = pick(practitioner_guide(cells, flags=flags), AUDIO_ONLY, "none", "sensitivity")
    assert best["judge"] == "listens" and best["n_candidates"] == 1
    assert best["note"] == "not recommended, ignores audio under the silence check: deaf"
    only_deaf = practitioner_guide(cells_table(cell("deaf", "audio", "none", sens=0.9)), flags=flags)
    row = pick(only_deaf, AUDIO_ONLY, "none", "sensitivity")
    assert row["judge"] is None and row["note"].endswith("ignores audio under the silence check: deaf")


def test_a_recommendation_below_the_minimum_support_says_it_is_not_estimable():
    table = cells_table(cell("j", "text", "gt", sens=0.3)).with_columns(
        sensitivity_lo=pl.lit(None, pl.Float64),
        sensitivity_hi=pl.lit(None, pl.Float64),
        sensitivity_status=pl.lit("not_estimable"),
        sensitivity_n_dialogues=pl.lit(2),
    )
    row = pick(practitioner_guide(table), TEXT_ONLY, "gt", "sensitivity")
    assert row["judge"] == "j" and row["value"] == 0.3 and row["ci_lo"] is None
    assert (row["status"], row["n_estimable"]) == ("not_estimable", 0)
    assert "not estimable: sensitivity rests on 2 dialogue(s), below the minimum support" in row["note"]
    assert "0 of 1 candidates are estimable" in row["note"]
    specificity = pick(practitioner_guide(table), TEXT_ONLY, "gt", "specificity")
    assert "not estimable" not in (specificity["note"] or "")


def test_an_estimable_candidate_is_listed_before_a_better_looking_one_that_is_not():
    """b's sensitivity (0.8) rests on too few dialogues: a (0.3, estimable) is listed first, and the row says how
    many candidates are estimable."""
    table = cells_table(cell("a", "text", "gt", sens=0.3), cell("b", "text", "gt", sens=0.8)).with_columns(
        sensitivity_status=pl.Series(["ok", "not_estimable"])
    )
    row = pick(practitioner_guide(table), TEXT_ONLY, "gt", "sensitivity")
    assert (row["judge"], row["status"], row["n_estimable"], row["n_candidates"]) == ("a", "ok", 1, 2)
