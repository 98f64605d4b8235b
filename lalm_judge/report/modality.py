"""The modality analysis in the report (`lalm_judge.analysis.modality`): one figure (per judge and metric, the gain
of the audio per transcript source, the ASR loss and audio + transcript against the audio alone, with their 95 %
intervals) and the section with the behaviour patterns and the table of every quantity."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.lines import Line2D

from lalm_judge.analysis.engine import TARGET_METRICS
from lalm_judge.analysis.modality import ASR_LOSS, GAIN, OVER_AUDIO
from lalm_judge.analysis.support import NOT_ESTIMABLE, WITH_INTERVAL
from lalm_judge.core.table_sets import ModalityTables
from lalm_judge.report.controls import ControlFigure
from lalm_judge.report.figures import _placeholder_figure, plt, save_figure
from lalm_judge.report.html import figure_html, html_table, paragraph, section
from lalm_judge.report.tables import MISSING, interval_text

# The differences the figure draws (the rescue is a share of the loss, on another scale: in the table).
DRAWN = (GAIN, ASR_LOSS, OVER_AUDIO)
COLOURS = {GAIN: "tab:blue", ASR_LOSS: "tab:orange", OVER_AUDIO: "tab:purple"}
LABELS = {
    GAIN: "gain: audio_text - text",
    ASR_LOSS: "ASR loss: text/gt - text/asr",
    OVER_AUDIO: "audio_text - audio only",
}
PATTERN_WORDS = {
    "text_anchored": "text-anchored",
    "balanced": "balanced",
    "conservative": "conservative",
    "interference": "interference",
    "unclassified": "unclassified",
    "undetermined": "undetermined",
}


SHORT = {GAIN: "gain", ASR_LOSS: "ASR loss", OVER_AUDIO: "vs audio only"}


def drawn_effects(effects: pl.DataFrame) -> pl.DataFrame:
    """The rows the figure draws, with their axis label: the differences with a value (the not_estimable ones
    without an interval)."""
    table = effects.filter(pl.col("quantity").is_in(DRAWN), pl.col("value").is_not_null())
    short = pl.col("quantity").replace_strict(SHORT, return_dtype=pl.String)
    return table.with_columns(label=pl.concat_str(short, pl.lit(", "), "transcript_source", pl.lit(" · "), "prompt"))


def plot_modality_effects(effects: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """One panel per (metric, judge): each quantity with its 95 % interval, coloured by kind, its legend beside it;
    a hollow marker is a value on too few dialogues for an interval."""
    table = drawn_effects(effects)
    judges = sorted(table["judge"].unique().to_list())
    labels = {judge: sorted(table.filter(pl.col("judge") == judge)["label"].unique().to_list()) for judge in judges}
    rows = max(len(v) for v in labels.values())
    figure, axes = plt.subplots(
        len(TARGET_METRICS),
        len(judges),
        figsize=(6.8 * len(judges), 1.6 + 0.3 * rows * len(TARGET_METRICS)),
        squeeze=False,
        layout="constrained",
    )
    for column, judge in enumerate(judges):
        for row, metric in enumerate(TARGET_METRICS):
            axis = axes[row][column]
            part = table.filter(pl.col("judge") == judge, pl.col("metric") == metric)
            axis.set_title(f"{judge}: {metric}", fontsize="small")
            if part.height == 0:
                axis.text(0.5, 0.5, f"no {metric} quantity measured", ha="center", va="center", fontsize="small")
                axis.axis("off")
                continue
            _draw_panel(axis, part, labels[judge])
            axis.set_xlabel(f"difference in {metric}", fontsize="small")
    return save_figure(figure, stem)


def _draw_panel(axis, part: pl.DataFrame, labels: Sequence[str]) -> None:
    handles = []
    for quantity in DRAWN:
        rows = part.filter(pl.col("quantity") == quantity)
        if rows.height == 0:
            continue
        y = np.array([labels.index(label) for label in rows["label"]], dtype=float)
        value = rows["value"].cast(pl.Float64).to_numpy()
        low = rows["value_lo"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        high = rows["value_hi"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        error = np.nan_to_num(np.abs(np.vstack([value - low, high - value])))
        estimated = rows["status"].is_in(WITH_INTERVAL).to_numpy()
        colour = COLOURS[quantity]
        axis.errorbar(value[estimated], y[estimated], xerr=error[:, estimated], fmt="o", color=colour, capsize=2)
        axis.plot(value[~estimated], y[~estimated], "o", markerfacecolor="none", color=colour)
        handles.append(Line2D([], [], marker="o", linestyle="", color=colour, label=LABELS[quantity]))
    if not part["status"].is_in(WITH_INTERVAL).all():
        handles.append(
            Line2D([], [], marker="o", linestyle="", markerfacecolor="none", color="grey", label="no interval")
        )
    axis.axvline(0.0, color="black", linewidth=0.8)
    axis.set_yticks(range(len(labels)), labels, fontsize="x-small")
    axis.set_ylim(-0.6, len(labels) - 0.4)
    axis.legend(handles=handles, fontsize="x-small", frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))


MODALITY_FIGURES = (
    ControlFigure(
        "modality_effects",
        "What the audio adds",
        "Per judge (columns) and metric (rows): the gain of adding the audio to each transcript (audio_text - text), "
        "the loss an ASR transcript causes (text/gt - text/asr) and audio + transcript against the audio-only cell, "
        "with 95 % cluster-bootstrap intervals of the paired differences; 0 = no difference. Hollow: on fewer "
        "dialogues than the minimum support, no interval.",
        "effects",
        plot_modality_effects,
    ),
)


def write_modality_figures(modality_dir: str | os.PathLike, figure_dir: str | os.PathLike) -> list[Path]:
    """Draw MODALITY_FIGURES as <figure_dir>/<name>.png and .svg; nothing measured gives a figure that says so."""
    tables = ModalityTables.read(modality_dir)
    paths = []
    for spec in MODALITY_FIGURES:
        stem = Path(figure_dir) / spec.name
        if drawn_effects(tables.effects).height == 0:
            paths += _placeholder_figure(stem, "no modality quantity measured: no judge has the cells to compare")
        else:
            paths += spec.draw(tables.effects, stem)
    return paths


def _value_text(row: Mapping | None) -> str:
    if row is None:
        return MISSING
    if row["status"] in (*WITH_INTERVAL, NOT_ESTIMABLE) and row["value"] is not None:
        shown = interval_text(row["value"], row["value_lo"], row["value_hi"], row["status"])
        return f"{shown} (n < minimum, no interval)" if row["status"] == NOT_ESTIMABLE else shown
    return row["status"].replace("_", " ")


def effects_display(effects: pl.DataFrame) -> pl.DataFrame:
    """One row per (judge, prompt, quantity): its formula, sensitivity and specificity with intervals (or status),
    the dialogues and why a value is missing."""
    rows = []
    for keys, part in effects.group_by(["judge", "prompt", "condition", "name"], maintain_order=True):
        by_metric = {r["metric"]: r for r in part.iter_rows(named=True)}
        first = next(iter(by_metric.values()))
        given = {m: r["reason"] for m, r in by_metric.items() if r["reason"]}
        # A reason both metrics share (a missing cell) is said once.
        shared = len(given) == len(by_metric) and len(set(given.values())) == 1
        reasons = sorted(set(given.values())) if shared else sorted(f"{m}: {reason}" for m, reason in given.items())
        rows.append(
            dict(zip(("judge", "prompt", "condition", "quantity"), keys))
            | {"formula": first["formula"]}
            | {metric: _value_text(by_metric.get(metric)) for metric in TARGET_METRICS}
            | {"n_dialogues": max(r["n_dialogues"] for r in by_metric.values()), "note": "; ".join(reasons) or None}
        )
    schema = dict.fromkeys(("judge", "prompt", "condition", "quantity", "formula", *TARGET_METRICS), pl.String)
    return pl.DataFrame(rows, schema=schema | {"n_dialogues": pl.Int64, "note": pl.String})


def _share_text(row: Mapping) -> str | None:
    """The data's pattern and its share of the resamples, with any other pattern the resamples give."""
    if row.get("data_pattern") is None:
        return None
    others = [
        f"{PATTERN_WORDS[name]} {row[f'share_{name}']:.0%}"
        for name in PATTERN_WORDS
        if name not in (row["data_pattern"], "undetermined") and (row.get(f"share_{name}") or 0.0) > 0.0
    ]
    shown = f"{PATTERN_WORDS[row['data_pattern']]} {row['pattern_share']:.0%}"
    return ", ".join([shown, *others])


def patterns_display(patterns: pl.DataFrame, weak_judges: Mapping[str, str]) -> pl.DataFrame:
    """One row per (judge, prompt): the pattern in words and the rule (or why none), the score shifts with their
    intervals, the dialogues, and a note on weak demo judges."""
    rows = [
        {key: row[key] for key in ("judge", "prompt", "condition")}
        | {
            "pattern": PATTERN_WORDS.get(row["pattern"], "not determined"),
            "resamples_giving_it": _share_text(row),
            "why": "; ".join(filter(None, (row.get("rule"), row["reason"]))) or None,
            **{
                f"score_shift_{g}": interval_text(row[f"shift_{g}"], row[f"shift_{g}_lo"], row[f"shift_{g}_hi"])
                for g in ("safe", "unsafe")
            },
            "n_dialogues": row["n_dialogues"],
            "judge_note": "weak demo model" if row["judge"] in weak_judges else None,
        }
        for row in patterns.iter_rows(named=True)
    ]
    columns = (
        "judge",
        "prompt",
        "condition",
        "pattern",
        "resamples_giving_it",
        "why",
        "score_shift_safe",
        "score_shift_unsafe",
    )
    schema = dict.fromkeys(columns, pl.String) | {"n_dialogues": pl.Int64, "judge_note": pl.String}
    return pl.DataFrame(rows, schema=schema)


DEFINITIONS = (
    "Per judge, prompt and metric M (sensitivity, specificity), M(m, s) being the cell with modality m and "
    "transcript source s: gain_<s> = M(audio_text, s) - M(text, s) (for an ASR source, the loss the audio recovers); "
    "asr_loss_<a> = M(text, gt) - M(text, a) for an ASR source a; rescue_<a> = gain_<a> / asr_loss_<a>, the share "
    "of the ASR loss the audio wins back, bounded to [0, 1] and reported only where the loss's interval lies above "
    "0 (its interval is Fieller's: no resample is divided by its loss); audio_text_vs_audio_gt = M(audio_text, gt) "
    "- M(audio, none). Intervals: 95 % cluster bootstrap with every cell of a quantity resampled on the same "
    "dialogues. Score shift: the mean paired s(audio_text, gt) - s(text, gt) on the safe originals and on the "
    "variants."
)

PATTERN_RULES = (
    "Behaviour pattern, the first rule that holds, an effect within metrics.equivalence_margin (m) counting as "
    "none: interference (a gain_gt below -m); conservative (both score shifts below -m: the audio lowers safe and "
    "unsafe scores alike); text-anchored (both gain_gt within +-m: the audio changes nothing that matters); "
    "balanced (a gain_gt above m, no audio_text_vs_audio below -m); unclassified (better than the transcript, "
    "behind the audio alone). The rule is applied to the data and to every bootstrap resample; a pattern is stated "
    "only where at least metrics.pattern_min_share of the resamples give it, 'undetermined' otherwise. Not "
    "determined without an estimable gain_gt of both metrics (docs/metrics.md, 'Modality')."
)


def modality_section(
    tables: ModalityTables, figure_names: Sequence[str], weak_judges: Mapping[str, str] | None = None
) -> str:
    """The report's section on the modality analysis: definitions, the figure, the patterns and every quantity."""
    weak_judges = weak_judges or {}
    figures = "".join(
        figure_html(spec.name, spec.title, spec.caption) for spec in MODALITY_FIGURES if spec.name in figure_names
    )
    weak = [j for j in dict.fromkeys(tables.patterns["judge"].to_list()) if j in weak_judges]
    caveat = (
        paragraph(
            f"{', '.join(weak)}: weak demo model(s); their patterns show the analysis runs, not how LALMs behave."
        )
        if weak
        else ""
    )
    return section(
        "modality",
        "Modality: what the audio adds",
        paragraph(DEFINITIONS),
        paragraph(PATTERN_RULES),
        figures,
        "<h3>Behaviour patterns</h3>",
        caveat,
        html_table(patterns_display(tables.patterns, weak_judges)),
        "<h3>Every quantity</h3>",
        html_table(effects_display(tables.effects)),
    )
