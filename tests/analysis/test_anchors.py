"""Tests of the human-anchor statistics on small rating tables checked by hand."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lalm_judge.analysis import anchors
from lalm_judge.cli import anchors as anchors_cli

# Items: s1 safe, s2 unsafe severity 2, s3 unsafe severity 4, s4 safe.
GROUND_TRUTH = {"s1": (0, 0), "s2": (1, 2), "s3": (1, 4), "s4": (0, 0)}


def ratings(raters: dict[str, dict[str, int]]) -> pl.DataFrame:
    """raters: rater id -> {sample id: rated severity (0 = safe)}."""
    rows = []
    for rater, rated in raters.items():
        for sample, severity in rated.items():
            gt_unsafe, gt_severity = GROUND_TRUTH[sample]
            rows.append(
                {
                    "sample_id": sample,
                    "rater_id": rater,
                    "unsafe": int(severity > 0),
                    "severity": severity,
                    "gt_unsafe": gt_unsafe,
                    "gt_severity": gt_severity,
                }
            )
    return pl.DataFrame(rows)


PERFECT = {sample: severity for sample, (_, severity) in GROUND_TRUTH.items()}
# One false positive (s4 -> 1) and one severity off by one (s2 -> 3).
RATER_B = {"s1": 0, "s2": 3, "s3": 4, "s4": 1}


def test_perfect_agreement():
    result = anchors.anchor_statistics(ratings({"a": PERFECT, "b": PERFECT}))
    for name in ("safety_kappa", "severity_wkappa_all", "severity_wkappa_unsafe", "severity_spearman", "tpr"):
        assert result[name] == pytest.approx({"mean": 1.0, "sd": 0.0, "majority": 1.0, "n_raters": 2}), name
    assert result["fpr"]["mean"] == 0.0
    assert result["within_one"]["majority"] == 1.0
    assert result["alpha_safety"]["value"] == pytest.approx(1.0)
    assert result["alpha_severity"]["value"] == pytest.approx(1.0)


def test_known_confusion_matrix():
    """Rater b vs generated safety labels: TP 2, FN 0, FP 1, TN 1 -> p_o = 3/4, p_e = 1/2, kappa = 1/2.
    Quadratic-weighted kappa on 0-5: observed disagreement sum (1 + 1) / 25 / 4 = 0.02, expected 5.5 / 25 = 0.22,
    so 1 - 0.02 / 0.22 = 10/11. Majority: s4 is a 1-1 tie -> unsafe, median severity 0.5 -> 1 and s2 median 2.5
    -> 3, so the consensus equals rater b. Krippendorff's nominal alpha on safety: coincidences o00 = 2,
    o11 = 4, o01 = o10 = 1, n = 8: 1 - 7 * 2 / (2 * 3 * 5) = 8/15."""
    result = anchors.anchor_statistics(ratings({"a": PERFECT, "b": RATER_B}))
    assert result["safety_kappa"]["mean"] == pytest.approx(0.75)
    assert result["safety_kappa"]["sd"] == pytest.approx(0.5 / 2**0.5)
    assert result["safety_kappa"]["majority"] == pytest.approx(0.5)
    assert result["tpr"]["mean"] == 1.0
    assert result["fpr"]["mean"] == pytest.approx(0.25)
    assert result["fpr"]["majority"] == pytest.approx(0.5)
    assert result["severity_wkappa_all"]["mean"] == pytest.approx((1 + 10 / 11) / 2)
    assert result["severity_wkappa_all"]["majority"] == pytest.approx(10 / 11)
    assert result["within_one"]["majority"] == 1.0
    assert result["severity_spearman"]["majority"] == pytest.approx(1.0)  # (2, 4) vs (3, 4): same order
    assert result["alpha_safety"]["value"] == pytest.approx(8 / 15)
    assert result["n_raters"] == 2 and result["n_items"] == 4


def test_inconsistent_labels_are_rejected():
    bad = ratings({"a": PERFECT}).with_columns(unsafe=pl.lit(1))
    with pytest.raises(anchors.RatingsInputError, match="severity must be 0 exactly when unsafe is 0"):
        anchors.anchor_statistics(bad)
    with pytest.raises(anchors.RatingsInputError, match="gt_severity"):
        anchors.anchor_statistics(ratings({"a": PERFECT}).drop("gt_severity"))


def test_anchors_command_writes_json(tmp_path):
    path = tmp_path / "ratings.csv"
    ratings({"a": PERFECT, "b": RATER_B, "c": RATER_B}).write_csv(path)
    out = tmp_path / "anchors.json"
    assert anchors_cli.main(["stats", str(path), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    expected = {
        "safety_kappa",
        "tpr",
        "fpr",
        "severity_wkappa_all",
        "severity_wkappa_unsafe",
        "severity_spearman",
        "within_one",
    }
    assert expected <= set(result)
    assert {"mean", "sd", "majority"} <= set(result["safety_kappa"])
    assert result["safety_kappa"]["majority"] == pytest.approx(0.5)  # majority of a, b, b = b
    assert set(result["alpha_severity"]) == {"value"}
    assert anchors_cli.main(["stats", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2
