"""The report's wording of its intervals: the coverage figures it quotes are docs/metrics.md's, measured by
bench/coverage.py, and the size it quotes is the largest measured one not above the run's."""

from __future__ import annotations

import re
from pathlib import Path

from lalm_judge.report.coverage import MEASURED, MeasuredCoverage, coverage_statement, measured_at

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _table(marker: str) -> list[list[str]]:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", text, flags=re.S).group(1)
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in block.splitlines()[2:] if line]


def test_the_quoted_figures_are_the_docs_tables_lowest_per_size():
    by_size = {int(row[0]): MeasuredCoverage(float(row[1]), float(row[2])) for row in _table("coverage-by-size")}
    assert by_size == MEASURED
    rows = _table("coverage-table")
    for size, measured in MEASURED.items():
        at_size = [row for row in rows if int(row[1]) == size]
        assert len(at_size) == 4  # the four scenarios
        lowest_delta = min(float(re.search(r"\((.*?)\)", row[2]).group(1)) for row in at_size)
        assert (lowest_delta, min(float(row[4]) for row in at_size)) == (measured.delta, measured.sensitivity)
        for row in at_size:  # each row's one-sided misses add up to its non-coverage
            below, above = (float(x) for x in row[5].split(" / "))
            assert abs(100.0 - below - above - float(row[4])) < 0.11


def test_a_run_is_described_by_the_largest_measured_size_not_above_it():
    assert measured_at(9) is None and measured_at(None) is None
    assert measured_at(24) == (20, MEASURED[20]) and measured_at(100) == (100, MEASURED[100])
    assert "not measured below 10 dialogues (this run: 2)" in coverage_statement(2)
    statement = coverage_statement(24)
    assert f"at least {MEASURED[20].delta:.1f} % (Delta_i) and {MEASURED[20].sensitivity:.1f} %" in statement
    assert "tables of 20 dialogues" in statement and "this run's 24" in statement
