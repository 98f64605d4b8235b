"""The input contract of the metrics stage: any long-format score table with the columns of
`lalm_judge.core.tables.METRIC_INPUT`, checked before anything is computed."""

from __future__ import annotations

import os
from collections.abc import Sequence

import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import MetricsInputError
from lalm_judge.core.tables import METRIC_INPUT, TableError


def validate_scores(frame: pl.DataFrame | pl.LazyFrame, source: str = "score table") -> pl.DataFrame:
    """Select and type the required columns; raise MetricsInputError naming what is wrong."""
    try:
        scores = METRIC_INPUT.conform(frame, source).collect()
    except TableError as err:
        raise MetricsInputError(str(err)) from err
    bad_severity = scores.filter(~pl.col("severity").is_between(0, st.N_SEVERITIES))
    if bad_severity.height:
        raise MetricsInputError(
            f"{source}: severity must be 0 (safe original) or 1-5; row {bad_severity['variant_id'][0]!r} "
            f"has {bad_severity['severity'][0]}"
        )
    no_position = scores.filter((pl.col("severity") > 0) & pl.col("turn_index").is_null())
    if no_position.height:
        raise MetricsInputError(
            f"{source}: variant {no_position['variant_id'][0]!r} has no turn_index; every variant row needs the "
            "0-based index of its unsafe turn"
        )
    return scores


def read_scores(paths: Sequence[str | os.PathLike]) -> pl.DataFrame:
    """Read and concatenate score parquet files, keeping the required columns."""
    if not paths:
        raise MetricsInputError("no score files given")
    try:
        frames = METRIC_INPUT.scan(paths)
    except TableError as err:
        raise MetricsInputError(str(err)) from err
    return validate_scores(frames, source=", ".join(os.fspath(p) for p in paths))
