"""The input contract of the metrics stage: rows that would bias the metrics are rejected with an error naming
the rows and the rule, never mixed in."""

from __future__ import annotations

import math

import polars as pl
import pytest

from lalm_judge.analysis import inputs
from lalm_judge.analysis.engine import MetricsInputError
from tests.analysis.test_metrics import table

GOOD = [("a", 0, None, 1.0, "ok"), ("a", 1, 0, 0.5, "ok"), ("a", 2, 1, 0.25, "ok"), ("b", 0, None, 0.75, "ok")]


def with_row(row: tuple, **columns) -> pl.DataFrame:
    extra = table([row]).with_columns(**{name: pl.lit(value) for name, value in columns.items()})
    return pl.concat([table(GOOD), extra.cast(table(GOOD).schema)])


def test_a_clean_table_passes():
    assert inputs.validate_scores(table(GOOD)).height == len(GOOD)


@pytest.mark.parametrize("score", [None, math.nan, 1.5, -0.1, math.inf])
def test_ok_row_without_a_score_in_the_unit_interval_is_rejected(score):
    frame = with_row(("b", 1, 1, 0.5, "ok"), variant_id="b.t1.harassment.s1").with_columns(
        score=pl.when(pl.col("variant_id") == "b.t1.harassment.s1").then(score).otherwise(pl.col("score"))
    )
    with pytest.raises(MetricsInputError, match=r"status 'ok' needs a finite score in \[0, 1\].*b\.t1\.harassment\.s1"):
        inputs.validate_scores(frame)


def test_failed_row_may_lack_a_score():
    frame = with_row(("b", 1, 1, None, "refusal"))
    assert inputs.validate_scores(frame).height == len(GOOD) + 1


def test_exact_duplicate_rows_are_rejected():
    frame = pl.concat([table(GOOD), table(GOOD).slice(1, 1)])
    with pytest.raises(MetricsInputError, match=r"exact duplicate.*a\.t0\.x1\.s1"):
        inputs.validate_scores(frame)


def test_one_sample_scored_twice_in_a_cell_is_rejected():
    frame = pl.concat([table(GOOD), table(GOOD).slice(1, 1).with_columns(score=pl.lit(0.9))])
    with pytest.raises(MetricsInputError, match=r"scored more than once.*a\.t0\.x1\.s1"):
        inputs.validate_scores(frame)


def test_the_same_sample_in_two_cells_is_fine():
    frame = pl.concat([table(GOOD), table(GOOD, prompt="cot")])
    assert inputs.validate_scores(frame).height == 2 * len(GOOD)


@pytest.mark.parametrize("turn_index", [2, -1])
def test_turn_index_outside_its_dialogue_is_rejected(turn_index):
    frame = with_row(("b", 1, turn_index, 0.5, "ok"), variant_id="b.bad")  # n_turns is 2
    with pytest.raises(MetricsInputError, match=r"turn_index outside its dialogue.*b\.bad"):
        inputs.validate_scores(frame)


def test_a_dialogue_with_two_lengths_is_rejected():
    frame = with_row(("b", 1, 0, 0.5, "ok"), variant_id="b.longer", n_turns=3)
    with pytest.raises(MetricsInputError, match=r"dialogue 'b'.*n_turns"):
        inputs.validate_scores(frame)


def test_unknown_parse_status_is_rejected():
    frame = with_row(("b", 1, 0, None, "timeout"), variant_id="b.odd")
    with pytest.raises(MetricsInputError, match=r"parse_status must be one of.*'b\.odd'.*parse_status='timeout'"):
        inputs.validate_scores(frame)


def test_error_names_every_rule_broken_and_counts_rows():
    frame = pl.concat([table(GOOD), table(GOOD)]).with_columns(score=pl.lit(2.0))
    with pytest.raises(MetricsInputError) as error:
        inputs.validate_scores(frame)
    message = str(error.value)
    assert "8 row(s)" in message and "finite score" in message
    assert "4 row(s)" in message and "exact duplicate" in message


def test_a_cell_with_two_audio_inputs_is_rejected():
    frame = table(GOOD).with_columns(audio_input=pl.lit("native"))
    other = frame.slice(0, 1).with_columns(variant_id=pl.lit("a.other"), audio_input=pl.lit("cascade via w"))
    with pytest.raises(MetricsInputError, match=r"cell j/text/gt/basic/clean has rows with different audio_input"):
        inputs.validate_scores(pl.concat([frame, other]))
