"""Families of tests in the pairwise track: bootstrap p-values, Holm and Benjamini-Hochberg against hand
computations, and the findings family on seeded null tables (a judge that guesses: no claim at the stated rate)."""

import numpy as np
import polars as pl
import pytest

from lalm_judge.pairwise.families import adjust, benjamini_hochberg, bootstrap_p_value, holm
from lalm_judge.pairwise.metrics import PairwiseMetricSettings, accuracy_findings, estimate_cell, validate_predictions


def test_bootstrap_p_values_by_hand():
    boot = np.array([0.1, 0.2, 0.3, 0.4, np.nan])  # the empty resample is left out
    assert bootstrap_p_value(boot, 0.25) == pytest.approx(3 / 5)  # (1 + two at or below) / (1 + four)
    assert bootstrap_p_value(boot, 0.0) == pytest.approx(1 / 5)
    assert bootstrap_p_value(boot, 0.0, "two-sided") == pytest.approx(2 / 5)
    assert bootstrap_p_value(boot, 0.25, "two-sided") == 1.0
    assert bootstrap_p_value(np.array([np.nan]), 0.0) is None
    with pytest.raises(ValueError, match="unknown alternative 'less'"):
        bootstrap_p_value(boot, 0.0, "less")


def test_holm_and_benjamini_hochberg_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005 x 4, 0.01 x 3, 0.03 x 2, 0.04 x 1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06.
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted p x 4 / rank = 0.02, 0.02, 0.04, 0.04, each the minimum of those at or above its rank.
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust([], "holm").size == 0
    with pytest.raises(ValueError, match="unknown multiplicity correction 'bonferroni'"):
        adjust(p, "bonferroni")


def guessing_cells(rng: np.random.Generator, n_cells: int, n_items: int):
    """Cells whose verdicts are drawn independently of labels balanced over 1, 2 and Tie in each aspect, so that
    chance is exactly 1/3 everywhere (the least favourable null: the accuracy is chance, not below it)."""
    labels = np.stack([rng.permutation(["1", "2", "Tie"] * (n_items // 3)) for _ in range(2)], axis=1)
    settings = PairwiseMetricSettings(n_boot=200, seed=0, min_items=10)
    cells = []
    for cell in range(n_cells):
        rows = [
            {"item_id": f"i{item:03d}", "aspect": aspect, "label": labels[item, column], "prediction": guess}
            for item in range(n_items)
            for (column, aspect), guess in zip(enumerate(("helpfulness", "gender")), rng.choice(["1", "2", "Tie"], 2))
        ]
        keys = {"judge": f"j{cell}", "modality": "audio", "transcript_source": "none", "prompt": "sagelm"}
        cells.append((keys, estimate_cell(validate_predictions(pl.DataFrame(rows)), settings)))
    return cells


def test_a_guessing_judge_is_claimed_at_most_at_the_stated_rate():
    """100 seeded null tables of four guessing cells on 21 items (20 hypotheses: all, two dimensions, two aspects
    each): with every null true, the false-discovery rate is the share of tables with any claim, at most the
    one-sided 2.5 % (binomial slack: at most 5 of 100). Uncorrected, the same tables would claim far more often."""
    rng = np.random.default_rng(7)
    claimed, uncorrected = 0, 0
    for _ in range(100):
        rows = accuracy_findings(guessing_cells(rng, n_cells=4, n_items=21))
        assert {row["family_size"] for row in rows} == {20} and {row["chance"] for row in rows} == {1 / 3}
        claimed += any(row["finding"] for row in rows)
        uncorrected += any(row["p_value"] <= 0.025 for row in rows)
    assert claimed <= 5 < uncorrected
