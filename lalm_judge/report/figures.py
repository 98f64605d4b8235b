"""Figures of the benchmark from the metric tables (matplotlib, Agg backend): each function takes the tables it
draws and an output path stem, and writes `<stem>.png` and `<stem>.svg`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# SVG element ids from a fixed salt instead of random ones, so that equal tables give byte-equal SVG files.
matplotlib.rcParams["svg.hashsalt"] = "lalm-judge"

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from adjustText import adjust_text  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from lalm_judge.analysis.engine import CELL_KEYS, CONFIG_KEYS  # noqa: E402
from lalm_judge.core.files import atomic_path  # noqa: E402
from lalm_judge.core.table_sets import MetricTables  # noqa: E402
from lalm_judge.core.vocabulary import TranscriptSource, cascade_source  # noqa: E402

FORMATS = ("png", "svg")


def save_figure(figure: Figure, stem: str | os.PathLike) -> list[Path]:
    """Write the figure as <stem>.png and <stem>.svg (atomically, deterministic SVG ids) and close it."""
    paths = []
    for fmt in FORMATS:
        path = Path(f"{os.fspath(stem)}.{fmt}")
        with atomic_path(path) as tmp:
            figure.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight", metadata=_metadata(fmt))
        paths.append(path)
    plt.close(figure)
    return paths


def _metadata(fmt: str) -> dict[str, str | None]:
    # No creation dates, so equal tables give equal files.
    return {"Date": None} if fmt == "svg" else {"Software": "lalm-judge"}


def _source_label(modality: str, source: str, audio_input: str | None = None) -> str:
    if cascade_source(audio_input) is not None:
        return f"{modality} ({audio_input})"
    return f"{modality} ({source})" if TranscriptSource(source).has_transcript else modality


def _labelled(frame: pl.DataFrame) -> pl.DataFrame:
    """Add `series`: the modality/transcript-source label of each row (an ASR cascade says so)."""
    audio_input = frame["audio_input"] if "audio_input" in frame.columns else [None] * frame.height
    labels = [_source_label(*values) for values in zip(frame["modality"], frame["transcript_source"], audio_input)]
    return frame.with_columns(series=pl.Series(labels, dtype=pl.String))


# --- what each figure plots (tested against the metric tables), then how it is drawn ----------------------


def sensitivity_bars(cells: pl.DataFrame, pareto: pl.DataFrame) -> pl.DataFrame:
    """One bar per configuration at its CV-selected prompt for sensitivity (condition 'clean' if present):
    judge, series, sensitivity, sensitivity_lo, sensitivity_hi."""
    selected = pareto.select(*CONFIG_KEYS, pl.col("prompt_sensitivity").alias("prompt"))
    table = cells.join(selected, on=list(CELL_KEYS), how="semi", nulls_equal=True)
    if "clean" in table["condition"].to_list():
        table = table.filter(pl.col("condition") == "clean")
    return _labelled(table.sort(CELL_KEYS, nulls_last=True)).select(
        "judge", "series", "sensitivity", "sensitivity_lo", "sensitivity_hi"
    )


def pareto_points(pareto: pl.DataFrame) -> pl.DataFrame:
    """One point per configuration: its cross-validated sensitivity and specificity, AvgAbsPB (sensitivity) as
    colour, and whether it is on the front."""
    return _labelled(pareto).select(
        "judge", "series", "cv_sensitivity", "cv_specificity", "avg_abs_pb_sensitivity", "on_front"
    )


def prompt_lines(cells: pl.DataFrame, metric: str) -> pl.DataFrame:
    """The metric of every cell, by configuration (`config` label) and prompt."""
    labelled = _labelled(cells)
    return labelled.select(
        pl.concat_str(pl.col("judge"), pl.col("series"), pl.col("condition"), separator=" ").alias("config"),
        "prompt",
        pl.col(metric).alias("value"),
    ).sort("config", "prompt")


def severity_lines(severity_curve: pl.DataFrame) -> pl.DataFrame:
    """Mean score per judge, modality/transcript source and severity, averaged over prompts and conditions."""
    return (
        _labelled(severity_curve)
        .group_by("judge", "series", "severity")
        .agg(pl.col("mean_score").mean())
        .sort("judge", "series", "severity")
    )


def position_bias_grid(position_bias: pl.DataFrame, metric: str) -> pl.DataFrame:
    """PB(L, k) per judge, averaged over its cells, of the (L, k) that enter AvgAbsPB (`included`); the others,
    and position 1 (the reference), are not drawn."""
    shown = position_bias.filter((pl.col("metric") == metric) & pl.col("included"))
    return shown.group_by("judge", "n_turns", "position").agg(pl.col("pb").mean()).sort("judge", "n_turns", "position")


def category_grid(categories: pl.DataFrame, metric: str) -> pl.DataFrame:
    """The metric per configuration (`row` label, averaged over prompts) and harm category."""
    labelled = categories.with_columns(
        row=pl.concat_str(
            pl.col("judge"),
            pl.col("modality"),
            pl.col("transcript_source").fill_null("-"),
            pl.col("condition"),
            separator=" ",
        )
    )
    return labelled.group_by("row", "category").agg(pl.col(metric).mean().alias("value")).sort("row", "category")


def plot_sensitivity(cells: pl.DataFrame, pareto: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Sensitivity with 95 % CI bars per judge x modality/transcript source (`sensitivity_bars`)."""
    table = sensitivity_bars(cells, pareto)
    judges = table["judge"].unique(maintain_order=True).to_list()
    series = table["series"].unique(maintain_order=True).to_list()
    figure, axis = plt.subplots(figsize=(max(4.0, 1.2 * len(judges) * max(1, len(series)) / 2), 3.5))
    width = 0.8 / max(1, len(series))
    for offset, label in enumerate(series):
        part = table.filter(pl.col("series") == label)
        x = np.array([judges.index(judge) for judge in part["judge"]]) + offset * width - 0.4 + width / 2
        value = part["sensitivity"].fill_null(np.nan).to_numpy()
        error = np.abs(
            np.vstack(
                [value - part["sensitivity_lo"].fill_null(np.nan), part["sensitivity_hi"].fill_null(np.nan) - value]
            )
        )
        axis.bar(x, value, width, yerr=np.nan_to_num(error), capsize=2, label=label)
    axis.axhline(0.0, color="black", linewidth=0.8)
    axis.set_xticks(range(len(judges)), judges, rotation=30, ha="right")
    axis.set_ylabel("sensitivity (min_i Delta_i)")
    axis.legend(fontsize="small", frameon=False)
    return save_figure(figure, stem)


def plot_pareto(pareto: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Cross-validated sensitivity vs specificity per configuration, colour = AvgAbsPB (sensitivity), front
    circled (`pareto_points`)."""
    table = pareto_points(pareto)
    figure, axis = plt.subplots(figsize=(5, 4))
    points = axis.scatter(
        table["cv_sensitivity"].fill_null(np.nan),
        table["cv_specificity"].fill_null(np.nan),
        c=table["avg_abs_pb_sensitivity"].fill_null(np.nan),
        cmap="viridis_r",
        label="configuration",
    )
    front = table.filter(pl.col("on_front"))
    axis.scatter(
        front["cv_sensitivity"], front["cv_specificity"], s=140, facecolors="none", edgecolors="red", label="front"
    )
    figure.colorbar(points, label="AvgAbsPB (sensitivity)")
    axis.set_xlabel("sensitivity (cross-validated)")
    axis.set_ylabel("specificity (cross-validated)")
    axis.legend(fontsize="small", frameon=False)
    label_points(
        axis,
        front["cv_sensitivity"],
        front["cv_specificity"],
        [f"{r['judge']} {r['series']}" for r in front.iter_rows(named=True)],
    )
    return save_figure(figure, stem)


# Iterations of the label placement: a fixed count, not adjustText's default time limit, so that equal tables
# give equal figures.
LABEL_ITERATIONS = 400


def label_points(axis, x: pl.Series, y: pl.Series, labels: list[str]) -> list:
    """Label points so that no two labels overlap (adjustText pushes them apart and draws a leader line)."""
    texts = [axis.text(a, b, label, fontsize=6) for a, b, label in zip(x, y, labels) if a is not None and b is not None]
    if texts:
        adjust_text(
            texts,
            ax=axis,
            x=x.fill_null(np.nan).to_numpy(),
            y=y.fill_null(np.nan).to_numpy(),
            iter_lim=LABEL_ITERATIONS,
            arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5},
        )
    return texts


def plot_prompt_strategies(
    cells: pl.DataFrame, stem: str | os.PathLike, metrics: tuple[str, ...] = ("sensitivity", "specificity")
) -> list[Path]:
    """One line per configuration across prompt strategies, one panel per metric (`prompt_lines`)."""
    figure, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.5), squeeze=False)
    prompts = sorted(cells["prompt"].unique().to_list())
    for axis, metric in zip(axes[0], metrics):
        for (config,), part in prompt_lines(cells, metric).group_by("config", maintain_order=True):
            x = [prompts.index(prompt) for prompt in part["prompt"]]
            axis.plot(x, part["value"].fill_null(np.nan), marker="o", label=config)
        axis.set_xticks(range(len(prompts)), prompts, rotation=30, ha="right")
        axis.set_title(metric)
        axis.legend(fontsize="x-small", frameon=False, bbox_to_anchor=(1.02, 1), loc="upper left")
    return save_figure(figure, stem)


def plot_severity_curves(severity_curve: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Mean score vs severity (0 = safe original), one panel per judge, one line per modality/transcript source
    (`severity_lines`)."""
    table = severity_lines(severity_curve)
    judges = sorted(table["judge"].unique().to_list())
    measured = sorted(table["severity"].unique().to_list())
    figure, axes = plt.subplots(1, len(judges), figsize=(3.5 * len(judges), 3), squeeze=False, sharey=True)
    for axis, judge in zip(axes[0], judges):
        part = table.filter(pl.col("judge") == judge)
        for (label,), line in part.group_by("series", maintain_order=True):
            axis.plot(line["severity"], line["mean_score"], marker="o", label=label)
        axis.set_title(judge)
        axis.set_xlabel("severity (0 = safe original)")
        # Only the severities the run measured: an axis running 0-5 suggests levels that were never scored.
        axis.set_xticks(measured, [str(s) for s in measured])
        axis.legend(fontsize="x-small", frameon=False)
    axes[0][0].set_ylabel("mean safety score")
    return save_figure(figure, stem)


def plot_position_bias(position_bias: pl.DataFrame, stem: str | os.PathLike, metric: str = "sensitivity") -> list[Path]:
    """Heatmaps of PB(L, k) (dialogue length x unsafe-turn position), one per judge (`position_bias_grid`)."""
    table = position_bias.filter(pl.col("metric") == metric)
    averaged = position_bias_grid(position_bias, metric)
    judges = sorted(table["judge"].unique().to_list())
    lengths = sorted(table["n_turns"].unique().to_list())
    positions = list(range(1, max(lengths, default=1) + 1))
    figure, axes = plt.subplots(1, len(judges), figsize=(3.5 * len(judges), 3), squeeze=False)
    limit = float(np.nanmax(np.abs(averaged["pb"].fill_null(np.nan).to_numpy()), initial=1e-9))
    for axis, judge in zip(axes[0], judges):
        grid = np.full((len(lengths), len(positions)), np.nan)
        for row in averaged.filter(pl.col("judge") == judge).iter_rows(named=True):
            if row["pb"] is not None:
                grid[lengths.index(row["n_turns"]), row["position"] - 1] = row["pb"]
        image = axis.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        axis.set_xticks(range(len(positions)), positions)
        axis.set_yticks(range(len(lengths)), lengths)
        axis.set_xlabel("unsafe turn position k")
        axis.set_title(judge)
    axes[0][0].set_ylabel("dialogue length L")
    figure.colorbar(image, ax=axes[0].tolist(), label=f"PB ({metric})")
    return save_figure(figure, stem)


def plot_categories(categories: pl.DataFrame, stem: str | os.PathLike, metric: str = "sensitivity") -> list[Path]:
    """Heatmap of a metric per configuration (rows, averaged over prompts) and harm category (`category_grid`)."""
    averaged = category_grid(categories, metric)
    rows = sorted(averaged["row"].unique().to_list())
    columns = sorted(averaged["category"].unique().to_list())
    grid = np.full((len(rows), len(columns)), np.nan)
    for row in averaged.iter_rows(named=True):
        if row["value"] is not None:
            grid[rows.index(row["row"]), columns.index(row["category"])] = row["value"]
    figure, axis = plt.subplots(figsize=(1 + 0.8 * len(columns), 1 + 0.35 * len(rows)))
    image = axis.imshow(grid, cmap="viridis", aspect="auto")
    axis.set_xticks(range(len(columns)), columns, rotation=30, ha="right")
    axis.set_yticks(range(len(rows)), rows, fontsize="small")
    figure.colorbar(image, label=metric)
    return save_figure(figure, stem)


# --- the figures of the report ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FigureSpec:
    """One figure: its file stem under the figure folder, the metric table it needs, and how it is drawn."""

    name: str
    title: str
    caption: str
    table: str
    draw: Callable[[MetricTables, Path], list[Path]]


FIGURES = (
    FigureSpec(
        "sensitivity",
        "Sensitivity per judge and modality",
        "Sensitivity (min over severities of the mean score drop from the safe original) per judge and "
        "modality/transcript source, at the prompt chosen by cross-validation; bars are 95 % cluster-bootstrap "
        "intervals over dialogues. Above 0: even the mildest harm lowers the score.",
        "cells",
        lambda t, stem: plot_sensitivity(t.cells, t.pareto, stem),
    ),
    FigureSpec(
        "pareto",
        "Pareto front",
        "Cross-validated sensitivity vs specificity per configuration (each dialogue scored by the prompt chosen "
        "without it), colour = AvgAbsPB of sensitivity; circled configurations are on the Pareto front (higher "
        "sensitivity and specificity, lower position bias; configurations lacking a severity are compared apart).",
        "pareto",
        lambda t, stem: plot_pareto(t.pareto, stem),
    ),
    FigureSpec(
        "prompt_strategies",
        "Prompt strategies",
        "Sensitivity and specificity of every configuration across prompt strategies.",
        "cells",
        lambda t, stem: plot_prompt_strategies(t.cells, stem),
    ),
    FigureSpec(
        "severity_curves",
        "Mean score vs severity",
        "Mean safety score per severity (0 = safe original) per judge, one line per modality/transcript "
        "source; a useful judge falls monotonically.",
        "severity_curve",
        lambda t, stem: plot_severity_curves(t.severity_curve, stem),
    ),
    FigureSpec(
        "position_bias_sensitivity",
        "Position bias (sensitivity)",
        "PB(L, k) = Sensitivity(L, k) - Sensitivity(L, 1) per dialogue length L and unsafe-turn position k, "
        "averaged over each judge's cells; 0 = no position bias. Blank: (L, k) left out of AvgAbsPB (too few "
        "dialogues, or no position-1 value); compare with the noise reference in the metrics table.",
        "position_bias",
        lambda t, stem: plot_position_bias(t.position_bias, stem, metric="sensitivity"),
    ),
    FigureSpec(
        "position_bias_specificity",
        "Position bias (specificity)",
        "PB(L, k) = Specificity(L, k) - Specificity(L, 1), as for sensitivity.",
        "position_bias",
        lambda t, stem: plot_position_bias(t.position_bias, stem, metric="specificity"),
    ),
    FigureSpec(
        "categories",
        "Sensitivity per harm category",
        "Sensitivity per configuration (averaged over prompts) and harm category.",
        "categories",
        lambda t, stem: plot_categories(t.categories, stem, metric="sensitivity"),
    ),
)


def _placeholder_figure(stem: Path, message: str) -> list[Path]:
    figure, axis = plt.subplots(figsize=(5, 1.5))
    axis.axis("off")
    axis.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    return save_figure(figure, stem)


def write_figures(metrics_dir: str | os.PathLike, figure_dir: str | os.PathLike) -> list[Path]:
    """Draw every figure of FIGURES as <figure_dir>/<name>.png and .svg; an empty table gives a figure
    that says so (the workflow expects every file)."""
    tables = MetricTables.read(metrics_dir)
    paths = []
    for spec in FIGURES:
        stem = Path(figure_dir) / spec.name
        table = getattr(tables, spec.table)
        if table.height == 0:
            paths += _placeholder_figure(stem, f"no data: {spec.table}.parquet has no rows")
        else:
            paths += spec.draw(tables, stem)
    return paths
