"""Minimum support (docs/metrics.md): no interval, finding or flag rests on fewer than `metrics.min_dialogues`
dialogues (`pairwise.metrics.min_items` items in the pairwise track).

Below the minimum a value keeps its point estimate and its n, its status is `not_estimable` and its interval is
null; findings and flags are never read from such a value. With one dialogue every resample is that dialogue and the
interval has zero width; with two, nearly so: such an interval says nothing about the noise. An interval of zero width
above the minimum (every resample gives the same value: a specificity of 1 in every resample, a constant shift) keeps
its bounds and has the status `zero_width`, which the report shows beside it: the resamples saw no variation, which
is not the absence of noise.
"""

from __future__ import annotations

import numpy as np
import polars as pl

ESTIMATED = "ok"
NOT_ESTIMABLE = "not_estimable"
ZERO_WIDTH = "zero_width"
SUPPORT_STATUSES = (ESTIMATED, NOT_ESTIMABLE, ZERO_WIDTH)
# The statuses of a value that has an interval (a zero-width one is marked, not withheld).
WITH_INTERVAL = (ESTIMATED, ZERO_WIDTH)
DEFAULT_MIN_DIALOGUES = 10
DEFAULT_MIN_ITEMS = 10


def estimable(n: int | None, minimum: int) -> bool:
    """Whether a value resting on n dialogues (items) may carry an interval, a finding or a flag."""
    return n is not None and n >= minimum


def has_interval(status: str | None) -> bool:
    """Whether a value of this status carries an interval (and may give a finding or a flag)."""
    return status in WITH_INTERVAL


def support_status(value: pl.Expr, n: pl.Expr, minimum: int) -> pl.Expr:
    """`ok` / `not_estimable` per row by its n; null where the value itself is null (nothing to estimate)."""
    return (
        pl.when(value.is_null())
        .then(pl.lit(None, pl.String))
        .when(n.fill_null(0) < minimum)
        .then(pl.lit(NOT_ESTIMABLE))
        .otherwise(pl.lit(ESTIMATED))
    )


def with_min_support(
    frame: pl.DataFrame,
    value: str,
    n_column: str,
    minimum: int,
    bounds: tuple[str, str] | None = None,
    status: str | None = None,
) -> pl.DataFrame:
    """Add the status column of `value` (default `<value>_status`) and null its interval (default `<value>_lo`,
    `<value>_hi`) where it rests on fewer than `minimum` dialogues (items) by `n_column`; an interval of zero width
    above the minimum is marked `zero_width`."""
    low, high = bounds or (f"{value}_lo", f"{value}_hi")
    status = status or f"{value}_status"
    frame = frame.with_columns(support_status(pl.col(value), pl.col(n_column), minimum).alias(status))
    if low in frame.columns and high in frame.columns:
        degenerate = (pl.col(status) == ESTIMATED) & (pl.col(high) - pl.col(low) <= 0.0).fill_null(False)
        frame = frame.with_columns(pl.when(degenerate).then(pl.lit(ZERO_WIDTH)).otherwise(pl.col(status)).alias(status))
    below = pl.col(status) == NOT_ESTIMABLE
    return frame.with_columns(
        pl.when(below).then(None).otherwise(pl.col(name)).alias(name) for name in (low, high) if name in frame.columns
    )


def fewest_present(counts: np.ndarray) -> np.ndarray:
    """Per row of (n, k) counts, the smallest count among the non-zero ones (0 where all are zero): a value that
    needs every present part rests on the least supported one."""
    counts = np.asarray(counts)
    present = counts > 0
    return np.where(present.any(axis=-1), np.where(present, counts, np.iinfo(np.int64).max).min(axis=-1), 0)
