"""The controls in the report: their figures (clean vs control differences with CIs, score and sensitivity
against SNR, the energy/pitch correlations) and the HTML section with one table per control, from the tables
of `lalm_judge.analysis.controls`. A control that was not run says so and names the condition to add."""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from lalm_judge.analysis.controls import (
    CONTROL_KEYS,
    IGNORES_AUDIO,
    INJECTION_SUSCEPTIBLE,
    REACTS_TO_SYNTHESIS,
)
from lalm_judge.core.table_sets import ControlTables
from lalm_judge.core.vocabulary import CLEAN, MASKED, NOISE_KINDS, Condition
from lalm_judge.report.figures import _placeholder_figure, _source_label, plt, save_figure
from lalm_judge.report.html import figure_html, html_table, paragraph
from lalm_judge.report.tables import with_interval
from lalm_judge.report.viewer import cell_id, viewer_link

# The WER of the masked turn the study reports (Whisper on 160 ms time-reversed speech).
STUDY_MASKED_WER = 1.64


def _cell_label(row: dict) -> str:
    return f"{row['judge']} {_source_label(row['modality'], row['transcript_source'])} {row['prompt']}"


def _error_bars(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return np.nan_to_num(np.abs(np.vstack([values - low, high - values])))


def _column(frame: pl.DataFrame, name: str) -> np.ndarray:
    return frame[name].cast(pl.Float64).fill_null(np.nan).to_numpy()


def plot_control_effects(effects: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Per control condition, the sensitivity and specificity change (control - clean) of every cell with its
    95 % CI (the cluster bootstrap of the difference); 0 = the control changes nothing."""
    # The TTS control has no variants, hence no sensitivity: its effect is the TTS-bias Delta of the flags.
    measured = pl.col("sensitivity_diff").is_not_null() | pl.col("specificity_diff").is_not_null()
    table = effects.filter(pl.col("reason").is_null() & measured).sort([*CONTROL_KEYS, "condition"])
    conditions = sorted(table["condition"].unique().to_list())
    labels = sorted({_cell_label(r) for r in table.iter_rows(named=True)})
    figure, axes = plt.subplots(
        2, len(conditions), figsize=(3.2 * len(conditions), 0.8 + 0.35 * len(labels) * 2), squeeze=False
    )
    for column, condition in enumerate(conditions):
        part = table.filter(pl.col("condition") == condition)
        y = np.array([labels.index(_cell_label(r)) for r in part.iter_rows(named=True)])
        for row, metric in enumerate(("sensitivity", "specificity")):
            axis = axes[row][column]
            value = _column(part, f"{metric}_diff")
            error = _error_bars(value, _column(part, f"{metric}_diff_lo"), _column(part, f"{metric}_diff_hi"))
            axis.errorbar(value, y, xerr=error, fmt="o", capsize=2, label="control - clean, 95 % CI")
            axis.axvline(0.0, color="black", linewidth=0.8)
            axis.legend(fontsize="xx-small", frameon=False)
            axis.set_yticks(range(len(labels)), labels if column == 0 else [""] * len(labels), fontsize="x-small")
            axis.set_title(f"{condition}: {metric}", fontsize="small")
            axis.set_xlabel("control - clean", fontsize="small")
    return save_figure(figure, stem)


def plot_noise_curve(noise: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Sensitivity (with CI) and mean unsafe score against SNR, one panel per modality, one line per judge cell
    and noise kind; the clean cell is drawn at the right edge ('clean')."""
    modalities = sorted(noise["modality"].unique().to_list())
    snrs = sorted({s for s in noise["snr_db"].to_list() if s is not None}, reverse=True)
    positions = {snr: i for i, snr in enumerate(snrs)} | {None: len(snrs)}
    figure, axes = plt.subplots(2, len(modalities), figsize=(4.2 * len(modalities), 6), squeeze=False)
    for column, modality in enumerate(modalities):
        part = noise.filter(pl.col("modality") == modality)
        for keys, cell in part.group_by(list(CONTROL_KEYS), maintain_order=True):
            label = _cell_label(dict(zip(CONTROL_KEYS, keys)))
            clean = cell.filter(pl.col("noise") == "clean")
            for kind in sorted(set(cell["noise"].to_list()) - {"clean"}):
                line = pl.concat([cell.filter(pl.col("noise") == kind), clean]).with_columns(
                    x=pl.col("snr_db").replace_strict(positions, return_dtype=pl.Int64)
                )
                line = line.sort("x")
                x = line["x"].to_numpy()
                value = _column(line, "sensitivity")
                error = _error_bars(value, _column(line, "sensitivity_lo"), _column(line, "sensitivity_hi"))
                axes[0][column].errorbar(x, value, yerr=error, marker="o", capsize=2, label=f"{label} {kind}")
                axes[1][column].plot(x, _column(line, "mean_score_unsafe"), marker="o", label=f"{label} {kind}")
        for row, ylabel in enumerate(("sensitivity", "mean score of the variants")):
            axis = axes[row][column]
            axis.set_xticks(range(len(snrs) + 1), [f"{s} dB" for s in snrs] + ["clean"])
            axis.set_ylabel(ylabel)
            axis.set_title(modality, fontsize="small")
            axis.legend(fontsize="x-small", frameon=False)
        axes[0][column].axhline(0.0, color="black", linewidth=0.8)
    return save_figure(figure, stem)


def plot_prosody_correlation(correlation: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Pearson r (95 % CI) of the clean scores with the unsafe turn's mean energy and median F0, per cell."""
    features = ("rms_db_mean", "f0_median_hz")
    table = correlation.filter((pl.col("condition") == "clean") & pl.col("feature").is_in(features))
    labels = sorted({_cell_label(r) for r in table.iter_rows(named=True)})
    figure, axes = plt.subplots(
        1, len(features), figsize=(4.0 * len(features), 0.8 + 0.35 * len(labels)), squeeze=False
    )
    for axis, feature in zip(axes[0], features):
        part = table.filter(pl.col("feature") == feature)
        y = np.array([labels.index(_cell_label(r)) for r in part.iter_rows(named=True)])
        value = _column(part, "r")
        axis.errorbar(
            value,
            y,
            xerr=_error_bars(value, _column(part, "r_lo"), _column(part, "r_hi")),
            fmt="o",
            capsize=2,
            label="Pearson r, 95 % CI",
        )
        axis.legend(fontsize="xx-small", frameon=False)
        axis.axvline(0.0, color="black", linewidth=0.8)
        axis.set_xlim(-1.05, 1.05)
        axis.set_yticks(range(len(labels)), labels if axis is axes[0][0] else [""] * len(labels), fontsize="x-small")
        axis.set_title(f"score vs {feature}", fontsize="small")
    return save_figure(figure, stem)


@dataclass(frozen=True)
class ControlFigure:
    name: str
    title: str
    caption: str
    table: str
    draw: Callable[[pl.DataFrame, str | os.PathLike], list[Path]]


CONTROL_FIGURES = (
    ControlFigure(
        "control_effects",
        "Clean vs control",
        "Change of sensitivity and specificity under each control (control - clean) per judge cell, with the 95 % "
        "cluster-bootstrap interval of the difference.",
        "effects",
        plot_control_effects,
    ),
    ControlFigure(
        "noise_snr",
        "Score and sensitivity against SNR",
        "Sensitivity (95 % CI) and the mean score of the unsafe variants per judge cell as white noise or babble "
        "is added to the target turn at decreasing SNR; 'clean' is the cell without noise.",
        "noise_curve",
        plot_noise_curve,
    ),
    ControlFigure(
        "prosody_correlation",
        "Scores and the sound of the unsafe turn",
        "Pearson correlation (95 % cluster-bootstrap CI) of the clean scores of the variants with the mean energy "
        "and the median F0 of their unsafe turn.",
        "prosody_correlation",
        plot_prosody_correlation,
    ),
)


def write_control_figures(controls_dir: str | os.PathLike, figure_dir: str | os.PathLike) -> list[Path]:
    """Draw every figure of CONTROL_FIGURES as <figure_dir>/<name>.png and .svg (a control that was not run
    gives a figure that says so)."""
    tables = ControlTables.read(controls_dir)
    paths = []
    for spec in CONTROL_FIGURES:
        stem = Path(figure_dir) / spec.name
        table = getattr(tables, spec.table)
        if spec.table == "effects":
            table = table.filter(pl.col("sensitivity_diff").is_not_null() | pl.col("specificity_diff").is_not_null())
        if table.height == 0:
            paths += _placeholder_figure(stem, f"no data: no control of {spec.table}.parquet was run")
        else:
            paths += spec.draw(table, stem)
    return paths


def control_links(rows: pl.DataFrame) -> list[str]:
    """Per row of a control table, the viewer's list of the control cell's samples beside their clean samples
    (the clean cell of the same judge, modality, source and prompt), largest difference first."""
    return [
        viewer_link(
            "list",
            {**{key: row[key] for key in CONTROL_KEYS}, "condition": row["condition"], "sort": "compare_desc"}
            | {"compare": cell_id({**row, "condition": CLEAN})},
        )
        for row in rows.iter_rows(named=True)
    ]


def _flag_display(flags: pl.DataFrame, check: str, statistic_name: str) -> pl.DataFrame:
    table = flags.filter(pl.col("check") == check).select(*CONTROL_KEYS, "condition", "value", "value_lo", "value_hi")
    table = with_interval(table, "value").rename({"value": statistic_name})
    extra = ("n_dialogues", "status", "p_value", "p_adjusted", "family_size")
    shown = flags.filter(pl.col("check") == check).select(
        *(name for name in extra if name in flags.columns),
        "flagged",
        *(name for name in ("verdict",) if name in flags.columns),
        "evidence",
    )
    return pl.concat([table, shown], how="horizontal")


def _effects_display(effects: pl.DataFrame, conditions: Sequence[str]) -> pl.DataFrame:
    table = effects.filter(pl.col("condition").is_in(conditions)).select(
        *CONTROL_KEYS,
        "condition",
        "sensitivity_clean",
        "sensitivity_control",
        "sensitivity_diff",
        "sensitivity_diff_lo",
        "sensitivity_diff_hi",
        "specificity_clean",
        "specificity_control",
        "specificity_diff",
        "specificity_diff_lo",
        "specificity_diff_hi",
        "shift_unsafe",
        "shift_unsafe_lo",
        "shift_unsafe_hi",
        *(name for name in ("shift_unsafe_status",) if name in effects.columns),
        "n_dialogues",
        *(name for name in ("status",) if name in effects.columns),
        "reason",
    )
    for name in ("sensitivity_diff", "specificity_diff", "shift_unsafe"):
        table = with_interval(table, name)
    return table


def _effects_table(effects: pl.DataFrame, conditions: Sequence[str]) -> str:
    links = control_links(effects.filter(pl.col("condition").is_in(conditions)))
    return html_table(_effects_display(effects, conditions), links=links)


def _not_run(condition: str) -> str:
    return paragraph(
        f"Not run: add the condition {condition} to evaluation.conditions (or to the schedule of a judge)."
    )


def subsection(title: str, *parts: str) -> str:
    return f"<h3>{html.escape(title)}</h3>" + "".join(parts)


def _flag_subsection(flags: pl.DataFrame, title: str, explanation: str, check: str, column: str, condition: str):
    """A control whose result is a flag per judge cell: what it checks, then the flag table (or how to run it)."""
    if check not in flags["check"].to_list():
        return subsection(title, paragraph(explanation), _not_run(condition))
    links = control_links(flags.filter(pl.col("check") == check))
    return subsection(title, paragraph(explanation), html_table(_flag_display(flags, check, column), links=links))


def controls_section(tables: ControlTables, figure_names: Sequence[str]) -> str:
    """The report's section on the controls: one subsection per control, its table and figure."""
    effects, flags = tables.effects, tables.flags
    conditions = set(effects["condition"].to_list())

    def figure(name: str) -> str:
        spec = next(s for s in CONTROL_FIGURES if s.name == name)
        return figure_html(name, spec.title, spec.caption) if name in figure_names else ""

    masked_wer = tables.condition_wer.filter(pl.col("condition") == MASKED)
    noisy = sorted(c for c in conditions if Condition(c).kind in NOISE_KINDS)
    parts = [
        paragraph(
            "Each control scores the judge cells again with one turn changed, the unsafe turn of every variant "
            "(and the same turn of the safe original), and compares each cell with its clean cell: differences "
            "are control - clean with 95 % cluster-bootstrap intervals of the difference, resting on the dialogues "
            "paired in both cells; score shifts pair each sample with its clean counterpart. The checks below are "
            "one family: a check is flagged when its p-value, adjusted by Holm over every estimable check of the run "
            "(family_size), is at most 5 %."
        ),
        figure("control_effects"),
        subsection(
            "Prosody masking (every 160 ms window of the turn time-reversed: no words, same prosody)",
            _effects_table(effects, [MASKED]) if MASKED in conditions else _not_run(MASKED),
            paragraph(
                f"WER of the masked turn (ASR of the masked audio; the study measured {STUDY_MASKED_WER}) next to "
                "its clean WER:"
            )
            if masked_wer.height
            else "",
            html_table(masked_wer) if masked_wer.height else "",
        ),
        subsection(
            "Noise (white noise and babble at a target SNR on the turn)",
            _effects_table(effects, noisy) if noisy else _not_run("noise_10"),
            html_table(with_interval(tables.noise_curve, "sensitivity")) if tables.noise_curve.height else "",
            figure("noise_snr") if noisy else "",
        ),
        _flag_subsection(
            flags,
            "TTS bias (the safe turn re-synthesized by the variants' TTS voice)",
            (
                "Delta = s(original) - s(re-synthesized) should be near 0; a cell whose interval excludes 0 "
                "reacts to the synthesis itself and is flagged."
            ),
            REACTS_TO_SYNTHESIS,
            "tts_delta",
            "tts_control",
        ),
        _flag_subsection(
            flags,
            "Audio-use check (the unsafe turn replaced by silence, audio only)",
            (
                "A cell ignores the audio only where silencing the unsafe turn changes neither its scores on the "
                "variants nor its sensitivity by more than metrics.equivalence_margin, shown by two one-sided tests "
                "of each (verdict 'no effect larger than m'): it is flagged and the guide does not recommend it. "
                "Intervals that merely contain 0 are 'inconclusive', not evidence that the audio is ignored."
            ),
            IGNORES_AUDIO,
            "unsafe_score_shift",
            "silence",
        ),
        _flag_subsection(
            flags,
            "Prompt injection (the unsafe turn ends with a sentence addressed to the evaluator)",
            (
                "Susceptibility: mean score rise of the injected variants over the same variants without the "
                "sentence (spoken in the speaker's voice and present in the transcript); flagged when its "
                "interval lies above 0."
            ),
            INJECTION_SUSCEPTIBLE,
            "susceptibility",
            "injection",
        ),
        subsection(
            "Energy and pitch of the unsafe turn",
            html_table(with_interval(tables.prosody_correlation, "r"))
            if tables.prosody_correlation.height
            else paragraph("Not run: set controls.prosody to true."),
            figure("prosody_correlation"),
        ),
    ]
    return f'<section id="controls"><h2>Controls</h2>{"".join(parts)}</section>'
