"""The metrics stage: read score tables, compute every metric table, write them with provenance columns.

`compute_metrics` returns `MetricTables` (`core.table_sets`: cells, position_bias, prompt_selection, pareto,
categories, severity_curve, parse_status, comparisons); `write_metrics` writes each as `<out_dir>/<name>.parquet` and
`read_metric_tables` reads them back (the figures and the report read nothing else of the run's scores).
`run_guide` writes the practitioner guide, the findings and the families of tests beside them (`GuideTables`), from
the metric tables, the control flags and the modality patterns, so that the report only renders.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from lalm_judge.analysis.comparisons import paired_comparisons
from lalm_judge.analysis.engine import (
    CELL_COLUMNS,
    CELL_KEYS,
    CONFIG_KEYS,
    DEFAULT_PATTERN_MIN_SHARE,
    DenseStatistics,
    MetricSettings,
    cell_counts,
    cells_table,
    coarsen,
    contributing_dialogues,
    densify,
    encode_scores,
    paired_variants,
    safe_score_table,
    severity_completeness,
    severity_curve,
    slice_metric_table,
    slice_statistics,
    with_cell_keys,
)
from lalm_judge.analysis.findings import delta_findings, families
from lalm_judge.analysis.guide import practitioner_guide
from lalm_judge.analysis.inputs import read_scores
from lalm_judge.analysis.position import position_bias
from lalm_judge.analysis.selection import pareto_table, prompt_selection_table
from lalm_judge.core.files import stable_hash
from lalm_judge.core.table_sets import GuideTables, MetricTables
from lalm_judge.core.vocabulary import ParseStatus


def parse_status_table(scores: pl.DataFrame) -> pl.DataFrame:
    """Per judge cell: rows, one count column per parse status, failure and refusal rates."""
    if scores.height == 0:
        return pl.DataFrame(schema={key: pl.String for key in CELL_KEYS})
    counts = scores.group_by(*CELL_KEYS, "parse_status").agg(n=pl.len())
    ok, refusal = ParseStatus.OK.value, ParseStatus.REFUSAL.value
    statuses = [ok, *sorted(set(counts["parse_status"].to_list()) - {ok})]
    wide = counts.pivot(on="parse_status", index=list(CELL_KEYS), values="n").fill_null(0)
    wide = wide.with_columns(pl.lit(0, pl.UInt32).alias(s) for s in statuses if s not in wide.columns)
    total = pl.sum_horizontal(statuses)
    return (
        wide.select(
            *CELL_KEYS,
            total.alias("n_rows"),
            *statuses,
            (1 - pl.col(ok) / total).alias("parse_failure_rate"),
            (pl.col(refusal) / total if refusal in statuses else pl.lit(0.0)).alias("refusal_rate"),
        )
        .cast({s: pl.Int64 for s in ["n_rows", *statuses]})
        .sort(CELL_KEYS, nulls_last=True)
    )


def compute_metrics(scores: pl.DataFrame, settings: MetricSettings) -> MetricTables:
    """All metric tables from a validated score table (see `validate_scores`)."""
    encoded = encode_scores(scores)
    n_dialogues, n_cells = len(encoded.dialogues), encoded.cells.height
    counts = cell_counts(encoded.rows)
    paired_cells = counts.filter(pl.col("n_safe") > 0).select("cell")
    variants = paired_variants(encoded.rows).join(paired_cells, on="cell", how="semi")
    by_category = slice_statistics(variants, ["cell", "category"])
    # Every cell gets a slice (zeros where it has no paired variant), so arrays are indexed by cell number.
    cell_statistics = coarsen(by_category, ["cell"])
    cell_dense = densify(cell_statistics, ["cell"], n_dialogues)
    cell_present = np.zeros((n_dialogues, n_cells), dtype=bool)
    cell_present[:, cell_dense.slices["cell"].to_numpy()] = contributing_dialogues(cell_dense.arrays)
    cell_metrics = slice_metric_table(cell_dense, settings)
    expected = sorted(encoded.rows.filter(pl.col("severity") > 0)["severity"].unique().to_list())
    completeness = severity_completeness(cell_metrics, expected)
    bias = position_bias(variants, n_dialogues, cell_present, settings)
    cells = cells_table(
        counts,
        cell_metrics,
        completeness,
        bias.summary,
        safe_score_table(encoded.rows, n_dialogues, n_cells, settings),
    )
    comparisons = paired_comparisons(
        cell_dense, cells.join(encoded.cells.drop("audio_input"), on="cell", how="left"), bias, settings
    )
    cells = with_cell_keys(cells, encoded.cells).select(CELL_COLUMNS).sort(CELL_KEYS, nulls_last=True)
    keyed_dense = DenseStatistics(with_cell_keys(cell_dense.slices, encoded.cells), cell_dense.arrays)
    complete = cell_dense.slices.join(completeness, on="cell", how="left")["complete"].fill_null(False).to_numpy()
    prompt_selection = prompt_selection_table(keyed_dense, complete, settings)
    categories = slice_metric_table(densify(by_category, ["cell", "category"], n_dialogues), settings)

    def keyed(frame: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
        return with_cell_keys(frame, encoded.cells).sort([*CELL_KEYS, *order], nulls_last=True)

    return MetricTables(
        cells=cells,
        position_bias=keyed(bias.table, ["metric", "n_turns", "position"]),
        prompt_selection=prompt_selection.sort([*CONFIG_KEYS, "metric", "fold"], nulls_last=True),
        pareto=pareto_table(cells, prompt_selection, comparisons),
        categories=keyed(categories, ["category"]),
        severity_curve=keyed(severity_curve(encoded.rows), ["severity"]),
        parse_status=parse_status_table(scores),
        comparisons=comparisons,
    )


# The metric settings every table of the metrics folder records (provenance columns), the seed apart.
METRIC_SETTINGS = tuple(name for name in MetricSettings().provenance() if name != "seed")


def write_metrics(tables: MetricTables, out_dir: str | os.PathLike, settings: MetricSettings) -> list[Path]:
    """Write every table as `<out_dir>/<name>.parquet` with provenance columns; return the paths."""
    return tables.write(
        out_dir,
        config_hash=stable_hash(dataclasses.asdict(settings)),
        **settings.provenance(),
    )


def read_metric_tables(metrics_dir: str | os.PathLike) -> MetricTables:
    """The tables written by `write_metrics` under metrics_dir."""
    return MetricTables.read(metrics_dir)


def run_metrics(
    score_paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike, settings: MetricSettings
) -> list[Path]:
    """Read score files, compute all metric tables, write them under out_dir."""
    return write_metrics(compute_metrics(read_scores(score_paths), settings), out_dir, settings)


def run_guide(
    cells_path: str | os.PathLike,
    pareto_path: str | os.PathLike,
    flags_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    seed: int = 0,
    *,
    categories_path: str | os.PathLike,
    comparisons_path: str | os.PathLike,
    patterns_path: str | os.PathLike,
) -> list[Path]:
    """The practitioner guide (`guide.practitioner_guide`, of the cells, Pareto and comparisons tables and the control
    flags), the findings (`findings.delta_findings`, of the cells and categories tables) and the families of tests
    (`findings.families`, with the flags and the modality patterns), written as
    `<out_dir>/{guide,findings,families}.parquet`: the report renders them. They are functions of the metric tables,
    so their provenance is theirs: the config hash of the cells table's config hashes, and its metric settings."""
    cells, pareto, flags, categories, comparisons, patterns = (
        pl.read_parquet(path)
        for path in (cells_path, pareto_path, flags_path, categories_path, comparisons_path, patterns_path)
    )
    share = patterns["pattern_min_share"][0] if "pattern_min_share" in patterns.columns and patterns.height else None
    tables = GuideTables(
        guide=practitioner_guide(cells, pareto, flags=flags, comparisons=comparisons),
        findings=delta_findings(cells, categories),
        families=families(
            cells, categories, flags, patterns, DEFAULT_PATTERN_MIN_SHARE if share is None else float(share)
        ),
    )
    hashes = sorted(set(cells["config_hash"].to_list())) if "config_hash" in cells.columns else []
    settings = {name: cells[name][0] for name in METRIC_SETTINGS if name in cells.columns and cells.height}
    return tables.write(out_dir, config_hash=stable_hash(hashes), seed=seed, **settings)
