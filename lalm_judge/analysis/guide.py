"""The practitioner guide: which judge cell to use, derived from the measured metric tables.

For every available input (text only, audio only, audio + transcript) x transcript quality (ground truth,
each ASR source measured) x priority (sensitivity, specificity, stability) the guide recommends the best
(judge, modality, transcript source, prompt) among the cells usable with that input:

- text only: the text modality fed the transcript of that quality;
- audio + transcript: audio-native cells, or text/audio_text cells fed the transcript of that quality;
- audio only: audio-native cells, or a cascade, i.e. text/audio_text cells fed the transcript of an ASR
  model run on the audio. Its transcript quality is the ASR model of the cascade, or 'none' for
  audio-native cells alone; a ground-truth transcript does not exist for audio only, so it has no 'gt' row.

A cell whose `audio_input` is 'cascade via <asr model>' (an audio modality that reads an ASR transcript
instead of the audio, such as the embedding baseline's) is a cascade, never an audio-native judge: it competes
for audio only with that ASR model's transcript quality and for audio + transcript, and its row says so.
Cells lacking a severity of the table (fewer `n_severities` than the most complete cell) rank after every
complete cell, as in prompt selection and the Pareto front.

Within a configuration (a cell without its prompt) the prompt is the one chosen by cross-validation for the
priority's metric (pareto.parquet); a configuration without a CV choice competes with every prompt, and its
row says the prompt was picked on all data. Stability is the lowest AvgAbsPB of sensitivity, at the prompt
chosen for sensitivity (as in the Pareto table). Candidates whose value is estimable rank before those whose value
is not (`n_estimable` counts them); among them the best point estimate is listed first, ties broken by the other two
priorities (sensitivity, specificity, stability in that order), then by name. Listed first is not recommended over:
the winner of a point-estimate ranking is biased upwards (the winner's curse), so the row names every other candidate
whose paired difference with it (comparisons.parquet, both cells on the same resampled dialogues) has an interval
that includes 0 as `tied_with` (`n_tied` of them), and the guide recommends the cell over only the `n_separated`
candidates it beats beyond the noise. A combination with no usable cell gets a row whose judge is null and whose note
says why.

Given the control flags (`lalm_judge.analysis.controls.control_flags`), a cell flagged `ignores_audio` (its
audio-only scores did not move when the unsafe turn was silenced) is not recommended: the note of every row
where such a cell was left out names it. A recommendation whose value is `not_estimable` (fewer dialogues than the
minimum support, `lalm_judge.analysis.support`) has no interval, its `status` says so, and so does its note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from lalm_judge.analysis.comparisons import FIRST, comparison_lookup
from lalm_judge.analysis.controls import CONTROL_KEYS, IGNORES_AUDIO
from lalm_judge.analysis.engine import CELL_KEYS, CONFIG_KEYS
from lalm_judge.analysis.support import NOT_ESTIMABLE
from lalm_judge.core.vocabulary import AUDIO, AUDIO_TEXT, TEXT, TranscriptSource, cascade_source

TEXT_ONLY = "text only"
AUDIO_ONLY = "audio only"
AUDIO_AND_TRANSCRIPT = "audio + transcript"
AVAILABLE_INPUTS = (TEXT_ONLY, AUDIO_ONLY, AUDIO_AND_TRANSCRIPT)
NO_TRANSCRIPT_QUALITY = TranscriptSource.NONE
TRANSCRIPT_MODALITIES = (TEXT, AUDIO_TEXT)
CV_CHOICE = "cross-validated"
IN_SAMPLE_CHOICE = "best on all data (no CV selection)"
NO_USABLE_CONFIGURATION = "no usable configuration"


@dataclass(frozen=True)
class Priority:
    """What a practitioner optimizes: a cells.parquet column, its direction, and where its prompt comes from."""

    name: str
    column: str
    maximize: bool
    selected_prompt_column: str
    ci_columns: tuple[str, str] | None


PRIORITIES = (
    Priority("sensitivity", "sensitivity", True, "prompt_sensitivity", ("sensitivity_lo", "sensitivity_hi")),
    Priority("specificity", "specificity", True, "prompt_specificity", ("specificity_lo", "specificity_hi")),
    Priority("stability", "avg_abs_pb_sensitivity", False, "prompt_sensitivity", None),
)

GUIDE_SCHEMA = {
    "available_input": pl.String,
    "transcript_quality": pl.String,
    "priority": pl.String,
    "metric": pl.String,
    "judge": pl.String,
    "modality": pl.String,
    "transcript_source": pl.String,
    "audio_input": pl.String,
    "prompt": pl.String,
    "condition": pl.String,
    "prompt_choice": pl.String,
    "value": pl.Float64,
    "ci_lo": pl.Float64,
    "ci_hi": pl.Float64,
    "status": pl.String,
    "n_candidates": pl.Int64,
    "n_estimable": pl.Int64,
    "n_tied": pl.Int64,
    "n_separated": pl.Int64,
    "tied_with": pl.String,
    "note": pl.String,
}

# The comparisons' metric of each priority's column.
COMPARED_METRIC = {"sensitivity": "sensitivity", "specificity": "specificity", "stability": "avg_abs_pb_sensitivity"}


def has_transcript(source: str | None) -> bool:
    return source is not None and TranscriptSource(source).has_transcript


def usable(
    available_input: str, transcript_quality: str, modality: str, source: str | None, audio_input: str | None = None
) -> bool:
    """Whether a cell (modality, transcript source, audio input) can be run with this input and transcript
    quality; an ASR cascade counts as a cell fed its ASR model's transcript, not as an audio-native one."""
    cascade = cascade_source(audio_input)
    if available_input == TEXT_ONLY:
        return modality == TEXT and source == transcript_quality
    if cascade is not None:
        return available_input == AUDIO_AND_TRANSCRIPT or transcript_quality == cascade
    if modality == AUDIO:
        return not has_transcript(source)
    if modality not in TRANSCRIPT_MODALITIES:
        return False
    if available_input == AUDIO_AND_TRANSCRIPT:
        return source == transcript_quality
    if available_input == AUDIO_ONLY:
        return TranscriptSource(transcript_quality).is_asr and source == transcript_quality
    raise ValueError(f"unknown available input {available_input!r}; use one of {AVAILABLE_INPUTS}")


def transcript_qualities(cells: pl.DataFrame, available_input: str) -> list[str]:
    """The transcript qualities that apply to an input: 'gt' and each ASR source in the cells table."""
    asr_sources = sorted(s for s in cells["transcript_source"].drop_nulls().unique() if s.startswith("asr:"))
    if available_input == AUDIO_ONLY:
        return [NO_TRANSCRIPT_QUALITY, *asr_sources]
    return [TranscriptSource.GT, *asr_sources]


def candidate_cells(cells: pl.DataFrame, pareto: pl.DataFrame | None, priority: Priority) -> pl.DataFrame:
    """One row per (configuration, prompt) allowed to compete: the CV-selected prompt where there is one,
    every prompt of configurations without one; column `prompt_choice` says which."""
    scored = cells.filter(pl.col(priority.column).is_not_null())
    if pareto is None or pareto.height == 0:
        return scored.with_columns(prompt_choice=pl.lit(IN_SAMPLE_CHOICE))
    selected = pareto.filter(pl.col(priority.selected_prompt_column).is_not_null()).select(
        *CONFIG_KEYS, pl.col(priority.selected_prompt_column).alias("prompt")
    )
    chosen = scored.join(selected, on=[*CONFIG_KEYS, "prompt"], how="semi", nulls_equal=True)
    unselected = scored.join(selected, on=list(CONFIG_KEYS), how="anti", nulls_equal=True)
    return pl.concat(
        [
            chosen.with_columns(prompt_choice=pl.lit(CV_CHOICE)),
            unselected.with_columns(prompt_choice=pl.lit(IN_SAMPLE_CHOICE)),
        ]
    )


def _estimable(row: dict[str, Any], priority: Priority) -> bool:
    return row.get(f"{priority.column}_status") != NOT_ESTIMABLE


def _ranking_key(row: dict[str, Any], priority: Priority) -> tuple:
    def ordered(p: Priority) -> tuple[bool, float]:
        value = row.get(p.column)
        if value is None:
            return (True, 0.0)  # missing secondary values rank last
        return (False, -value if p.maximize else value)

    others = [ordered(p) for p in PRIORITIES if p is not priority]
    names = tuple(row[k] or "" for k in ("judge", "modality", "transcript_source", "prompt"))
    return (not row["complete"], not _estimable(row, priority), ordered(priority), *others, names)


def cell_name(row: dict[str, Any]) -> str:
    """A judge cell in words: 'judge modality/source prompt'."""
    source = row["transcript_source"]
    shown = row["modality"] if source in (None, TranscriptSource.NONE) else f"{row['modality']}/{source}"
    return f"{row['judge']} {shown} {row['prompt']}"


def _keys(row: dict[str, Any]) -> tuple:
    return tuple(row[key] for key in CELL_KEYS)


def _separation(
    best: dict[str, Any], rows: list[dict[str, Any]], priority: Priority, lookup: dict
) -> tuple[list[dict[str, Any]], int]:
    """The candidates the winner is tied with (no paired comparison, or one whose interval includes 0, or one that
    favours the other) and how many it beats beyond the noise."""
    tied, separated = [], 0
    metric = COMPARED_METRIC[priority.name]
    for other in rows:
        if other is best:
            continue
        comparison = lookup.get((_keys(best), _keys(other), metric))
        if comparison is not None and comparison["separated"] and comparison["better"] == FIRST:
            separated += 1
        else:
            tied.append(other)
    return tied, separated


def recommend(
    candidates: pl.DataFrame,
    available_input: str,
    transcript_quality: str,
    priority: Priority,
    excluded: pl.DataFrame | None = None,
    lookup: dict | None = None,
) -> dict[str, Any]:
    """The guide row for one combination, from the candidate cells of the priority (see `candidate_cells`);
    `excluded` cells (CONTROL_KEYS rows: cells that ignore audio) are left out and named in the note; `lookup` holds
    the paired comparisons (`comparisons.comparison_lookup`; without it every other candidate is tied)."""
    row: dict[str, Any] = {
        "available_input": available_input,
        "transcript_quality": transcript_quality,
        "priority": priority.name,
        "metric": priority.column,
    }
    rows = [
        r
        for r in candidates.iter_rows(named=True)
        if usable(available_input, transcript_quality, r["modality"], r["transcript_source"], r["audio_input"])
    ]
    left_out = set(excluded.select(CONTROL_KEYS).iter_rows()) if excluded is not None else set()
    ignoring = sorted({r["judge"] for r in rows if tuple(r[k] for k in CONTROL_KEYS) in left_out})
    rows = [r for r in rows if tuple(r[k] for k in CONTROL_KEYS) not in left_out]
    ignoring_note = (
        f"not recommended, ignores audio under the silence check: {', '.join(ignoring)}" if ignoring else None
    )
    if not rows:
        reason = f"{NO_USABLE_CONFIGURATION}: no measured cell with a {priority.column} takes this input"
        return {
            **row,
            "n_candidates": 0,
            "n_estimable": 0,
            "n_tied": 0,
            "n_separated": 0,
            "note": "; ".join(filter(None, (reason, ignoring_note))),
        }
    best = min(rows, key=lambda r: _ranking_key(r, priority))
    value = best[priority.column]
    low, high = (best[c] for c in priority.ci_columns) if priority.ci_columns else (None, None)
    tied, n_separated = _separation(best, rows, priority, lookup or {})
    n_estimable = sum(1 for r in rows if _estimable(r, priority))
    status = best.get(f"{priority.column}_status")
    support_note = None
    if status == NOT_ESTIMABLE:
        n = best.get(f"{priority.column}_n_dialogues", best.get("n_dialogues"))
        support_note = (
            f"not estimable: {priority.column} rests on {n} dialogue(s), below the minimum support; "
            f"{n_estimable} of {len(rows)} candidates are estimable"
        )
    tie_note = None
    if tied:
        tie_note = (
            f"tied with {len(tied)} other candidate(s): their paired 95 % interval of the difference in "
            f"{priority.column} includes 0, so this run does not tell them apart (listed first by point estimate)"
        )
    keys = ("judge", "modality", "transcript_source", "audio_input", "prompt", "condition", "prompt_choice")
    return {
        **row,
        **{k: best[k] for k in keys},
        "value": value,
        "ci_lo": low,
        "ci_hi": high,
        "status": status,
        "n_candidates": len(rows),
        "n_estimable": n_estimable,
        "n_tied": len(tied),
        "n_separated": n_separated,
        "tied_with": "; ".join(cell_name(r) for r in tied) or None,
        "note": "; ".join(filter(None, (tie_note, support_note, ignoring_note))) or None,
    }


def practitioner_guide(
    cells: pl.DataFrame,
    pareto: pl.DataFrame | None = None,
    condition: str = "clean",
    flags: pl.DataFrame | None = None,
    comparisons: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The guide table (columns GUIDE_SCHEMA), one row per input x transcript quality x priority.

    cells: cells.parquet; pareto: pareto.parquet (its CV-selected prompts; None: no CV choice anywhere);
    condition: the condition recommended for (controls such as noise are other conditions); flags: the control
    flags (None: no control was run), whose `ignores_audio` cells are not recommended; comparisons:
    comparisons.parquet (None: no paired comparison, every other candidate is tied with the winner).
    """
    excluded = None
    if flags is not None:
        excluded = flags.filter((pl.col("check") == IGNORES_AUDIO) & pl.col("flagged")).select(CONTROL_KEYS)
    cells = cells.filter(pl.col("condition") == condition)
    if "audio_input" not in cells.columns:
        cells = cells.with_columns(audio_input=pl.lit(None, pl.String))  # a table that does not say: none known
    most = cells["n_severities"].max() if "n_severities" in cells.columns and cells.height else None
    cells = cells.with_columns(
        complete=pl.lit(True) if most is None else (pl.col("n_severities") == most).fill_null(False)
    )
    if pareto is not None:
        pareto = pareto.filter(pl.col("condition") == condition)
    candidates = {priority.name: candidate_cells(cells, pareto, priority) for priority in PRIORITIES}
    lookup = comparison_lookup(comparisons)
    rows = [
        recommend(candidates[priority.name], available_input, quality, priority, excluded, lookup)
        for available_input in AVAILABLE_INPUTS
        for quality in transcript_qualities(cells, available_input)
        for priority in PRIORITIES
    ]
    return pl.DataFrame([{name: row.get(name) for name in GUIDE_SCHEMA} for row in rows], schema=GUIDE_SCHEMA)
