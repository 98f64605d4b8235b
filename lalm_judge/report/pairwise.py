"""The pairwise track's report: `results/pairwise/report/index.html` and its figure, from the pairwise metric
tables (`lalm_judge.pairwise.metrics.run_pairwise_stage`) and the item summary, with the safety report's
page, tables and figure machinery.

Sections: the items (and any excluded for missing audio), the judges (weak demo models flagged), agreement
and accuracy per judge cell and aspect with 95 % intervals (single order, as SageLM reports, and both orders
combined), swap consistency, agreement against the combined duration of the two responses (figure and
table), the best audio-native cell against the best cascade (paired difference), the verdict statuses and
length-policy actions, the definitions and the provenance. Everything depends only on the inputs.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from lalm_judge.core.files import atomic_path, read_json  # noqa: E402
from lalm_judge.pairwise.metrics import CELL_KEYS, PairwiseStageTables, read_pairwise_stage  # noqa: E402
from lalm_judge.report.figures import save_figure  # noqa: E402
from lalm_judge.report.html import html_table, judges_section, page, paragraph, section  # noqa: E402
from lalm_judge.report.pairwise_samples import PairwiseViewerInputs, write_pairwise_viewer  # noqa: E402
from lalm_judge.report.tables import MISSING, PROVENANCE_COLUMNS, interval_text, judge_table  # noqa: E402
from lalm_judge.report.viewer import VIEWER_DIR, viewer_intro, viewer_link  # noqa: E402

TITLE = "lalm-judge: pairwise judging of spoken responses"
DURATION_FIGURE = "agreement_by_duration"
NAVIGATION = (
    ("items", "Items"),
    ("judges", "Judges"),
    ("aspects", "Agreement and accuracy"),
    ("swap", "Swap consistency"),
    ("duration", "Agreement vs duration"),
    ("modes", "Audio-native vs cascade"),
    ("statuses", "Verdict statuses"),
    ("definitions", "Definitions"),
)
SHOWN_METRICS = (
    ("agreement", "agreement"),
    ("accuracy", "accuracy"),
    ("agreement_combined", "agreement (both orders)"),
    ("accuracy_combined", "accuracy (both orders)"),
    ("parse_failure_rate", "parse failures"),
    ("rationale_contradiction_rate", "rationales against own verdict"),
)
DEFINITIONS = (
    "Each item (a query and two spoken responses) is judged on each aspect twice: with the responses in their "
    "order and swapped. The swapped verdict is mapped back (its 1 names response 2).",
    "Accuracy: share of verdicts equal to the label. Agreement (SageLM's): 1 when equal, 0.5 when exactly one of "
    "verdict and label is Tie, 0 when opposite. An unreadable answer counts as wrong; single order = the "
    "responses in their order, as SageLM evaluates.",
    "Both orders combined: each order votes +1 (response 1), -1 (response 2) or 0 (Tie), the sum decides; "
    "opposite wins become Tie; a combined verdict needs both orders readable.",
    "Swap consistency: share of rows whose two orders give the same verdict (an unreadable order is inconsistent).",
    "Rationales against own verdict: among answers whose rationale argues for a verdict (documented text rules, "
    "docs/metrics.md), the share arguing for another verdict than the answer's own (single order).",
    "Overall pools all rows; 'aspect mean' averages the aspects' values, as SageLM's average does.",
    "Intervals: 95 % percentile bootstrap over items (an item's aspects are resampled together), seeded; cells "
    "judged on the same items share their resamples, so differences between cells are paired.",
    "Duration: the two responses' combined full length (before any cut), binned; the length policy (cut or "
    "skip per response) is recorded per row in the predictions.",
)


def _cell_label(row: Mapping[str, Any]) -> str:
    return f"{row['judge']} · {row['modality']}-{row['transcript_source']} · {row['prompt']}"


def _wide(metrics: pl.DataFrame, scopes: Sequence[str], names: Sequence[tuple[str, str]]) -> pl.DataFrame:
    """One display row per (cell, group) of `scopes`, in table order: mode, counts and each metric as
    'value [low, high]'."""
    part = metrics.filter(pl.col("scope").is_in(list(scopes)))
    if part.height == 0:
        return pl.DataFrame(schema={"cell": pl.String})
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in part.iter_rows(named=True):
        key = (_cell_label(record), record["group"])
        row = rows.setdefault(key, {"cell": key[0], "mode": record["mode"], "group": key[1]})
        row["n"], row["n_items"] = record["n"], record["n_items"]
        row[record["metric"]] = interval_text(record["value"], record["ci_low"], record["ci_high"])
    columns = ["cell", "mode", "group", "n", "n_items", *[name for name, _ in names]]
    frame = pl.DataFrame([{c: row.get(c) for c in columns} for row in rows.values()], schema_overrides={"n": pl.Int64})
    return frame.rename({name: label for name, label in names}, strict=False)


def _wide_links(metrics: pl.DataFrame, scopes: Sequence[str]) -> list[str]:
    """Per row of `_wide` (same order), the item viewer's list of that cell's rows (of the aspect, for an aspect)."""
    links: dict[tuple[str, str], str] = {}
    for record in metrics.filter(pl.col("scope").is_in(list(scopes))).iter_rows(named=True):
        aspect = record["group"] if record["scope"] == "aspect" else None
        link = viewer_link("list", {**{key: record[key] for key in CELL_KEYS}, "aspect": aspect})
        links.setdefault((_cell_label(record), record["group"]), link)
    return list(links.values())


def items_table(summary: Mapping[str, Any], config: Mapping[str, Any]) -> pl.DataFrame:
    pairwise = config.get("pairwise", {})
    length = pairwise.get("long_audio", {})
    metrics = pairwise.get("metrics", {})
    missing = summary.get("n_missing_audio_items", 0)
    rows = [
        ("source", f"{summary.get('format', MISSING)}: {', '.join(summary.get('files', []))}"),
        ("items judged / rows", f"{summary.get('n_items_judged', MISSING)} / {summary.get('n_rows', MISSING)}"),
        ("rows per aspect", ", ".join(f"{a} {n}" for a, n in summary.get("aspects", {}).items())),
        (
            "items with missing audio",
            f"{missing} ({summary.get('missing_audio', MISSING)})"
            + (f"; first: {', '.join(summary.get('first_missing_items', []))}" if missing else ""),
        ),
        (
            "length policy",
            f"{length.get('policy', MISSING)} at {length.get('max_response_s', MISSING)} s per response "
            "(lowered by a judge's own audio limit)",
        ),
        ("prompts", ", ".join(pairwise.get("prompts", []))),
        ("bootstrap resamples / seed", f"{metrics.get('bootstrap', MISSING)} / {config.get('seed', MISSING)}"),
    ]
    return pl.DataFrame(rows, schema={"setting": pl.String, "value": pl.String}, orient="row")


def swap_table(metrics: pl.DataFrame) -> pl.DataFrame:
    names = (
        ("swap_consistency", "swap consistency"),
        ("parse_failure_rate", "parse failures"),
        ("parse_failure_rate_swapped", "parse failures (swapped)"),
    )
    overall = metrics.filter(pl.col("group") == "all")
    return _wide(overall, ["overall"], names).drop("group", strict=False)


def comparisons_display(comparisons: pl.DataFrame) -> pl.DataFrame:
    if comparisons.height == 0:
        return pl.DataFrame(schema={"note": pl.String})
    shown = [interval_text(*values) for values in comparisons.select("difference", "ci_low", "ci_high").iter_rows()]
    return comparisons.select(
        "group", "metric", "cell_a", "value_a", "cell_b", "value_b", pl.Series("difference a - b", shown), "n_items"
    )


def statuses_display(statuses: pl.DataFrame) -> pl.DataFrame:
    if statuses.height == 0:
        return pl.DataFrame(schema={"cell": pl.String})
    labelled = statuses.with_columns(
        cell=pl.concat_str([pl.col(k) for k in CELL_KEYS], separator=" · "),
        status=pl.col("status").fill_null(MISSING),
    )
    wide = labelled.pivot(on="status", index=["cell", "order"], values="n", aggregate_function="sum").fill_null(0)
    return wide.sort("cell", "order")


def plot_agreement_by_duration(metrics: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Overall agreement with 95 % intervals per bin of combined response duration, one line per cell."""
    part = metrics.filter((pl.col("scope") == "duration") & (pl.col("metric") == "agreement"))
    bins = part.select("group", "low_s").unique().sort("low_s", nulls_last=True)["group"].to_list()
    figure, axis = plt.subplots(figsize=(max(4.5, 0.9 * len(bins) + 2), 3.5))
    for offset, ((_, *keys), cell) in enumerate(part.group_by(["mode", *CELL_KEYS], maintain_order=True)):
        cell = cell.filter(pl.col("n") > 0)
        x = np.array([bins.index(group) for group in cell["group"]], dtype=float) + 0.06 * offset
        value = cell["value"].fill_null(np.nan).to_numpy()
        error = np.abs(np.vstack([value - cell["ci_low"].fill_null(np.nan), cell["ci_high"].fill_null(np.nan) - value]))
        label = _cell_label(dict(zip(CELL_KEYS, keys)))
        axis.errorbar(x, value, yerr=np.nan_to_num(error), marker="o", capsize=2, label=label)
    axis.set_xticks(range(len(bins)), [f"{b} s" if b != "unknown" else b for b in bins], rotation=30, ha="right")
    axis.set_ylim(-0.05, 1.05)
    axis.set_xlabel("combined duration of the two responses")
    axis.set_ylabel("agreement")
    if bins:
        axis.legend(fontsize="x-small", frameon=False, loc="best")
    return save_figure(figure, stem)


def provenance_display(metrics: pl.DataFrame) -> pl.DataFrame:
    rows = [
        (name, ", ".join(sorted({str(v) for v in metrics[name].to_list()})))
        for name in PROVENANCE_COLUMNS
        if name in metrics.columns
    ]
    return pl.DataFrame(rows, schema={"field": pl.String, "value": pl.String}, orient="row")


def render_pairwise_html(
    tables: PairwiseStageTables, summary: Mapping[str, Any], config: Mapping[str, Any], figure: str
) -> str:
    metrics = tables.metrics
    judged = sorted(set(metrics["judge"].to_list()))
    judges = judge_table({"judges": config.get("judges", {})}, judged)
    weak = [r for r in judges.iter_rows(named=True) if r["weak_reason"]]
    banner = ""
    if weak:
        names = ", ".join(r["judge"] for r in weak)
        banner = (
            f'<div class="warning"><strong>{len(weak)} of {judges.height} judges ({html.escape(names)}) are weak demo '
            "models: their verdicts do not measure LALM ability.</strong> This run demonstrates the track.</div>"
        )
    aspects = _wide(metrics, ["aspect", "overall"], SHOWN_METRICS)
    duration = _wide(metrics, ["duration"], SHOWN_METRICS[:2])
    image = (
        f'<figure id="figure-{figure}"><img src="figures/{figure}.png" alt="agreement by duration">'
        "<figcaption><strong>Agreement against duration.</strong> Overall agreement (single order) with 95 % "
        f'bootstrap intervals per bin of combined response duration. <a href="figures/{figure}.svg">SVG</a>'
        "</figcaption></figure>"
    )
    parts = [
        banner,
        viewer_intro("every item with both responses, its label and rationale, every judge's answers in both orders"),
        section("items", "Items", html_table(items_table(summary, config), css_class="data overview")),
        judges_section(judges),
        section(
            "aspects",
            "Agreement and accuracy per judge cell and aspect",
            paragraph(
                "Single order (responses as the item has them, as SageLM evaluates) and both orders combined; "
                "95 % bootstrap intervals over items. 'all' pools every row, 'aspect_mean' averages the aspects."
            ),
            html_table(aspects, links=_wide_links(metrics, ["aspect", "overall"])),
        ),
        section(
            "swap",
            "Swap consistency",
            paragraph("Share of rows whose verdict survives swapping the responses (position bias lowers it)."),
            html_table(swap_table(metrics)),
        ),
        section("duration", "Agreement against duration", image, html_table(duration)),
        section(
            "modes",
            "Audio-native against cascade",
            paragraph(
                "Per aspect: the best audio-native cell (a) against the best cascade cell (b, ASR transcripts read "
                "by a text judge), with the paired bootstrap interval of the difference. 'Best' is chosen on the "
                "same items, so the difference is optimistic for whichever side has more cells. Empty when the run "
                "has no cell of one of the two modes."
            ),
            html_table(comparisons_display(tables.comparisons)),
        ),
        section(
            "statuses",
            "Verdict statuses and length policy",
            paragraph(
                "Rows per verdict status for each order (forward, swapped, combined), and per length-policy action "
                "(order 'long_audio')."
            ),
            html_table(statuses_display(tables.statuses)),
        ),
        section(
            "definitions", "Definitions", "<ul>" + "".join(f"<li>{html.escape(d)}</li>" for d in DEFINITIONS) + "</ul>"
        ),
        section("provenance", "Provenance", html_table(provenance_display(metrics))),
    ]
    return page(TITLE, NAVIGATION, parts)


def build_pairwise_report(
    *,
    metrics_dir: str | os.PathLike,
    items_summary_path: str | os.PathLike,
    config: Mapping[str, Any],
    out_dir: str | os.PathLike,
    viewer: PairwiseViewerInputs | None = None,
) -> Path:
    """Write the pairwise report folder (index.html, figures/, and with `viewer` the item viewer, samples/);
    return index.html."""
    out_dir = Path(out_dir)
    tables = read_pairwise_stage(metrics_dir)
    summary = read_json(items_summary_path)
    plot_agreement_by_duration(tables.metrics, out_dir / "figures" / DURATION_FIGURE)
    index = out_dir / "index.html"
    with atomic_path(index) as tmp:
        tmp.write_text(render_pairwise_html(tables, summary, config, DURATION_FIGURE), encoding="utf-8")
    if viewer is not None:
        write_pairwise_viewer(viewer, out_dir / VIEWER_DIR)
    return index
