"""Families of tests and their control (docs/metrics.md, "Families of tests").

Every statement a run makes from an interval is one test of a family, and each family is controlled as a whole at
LEVEL (the complement of the 95 % intervals):

- findings: every estimable Delta_i of the clean cells (cell x severity); Benjamini-Hochberg, a false-discovery
  rate of LEVEL (with no effect anywhere, the chance of any finding at all);
- categories: every estimable Delta_i of a clean cell's harm category; Benjamini-Hochberg, separately;
- control flags: every estimable check of the controls; Holm, a family-wise error rate of LEVEL (a flag takes a
  judge out of the guide, so any false flag counts);
- modality patterns: one label per judge, prompt and condition; a label is stated only when the bootstrap gives it
  in at least `metrics.pattern_min_share` of the resamples, otherwise the pattern is `undetermined`.

`families_table` writes them as `families.parquet` beside the findings; the report and `lalm-judge findings` print
it (`lalm_judge.report.tables.family_sentence`). The adjustments are scipy's (`scipy.stats.false_discovery_control`)
and Holm's step-down, written out here (statsmodels is not a dependency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.stats import false_discovery_control

LEVEL = 0.05

FINDINGS = "findings"
CATEGORIES = "categories"
CONTROL_FLAGS = "control flags"
PATTERNS = "modality patterns"

BENJAMINI_HOCHBERG = "Benjamini-Hochberg"
HOLM = "Holm"
STABILITY = "bootstrap share"

FAMILY_SCHEMA = {
    "family": pl.String,
    "tests": pl.String,
    "size": pl.Int64,
    "control": pl.String,
    "level": pl.Float64,
    "n_claims": pl.Int64,
    "claims": pl.String,
}


def _adjusted(p_values: np.ndarray, adjust) -> np.ndarray:
    """Apply `adjust` to the finite p-values; NaN (an untested hypothesis) stays NaN and counts in no family."""
    p_values = np.asarray(p_values, dtype=float)
    out = np.full(p_values.shape, np.nan)
    tested = ~np.isnan(p_values)
    if tested.any():
        out[tested] = adjust(np.clip(p_values[tested], 0.0, 1.0))
    return out


def benjamini_hochberg(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (scipy); reject where <= the false-discovery rate."""
    return _adjusted(p_values, lambda p: false_discovery_control(p, method="bh"))


def _holm(p_values: np.ndarray) -> np.ndarray:
    order = np.argsort(p_values, kind="stable")
    m = p_values.size
    stepped = np.maximum.accumulate((m - np.arange(m)) * p_values[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values: reject where <= the family-wise error rate."""
    return _adjusted(p_values, _holm)


@dataclass(frozen=True)
class Family:
    """A family of tests: what it tests, how many it holds, how it is controlled and what it claims."""

    name: str
    tests: str
    size: int
    control: str
    level: float
    n_claims: int
    claims: str

    def row(self) -> dict:
        return {
            "family": self.name,
            "tests": self.tests,
            "size": self.size,
            "control": self.control,
            "level": self.level,
            "n_claims": self.n_claims,
            "claims": self.claims,
        }


def families_table(families: list[Family]) -> pl.DataFrame:
    """One row per family (FAMILY_SCHEMA), in the given order."""
    return pl.DataFrame([family.row() for family in families], schema=FAMILY_SCHEMA)
