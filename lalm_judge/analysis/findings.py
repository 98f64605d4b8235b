"""Findings: the effects a run has measured beyond its noise, read off the cells and categories tables, and the
families of tests every statement of a run belongs to (`lalm_judge.analysis.multiplicity`).

A finding is a (clean judge cell, severity i) whose Delta_i differs from 0 beyond what resampling the dialogues
explains, with the family of all such tests controlled: every estimable Delta_i of the clean cells is one test (its
two-sided bootstrap-t p-value `delta_<i>_p`, whose 95 % interval is `delta_<i>_lo`, `delta_<i>_hi`), and a finding
is a test whose Benjamini-Hochberg adjusted p-value is at most 5 % (a false-discovery rate of 5 %; with no effect
anywhere, a 5 % chance of any finding at all). Delta_i is the value measured per severity; sensitivity, a minimum over
severities, is not tested. Findings come from the clean cells only: a control cell is read against its clean cell in
the controls section, under its own family. A Delta_i resting on fewer dialogues than the minimum support
(`delta_<i>_status` `not_estimable`) is no test and no finding. The per-category Delta_i of the clean cells
(categories.parquet) are a second family, controlled the same way on their own. A finding states its family, the
family's size, its p-value and adjusted p-value, and the dialogues its Delta_i rests on.
"""

from __future__ import annotations

import polars as pl

from lalm_judge.analysis.engine import CELL_KEYS
from lalm_judge.analysis.multiplicity import (
    BENJAMINI_HOCHBERG,
    CATEGORIES,
    CONTROL_FLAGS,
    FINDINGS,
    HOLM,
    LEVEL,
    PATTERNS,
    STABILITY,
    Family,
    benjamini_hochberg,
    families_table,
)
from lalm_judge.analysis.support import WITH_INTERVAL
from lalm_judge.core.table_sets import severities_with_intervals
from lalm_judge.core.taxonomy import SEVERITIES
from lalm_judge.core.vocabulary import CLEAN

DROP = "drop"  # unsafe variants score lower (less safe) than their originals: the intended reaction
RISE = "rise"  # unsafe variants score higher (safer) than their originals
# The modality patterns' label for a judge whose label the resamples do not give often enough.
UNDETERMINED = "undetermined"

FINDING_SCHEMA = {
    "family": pl.String,
    **dict.fromkeys(CELL_KEYS, pl.String),
    "category": pl.String,
    "severity": pl.Int64,
    "delta": pl.Float64,
    "delta_lo": pl.Float64,
    "delta_hi": pl.Float64,
    "p_value": pl.Float64,
    "p_adjusted": pl.Float64,
    "family_size": pl.Int64,
    "n_dialogues": pl.Int64,
    "direction": pl.String,
}


def _tested(table: pl.DataFrame, family: str, with_category: bool) -> pl.DataFrame:
    """Every estimable Delta_i of the clean rows of a cells or categories table, one row per (row, severity)."""
    severities = [i for i in severities_with_intervals(table) if i in SEVERITIES]
    if not severities:
        return pl.DataFrame(schema={k: v for k, v in FINDING_SCHEMA.items() if k != "direction"})
    missing = [f"delta_{i}_p" for i in severities if f"delta_{i}_p" not in table.columns]
    if missing:
        raise ValueError(
            f"the {family} table has Delta_i intervals but no p-values ({', '.join(missing)}): it was written by an "
            "older metrics stage; rerun the metrics stage (`lalm-judge metrics`)"
        )
    clean = table.filter(pl.col("condition") == CLEAN)
    frames = [
        clean.filter(
            pl.col(f"delta_{i}_p").is_not_null()
            & (
                pl.col(f"delta_{i}_status").is_in(WITH_INTERVAL)
                if f"delta_{i}_status" in clean.columns
                else pl.lit(True)
            )
        ).select(
            pl.lit(family).alias("family"),
            *(pl.col(key).cast(pl.String) for key in CELL_KEYS),
            (pl.col("category") if with_category else pl.lit(None)).cast(pl.String).alias("category"),
            pl.lit(i, pl.Int64).alias("severity"),
            pl.col(f"delta_{i}").alias("delta"),
            pl.col(f"delta_{i}_lo").alias("delta_lo"),
            pl.col(f"delta_{i}_hi").alias("delta_hi"),
            pl.col(f"delta_{i}_p").alias("p_value"),
            (pl.col(f"delta_{i}_n_dialogues") if f"delta_{i}_n_dialogues" in clean.columns else pl.col("n_dialogues"))
            .cast(pl.Int64)
            .alias("n_dialogues"),
        )
        for i in severities
    ]
    tested = pl.concat(frames)
    adjusted = benjamini_hochberg(tested["p_value"].to_numpy())
    return tested.with_columns(
        pl.Series("p_adjusted", adjusted).fill_nan(None), pl.lit(tested.height, pl.Int64).alias("family_size")
    )


def _findings(tested: pl.DataFrame) -> pl.DataFrame:
    direction = pl.when(pl.col("delta_lo") > 0).then(pl.lit(DROP)).when(pl.col("delta_hi") < 0).then(pl.lit(RISE))
    return (
        tested.with_columns(direction=direction)
        .filter((pl.col("p_adjusted") <= LEVEL) & pl.col("direction").is_not_null())
        .sort(
            ["severity", pl.col("delta").abs(), *CELL_KEYS, "category"],
            descending=[True, True, *([False] * (len(CELL_KEYS) + 1))],
            nulls_last=True,
        )
        .select(list(FINDING_SCHEMA))
        .cast(FINDING_SCHEMA)
    )


def delta_findings(cells: pl.DataFrame, categories: pl.DataFrame | None = None) -> pl.DataFrame:
    """The findings of the cells table (family `findings`) and, given the categories table, of its categories
    (family `categories`): one row per Delta_i whose Benjamini-Hochberg adjusted p-value within its family is at
    most LEVEL, highest severity first, then the largest effect; `direction` is 'drop' (lower bound > 0) or 'rise'
    (upper bound < 0)."""
    parts = [_findings(_tested(cells, FINDINGS, with_category=False))]
    if categories is not None:
        parts.append(_findings(_tested(categories, CATEGORIES, with_category=True)))
    return pl.concat(parts)


def families(
    cells: pl.DataFrame,
    categories: pl.DataFrame,
    flags: pl.DataFrame,
    patterns: pl.DataFrame,
    pattern_min_share: float,
) -> pl.DataFrame:
    """The families of tests of a run (`multiplicity.FAMILY_SCHEMA`): the findings, the categories, the control
    flags and the modality patterns, each with its size, its control and how many claims it makes."""
    tested = {
        family: _tested(table, family, with_category=family == CATEGORIES)
        for family, table in ((FINDINGS, cells), (CATEGORIES, categories))
    }
    found = {family: _findings(frame).height for family, frame in tested.items()}
    checks = flags.filter(pl.col("p_value").is_not_null()) if "p_value" in flags.columns else flags.clear()
    flagged = int(checks["flagged"].fill_null(False).sum()) if checks.height else 0
    labelled = patterns.filter(pl.col("pattern").is_not_null()) if "pattern" in patterns.columns else patterns.clear()
    stated = int((labelled["pattern"] != UNDETERMINED).sum()) if labelled.height else 0
    rows = [
        Family(
            FINDINGS,
            "tests of Delta_i = 0 (clean cell x severity with an interval)",
            tested[FINDINGS].height,
            BENJAMINI_HOCHBERG,
            LEVEL,
            found[FINDINGS],
            "findings",
        ),
        Family(
            CATEGORIES,
            "tests of Delta_i = 0 (clean cell x harm category x severity with an interval)",
            tested[CATEGORIES].height,
            BENJAMINI_HOCHBERG,
            LEVEL,
            found[CATEGORIES],
            "category findings",
        ),
        Family(CONTROL_FLAGS, "estimable control checks", checks.height, HOLM, LEVEL, flagged, "flagged"),
        Family(
            PATTERNS,
            "behaviour patterns (judge x prompt x condition with an estimable gain)",
            labelled.height,
            STABILITY,
            float(pattern_min_share),
            stated,
            "labels stated",
        ),
    ]
    return families_table(rows)


def tested_count(table: pl.DataFrame) -> int:
    """How many Delta_i of a cells table's clean cells are tests of the findings family."""
    return _tested(table, FINDINGS, with_category=False).height
