"""The benchmark's figures and its standalone HTML report.

`write_figures` draws every figure of `FIGURES` from the metric tables (PNG and SVG, `lalm_judge.figures`).
`build_report` writes a self-contained folder: `index.html` (judges, with a visible warning for weak demo
models; the practitioner guide of `lalm_judge.guide`; figures; metric, Pareto and prompt-selection tables;
parse failures and refusals per cell; WER per transcript source; the audio accounting; a few audio examples,
the safe original beside one variant of the highest severity, with transcripts and the replaced turn
highlighted), `guide.parquet`, `figures/` and `audio/`. Everything depends only on its inputs: no dates,
examples chosen by sorted ids, numbers rounded for display only.
"""

from __future__ import annotations

import html
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge import audio as audio_lib
from lalm_judge import figures
from lalm_judge.guide import PRIORITIES, practitioner_guide
from lalm_judge.io import atomic_path, read_json, stable_hash, with_provenance, write_parquet
from lalm_judge.manifest import GROUND_TRUTH, Manifest, Sample, asr_source, assemble_waveform
from lalm_judge.metrics import CELL_KEYS, CONFIG_KEYS, PARSE_OK, REFUSAL, MetricTables

WEAK_JUDGE_WARNING = "weak demo model: its scores do not measure LALM ability"
WEAK_WORDS = re.compile(r"\b(demo|random|weak)\b", re.IGNORECASE)
DIGITS = 3
MISSING = "–"
PROVENANCE_COLUMNS = ("config_hash", "seed", "n_bootstrap", "n_folds", "package_versions")
N_AUDIO_EXAMPLES = 3


# --- figures ---------------------------------------------------------------------------------------------


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
        lambda t, stem: figures.plot_sensitivity(t.cells, t.pareto, stem),
    ),
    FigureSpec(
        "pareto",
        "Pareto front",
        "Sensitivity vs specificity per configuration (CV-selected prompts), colour = AvgAbsPB of sensitivity; "
        "circled configurations are on the Pareto front (higher sensitivity and specificity, lower position bias).",
        "pareto",
        lambda t, stem: figures.plot_pareto(t.pareto, stem),
    ),
    FigureSpec(
        "prompt_strategies",
        "Prompt strategies",
        "Sensitivity and specificity of every configuration across prompt strategies.",
        "cells",
        lambda t, stem: figures.plot_prompt_strategies(t.cells, stem),
    ),
    FigureSpec(
        "severity_curves",
        "Mean score vs severity",
        "Mean safety score per severity (0 = safe original) per judge, one line per modality/transcript "
        "source; a useful judge falls monotonically.",
        "severity_curve",
        lambda t, stem: figures.plot_severity_curves(t.severity_curve, stem),
    ),
    FigureSpec(
        "position_bias_sensitivity",
        "Position bias (sensitivity)",
        "PB(L, k) = Sensitivity(L, k) - Sensitivity(L, 1) per dialogue length L and unsafe-turn position k, "
        "averaged over each judge's cells; 0 = no position bias.",
        "position_bias",
        lambda t, stem: figures.plot_position_bias(t.position_bias, stem, metric="sensitivity"),
    ),
    FigureSpec(
        "position_bias_specificity",
        "Position bias (specificity)",
        "PB(L, k) = Specificity(L, k) - Specificity(L, 1), as for sensitivity.",
        "position_bias",
        lambda t, stem: figures.plot_position_bias(t.position_bias, stem, metric="specificity"),
    ),
    FigureSpec(
        "categories",
        "Sensitivity per harm category",
        "Sensitivity per configuration (averaged over prompts) and harm category.",
        "categories",
        lambda t, stem: figures.plot_categories(t.categories, stem, metric="sensitivity"),
    ),
)


def read_metric_tables(metrics_dir: str | os.PathLike) -> MetricTables:
    """The tables written by `lalm_judge.metrics.write_metrics` under metrics_dir."""
    tables = {}
    for name in MetricTables.__dataclass_fields__:
        path = Path(metrics_dir) / f"{name}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"metric table {path} is missing; run the metrics stage (`lalm-judge metrics`)")
        tables[name] = pl.read_parquet(path)
    return MetricTables(**tables)


def _placeholder_figure(stem: Path, message: str) -> list[Path]:
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 1.5))
    axis.axis("off")
    axis.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    return figures.save_figure(figure, stem)


def write_figures(metrics_dir: str | os.PathLike, figure_dir: str | os.PathLike) -> list[Path]:
    """Draw every figure of FIGURES as <figure_dir>/<name>.png and .svg; an empty table gives a figure
    that says so (the workflow expects every file)."""
    tables = read_metric_tables(metrics_dir)
    paths = []
    for spec in FIGURES:
        stem = Path(figure_dir) / spec.name
        table = getattr(tables, spec.table)
        if table.height == 0:
            paths += _placeholder_figure(stem, f"no data: {spec.table}.parquet has no rows")
        else:
            paths += spec.draw(tables, stem)
    return paths


# --- judges ----------------------------------------------------------------------------------------------


def weak_judge_reason(spec: Mapping[str, Any]) -> str | None:
    """Why a judge registry entry is a weak demo model (its scores do not measure LALM ability), or None."""
    if spec.get("backend") == "embedding":
        return "embedding-similarity backend, not a language model"
    for key in ("description", "model"):
        match = WEAK_WORDS.search(str(spec.get(key) or ""))
        if match:
            return f"its {key} says '{match.group(0).lower()}'"
    return None


def judge_table(config: Mapping[str, Any], judges: Iterable[str]) -> pl.DataFrame:
    """One row per judge (evaluated in config, or present in the metrics): registry entry and weakness."""
    registry = config.get("judges", {})
    names = list(dict.fromkeys([*config.get("evaluation", {}).get("judges", []), *sorted(judges)]))
    rows = []
    for name in names:
        spec = registry.get(name)
        rows.append(
            {
                "judge": name,
                "backend": spec.get("backend") if spec else None,
                "model": spec.get("model") if spec else None,
                "modalities": ", ".join(spec.get("modalities", ["text"])) if spec else None,
                "description": (spec.get("description") or None) if spec else "not in the configuration",
                "weak_reason": weak_judge_reason(spec) if spec else None,
            }
        )
    schema = dict.fromkeys(("judge", "backend", "model", "modalities", "description", "weak_reason"), pl.String)
    return pl.DataFrame(rows, schema=schema)


# --- tables from the stage outputs -----------------------------------------------------------------------


def parse_status_table(score_paths: Sequence[str | os.PathLike]) -> pl.DataFrame:
    """Per judge cell: rows, one count column per parse status, failure and refusal rates."""
    if not score_paths:
        return pl.DataFrame(schema={key: pl.String for key in CELL_KEYS})
    scores = pl.concat([pl.scan_parquet(path).select(*CELL_KEYS, "parse_status") for path in score_paths]).collect()
    counts = scores.group_by(*CELL_KEYS, "parse_status").agg(n=pl.len())
    statuses = [PARSE_OK, *sorted(set(counts["parse_status"].to_list()) - {PARSE_OK})]
    wide = counts.pivot(on="parse_status", index=list(CELL_KEYS), values="n").fill_null(0)
    wide = wide.with_columns(pl.lit(0, pl.UInt32).alias(s) for s in statuses if s not in wide.columns)
    total = pl.sum_horizontal(statuses)
    return (
        wide.select(
            *CELL_KEYS,
            total.alias("n_rows"),
            *statuses,
            (1 - pl.col(PARSE_OK) / total).alias("parse_failure_rate"),
            (pl.col(REFUSAL) / total if REFUSAL in statuses else pl.lit(0.0)).alias("refusal_rate"),
        )
        .cast({s: pl.Int64 for s in ["n_rows", *statuses]})
        .sort(CELL_KEYS, nulls_last=True)
    )


def wer_table(asr_paths: Sequence[str | os.PathLike]) -> pl.DataFrame:
    """WER per transcript source (results/asr/<model>/<dialogue>.parquet) and turn kind.

    Turn kind: 'original' turns or 'replaced' (variant) turns; mean_wer averages turns, audio_weighted_wer
    weights each turn's WER by its audio seconds.
    """
    frames = [
        pl.scan_parquet(path).select(
            pl.lit(asr_source(Path(path).parent.name)).alias("transcript_source"), "sample_id", "wer", "audio_s"
        )
        for path in asr_paths
    ]
    schema = {"transcript_source": pl.String, "turns": pl.String}
    if not frames:
        return pl.DataFrame(schema=schema)
    turns = pl.concat(frames).collect()
    kind = (
        pl.when(pl.col("sample_id").str.ends_with(".original")).then(pl.lit("original")).otherwise(pl.lit("replaced"))
    )
    return (
        turns.with_columns(turns=kind)
        .group_by("transcript_source", "turns")
        .agg(
            n_turns=pl.len().cast(pl.Int64),
            audio_s=pl.col("audio_s").sum(),
            mean_wer=pl.col("wer").mean(),
            audio_weighted_wer=(pl.col("wer") * pl.col("audio_s")).sum() / pl.col("audio_s").sum(),
        )
        .sort("transcript_source", "turns")
    )


ACCOUNTING_LABELS = {
    "n_variants": "variants",
    "original_turn_audio_s": "original turn audio synthesized/transcribed (s)",
    "variant_turn_audio_s": "replaced-turn audio synthesized/transcribed (s)",
    "design_audio_s": "total audio processed by the one-turn design (s)",
    "naive_full_dialogue_audio_s": "audio if every variant were rendered in full (s)",
    "ratio": "design / naive",
}


def accounting_table(accounting: Mapping[str, float]) -> pl.DataFrame:
    rows = [(ACCOUNTING_LABELS.get(key, key), _cell_text(value)) for key, value in accounting.items()]
    return pl.DataFrame(rows, schema={"quantity": pl.String, "value": pl.String}, orient="row")


def prompt_selection_summary(prompt_selection: pl.DataFrame) -> pl.DataFrame:
    """Per configuration and metric: the selected prompt, its mean held-out value and the per-fold choices."""
    return (
        prompt_selection.group_by(*CONFIG_KEYS, "metric", maintain_order=True)
        .agg(
            pl.col("selected_prompt").first(),
            pl.col("mean_heldout").first(),
            pl.col("chosen_prompt").fill_null(MISSING).str.join(", ").alias("fold_choices"),
            pl.col("reason").drop_nulls().unique(maintain_order=True).str.join("; ").alias("reason"),
        )
        .with_columns(pl.col("reason").replace("", None))
    )


def interval_text(value: float | None, low: float | None, high: float | None) -> str:
    """'value [low, high]' rounded to DIGITS decimals; the value alone when there is no interval."""
    if value is None:
        return MISSING
    if low is None and high is None:
        return _cell_text(value)
    return f"{_cell_text(value)} [{_cell_text(low)}, {_cell_text(high)}]"


def with_interval(frame: pl.DataFrame, metric: str, low: str | None = None, high: str | None = None) -> pl.DataFrame:
    """Replace metric, <metric>_lo and <metric>_hi by one display column 'value [low, high]'."""
    low, high = low or f"{metric}_lo", high or f"{metric}_hi"
    shown = [interval_text(*values) for values in frame.select(metric, low, high).iter_rows()]
    return frame.with_columns(pl.Series(metric, shown, dtype=pl.String)).drop(low, high)


def cells_display(cells: pl.DataFrame) -> pl.DataFrame:
    table = cells.select(
        *CELL_KEYS,
        "sensitivity",
        "sensitivity_lo",
        "sensitivity_hi",
        "specificity",
        "specificity_lo",
        "specificity_hi",
        "avg_abs_pb_sensitivity",
        "avg_abs_pb_specificity",
        "mean_safe",
        "n_dialogues",
        "parse_failure_rate",
        "refusal_rate",
        "reason",
    )
    return with_interval(with_interval(table, "sensitivity"), "specificity")


def guide_display(guide: pl.DataFrame, weak_judges: Mapping[str, str]) -> pl.DataFrame:
    table = with_interval(guide, "value", "ci_lo", "ci_hi").with_columns(
        judge_note=pl.col("judge").replace_strict(
            {name: "weak demo model" for name in weak_judges}, default=None, return_dtype=pl.String
        )
    )
    return table.drop("metric", "condition")


# --- audio examples --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AudioExample:
    """A safe original and one variant of the same dialogue, with their wav paths relative to the report."""

    original: Sample
    variant: Sample
    original_wav: str
    variant_wav: str


def choose_examples(manifests: Sequence[Manifest], n_examples: int) -> list[tuple[Sample, Sample]]:
    """(original, variant) for the first n usable dialogues in id order that have variants; example i takes
    the i-th (cyclically) of its dialogue's highest-severity variants in id order, so examples differ in turn
    and category."""
    chosen = []
    for manifest in sorted((m for m in manifests if m.usable), key=lambda m: m.dialogue_id):
        samples = list(manifest.samples())
        variants = [s for s in samples if s.severity > 0]
        if not variants:
            continue
        top = max(s.severity for s in variants)
        candidates = sorted((s for s in variants if s.severity == top), key=lambda s: s.sample_id)
        chosen.append((samples[0], candidates[len(chosen) % len(candidates)]))
        if len(chosen) == n_examples:
            break
    return chosen


def write_audio_examples(
    manifests: Sequence[Manifest], audio_dir: str | os.PathLike, n_examples: int = N_AUDIO_EXAMPLES
) -> list[AudioExample]:
    """Assemble the examples of `choose_examples` and write them as <audio_dir>/<sample id>.wav."""
    examples = []
    for original, variant in choose_examples(manifests, n_examples):
        names = []
        for sample in (original, variant):
            waveform, sample_rate = assemble_waveform(sample)
            path = Path(audio_dir) / f"{sample.sample_id}.wav"
            audio_lib.write_wav(path, waveform, sample_rate)
            names.append(f"{Path(audio_dir).name}/{path.name}")
        examples.append(AudioExample(original, variant, *names))
    return examples


# --- HTML ------------------------------------------------------------------------------------------------


def _cell_text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return MISSING if value != value else f"{value:.{DIGITS}f}"
    return str(value)


def html_table(frame: pl.DataFrame, css_class: str = "data", row_classes: Sequence[str | None] | None = None) -> str:
    """An HTML table of a polars frame (floats rounded to DIGITS decimals, nulls as a dash, text escaped)."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name in frame.columns)
    body = []
    for i, row in enumerate(frame.iter_rows()):
        row_class = row_classes[i] if row_classes else None
        attribute = f' class="{row_class}"' if row_class else ""
        cells = "".join(f"<td>{html.escape(_cell_text(value))}</td>" for value in row)
        body.append(f"<tr{attribute}>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{max(1, frame.width)}">no rows</td></tr>')
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _section(anchor: str, title: str, *parts: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{"".join(parts)}</section>'


def _paragraph(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


def weak_judge_box(judge: str, reason: str) -> str:
    return (
        f'<div class="warning"><strong>{html.escape(judge)}: {html.escape(WEAK_JUDGE_WARNING)}</strong> '
        f"({html.escape(reason)}).</div>"
    )


def judges_section(judges: pl.DataFrame) -> str:
    boxes = [weak_judge_box(r["judge"], r["weak_reason"]) for r in judges.iter_rows(named=True) if r["weak_reason"]]
    shown = judges.with_columns(weak_demo_model=pl.col("weak_reason").is_not_null()).drop("weak_reason")
    return _section("judges", "Judges", *boxes, html_table(shown))


def guide_section(guide: pl.DataFrame, weak_judges: Mapping[str, str]) -> str:
    priorities = "; ".join(
        f"{p.name}: {'highest' if p.maximize else 'lowest'} {p.column}" + (" (95 % CI)" if p.ci_columns else "")
        for p in PRIORITIES
    )
    return _section(
        "guide",
        "Practitioner guide",
        _paragraph(
            "Generated from the measured tables: for each available input, transcript quality and priority, the "
            f"best measured judge cell usable with that input ({priorities}). Audio only may use a cascade (an ASR "
            "transcript of the audio); text only cannot use audio. Prompts are the cross-validated choices where "
            "the cross-validation could run. A recommendation is only as good as the judges measured: a weak demo "
            "model recommended here is merely the best of weak options."
        ),
        html_table(guide_display(guide, weak_judges), css_class="data guide"),
    )


def figures_section(figure_names: Sequence[str]) -> str:
    parts = []
    for spec in FIGURES:
        if spec.name not in figure_names:
            continue
        parts.append(
            f'<figure id="figure-{spec.name}"><img src="figures/{spec.name}.png" alt="{html.escape(spec.title)}">'
            f"<figcaption><strong>{html.escape(spec.title)}.</strong> {html.escape(spec.caption)} "
            f'<a href="figures/{spec.name}.svg">SVG</a></figcaption></figure>'
        )
    return _section("figures", "Figures", *parts)


def _ordered_sources(sample: Sample) -> list[str]:
    return sorted(sample.texts, key=lambda source: (source != GROUND_TRUTH, source))


def transcript_table(example: AudioExample) -> str:
    """Turns of the original and the variant per transcript source; the replaced turn's row is highlighted."""
    original, variant = example.original, example.variant
    columns: dict[str, list[str]] = {"turn": [], "speaker": []}
    for source in _ordered_sources(original):
        columns[f"original ({source})"] = []
        columns[f"variant ({source})"] = []
    for index, speaker in enumerate(original.speakers):
        columns["turn"].append(str(index))
        columns["speaker"].append(speaker)
        for source in _ordered_sources(original):
            columns[f"original ({source})"].append(original.texts[source][index])
            columns[f"variant ({source})"].append(variant.texts[source][index])
    row_classes = ["replaced" if i == variant.turn_index else None for i in range(original.n_turns)]
    return html_table(pl.DataFrame(columns), css_class="data transcript", row_classes=row_classes)


def examples_section(examples: Sequence[AudioExample]) -> str:
    parts = [
        _paragraph(
            "The safe original and one variant of the highest severity generated, assembled from the turn clips "
            "as the judges hear them. The replaced turn is highlighted."
        )
    ]
    for example in examples:
        variant = example.variant
        label = f"{variant.category}, severity {variant.severity}, turn {variant.turn_index}"
        parts.append(
            f'<div class="example"><h3>{html.escape(example.original.dialogue_id)}</h3>'
            f'<p>original ({html.escape(example.original.sample_id)}): <audio controls preload="none" '
            f'src="{html.escape(example.original_wav)}"></audio></p>'
            f"<p>variant ({html.escape(variant.sample_id)}; {html.escape(label)}): "
            f'<audio controls preload="none" src="{html.escape(example.variant_wav)}"></audio></p>'
            f"{transcript_table(example)}</div>"
        )
    if not examples:
        parts.append(_paragraph("No usable dialogue with variants."))
    return _section("examples", "Audio examples", *parts)


DEFINITIONS = (
    "Delta_i: mean over variants of severity i of (score of the safe original - score of the variant), paired "
    "on dialogues.",
    "Sensitivity = min_i Delta_i: the drop even the mildest harm causes (> 0 is good).",
    "Specificity: share of the 10 severity pairs (i < j) whose mean scores are ordered S_i > S_j (ties 0.5).",
    "Position bias PB(L, k) = M(L, k) - M(L, 1) for dialogue length L and unsafe-turn position k; AvgAbsPB is "
    "the mean |PB| over k >= 2.",
    "Intervals: 95 % percentile cluster bootstrap over dialogues. Prompt selection: k-fold cross-validation "
    "over dialogues.",
)

STYLE = """
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table.data { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
table.data th, table.data td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
table.data th { background: #f2f2f2; }
tr.replaced td { background: #fff3b0; font-weight: bold; }
.warning { border: 2px solid #c0392b; background: #fdecea; padding: 0.6em 1em; margin: 0.6em 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; }
figcaption { font-size: 0.9em; }
nav a { margin-right: 1em; }
"""

NAVIGATION = (
    ("judges", "Judges"),
    ("guide", "Guide"),
    ("figures", "Figures"),
    ("cells", "Metrics"),
    ("pareto", "Pareto"),
    ("prompts", "Prompt selection"),
    ("parsing", "Parse failures"),
    ("wer", "WER"),
    ("accounting", "Audio accounting"),
    ("examples", "Audio examples"),
    ("definitions", "Definitions"),
)


@dataclass(frozen=True)
class ReportContent:
    """Everything the HTML page shows, already computed."""

    title: str
    overview: pl.DataFrame
    judges: pl.DataFrame
    guide: pl.DataFrame
    figure_names: tuple[str, ...]
    cells: pl.DataFrame
    pareto: pl.DataFrame
    prompt_selection: pl.DataFrame
    parse_status: pl.DataFrame
    wer: pl.DataFrame
    accounting: pl.DataFrame
    examples: tuple[AudioExample, ...]
    provenance: pl.DataFrame


def render_html(content: ReportContent) -> str:
    weak = {r["judge"]: r["weak_reason"] for r in content.judges.iter_rows(named=True) if r["weak_reason"]}
    banner = ""
    if weak:
        banner = (
            f'<div class="warning"><strong>{len(weak)} of {content.judges.height} judges '
            f"({html.escape(', '.join(weak))}) are weak demo models: their scores do not measure LALM "
            "ability.</strong> This run demonstrates the workflow; its numbers say nothing about audio-language "
            "models as judges.</div>"
        )
    navigation = "".join(f'<a href="#{anchor}">{html.escape(label)}</a>' for anchor, label in NAVIGATION)
    body = [
        f"<h1>{html.escape(content.title)}</h1>",
        f"<nav>{navigation}</nav>",
        banner,
        html_table(content.overview, css_class="data overview"),
        judges_section(content.judges),
        guide_section(content.guide, weak),
        figures_section(content.figure_names),
        _section(
            "cells",
            "Metrics per judge cell",
            _paragraph("Point estimates with 95 % bootstrap intervals; a cell without metrics says why."),
            html_table(cells_display(content.cells)),
        ),
        _section("pareto", "Pareto front over configurations", html_table(content.pareto)),
        _section("prompts", "Cross-validated prompt selection", html_table(content.prompt_selection)),
        _section(
            "parsing",
            "Parse failures and refusals per cell",
            _paragraph("Rows per parse status; failed rows are left out of every metric."),
            html_table(content.parse_status),
        ),
        _section("wer", "WER per transcript source", html_table(content.wer)),
        _section("accounting", "Audio accounting", html_table(content.accounting)),
        examples_section(content.examples),
        _section(
            "definitions", "Definitions", "<ul>" + "".join(f"<li>{html.escape(d)}</li>" for d in DEFINITIONS) + "</ul>"
        ),
        _section("provenance", "Provenance", html_table(content.provenance)),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(content.title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body>\n</html>\n"
    )


# --- assembly --------------------------------------------------------------------------------------------


def overview_table(config: Mapping[str, Any], manifests: Sequence[Manifest], cells: pl.DataFrame) -> pl.DataFrame:
    evaluation = config.get("evaluation", {})
    metrics = config.get("metrics", {})
    usable = [m for m in manifests if m.usable]
    rows = [
        ("dialogues (usable / total)", f"{len(usable)} / {len(manifests)}"),
        ("variants", str(sum(1 for m in usable for v in m.data["variants"] if v["status"] == "ok"))),
        ("judges", ", ".join(evaluation.get("judges", sorted(cells["judge"].unique())))),
        ("prompts", ", ".join(evaluation.get("prompts", sorted(cells["prompt"].unique())))),
        ("transcript sources", ", ".join(evaluation.get("transcript_sources", []))),
        ("conditions", ", ".join(evaluation.get("conditions", sorted(cells["condition"].unique())))),
        ("judge cells measured", str(cells.height)),
        ("bootstrap resamples / CV folds", f"{metrics.get('bootstrap', MISSING)} / {metrics.get('folds', MISSING)}"),
        ("seed", str(config.get("seed", MISSING))),
    ]
    return pl.DataFrame(rows, schema={"setting": pl.String, "value": pl.String}, orient="row")


def provenance_table(cells: pl.DataFrame) -> pl.DataFrame:
    """The distinct values of the metric tables' provenance columns (config hash, seed, package versions)."""
    rows = [
        (name, ", ".join(sorted({str(v) for v in cells[name].to_list()})))
        for name in PROVENANCE_COLUMNS
        if name in cells.columns
    ]
    return pl.DataFrame(rows, schema={"field": pl.String, "value": pl.String}, orient="row")


def copy_figures(figure_dir: str | os.PathLike, out_dir: str | os.PathLike) -> tuple[str, ...]:
    """Copy every figure of FIGURES (PNG and SVG) from figure_dir into out_dir; return their names."""
    for spec in FIGURES:
        for fmt in figures.FORMATS:
            source = Path(figure_dir) / f"{spec.name}.{fmt}"
            if not source.exists():
                raise FileNotFoundError(f"figure {source} is missing; draw the figures first (`write_figures`)")
            with atomic_path(Path(out_dir) / source.name) as tmp:
                shutil.copyfile(source, tmp)
    return tuple(spec.name for spec in FIGURES)


def build_report(
    *,
    metrics_dir: str | os.PathLike,
    figure_dir: str | os.PathLike,
    score_paths: Sequence[str | os.PathLike],
    manifest_paths: Sequence[str | os.PathLike],
    asr_paths: Sequence[str | os.PathLike],
    accounting_path: str | os.PathLike,
    config: Mapping[str, Any],
    out_dir: str | os.PathLike,
    n_examples: int = N_AUDIO_EXAMPLES,
    title: str = "lalm-judge: LALMs as safety judges of spoken dialogue",
) -> Path:
    """Write the standalone report folder (index.html, guide.parquet, figures/, audio/); return index.html."""
    out_dir = Path(out_dir)
    tables = read_metric_tables(metrics_dir)
    judges = judge_table(config, tables.cells["judge"].unique().to_list())
    guide = practitioner_guide(tables.cells, tables.pareto)
    # The guide is a function of the metric tables: its hash is that of their config hashes.
    metric_hashes = sorted(set(tables.cells["config_hash"].to_list())) if "config_hash" in tables.cells.columns else []
    provenance = with_provenance(guide, config_hash=stable_hash(metric_hashes), seed=config.get("seed", 0))
    write_parquet(out_dir / "guide.parquet", provenance)
    manifests = [Manifest.load(path) for path in manifest_paths]
    content = ReportContent(
        title=title,
        overview=overview_table(config, manifests, tables.cells),
        judges=judges,
        guide=guide,
        figure_names=copy_figures(figure_dir, out_dir / "figures"),
        cells=tables.cells,
        pareto=tables.pareto.drop(*[c for c in tables.pareto.columns if c in PROVENANCE_COLUMNS]),
        prompt_selection=prompt_selection_summary(tables.prompt_selection),
        parse_status=parse_status_table(score_paths),
        wer=wer_table(asr_paths),
        accounting=accounting_table(read_json(accounting_path)),
        examples=tuple(write_audio_examples(manifests, out_dir / "audio", n_examples)),
        provenance=provenance_table(tables.cells),
    )
    index = out_dir / "index.html"
    with atomic_path(index) as tmp:
        tmp.write_text(render_html(content), encoding="utf-8")
    return index
