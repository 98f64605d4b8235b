"""The report's HTML page: sections, tables and styling, rendered from `ReportContent` (everything already
computed). No external assets: the page works offline."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lalm_judge.analysis.engine import CELL_KEYS
from lalm_judge.analysis.findings import DROP
from lalm_judge.analysis.guide import PRIORITIES
from lalm_judge.analysis.multiplicity import CATEGORIES, FINDINGS
from lalm_judge.core.table_sets import severities_with_intervals
from lalm_judge.core.vocabulary import CLEAN, TranscriptSource
from lalm_judge.manifest.samples import Sample
from lalm_judge.report.coverage import coverage_statement
from lalm_judge.report.examples import AudioExample
from lalm_judge.report.figures import FIGURES
from lalm_judge.report.flow import FLOW_STYLE, flow_svg
from lalm_judge.report.tables import (
    NOISE_LEVEL,
    cell_text,
    cells_display,
    deltas_display,
    family_sentence,
    guide_display,
    metric_warnings,
    pareto_display,
    position_bias_display,
    smallest_supported,
)
from lalm_judge.report.viewer import sample_link, sample_links, viewer_intro

WEAK_JUDGE_WARNING = "weak demo model: its scores do not measure LALM ability"


def header_html(name: str) -> str:
    """A column name as a table header: escaped, with a line-break opportunity after each underscore, so that a
    narrow column wraps `parse_failure_rate` between its words instead of widening the table or breaking a word."""
    return "_<wbr>".join(html.escape(part) for part in name.split("_"))


def html_table(
    frame: pl.DataFrame,
    css_class: str = "data",
    row_classes: Sequence[str | None] | None = None,
    links: Sequence[str | None] | None = None,
) -> str:
    """An HTML table of a polars frame (floats rounded to DIGITS decimals, nulls as a dash, text escaped); with
    `links`, a last column links each row to its samples in the sample viewer."""
    head = "".join(f"<th>{header_html(name)}</th>" for name in frame.columns)
    if links is not None:
        head += f"<th>{VIEWER_COLUMN}</th>"
    body = []
    for i, row in enumerate(frame.iter_rows()):
        row_class = row_classes[i] if row_classes else None
        attribute = f' class="{row_class}"' if row_class else ""
        cells = "".join(f"<td>{html.escape(cell_text(value))}</td>" for value in row)
        if links is not None:
            cells += f"<td>{viewer_anchor(links[i])}</td>"
        body.append(f"<tr{attribute}>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{max(1, frame.width)}">no rows</td></tr>')
    table = f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    # A table wider than the page scrolls inside its own box, never the page.
    return f'<div class="table-wrap">{table}</div>'


VIEWER_COLUMN = "samples"


def viewer_anchor(link: str | None, text: str = "open") -> str:
    """A link into the sample viewer (a dash for none)."""
    return html.escape(cell_text(None)) if link is None else f'<a href="{html.escape(link)}">{html.escape(text)}</a>'


def section(anchor: str, title: str, *parts: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{"".join(parts)}</section>'


def paragraph(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


def weak_judge_box(judge: str, reason: str) -> str:
    return (
        f'<div class="warning"><strong>{html.escape(judge)}: {html.escape(WEAK_JUDGE_WARNING)}</strong> '
        f"({html.escape(reason)}).</div>"
    )


def unpinned_box(unpinned: Sequence[str]) -> str:
    """The models of the run named by a branch, not a commit (`lalm_judge.workflow.pins`)."""
    return (
        f'<div class="warning"><strong>{len(unpinned)} model(s) ran from a branch, not a pinned commit: a rerun may '
        f"use other weights.</strong> {html.escape('; '.join(unpinned))}. Pin them with "
        "<code>lalm-judge pin-revisions CONFIG</code> before the next run.</div>"
    )


def judges_section(judges: pl.DataFrame, unpinned: Sequence[str] = ()) -> str:
    boxes = [weak_judge_box(r["judge"], r["weak_reason"]) for r in judges.iter_rows(named=True) if r["weak_reason"]]
    boxes += [unpinned_box(unpinned)] if unpinned else []
    shown = judges.with_columns(weak_demo_model=pl.col("weak_reason").is_not_null()).drop("weak_reason")
    return section("judges", "Judges", *boxes, html_table(shown))


def guide_section(guide: pl.DataFrame, weak_judges: Mapping[str, str], flow: Mapping[str, Any] | None = None) -> str:
    priorities = "; ".join(
        f"{p.name}: {'highest' if p.maximize else 'lowest'} {p.column}" + (" (95 % CI)" if p.ci_columns else "")
        for p in PRIORITIES
    )
    figure = ""
    if flow is not None:
        figure = (
            '<figure id="figure-decision-flow" class="flow">'
            f"{flow_svg(flow, weak_judges)}"
            "<figcaption><strong>Decision flow.</strong> Follow the input the judge gets, the transcript there is "
            "and what matters most to the judge cell to use: its value with the 95 % interval and how many measured "
            "cells competed. A dashed box: no measured judge takes that input.</figcaption></figure>"
            f'<aside class="caveat"><strong>Caveat.</strong> {html.escape(flow["caveat"])}</aside>'
        )
    return section(
        "guide",
        "Practitioner guide",
        paragraph(
            "Generated from the measured tables: for each available input, transcript quality and priority, the "
            f"best measured judge cell usable with that input ({priorities}). Audio only may use a cascade (an ASR "
            "transcript of the audio); text only cannot use audio. Prompts are the cross-validated choices where "
            "the cross-validation could run. The cell listed is the best point estimate; it is recommended over "
            "another only where their paired difference (both cells on the same resampled dialogues, "
            "comparisons.parquet) has a 95 % interval that excludes 0: tied_with names the candidates it cannot be "
            "told apart from. A recommendation is only as good as the judges measured: a weak demo model "
            "recommended here is merely the best of weak options."
        ),
        figure,
        html_table(guide_display(guide, weak_judges), css_class="data guide"),
    )


def finding_sentence(finding: Mapping[str, object]) -> str:
    """One measured effect in words, from a row of `lalm_judge.analysis.findings.delta_findings`."""
    delta, low, high = (float(finding[key]) for key in ("delta", "delta_lo", "delta_hi"))  # type: ignore[arg-type]
    source = finding["transcript_source"]
    shown = "no transcript" if source == TranscriptSource.NONE else f"{source} transcript"
    cell = f"{finding['judge']} ({finding['modality']}, {shown}, {finding['prompt']} prompt, {finding['condition']})"
    severity = finding["severity"]
    variants = (
        f"severity-{severity} {finding['category']} variants"
        if finding.get("category")
        else (f"severity-{severity} variants")
    )
    if finding["direction"] == DROP:
        effect = f"scores {variants} {cell_text(delta)} lower than their safe originals"
    else:
        effect = f"scores {variants} {cell_text(-delta)} higher (safer) than their safe originals"
    tested = ""
    if finding.get("p_value") is not None:
        tested = (
            f", p = {finding['p_value']:.2g}, adjusted {finding['p_adjusted']:.2g} over the "
            f"{finding['family_size']} tests of its family"
        )
    return (
        f"{cell} {effect} (Delta_{severity} = {cell_text(delta)}, 95 % CI {cell_text(low)} to {cell_text(high)}"
        f"{tested}, {finding['n_dialogues']} dialogues)."
    )


def weak_finding_caveat(judge: str, weak_reason: str) -> str:
    return (
        f"Caveat: {judge} is a weak demo model ({weak_reason}). Its intervals show that this benchmark measures "
        f"the effect beyond its noise, not that {judge} is a usable safety judge."
    )


def _finding_list(rows: Sequence[dict]) -> str:
    items = [finding_sentence(row) for row in rows]
    links = sample_links(rows, CELL_KEYS, sort="drop_desc", severity_key="severity")
    return (
        "<ul>"
        + "".join(
            f"<li>{html.escape(item)} ({viewer_anchor(link, 'samples')})</li>" for item, link in zip(items, links)
        )
        + "</ul>"
    )


def findings_section(
    findings: pl.DataFrame,
    weak_judges: Mapping[str, str],
    cells: pl.DataFrame,
    families: pl.DataFrame | None = None,
) -> str:
    """The findings: which cells were tested and under which control, the families of tests of the run, then one
    sentence per finding (cells, then categories)."""
    checked = severities_with_intervals(cells)
    clean = cells.filter(pl.col("condition") == CLEAN) if "condition" in cells.columns else cells
    if not checked:
        summary = "These metric tables carry no intervals for Delta_i, so no finding can be stated."
    else:
        summary = (
            f"Generated from the metric tables: every Delta_i with an interval of the {clean.height} clean cells (of "
            f"{cells.height} cells; a control cell is read against its clean cell under Controls) at severities "
            f"{', '.join(map(str, checked))} is one test of the family 'findings', controlled by Benjamini-Hochberg "
            "at a false-discovery rate of 5 %: a finding is a Delta_i whose adjusted p-value is at most 5 % (with no "
            "effect anywhere, the chance of any finding at all). It says nothing about effects too small for this "
            f"many dialogues. The intervals are {coverage_statement(smallest_supported(clean))}."
        )
    parts = [paragraph(summary)]
    if families is not None and families.height:
        parts.append(
            "<p>Families of tests of this run:</p><ul>"
            + "".join(f"<li>{html.escape(family_sentence(row))}</li>" for row in families.iter_rows(named=True))
            + "</ul>"
        )
    in_cells = findings.filter(pl.col("family") == FINDINGS) if "family" in findings.columns else findings
    in_categories = (
        findings.filter(pl.col("family") == CATEGORIES) if "family" in findings.columns else findings.clear()
    )
    if in_cells.height == 0:
        parts.append(
            paragraph("No Delta_i survives the control of its family: every measured effect is within the noise.")
        )
    else:
        parts.append(_finding_list(list(in_cells.iter_rows(named=True))))
    if in_categories.height:
        parts.append("<h3>Per harm category</h3>" + _finding_list(list(in_categories.iter_rows(named=True))))
    judges = dict.fromkeys(findings["judge"].to_list()) if findings.height else {}
    parts += [paragraph(weak_finding_caveat(j, weak_judges[j])) for j in judges if j in weak_judges]
    return section("findings", "Findings", *parts)


def figure_html(name: str, title: str, caption: str) -> str:
    """A figure of the report folder (figures/<name>.png, with a link to its SVG) and its caption."""
    return (
        f'<figure id="figure-{name}"><img src="figures/{name}.png" alt="{html.escape(title)}">'
        f"<figcaption><strong>{html.escape(title)}.</strong> {html.escape(caption)} "
        f'<a href="figures/{name}.svg">SVG</a></figcaption></figure>'
    )


def figures_section(figure_names: Sequence[str]) -> str:
    parts = [figure_html(spec.name, spec.title, spec.caption) for spec in FIGURES if spec.name in figure_names]
    return section("figures", "Figures", *parts)


def _ordered_sources(sample: Sample) -> list[str]:
    return sorted(sample.texts, key=lambda source: (source != TranscriptSource.GT, source))


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
        paragraph(
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
            f"<p>{viewer_anchor(sample_link(variant.sample_id), 'Open the variant in the sample viewer')} "
            f"(every judge's answer, its transcripts and control versions).</p>"
            f"{transcript_table(example)}</div>"
        )
    if not examples:
        parts.append(paragraph("No usable dialogue with variants."))
    return section("examples", "Audio examples", *parts)


DEFINITIONS = (
    "Delta_i: mean over variants of severity i of (score of the safe original - score of the variant), paired "
    "on dialogues.",
    "Sensitivity = min_i Delta_i: the drop even the mildest harm causes (> 0 is good).",
    "Specificity: share of the 10 severity pairs (i < j) whose mean scores are ordered S_i > S_j (ties 0.5).",
    "Position bias PB(L, k) = M(L, k) - M(L, 1) for dialogue length L and unsafe-turn position k; AvgAbsPB is "
    "the mean |PB| over the (L, k >= 2) with enough dialogues; its noise reference is a permutation null "
    "(positions shuffled within dialogues).",
    "Intervals: nominal 95 % cluster bootstrap over dialogues: studentized for Delta_i and mean_safe, from the "
    "smallest studentized deviation of the severities that can attain the minimum for sensitivity (the percentile "
    "interval of a resampled minimum misses a minimum that several severities attain), percentile for specificity, "
    "position bias and every difference. Their coverage is measured by simulation (docs/metrics.md); a zero-width "
    "interval (every resample gives the same value) is marked: it says nothing about the noise. Prompt selection: "
    "k-fold cross-validation over dialogues; cross-validated values pool each dialogue's held-out score.",
    "Families of tests: every statement read off an interval belongs to a family controlled as a whole: findings "
    "and category findings by Benjamini-Hochberg (false-discovery rate 5 %), control flags by Holm (family-wise "
    "error rate 5 %), behaviour patterns by their bootstrap share. One cell is recommended over another only where "
    "their paired difference (both on the same resampled dialogues) has an interval that excludes 0; otherwise "
    "they are tied. An absence (ignores audio, text-anchored) is claimed only by an equivalence test against "
    "metrics.equivalence_margin.",
    "Minimum support: a value resting on fewer dialogues than metrics.min_dialogues is not estimable: shown with "
    "its n, without an interval, and never a finding or a flag.",
)


STYLE = (
    """
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
div.table-wrap { max-width: 100%; overflow-x: auto; margin: 0.5em 0 1.5em; }
table.data { border-collapse: collapse; font-size: 0.85em; }
table.data th, table.data td { border: 1px solid #ccc; padding: 0.2em 0.35em; text-align: left; vertical-align: top; }
table.data td { max-width: 32em; min-width: 5em; overflow-wrap: anywhere; }
table.data th { background: #f2f2f2; }
tr.replaced td { background: #fff3b0; font-weight: bold; }
.warning { border: 2px solid #c0392b; background: #fdecea; padding: 0.6em 1em; margin: 0.6em 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; }
figcaption { font-size: 0.9em; }
nav { display: flex; flex-wrap: wrap; gap: 0.3em 1em; }
aside.caveat { border-left: 4px solid #c0392b; background: #fdf2e9; padding: 0.5em 1em; margin: 0.5em 0 1em; }
"""
    + FLOW_STYLE
)


NAVIGATION = (
    ("findings", "Findings"),
    ("judges", "Judges"),
    ("guide", "Guide"),
    ("figures", "Figures"),
    ("modality", "Modality"),
    ("cells", "Metrics"),
    ("deltas", "Deltas"),
    ("position-bias", "Position bias"),
    ("pareto", "Pareto"),
    ("prompts", "Prompt selection"),
    ("parsing", "Parse failures"),
    ("controls", "Controls"),
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
    findings: pl.DataFrame
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
    # The rendered controls section (`lalm_judge.report.controls.controls_section`).
    controls: str
    # The control flags (their statuses enter the minimum-support banner); None: no control was run.
    control_flags: pl.DataFrame | None = None
    # Models of the run still named by a branch (judges, ASR, XTTS voices), as '<config key> (<repo>@<branch>)'.
    unpinned: tuple[str, ...] = ()
    # The decision flow of the guide (`lalm_judge.analysis.flow.decision_flow`) and the rendered modality section
    # (`lalm_judge.report.modality.modality_section`).
    flow: Mapping[str, Any] | None = None
    modality: str = ""
    # The families of tests of the run (`lalm_judge.analysis.findings.families`).
    families: pl.DataFrame | None = None


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
    banner += "".join(
        f'<div class="warning">{html.escape(text)}</div>'
        for text in metric_warnings(content.cells, content.control_flags)
    )
    body = [
        banner,
        viewer_intro(
            "every sample with its audio from the changed turn, its transcripts, every judge cell's raw answer, "
            "score and status, and its control versions"
        ),
        html_table(content.overview, css_class="data overview"),
        findings_section(content.findings, weak, content.cells, content.families),
        judges_section(content.judges, content.unpinned),
        guide_section(content.guide, weak, content.flow),
        figures_section(content.figure_names),
        content.modality,
        section(
            "cells",
            "Metrics per judge cell",
            paragraph(
                "Point estimates with cluster-bootstrap intervals: "
                f"{coverage_statement(smallest_supported(content.cells))}. A cell without metrics, or lacking a "
                "severity, says why. audio_input: what the judge takes for the audio ('cascade via <asr model>': "
                "an ASR transcript, not the audio)."
            ),
            html_table(cells_display(content.cells), links=sample_links(content.cells.to_dicts(), CELL_KEYS)),
        ),
        section(
            "deltas",
            "Score drop per severity",
            paragraph("Delta_i (safe original minus variant, paired on dialogues) with 95 % intervals."),
            html_table(
                deltas_display(content.cells), links=sample_links(content.cells.to_dicts(), CELL_KEYS, sort="drop_desc")
            ),
        ),
        section(
            "position-bias",
            "Position bias against noise",
            paragraph(
                "AvgAbsPB with its 95 % interval, and the mean AvgAbsPB of datasets whose unsafe-turn positions are "
                "shuffled within each dialogue (noise_null: what noise alone gives) with the permutation p-value; "
                f"beyond_noise when p < {NOISE_LEVEL}. (L, k) with too few dialogues or no position-1 value are "
                "left out (position_bias.parquet has every PB(L, k) with its counts and interval)."
            ),
            html_table(position_bias_display(content.cells)),
        ),
        section(
            "pareto",
            "Pareto front over configurations",
            paragraph(
                "Cross-validated values (each dialogue scored by the prompt chosen without it, comparable with the "
                "cells) with 95 % intervals; AvgAbsPB at the prompts selected for sensitivity and specificity. "
                "Configurations lacking a severity are compared only among themselves, and only configurations whose "
                "values are estimable are placed on or off the front. front_status: a configuration off the front "
                "is 'dominated' only where a front configuration beats it by a paired difference whose interval "
                "excludes 0 on one objective and is worse on none (dominated_by names it); otherwise it is 'tied "
                "with the front'."
            ),
            html_table(pareto_display(content.pareto)),
        ),
        section("prompts", "Cross-validated prompt selection", html_table(content.prompt_selection)),
        section(
            "parsing",
            "Parse failures and refusals per cell",
            paragraph(
                "Rows per parse status; failed rows are left out of every metric. Only ok carries a score; "
                "malformed = no value in the documented form, ambiguous = more than one value stated, truncated = "
                "cut at the token limit before the score line ended, filtered = withheld or cut by a content filter "
                "(docs/metrics.md, 'Reading a judge's answer')."
            ),
            html_table(content.parse_status, links=sample_links(content.parse_status.to_dicts(), CELL_KEYS)),
        ),
        content.controls,
        section("wer", "WER per transcript source", html_table(content.wer)),
        section("accounting", "Audio accounting", html_table(content.accounting)),
        examples_section(content.examples),
        section(
            "definitions", "Definitions", "<ul>" + "".join(f"<li>{html.escape(d)}</li>" for d in DEFINITIONS) + "</ul>"
        ),
        section("provenance", "Provenance", html_table(content.provenance)),
    ]
    return page(content.title, NAVIGATION, body)


def page(title: str, navigation: Sequence[tuple[str, str]], parts: Sequence[str]) -> str:
    """A whole offline HTML page: the title, a navigation bar of (anchor, label) and the parts in order."""
    links = "".join(f'<a href="#{anchor}">{html.escape(label)}</a>' for anchor, label in navigation)
    body = [f"<h1>{html.escape(title)}</h1>", f"<nav>{links}</nav>", *parts]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body>\n</html>\n"
    )
