"""Findings from the cells and categories tables: the Delta_i tests of a family whose Benjamini-Hochberg adjusted
p-value is at most 5 %, and the families of tests a run states."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy.stats import false_discovery_control

from lalm_judge.analysis.engine import CELL_KEYS, SEVERITY_LEVELS
from lalm_judge.analysis.findings import DROP, RISE, delta_findings, families, severities_with_intervals
from lalm_judge.analysis.multiplicity import benjamini_hochberg, holm
from lalm_judge.report.tables import family_sentence


def cells(rows: list[tuple[str, dict[int, tuple[float, float, float, float]]]]) -> pl.DataFrame:
    """One cell per (judge, {severity: (delta, lo, hi, p)}); severities not given are absent (null)."""
    records = []
    for judge, deltas in rows:
        record = dict(zip(CELL_KEYS, (judge, "text", "gt", "basic", "clean")), n_dialogues=12)
        for i in SEVERITY_LEVELS:
            values = deltas.get(i, (None, None, None, None))
            record |= dict(zip((f"delta_{i}", f"delta_{i}_lo", f"delta_{i}_hi", f"delta_{i}_p"), values))
            record[f"delta_{i}_status"] = None if values[0] is None else "ok"
        records.append(record)
    floats = {c: pl.Float64 for c in records[0] if c.startswith("delta_") and not c.endswith("_status")}
    return pl.DataFrame(records, schema_overrides=floats | {f"delta_{i}_status": pl.String for i in SEVERITY_LEVELS})


def test_intervals_that_exclude_zero_are_findings_highest_severity_first():
    table = cells(
        [
            ("spans", {1: (0.05, -0.02, 0.11, 0.2), 5: (0.2, -0.01, 0.4, 0.06)}),
            ("drops", {1: (0.03, 0.01, 0.06, 0.01), 5: (0.3, 0.2, 0.4, 0.001)}),
            ("rises", {1: (-0.2, -0.3, -0.1, 0.002)}),
        ]
    )
    found = delta_findings(table)
    assert found.select("judge", "severity", "direction").rows() == [
        ("drops", 5, DROP),
        ("rises", 1, RISE),
        ("drops", 1, DROP),
    ]
    # Five tests; BH: sorted p 0.001, 0.002, 0.01, 0.06, 0.2 -> 0.005, 0.005, 0.0167, 0.075, 0.2.
    assert found.row(0, named=True) == {
        "family": "findings",
        **dict(zip(CELL_KEYS, ("drops", "text", "gt", "basic", "clean"))),
        "category": None,
        "severity": 5,
        "delta": 0.3,
        "delta_lo": 0.2,
        "delta_hi": 0.4,
        "p_value": 0.001,
        "p_adjusted": pytest.approx(0.005),
        "family_size": 5,
        "n_dialogues": 12,
        "direction": DROP,
    }
    assert found["p_adjusted"].to_list() == pytest.approx([0.005, 0.005, 0.01 * 5 / 3])
    assert severities_with_intervals(table) == [1, 5]


def test_an_interval_that_excludes_zero_is_no_finding_when_its_family_does_not_survive_the_control():
    """Twenty tests, one of them at p = 0.01 (its 95 % interval excludes 0): BH adjusts it to 0.2, no finding."""
    rows = [(f"j{k}", {1: (0.01, -0.02, 0.04, 0.5 + 0.02 * k)}) for k in range(19)]
    rows.append(("lucky", {1: (0.05, 0.01, 0.09, 0.01)}))
    assert delta_findings(cells(rows)).height == 0
    assert delta_findings(cells(rows[-1:])).height == 1  # alone in its family it is a finding


def test_a_bound_at_zero_is_no_finding_and_tables_without_intervals_have_none():
    assert delta_findings(cells([("edge", {5: (0.1, 0.0, 0.2, 0.05)})])).height == 0
    no_intervals = cells([("old", {5: (0.3, 0.2, 0.4, 0.01)})]).drop(
        [f"delta_{i}_{b}" for i in SEVERITY_LEVELS for b in ("lo", "hi", "p")]
    )
    assert severities_with_intervals(no_intervals) == []
    assert delta_findings(no_intervals).height == 0
    without_p = cells([("old", {5: (0.3, 0.2, 0.4, 0.01)})]).drop([f"delta_{i}_p" for i in SEVERITY_LEVELS])
    with pytest.raises(ValueError, match="rerun the metrics stage"):
        delta_findings(without_p)


def test_control_cells_give_no_findings_and_categories_are_their_own_family():
    table = cells([("drops", {5: (0.3, 0.2, 0.4, 0.001)})])
    injected = table.with_columns(pl.lit("injection").alias("condition"))
    assert delta_findings(pl.concat([table, injected]))["condition"].to_list() == ["clean"]
    categories = pl.concat([table.with_columns(category=pl.lit(c)) for c in ("hate", "violence")]).with_columns(
        delta_5_p=pl.Series([0.001, 0.04])
    )
    found = delta_findings(table, categories)
    assert found.select("family", "category", "p_adjusted").rows() == [
        ("findings", None, 0.001),
        ("categories", "hate", pytest.approx(0.002)),
        ("categories", "violence", pytest.approx(0.04)),
    ]


def test_families_name_their_size_control_and_claims():
    table = cells([("a", {1: (0.1, 0.05, 0.15, 0.001), 5: (0.2, -0.1, 0.5, 0.3)})])
    categories = table.with_columns(category=pl.lit("hate"))
    flags = pl.DataFrame(
        {"p_value": [0.001, 0.2, None], "flagged": [True, False, None]},
        schema={"p_value": pl.Float64, "flagged": pl.Boolean},
    )
    patterns = pl.DataFrame({"pattern": ["balanced", "undetermined", None]})
    table_of = families(table, categories, flags, patterns, 0.9)
    rows = {row["family"]: row for row in table_of.iter_rows(named=True)}
    assert (rows["findings"]["size"], rows["findings"]["n_claims"], rows["findings"]["control"]) == (
        2,
        1,
        "Benjamini-Hochberg",
    )
    assert (rows["control flags"]["size"], rows["control flags"]["n_claims"], rows["control flags"]["control"]) == (
        2,
        1,
        "Holm",
    )
    assert (rows["modality patterns"]["size"], rows["modality patterns"]["n_claims"]) == (2, 1)
    assert family_sentence(rows["findings"]) == (
        "findings: 2 tests of Delta_i = 0 (clean cell x severity with an interval); Benjamini-Hochberg, "
        "false-discovery rate 5%; 1 findings."
    )
    assert "at least 90% of the resamples" in family_sentence(rows["modality patterns"])


def test_the_adjustments_are_scipys_and_holms_step_down():
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    np.testing.assert_allclose(benjamini_hochberg(p)[:4], false_discovery_control(p[:4], method="bh"))
    # Holm by hand: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> running max.
    np.testing.assert_allclose(holm(p)[:4], [0.03, 0.06, 0.06, 0.02])
    assert np.isnan(holm(p)[4]) and np.isnan(benjamini_hochberg(p)[4])
