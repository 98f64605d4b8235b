"""Families of tests in the pairwise track: bootstrap p-values and their control over a family.

The pairwise metrics stage tests two families (docs/metrics.md, "Findings and their family"): the findings
(every judge cell and group whose accuracy is tested against its baselines) under the Benjamini-Hochberg
false-discovery rate, and the audit flags (every judge cell and audit condition) under Holm's family-wise error
rate. Each is controlled at the tail of the 95 % intervals it is reported with, so a family of one decides as the
interval does: one-sided tests at (1 - level) / 2, two-sided ones at 1 - level.

P-values come from the same item-bootstrap resamples as the intervals (percentile test): one-sided,
p = (1 + #{resamples on the null side}) / (1 + #resamples), where the null side of H0: value <= null is
"resample <= null"; two-sided, twice the smaller one-sided p (at most 1). The smallest p-value is
1 / (1 + resamples): a family of m hypotheses needs more resamples than m / level to reject any under Holm.
Benjamini-Hochberg is scipy's `false_discovery_control`; Holm's step-down is written out here (statsmodels'
`multipletests(method="holm")` computes the same).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy.stats import false_discovery_control

GREATER, TWO_SIDED = "greater", "two-sided"
HOLM, BENJAMINI_HOCHBERG = "holm", "benjamini-hochberg"


def bootstrap_p_value(boot: np.ndarray, null: float, alternative: str = GREATER) -> float | None:
    """The bootstrap p-value of H0: value <= null (`greater`) or value == null (`two-sided`); None without a
    finite resample."""
    finite = np.asarray(boot, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return None
    below = (1 + np.count_nonzero(finite <= null)) / (1 + finite.size)
    if alternative == GREATER:
        return float(below)
    if alternative != TWO_SIDED:
        raise ValueError(f"unknown alternative {alternative!r}; use {GREATER!r} or {TWO_SIDED!r}")
    above = (1 + np.count_nonzero(finite >= null)) / (1 + finite.size)
    return float(min(1.0, 2 * min(below, above)))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values: the i-th smallest times (m - i + 1), kept monotone, at most 1."""
    p = np.asarray(p_values, dtype=float)
    if p.size == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (p.size - np.arange(p.size))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (scipy.stats.false_discovery_control)."""
    p = np.asarray(p_values, dtype=float)
    return p if p.size == 0 else np.asarray(false_discovery_control(p, method="bh"), dtype=float)


ADJUST = {HOLM: holm, BENJAMINI_HOCHBERG: benjamini_hochberg}


def adjust(p_values: Sequence[float], method: str) -> np.ndarray:
    """Adjusted p-values of a family by `method` (holm or benjamini-hochberg)."""
    if method not in ADJUST:
        raise ValueError(f"unknown multiplicity correction {method!r}; use one of {sorted(ADJUST)}")
    return ADJUST[method](p_values)


def family_summary(findings: pl.DataFrame) -> list[str]:
    """One sentence per family of tests in a findings table (`core.tables.PAIRWISE_FINDINGS`): its size, its
    correction and how many hypotheses it claims."""
    sentences = []
    for (family, correction), rows in findings.group_by("family", "correction", maintain_order=True):
        control = (
            "false-discovery rate controlled by Benjamini-Hochberg"
            if correction == BENJAMINI_HOCHBERG
            else "family-wise error rate controlled by Holm's step-down"
        )
        sentences.append(f"{family}: {rows.height} hypotheses tested, {control}; {int(rows['finding'].sum())} claimed.")
    return sentences
