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
    assert {"value", "ci", "status", "n", "bootstrap_unsupported"} <= set(result["alpha_severity"])
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


def overlap_ratings(doubly_rated: int, n_items: int = 24, seed: int = 4) -> pl.DataFrame:
    """Three raters who split the items between them (no overlap); the first `doubly_rated` items are also rated
    by the next rater, all items when `doubly_rated` is n_items (every item by every rater: full overlap)."""
    full = random_ratings(seed, n_items=n_items, raters="abc")
    items = sorted(full["sample_id"].unique())
    if doubly_rated == n_items:
        return full
    owner = {sample: "abc"[i % 3] for i, sample in enumerate(items)}
    second = {sample: "abc"[(i + 1) % 3] for i, sample in enumerate(items[:doubly_rated])}
    keep = [owner[s] == r or second.get(s) == r for s, r in zip(full["sample_id"], full["rater_id"])]
    return full.filter(pl.Series(keep))


@pytest.mark.parametrize("doubly_rated", [0, 3, 24], ids=["no_overlap", "partial_overlap", "full_overlap"])
def test_statistics_at_any_point_of_a_study_at_1000_resamples(tmp_path, doubly_rated, capsys):
    """No overlap yet (alpha has no pairable item), partial overlap (3 doubly rated items: too few for alpha) and
    full overlap: numbers or "not estimable", each with its n, never an exception."""
    path = tmp_path / "ratings.csv"
    frame = overlap_ratings(doubly_rated)
    frame.write_csv(path)
    out = tmp_path / "anchors.json"
    assert anchors_cli.main(["stats", str(path), "--out", str(out), "--bootstrap", "1000"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    for name in ("alpha_safety", "alpha_severity"):
        alpha = result[name]
        assert alpha["n"] == doubly_rated
        if doubly_rated == 0:
            assert alpha["status"] == "not_estimable" and alpha["value"] is None and alpha["ci"] is None
            assert "no items rated by two or more raters" in alpha["reason"]
            assert alpha["bootstrap_unsupported"] == 1000
        elif doubly_rated < anchors.MIN_ALPHA_ITEMS:  # a value on 3 items, but too few to report
            assert alpha["status"] == "too_few_items" and alpha["value"] is not None and alpha["ci"] is None
            assert alpha["reason"] == "only 3 items rated by two or more raters; alpha needs at least 10"
        else:
            assert alpha["status"] == "ok" and alpha["ci"] is not None
            assert 0 <= alpha["bootstrap_unsupported"] < 1000
    assert (doubly_rated == 24) == (result["alpha_safety"]["bootstrap_unsupported"] == 0)
    assert ("| Inter-rater alpha (safety) | rated by 2+ (0) | not estimable |" in printed) == (doubly_rated == 0)
    too_few = "| Inter-rater alpha (safety) | rated by 2+ (3) | too few items (3 rated by 2+, 10 needed) | - |"
    assert (too_few in printed) == (doubly_rated == 3)
    # Each rater's statistics rest on that rater's items: n per rater is the size of their subset.
    for rater, group in frame.group_by("rater_id"):
        per_rater = result["tpr"]["per_rater"][rater[0]]
        assert per_rater["n"] == group.filter(pl.col("gt_unsafe") == 1).height
        assert result["safety_kappa"]["per_rater"][rater[0]]["n"] == group.height
    tpr = result["tpr"]
    assert tpr["status"] == "ok" and tpr["ci"] is not None and tpr["n_raters"] == 3
    assert tpr["n_majority"] == frame.unique("sample_id").filter(pl.col("gt_unsafe") == 1).height


def test_undefined_statistics_are_not_estimable_with_their_n():
    """Raters who have rated only generated-safe items, all as safe: TPR has no items; kappa is undefined on its
    items (one class on both sides); FPR is 0 on them."""
    frame = ratings({"a": {"s1": 0, "s4": 0}, "b": {"s1": 0}})
    result = anchors.anchor_statistics(frame, n_boot=1000)
    assert result["tpr"]["status"] == "not_estimable" and result["tpr"]["n_max"] == 0
    assert result["tpr"]["reason"] == "no items support it yet" and result["tpr"]["ci"] is None
    kappa = result["safety_kappa"]
    assert kappa["status"] == "not_estimable" and (kappa["n_min"], kappa["n_max"]) == (1, 2)
    assert kappa["reason"].startswith("undefined on its 2 items")
    assert result["fpr"]["mean"] == 0.0 and result["fpr"]["per_rater"]["a"] == {"value": 0.0, "n": 2}
    assert result["alpha_safety"]["status"] == "not_estimable" and result["alpha_safety"]["n"] == 1
    assert "not estimable" in anchors.table1_markdown(result)


def test_an_empty_table_gives_an_all_not_estimable_result():
    empty = ratings({"a": PERFECT}).clear()
    result = anchors.anchor_statistics(empty, n_boot=1000)
    assert result["n_items"] == 0 and result["n_raters"] == 0
    assert {row["status"] for row in result["table1"]} == {"not_estimable"}
    assert "0 raters, 0 items" in anchors.table1_markdown(result)


def test_only_rows_of_the_item_role_count():
    frame = ratings({"a": PERFECT, "b": RATER_B}).with_columns(role=pl.lit("item"))
    gold = frame.head(2).with_columns(sample_id=pl.lit("g1") + pl.col("rater_id"), role=pl.lit("gold"))
    counted, left_out = anchors.select_counted(pl.concat([frame, gold]))
    assert counted.height == frame.height and left_out == {"gold": 2}
    assert anchors.select_counted(frame.drop("role"))[1] == {}
