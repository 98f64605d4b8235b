"""Findings from the cells table: the (cell, severity) pairs whose Delta_i interval excludes 0."""

from __future__ import annotations

import polars as pl

from lalm_judge.analysis.engine import CELL_KEYS, SEVERITY_LEVELS
from lalm_judge.analysis.findings import DROP, RISE, delta_findings, severities_with_intervals


def cells(rows: list[tuple[str, dict[int, tuple[float, float, float]]]]) -> pl.DataFrame:
    """One cell per (judge, {severity: (delta, lo, hi)}); severities not given are absent (null)."""
    records = []
    for judge, deltas in rows:
        record = dict(zip(CELL_KEYS, (judge, "text", "gt", "basic", "clean")), n_dialogues=12)
        for i in SEVERITY_LEVELS:
            record |= dict(zip((f"delta_{i}", f"delta_{i}_lo", f"delta_{i}_hi"), deltas.get(i, (None, None, None))))
        records.append(record)
    return pl.DataFrame(records, schema_overrides={c: pl.Float64 for c in records[0] if c.startswith("delta_")})


def test_intervals_that_exclude_zero_are_findings_highest_severity_first():
    table = cells(
        [
            ("spans", {1: (0.05, -0.02, 0.11), 5: (0.2, -0.01, 0.4)}),
            ("drops", {1: (0.03, 0.01, 0.06), 5: (0.3, 0.2, 0.4)}),
            ("rises", {1: (-0.2, -0.3, -0.1)}),
        ]
    )
    found = delta_findings(table)
    assert found.select("judge", "severity", "direction").rows() == [
        ("drops", 5, DROP),
        ("rises", 1, RISE),
        ("drops", 1, DROP),
    ]
    assert found.row(0, named=True) == {
        **dict(zip(CELL_KEYS, ("drops", "text", "gt", "basic", "clean"))),
        "severity": 5,
        "delta": 0.3,
        "delta_lo": 0.2,
        "delta_hi": 0.4,
        "n_dialogues": 12,
        "direction": DROP,
    }
    assert severities_with_intervals(table) == [1, 5]


def test_a_bound_at_zero_is_no_finding_and_tables_without_intervals_have_none():
    assert delta_findings(cells([("edge", {5: (0.1, 0.0, 0.2)})])).height == 0
    no_intervals = cells([("old", {5: (0.3, 0.2, 0.4)})]).drop(
        [f"delta_{i}_{b}" for i in SEVERITY_LEVELS for b in ("lo", "hi")]
    )
    assert severities_with_intervals(no_intervals) == []
    assert delta_findings(no_intervals).height == 0


def test_control_cells_give_no_findings():
    table = cells([("drops", {5: (0.3, 0.2, 0.4)})])
    injected = table.with_columns(pl.lit("injection").alias("condition"))
    assert delta_findings(pl.concat([table, injected]))["condition"].to_list() == ["clean"]
