"""Findings: the effects a run has measured beyond its noise, read off the cells table.

A finding is a (judge cell, severity i) whose 95 % cluster-bootstrap interval of Delta_i (`delta_<i>_lo`,
`delta_<i>_hi`) excludes 0: the judge's scores of severity-i variants differ from those of their safe
originals by more than resampling the dialogues explains. Delta_i is the value measured per severity (its
interval's coverage is measured in docs/metrics.md); sensitivity, a minimum over severities, is not used here. Findings
come from the clean cells: a control cell is read against its clean cell in the controls section (and often
covers a few dialogues only, `controls.dialogues`). A Delta_i resting on fewer dialogues than the minimum support
(`delta_<i>_status` `not_estimable`, `lalm_judge.analysis.support`) is no finding, whatever its interval; a
finding states the dialogues its Delta_i rests on (`delta_<i>_n_dialogues`, where the table has it).
"""

from __future__ import annotations

import polars as pl

from lalm_judge.analysis.engine import CELL_KEYS
from lalm_judge.analysis.support import NOT_ESTIMABLE
from lalm_judge.core.table_sets import severities_with_intervals
from lalm_judge.core.vocabulary import CLEAN

DROP = "drop"  # unsafe variants score lower (less safe) than their originals: the intended reaction
RISE = "rise"  # unsafe variants score higher (safer) than their originals

FINDING_SCHEMA = {
    **dict.fromkeys(CELL_KEYS, pl.String),
    "severity": pl.Int64,
    "delta": pl.Float64,
    "delta_lo": pl.Float64,
    "delta_hi": pl.Float64,
    "n_dialogues": pl.Int64,
    "direction": pl.String,
}


def _estimable(cells: pl.DataFrame, severity: int) -> pl.Expr:
    status = f"delta_{severity}_status"
    return (pl.col(status) != NOT_ESTIMABLE).fill_null(True) if status in cells.columns else pl.lit(True)


def _support(cells: pl.DataFrame, severity: int) -> pl.Expr:
    column = f"delta_{severity}_n_dialogues"
    return pl.col(column) if column in cells.columns else pl.col("n_dialogues")


def delta_findings(cells: pl.DataFrame) -> pl.DataFrame:
    """One row per (cell, severity) whose Delta_i interval excludes 0, highest severity first, then the largest
    effect; `direction` is 'drop' (lower bound > 0) or 'rise' (upper bound < 0). Clean cells only."""
    severities = severities_with_intervals(cells)
    if not severities:
        return pl.DataFrame(schema=FINDING_SCHEMA)
    cells = cells.filter(pl.col("condition") == CLEAN)
    frames = [
        cells.filter(_estimable(cells, i)).select(
            *(pl.col(key).cast(pl.String) for key in CELL_KEYS),
            pl.lit(i, pl.Int64).alias("severity"),
            pl.col(f"delta_{i}").alias("delta"),
            pl.col(f"delta_{i}_lo").alias("delta_lo"),
            pl.col(f"delta_{i}_hi").alias("delta_hi"),
            _support(cells, i).cast(pl.Int64).alias("n_dialogues"),
        )
        for i in severities
    ]
    deltas = pl.concat(frames)
    direction = pl.when(pl.col("delta_lo") > 0).then(pl.lit(DROP)).when(pl.col("delta_hi") < 0).then(pl.lit(RISE))
    return (
        deltas.with_columns(direction=direction)
        .filter(pl.col("direction").is_not_null())
        .sort(
            ["severity", pl.col("delta").abs(), *CELL_KEYS],
            descending=[True, True, *([False] * len(CELL_KEYS))],
            nulls_last=True,
        )
        .select(list(FINDING_SCHEMA))
    )
