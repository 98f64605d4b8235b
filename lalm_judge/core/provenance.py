"""What the rows of a table say about how they were made, and the check that one table was made one way
(`lalm-judge provenance FILE`).

Every output table carries provenance columns (written by `core.files.with_provenance` and the stages):
- run columns, in every table: `config_hash` (the stage's own settings), `seed`, `package_versions`;
- settings columns, where they apply: `model`, `model_revision`, `served_model` and `served_revision` (what
  answered), `prompt_version`, `generation` (the sampling or
  model settings as canonical JSON), `tts_revision`, `asr_model`, `imported_from`, and the metric settings
  (`n_bootstrap`, `n_folds`, `min_pb_dialogues`, `n_permutations`);
- identity columns say which component and cell made a row: `judge`, `modality`, `transcript_source`, `prompt`,
  `condition`, `generator`, `asr_name`, `tts_engine`, `tts_model`.

Rows of one identity (one judge cell, one generator, one voice, one ASR model) must share every settings
column: two values mean that part of the table was made another way (a shard scored after an upgrade, a rerun
with an edited prompt), and `provenance_report` lists them with their row counts and first rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lalm_judge.core.tables import read_parquet_table

RUN_COLUMNS = ("config_hash", "seed", "package_versions")
SETTINGS_COLUMNS = (
    "model",
    "model_revision",
    "served_model",
    "served_revision",
    "prompt_version",
    "generation",
    "tts_revision",
    "asr_model",
    "imported_from",
    "n_bootstrap",
    "n_folds",
    "min_pb_dialogues",
    "n_permutations",
    *RUN_COLUMNS,
)
# Settings of the answer itself: null in rows that have none (an item skipped for its length), which therefore
# do not count as made another way.
ANSWER_COLUMNS = ("served_model", "served_revision")
IDENTITY_COLUMNS = (
    "judge",
    "modality",
    "transcript_source",
    "prompt",
    "condition",
    "generator",
    "asr_name",
    "tts_engine",
    "tts_model",
)
ROW_INDEX = "__row"


@dataclass(frozen=True)
class Value:
    value: Any
    n_rows: int
    first_row: int


@dataclass(frozen=True)
class Group:
    """The rows of one identity and the values each settings column takes in them."""

    identity: dict[str, Any]
    n_rows: int
    settings: dict[str, list[Value]]

    @property
    def differing(self) -> list[str]:
        return [column for column, values in self.settings.items() if len(values) > 1]

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.identity.items()) or "all rows"


@dataclass(frozen=True)
class ProvenanceReport:
    source: str
    n_rows: int
    missing: tuple[str, ...]  # run columns the table lacks
    groups: list[Group]

    @property
    def consistent(self) -> bool:
        return not self.missing and not any(group.differing for group in self.groups)

    def lines(self) -> list[str]:
        columns = [c for c in SETTINGS_COLUMNS if any(c in g.settings for g in self.groups)]
        shared = [
            c
            for c in columns
            if all(len(g.settings[c]) == 1 for g in self.groups) and len({_single(g, c) for g in self.groups}) == 1
        ]
        out = [f"{self.source}: {_rows(self.n_rows)}"]
        if shared:
            out.append("  in every row:")
            out += [f"    {c:<18} {_shown(self.groups[0].settings[c][0].value)}" for c in shared]
        varying = [c for c in columns if c not in shared]
        if varying and self.groups:
            identity = ", ".join(self.groups[0].identity) or "table"
            out.append(f"  per {identity}:")
            for group in self.groups:
                values = "; ".join(
                    f"{c}={_shown(group.settings[c][0].value)}" for c in varying if len(group.settings[c]) == 1
                )
                out.append(f"    {group.label()} ({_rows(group.n_rows)})" + (f": {values}" if values else ""))
        for group in self.groups:
            for column in group.differing:
                found = ", ".join(
                    f"{_shown(v.value)!r} ({_rows(v.n_rows)} from row {v.first_row})" for v in group.settings[column]
                )
                out.append(f"  DIFFERS {group.label()}: {column} takes {len(group.settings[column])} values: {found}")
        if self.missing:
            out.append(f"  MISSING provenance column(s): {', '.join(self.missing)}")
        if self.consistent:
            out.append("  provenance is the same in every row of each group")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "n_rows": self.n_rows,
            "consistent": self.consistent,
            "missing": list(self.missing),
            "groups": [
                {
                    "identity": g.identity,
                    "n_rows": g.n_rows,
                    "settings": {c: [vars(v) for v in values] for c, values in g.settings.items()},
                    "differing": g.differing,
                }
                for g in self.groups
            ],
        }


def _single(group: Group, column: str) -> Any:
    values = group.settings.get(column, [])
    return values[0].value if len(values) == 1 else None


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _shown(value: Any) -> str:
    return "null" if value is None else str(value)


def provenance_report(frame: pl.DataFrame, source: str) -> ProvenanceReport:
    """Group the rows by the identity columns the table has and collect each settings column's values."""
    identity = [c for c in IDENTITY_COLUMNS if c in frame.columns]
    settings = [c for c in SETTINGS_COLUMNS if c in frame.columns]
    indexed = frame.with_row_index(ROW_INDEX)
    groups = []
    keyed = indexed.partition_by(identity, maintain_order=True, as_dict=True) if identity else {(): indexed}
    for key, rows in keyed.items():
        values = {}
        for column in settings:
            answered = rows.filter(pl.col(column).is_not_null()) if column in ANSWER_COLUMNS else rows
            counted = answered.group_by(column, maintain_order=True).agg(
                pl.len().alias("n"), pl.col(ROW_INDEX).min().alias("first")
            )
            values[column] = [Value(r[column], r["n"], r["first"]) for r in counted.iter_rows(named=True)]
        groups.append(Group(dict(zip(identity, key, strict=True)), rows.height, values))
    missing = tuple(c for c in RUN_COLUMNS if c not in frame.columns)
    return ProvenanceReport(source, frame.height, missing, groups)


def read_tables(paths: Sequence[str], together: bool) -> list[tuple[str, pl.DataFrame]]:
    """(name, frame) per parquet file, or one concatenation of all of them (`together`)."""
    frames = [(str(path), read_parquet_table(path)) for path in paths]
    if together and len(frames) > 1:
        return [(f"{len(frames)} files together", pl.concat([f for _, f in frames], how="diagonal_relaxed"))]
    return frames
