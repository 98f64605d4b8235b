"""What the intervals are, in numbers: the coverage of the 95 % intervals measured by simulation, per number of
dialogues, from which the report words its intervals at a run's size.

`MEASURED` holds, per size of the simulated tables, the lowest coverage over bench/coverage.py's scenarios of a
Delta_i interval and of sensitivity's interval, as the bench prints them ("Per size, the lowest over the
scenarios"; the table in docs/metrics.md, "Coverage of the intervals, measured", comes from the same run and
tests/report/test_coverage.py checks the two agree). A run is described by the largest measured size not
above its own: fewer dialogues than the smallest measured size are not described at all.
"""

from __future__ import annotations

from dataclasses import dataclass

COMMAND = "OMP_NUM_THREADS=1 POLARS_MAX_THREADS=2 .venv/bin/python -m bench.coverage"


@dataclass(frozen=True)
class MeasuredCoverage:
    """Lowest coverage (%) over the simulated scenarios of one size."""

    delta: float
    sensitivity: float


MEASURED = {
    10: MeasuredCoverage(delta=92.6, sensitivity=94.0),
    20: MeasuredCoverage(delta=93.3, sensitivity=95.0),
    40: MeasuredCoverage(delta=92.6, sensitivity=94.1),
    100: MeasuredCoverage(delta=93.1, sensitivity=93.7),
}


def measured_at(n_dialogues: int | None) -> tuple[int, MeasuredCoverage] | None:
    """The largest measured size not above n_dialogues and its coverage; None below the smallest."""
    if n_dialogues is None:
        return None
    sizes = [size for size in MEASURED if size <= n_dialogues]
    return (max(sizes), MEASURED[max(sizes)]) if sizes else None


def coverage_statement(n_dialogues: int | None) -> str:
    """How the report words its 95 % intervals at a run of n_dialogues (the fewest a clean cell's interval rests on)."""
    measured = measured_at(n_dialogues)
    if measured is None:
        smallest = min(MEASURED)
        at = "" if n_dialogues is None else f" (this run: {n_dialogues})"
        return (
            f"nominal 95 % intervals whose coverage was not measured below {smallest} dialogues{at}: read them as "
            "rough (docs/metrics.md)"
        )
    size, coverage = measured
    run = f"this run's {n_dialogues}" if size != n_dialogues else "this run's size"
    return (
        f"nominal 95 % intervals; on simulated tables of {size} dialogues (the largest measured size not above "
        f"{run}) they covered the truth in at least {coverage.delta:.1f} % (Delta_i) and {coverage.sensitivity:.1f} % "
        "(sensitivity) of the tables (docs/metrics.md)"
    )
