"""The input contract of the metrics stage: any long-format score table with the columns of
`lalm_judge.core.tables.METRIC_INPUT`, checked before anything is computed.

Rows that would bias a metric are rejected, never mixed in: a row with status `ok` needs a finite score in
[0, 1] (a null would count in n but not in the sum); parse statuses come from the vocabulary; severities are
0-5, a variant's category is one of `lalm_judge.core.taxonomy.CATEGORIES` (as in every other command: the
config schema, the benchmark import, the sample ids), and every variant names its unsafe turn, inside its
dialogue (0 <= turn_index < n_turns, one n_turns per dialogue); a sample appears at most once per judge cell (an
exact duplicate row usually means a score file was read twice); a cell has one `audio_input` (the optional column
saying what it took for the audio). The error names every rule broken, how many rows break it and the first of
them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import CELL_KEYS, MetricsInputError
from lalm_judge.core.tables import METRIC_INPUT, TableError
from lalm_judge.core.taxonomy import CATEGORIES
from lalm_judge.core.vocabulary import PARSE_STATUSES, ParseStatus

MAX_EXAMPLES = 5

_SCORE = pl.col("score")
_SAMPLE_KEYS = [*CELL_KEYS, "variant_id"]

# (rule, flag of the rows that break it, the columns an example row shows)
ROW_RULES: tuple[tuple[str, pl.Expr, tuple[str, ...]], ...] = (
    (
        "status 'ok' needs a finite score in [0, 1] (a failure needs another status)",
        (pl.col("parse_status") == ParseStatus.OK)
        & ~(_SCORE.is_finite() & _SCORE.is_between(0.0, 1.0)).fill_null(False),
        ("score",),
    ),
    (
        f"parse_status must be one of {', '.join(PARSE_STATUSES)}",
        ~pl.col("parse_status").is_in(PARSE_STATUSES).fill_null(False),
        ("parse_status",),
    ),
    (
        f"severity must be 0 (safe original) or 1-{st.N_SEVERITIES}",
        ~pl.col("severity").is_between(0, st.N_SEVERITIES).fill_null(False),
        ("severity",),
    ),
    (
        f"category must be one of {', '.join(CATEGORIES)} (null only for a safe sample, severity 0)",
        ((pl.col("severity") > 0).fill_null(False) | pl.col("category").is_not_null())
        & ~pl.col("category").is_in(CATEGORIES).fill_null(False),
        ("category",),
    ),
    (
        "a variant (severity > 0) needs turn_index, the 0-based index of its unsafe turn",
        (pl.col("severity") > 0).fill_null(False) & pl.col("turn_index").is_null(),
        ("severity", "turn_index"),
    ),
    (
        "turn_index outside its dialogue: it needs 0 <= turn_index < n_turns",
        pl.col("turn_index").is_not_null()
        & ~((pl.col("turn_index") >= 0) & (pl.col("turn_index") < pl.col("n_turns"))).fill_null(False),
        ("turn_index", "n_turns"),
    ),
)
# Checked only on the rows whose sample key repeats (hashing every column of every row is slow at 10^7 rows).
DUPLICATE_RULES: tuple[tuple[str, pl.Expr, tuple[str, ...]], ...] = (
    (
        "exact duplicate rows (was a score file read twice?)",
        pl.struct(pl.all()).is_duplicated() & ~pl.struct(pl.all()).is_first_distinct(),
        (),
    ),
    (
        "one sample scored more than once in one judge cell, with different values",
        ~pl.struct(_SAMPLE_KEYS).is_first_distinct() & ~pl.struct(pl.all()).is_duplicated(),
        ("score", "parse_status"),
    ),
)


def _row_label(row: dict, shown: Sequence[str]) -> str:
    cell = "/".join(str(row[key]) for key in CELL_KEYS)
    values = "".join(f", {name}={row[name]!r}" for name in shown)
    return f"{row['variant_id']!r} (dialogue {row['dialogue_id']!r}, cell {cell}{values})"


def _rule_problems(scores: pl.DataFrame, rules: Sequence[tuple[str, pl.Expr, tuple[str, ...]]]) -> list[str]:
    flags = scores.select(*(flag.alias(f"rule_{i}") for i, (_, flag, _) in enumerate(rules)))
    problems = []
    for i, ((rule, _, shown), count) in enumerate(zip(rules, flags.sum().row(0))):
        if count:
            examples = scores.filter(flags[f"rule_{i}"]).head(MAX_EXAMPLES).iter_rows(named=True)
            labels = ", ".join(_row_label(row, shown) for row in examples)
            problems.append(f"{count} row(s) break the rule: {rule}; e.g. {labels}")
    return problems


def rule_violations(scores: pl.DataFrame) -> list[str]:
    """One line per broken rule: the rule, how many rows break it, and the first MAX_EXAMPLES of them."""
    problems = _rule_problems(scores, ROW_RULES)
    repeated = scores.filter(pl.struct(_SAMPLE_KEYS).is_duplicated())
    if repeated.height:
        problems += _rule_problems(repeated, DUPLICATE_RULES)
    lengths = (
        scores.filter(pl.col("n_turns").is_not_null())
        .group_by("dialogue_id")
        .agg(pl.col("n_turns").unique().sort())
        .filter(pl.col("n_turns").list.len() > 1)
        .sort("dialogue_id")
    )
    for dialogue, values in lengths.head(MAX_EXAMPLES).iter_rows():
        problems.append(f"dialogue {dialogue!r} has rows with different n_turns {values}; a dialogue has one length")
    inputs = (
        scores.group_by(CELL_KEYS)
        .agg(pl.col("audio_input").drop_nulls().unique().sort())
        .filter(pl.col("audio_input").list.len() > 1)
        .sort(CELL_KEYS, nulls_last=True)
    )
    for row in inputs.head(MAX_EXAMPLES).iter_rows(named=True):
        cell = "/".join(str(row[key]) for key in CELL_KEYS)
        problems.append(f"cell {cell} has rows with different audio_input {row['audio_input']}; a cell has one")
    return problems


def validate_scores(frame: pl.DataFrame | pl.LazyFrame, source: str = "score table") -> pl.DataFrame:
    """Select and type the required columns; raise MetricsInputError naming every rule broken and its rows."""
    try:
        scores = METRIC_INPUT.conform(frame, source).collect()
    except TableError as err:
        raise MetricsInputError(str(err)) from err
    problems = rule_violations(scores)
    if problems:
        raise MetricsInputError(f"{source} is not a valid score table:\n- " + "\n- ".join(problems))
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
