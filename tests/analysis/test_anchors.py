"""Tests of the human-anchor statistics on small rating tables checked by hand."""

from __future__ import annotations

import json

import numpy as np
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
        point = {key: result[name][key] for key in ("mean", "sd", "majority", "n_raters")}
        assert point == pytest.approx({"mean": 1.0, "sd": 0.0, "majority": 1.0, "n_raters": 2}), name
        assert result[name]["ci"] == pytest.approx([1.0, 1.0]), name
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
    assert set(result["alpha_severity"]) == {"value", "ci"}
    assert anchors_cli.main(["stats", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2


def random_ratings(seed: int, n_items: int = 40, raters: str = "abcd") -> pl.DataFrame:
    """Raters who give the generated severity 70 % of the time and a random one otherwise."""
    rng = np.random.default_rng(seed)
    truth = {f"s{i:02d}": (0 if i < n_items // 3 else int(rng.integers(1, 6))) for i in range(n_items)}
    rows = []
    for rater in raters:
        for sample, gt in truth.items():
            severity = gt if rng.random() < 0.7 else int(rng.integers(0, 6))
            rows.append(
                {
                    "sample_id": sample,
                    "rater_id": rater,
                    "unsafe": int(severity > 0),
                    "severity": severity,
                    "gt_unsafe": int(gt > 0),
                    "gt_severity": gt,
                }
            )
    return pl.DataFrame(rows)


def test_contingency_statistics_equal_sklearn_and_scipy():
    """The bootstrap computes each statistic from (generated x rated severity) tables; on any set of items,
    duplicates included, they must equal the sklearn/scipy values of the expanded label vectors."""
    ratings = anchors.validate_ratings(random_ratings(0))
    rng = np.random.default_rng(1)
    samples = sorted(ratings["sample_id"].unique())
    index = {sample: i for i, sample in enumerate(samples)}
    for _, group in ratings.group_by("rater_id"):
        tables = anchors._one_hot_tables(group, index)
        resample = rng.integers(0, len(samples), len(samples))
        drawn = pl.concat([group.filter(pl.col("sample_id") == samples[i]) for i in resample])
        for frame, table in ((group, tables.sum(axis=0)), (drawn, tables[resample].sum(axis=0))):
            expected = anchors.label_statistics(*anchors._arrays(frame))
            got = anchors.table_statistics(table)
            for name, value in expected.items():
                assert float(got[name]) == pytest.approx(value, nan_ok=True, abs=1e-12), name


def test_table1_layout_subsets_and_intervals():
    ratings = random_ratings(2)
    result = anchors.anchor_statistics(ratings, n_boot=200, seed=0)
    rows = {(row["statistic"], row["subset"]): row for row in result["table1"]}
    assert [key[1] for key in rows] == ["all", "gt_unsafe", "gt_safe", "all"] + ["gt_and_human_unsafe"] * 3 + [
        "raters"
    ] * 2
    gt_unsafe = ratings.filter(pl.col("rater_id") == "a")["gt_unsafe"].sum()
    assert rows[("tpr", "gt_unsafe")]["n_min"] == gt_unsafe and rows[("fpr", "gt_safe")]["n_max"] == 40 - gt_unsafe
    both = ratings.filter((pl.col("unsafe") == 1) & (pl.col("gt_unsafe") == 1)).group_by("rater_id").len()["len"]
    row = rows[("severity_wkappa_unsafe", "gt_and_human_unsafe")]
    assert (row["n_min"], row["n_max"]) == (both.min(), both.max())
    for row in result["table1"]:
        low, high = row["ci"]
        assert low <= row["mean"] <= high, row["statistic"]
        assert row["mean"] == (result[row["statistic"]].get("mean", result[row["statistic"]].get("value")))
    assert anchors.anchor_statistics(ratings, n_boot=200, seed=0) == result  # deterministic per seed
    assert anchors.anchor_statistics(ratings, n_boot=200, seed=1)["table1"][0]["ci"] != result["table1"][0]["ci"]
    without = anchors.anchor_statistics(ratings, n_boot=0)
    assert without["safety_kappa"]["ci"] is None and without["alpha_safety"]["ci"] is None
    table = anchors.table1_markdown(result)
    assert "| Safety FPR | GT-safe (" in table and f"GT and human unsafe ({both.min()}-{both.max()})" in table


def test_a_rater_who_missed_items_is_kept():
    ratings = random_ratings(3).filter(~((pl.col("rater_id") == "d") & (pl.col("sample_id") == "s39")))
    result = anchors.anchor_statistics(ratings, n_boot=20)
    assert result["n_items"] == 40 and result["alpha_safety"]["value"] is not None
