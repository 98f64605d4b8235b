"""The statistical benchmarks at a reduced size: bench/coverage.py prints coverage per tail, and bench/multiplicity.py
counts the claims of null tables, which stay within their families' stated level."""

from __future__ import annotations

from scipy.stats import binom

from bench import coverage, multiplicity
from lalm_judge.analysis.multiplicity import LEVEL


def test_the_coverage_bench_prints_each_tail(capsys):
    coverage.main(["--replicates", "4", "--batch", "4", "--bootstrap", "50", "--sizes", "10", "--scenarios", "equal"])
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("| scenario"))
    assert "lower bound above / upper bound below the truth" in header
    row = next(line for line in printed.splitlines() if line.startswith("| equal"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    below, above = (float(x) for x in cells[5].split(" / "))
    assert 0.0 <= below <= 100.0 and 0.0 <= above <= 100.0
    assert float(cells[4]) == 100.0 - below - above  # covered = 100 - the two one-sided misses
    assert printed.splitlines()[-1].startswith("coverage delta=")


def test_null_tables_give_no_more_claims_than_each_family_allows():
    """12 null tables of 4 judges on 12 dialogues (the full bench: 200 per row, docs/metrics.md): the tables with a
    finding, a category finding or a flag are as few as a rate at the stated 5 % gives (99th percentile of the
    binomial), while the uncorrected rule, any Delta_i interval excluding 0, is not."""
    rates = multiplicity.measure(replicates=12, n_dialogues=12, n_judges=4, n_boot=100, seed=1)
    allowed = binom.ppf(0.99, rates.replicates, LEVEL)
    assert rates.replicates == 12
    for family in ("findings", "categories", "flags"):
        assert getattr(rates, family) <= allowed, (family, rates)
    assert rates.uncorrected > allowed
