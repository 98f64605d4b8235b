"""The pairwise report's SageLM-layout tables, its findings and its per-item answers.

SageLM reports accuracy and agreement in percent: the four semantic aspects and their average (its Table 1), the
five acoustic aspects (emotion, gender, character, implicit emotion, mixed; its Table 2) and, from its acoustic
evaluation script, the acoustic rows by task format and by style and format ("detailed TTS/QA split"). The tables
here have one row per judge cell and metric in that order of columns, each value with its 95 % item-bootstrap
interval, so a reader can put them beside SageLM's. Every judge cell's raw answers and rationales per item are
shown too (both orders), so a reader sees why a verdict was read as it was.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from lalm_judge.core.vocabulary import SEMANTIC_ASPECTS, TASK_FORMATS
from lalm_judge.pairwise.families import family_summary
from lalm_judge.pairwise.metrics import ASPECT_MEAN, DIMENSION, STYLE_FORMAT, TASK_FORMAT, finding_sentence
from lalm_judge.report.html import html_table, paragraph
from lalm_judge.report.tables import MISSING, interval_text

# SageLM's column order (its evaluation scripts print them so).
ACOUSTIC_COLUMNS = ("emotion", "gender", "character", "implicit_emotion", "gender_emotion")
STYLE_FORMAT_COLUMNS = (
    "emotion/explicit_tts",
    "emotion/explicit_dialogue",
    "gender/explicit_tts",
    "gender/explicit_dialogue",
    "character/explicit_tts",
    "character/explicit_dialogue",
    "emotion/implicit",
)
# The single-answer metrics, and for a sampled judge the mean over its seeds (SageLM's protocol).
METRICS = ("agreement", "accuracy", "agreement_seed_mean", "accuracy_seed_mean")
ANSWER_CHARS = 400


def percent_interval(value: float | None, low: float | None, high: float | None) -> str:
    """'82.8 [78.1, 87.0]' (percent, as SageLM prints them)."""
    if value is None:
        return MISSING
    if low is None or high is None:
        return f"{100 * value:.1f}"
    return f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _cell(row: Mapping[str, Any]) -> str:
    return f"{row['judge']} · {row['modality']}-{row['transcript_source']} · {row['prompt']}"


def layout_table(metrics: pl.DataFrame, columns: Sequence[tuple[str, str, str]]) -> pl.DataFrame:
    """One row per (judge cell, metric), one column per (scope, group, title) that some cell has."""
    wanted = {(scope, group) for scope, group, _ in columns}
    part = metrics.filter(pl.col("metric").is_in(list(METRICS)))
    values: dict[tuple[str, str], dict[str, str]] = {}
    present: set[tuple[str, str]] = set()
    for record in part.iter_rows(named=True):
        key = (record["scope"], record["group"])
        if key not in wanted:
            continue
        present.add(key)
        row = values.setdefault((_cell(record), record["metric"]), {})
        row[key] = percent_interval(record["value"], record["ci_low"], record["ci_high"])
    shown = [(scope, group, title) for scope, group, title in columns if (scope, group) in present]
    if not shown:
        return pl.DataFrame(schema={"cell": pl.String})
    order = {metric: index for index, metric in enumerate(METRICS)}
    rows = [
        {"cell": cell, "metric": metric, **{title: found.get((s, g), MISSING) for s, g, title in shown}}
        for (cell, metric), found in sorted(values.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))
    ]
    return pl.DataFrame(rows)


def semantic_table(metrics: pl.DataFrame) -> pl.DataFrame:
    columns = [("aspect", aspect, aspect) for aspect in SEMANTIC_ASPECTS]
    return layout_table(metrics, [*columns, (DIMENSION, f"semantic_{ASPECT_MEAN}", "average")])


def acoustic_table(metrics: pl.DataFrame) -> pl.DataFrame:
    columns = [("aspect", aspect, aspect) for aspect in ACOUSTIC_COLUMNS]
    return layout_table(metrics, [*columns, (DIMENSION, f"acoustic_{ASPECT_MEAN}", "average")])


def format_table(metrics: pl.DataFrame) -> pl.DataFrame:
    columns = [(TASK_FORMAT, task_format, task_format) for task_format in TASK_FORMATS]
    return layout_table(metrics, [*columns, *((STYLE_FORMAT, group, group) for group in STYLE_FORMAT_COLUMNS)])


def hypotheses_table(findings: pl.DataFrame) -> pl.DataFrame:
    """Every tested hypothesis of the findings family: the cell, group, accuracy, chance, length baseline, the
    difference from it, both p-values and whether it is claimed."""
    part = findings.filter(pl.col("scope") != "audit")
    if part.height == 0:
        return pl.DataFrame(schema={"cell": pl.String})
    return part.select(
        pl.concat_str([pl.col(k) for k in ("judge", "modality", "transcript_source", "prompt")], separator=" · ").alias(
            "cell"
        ),
        "scope",
        "group",
        pl.struct("accuracy", "ci_low", "ci_high")
        .map_elements(lambda r: interval_text(r["accuracy"], r["ci_low"], r["ci_high"]), return_dtype=pl.String)
        .alias("accuracy"),
        "chance",
        pl.col("length_baseline").alias("longer wins"),
        pl.struct("difference", "difference_ci_low", "difference_ci_high")
        .map_elements(
            lambda r: interval_text(r["difference"], r["difference_ci_low"], r["difference_ci_high"]),
            return_dtype=pl.String,
        )
        .alias("accuracy - longer wins"),
        pl.col("p_value").alias("p"),
        pl.col("p_adjusted").alias("adjusted p"),
        pl.col("finding").replace_strict({True: "finding", False: "-"}, return_dtype=pl.String).alias("claimed"),
    )


def findings_html(findings: pl.DataFrame, weak: Mapping[str, str]) -> str:
    """The findings as sentences, with a caveat for each weak demo judge among them, each family of tests stated,
    and every tested hypothesis in a table."""
    if findings.height == 0:
        return paragraph(
            "No hypothesis could be tested: every group rests on fewer items than the minimum support, and the run has "
            "no audit condition."
        )
    claimed = findings.filter(pl.col("finding"))
    families = paragraph(" ".join(family_summary(findings)))
    table = (
        f'<details class="hypotheses"><summary>Every hypothesis tested</summary>'
        f"{html_table(hypotheses_table(findings))}</details>"
    )
    if claimed.height == 0:
        none = paragraph(
            "No judge cell's accuracy lies above both chance and the length baseline after the correction for its "
            "family, and the audit flags none: nothing here shows a judge that judges (chance: the better of a "
            "uniform guess among 1, 2 and Tie and always giving the most frequent label; length baseline: the "
            "longer response wins, on the same rows)."
        )
        return families + none + table
    items = "".join(f"<li>{html.escape(finding_sentence(row))}</li>" for row in claimed.iter_rows(named=True))
    caveats = [
        paragraph(f"{judge} is a weak demo judge: {weak[judge]}.")
        for judge in dict.fromkeys(claimed["judge"].to_list())
        if judge in weak
    ]
    return families + f"<ul>{items}</ul>" + "".join(caveats) + table


def _excerpt(text: str | None) -> str:
    if text is None:
        return MISSING
    text = " ".join(text.split())
    return text if len(text) <= ANSWER_CHARS else f"{text[:ANSWER_CHARS]}…"


def answers_html(predictions: Sequence[pl.DataFrame]) -> str:
    """Per judge cell, a collapsed table of every (item, aspect): the label, the verdict read from each order
    (the swapped one mapped back) and the raw answers, in which the rationales stand."""
    parts = []
    for frame in predictions:
        if frame.height == 0:
            continue
        first = frame.row(0, named=True)
        shown = frame.select(
            "item_id",
            "aspect",
            "label",
            pl.concat_str([pl.col("verdict").fill_null("-"), pl.col("verdict_status")], separator=" · ").alias(
                "verdict"
            ),
            pl.concat_str(
                [pl.col("verdict_swapped").fill_null("-"), pl.col("verdict_swapped_status")], separator=" · "
            ).alias("verdict (swapped)"),
            pl.col("prediction").map_elements(_excerpt, return_dtype=pl.String).alias("answer"),
            pl.col("prediction_swapped").map_elements(_excerpt, return_dtype=pl.String).alias("answer (swapped)"),
        )
        right = int((frame["verdict"] == frame["label"]).sum())
        summary = f"{html.escape(_cell(first))}: {right} of {frame.height} verdicts right (single order)"
        parts.append(f"<details><summary>{summary}</summary>{html_table(shown)}</details>")
    return "".join(parts) or paragraph("No predictions.")
