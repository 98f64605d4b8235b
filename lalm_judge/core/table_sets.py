"""The tables a stage writes together into one folder, declared once for their writer and every reader: the
metric tables (`results/metrics/`, written by `analysis.stage`), the control tables (`results/metrics/controls/`,
`analysis.controls`), the modality tables (`results/metrics/modality/`, `analysis.modality`) and the guide and
findings (`results/metrics/`, `analysis.stage.run_guide`). The figures and the report read them here, so rendering
needs nothing of the code that computed them.

A `TableSet` is a dataclass of frames, one `<field>.parquet` each; the columns of each table are described in
docs/metrics.md.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import polars as pl

from lalm_judge.core.files import with_provenance, write_parquet
from lalm_judge.core.taxonomy import SEVERITIES


@dataclass(frozen=True)
class TableSet:
    """The tables one stage writes together, one `<field>.parquet` each under one folder."""

    # What to run when a table is missing (said in the error); not annotated, so not a field.
    HOW_TO_MAKE = "run the stage that writes them"

    def as_dict(self) -> dict[str, pl.DataFrame]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def write(self, out_dir: str | os.PathLike, *, config_hash: str, seed: int, **provenance: Any) -> list[Path]:
        """Write every table as `<out_dir>/<name>.parquet` with the provenance columns; the paths."""
        paths = []
        for name, frame in self.as_dict().items():
            path = Path(out_dir) / f"{name}.parquet"
            write_parquet(path, with_provenance(frame, config_hash=config_hash, seed=seed, **provenance))
            paths.append(path)
        return paths

    @classmethod
    def read(cls, directory: str | os.PathLike) -> Self:
        """The tables under `directory`; a missing one is an error naming it and what makes it."""
        tables = {}
        for f in dataclasses.fields(cls):
            path = Path(directory) / f"{f.name}.parquet"
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing; {cls.HOW_TO_MAKE}")
            tables[f.name] = pl.read_parquet(path)
        return cls(**tables)


@dataclass(frozen=True)
class MetricTables(TableSet):
    """`results/metrics/`: the metrics of every judge cell (docs/metrics.md)."""

    HOW_TO_MAKE = "run the metrics stage (`lalm-judge metrics`)"

    cells: pl.DataFrame
    position_bias: pl.DataFrame
    prompt_selection: pl.DataFrame
    pareto: pl.DataFrame
    categories: pl.DataFrame
    severity_curve: pl.DataFrame
    parse_status: pl.DataFrame
    # Paired differences of the cells of a condition on the same dialogues (`analysis.comparisons`).
    comparisons: pl.DataFrame


@dataclass(frozen=True)
class ControlTables(TableSet):
    """`results/metrics/controls/`: every control cell against its clean cell (docs/metrics.md, "Controls")."""

    HOW_TO_MAKE = "run the control analysis"

    effects: pl.DataFrame
    flags: pl.DataFrame
    noise_curve: pl.DataFrame
    condition_wer: pl.DataFrame
    prosody_correlation: pl.DataFrame


@dataclass(frozen=True)
class ModalityTables(TableSet):
    """`results/metrics/modality/`: what the audio adds per transcript source and the judges' behaviour patterns
    (`analysis.modality`; docs/metrics.md, "Modality")."""

    HOW_TO_MAKE = "run the modality analysis (rule modality_analysis)"

    effects: pl.DataFrame
    patterns: pl.DataFrame


@dataclass(frozen=True)
class GuideTables(TableSet):
    """`results/metrics/{guide,findings,families}.parquet`: the practitioner guide (from the metric tables and the
    control flags), the findings (the effects beyond the noise) and the families of tests with their control, which
    the report renders."""

    HOW_TO_MAKE = "run the guide stage of the metrics (`analysis.stage.run_guide`)"

    guide: pl.DataFrame
    findings: pl.DataFrame
    families: pl.DataFrame


def severities_with_intervals(cells: pl.DataFrame) -> list[int]:
    """The severities with a Delta_i interval in at least one cell of a cells table (tables without the columns
    have none)."""
    return [
        i
        for i in SEVERITIES
        if {f"delta_{i}_lo", f"delta_{i}_hi"} <= set(cells.columns) and cells[f"delta_{i}_lo"].is_not_null().any()
    ]
