"""The modality analysis (docs/metrics.md, "Modality"): what the audio adds to a judge that also reads the
transcript, per transcript source; how much of the loss an ASR transcript causes the audio wins back; and the
judge's behaviour pattern.

Per (judge, prompt, condition) and metric M (sensitivity, specificity), M(m, s) being the metric of the judge cell
with modality m and transcript source s, on the dialogues every cell of the quantity shares:

- `gain_<s>`  = M(audio_text, s) - M(text, s), for every transcript source s (gt and each ASR model);
- `asr_loss_<a>` = M(text, gt) - M(text, a), for every ASR source a: what reading the ASR transcript costs;
- `rescue_<a>` = (M(audio_text, a) - M(text, a)) / (M(text, gt) - M(text, a)) = gain_<a> / asr_loss_<a>: the share
  of that loss the audio wins back (1: all of it, 0: none, < 0: the audio adds to the loss). It is reported only
  where the loss's interval excludes 0: a share of a loss that may be nothing is no number;
- `audio_text_vs_audio_gt` = M(audio_text, gt) - M(audio, none): audio + transcript against the audio-only cell
  (an audio cell that is an ASR cascade is not an audio-only cell and is left out).

Intervals: the cluster bootstrap over dialogues of `lalm_judge.analysis.stats`, both (all three) cells resampled
with the same dialogues (the engine's `resample_groups`: quantities over the same dialogues share one count
matrix), percentile 95 %. Beside them, the paired score shift s(audio_text, gt) - s(text, gt) of every sample both
cells parsed, on the safe originals and on the variants, with the engine's ratio intervals.

Minimum support (`lalm_judge.analysis.support`, `metrics.min_dialogues` as `MetricSettings.min_dialogues`): a
quantity on fewer dialogues is `not_estimable` (its value kept, its interval null) and no pattern rests on it.

The behaviour pattern of a (judge, prompt, condition), from the intervals of gain_gt (G, both metrics), of
audio_text_vs_audio_gt (A, both metrics, where the judge has an audio-only cell) and of the score shifts; the first
rule that holds decides:
1. interference: a G lies below 0 (audio + transcript is worse than the transcript alone);
2. conservative: both score shifts lie below 0 (the audio lowers the scores of safe and unsafe dialogues alike);
3. text_anchored: both G contain 0 (the audio changes nothing measurable);
4. balanced: no A lies below 0 (audio + transcript, better than the transcript on a metric, is at least as good as
   the audio alone on both);
5. unclassified: audio + transcript beats the transcript on a metric but falls behind the audio alone on one.
Without an estimable gain_gt of both metrics the pattern is not determined, and `reason` says why.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import (
    TARGET_METRICS,
    MetricSettings,
    cell_counts,
    contributing_dialogues,
    densify,
    encode_scores,
    paired_variants,
    ratio_intervals,
    resample_groups,
    slice_statistics,
)
from lalm_judge.analysis.inputs import read_scores
from lalm_judge.analysis.support import ESTIMATED, NOT_ESTIMABLE, estimable
from lalm_judge.core.table_sets import ModalityTables
from lalm_judge.core.vocabulary import AUDIO, AUDIO_TEXT, CLEAN, TEXT, ParseStatus, TranscriptSource, cascade_source

GROUP_KEYS = ("judge", "prompt", "condition")

GAIN = "gain"
ASR_LOSS = "asr_loss"
RESCUE = "rescue"
OVER_AUDIO = "audio_text_vs_audio"
QUANTITIES = (GAIN, ASR_LOSS, RESCUE, OVER_AUDIO)

# Beside the support statuses (ok, not_estimable): a quantity with a missing cell, and a rescue of no real loss.
NOT_MEASURED = "not_measured"
NOT_REPORTED = "not_reported"

TEXT_ANCHORED = "text_anchored"
BALANCED = "balanced"
CONSERVATIVE = "conservative"
INTERFERENCE = "interference"
UNCLASSIFIED = "unclassified"
PATTERNS = (TEXT_ANCHORED, BALANCED, CONSERVATIVE, INTERFERENCE, UNCLASSIFIED)

GT, NO_TRANSCRIPT = TranscriptSource.GT, TranscriptSource.NONE
SHIFT_GROUPS = ("safe", "unsafe")

EFFECT_SCHEMA: dict[str, pl.DataType] = {
    **dict.fromkeys(GROUP_KEYS, pl.String),
    "metric": pl.String,
    "quantity": pl.String,
    "transcript_source": pl.String,
    "name": pl.String,
    "formula": pl.String,
    "value": pl.Float64,
    "value_lo": pl.Float64,
    "value_hi": pl.Float64,
    "term_1": pl.Float64,
    "term_2": pl.Float64,
    "term_3": pl.Float64,
    "n_dialogues": pl.Int64,
    "status": pl.String,
    "reason": pl.String,
}

PATTERN_SCHEMA: dict[str, pl.DataType] = {
    **dict.fromkeys(GROUP_KEYS, pl.String),
    "pattern": pl.String,
    "rule": pl.String,
    **{f"shift_{group}{suffix}": pl.Float64 for group in SHIFT_GROUPS for suffix in ("", "_lo", "_hi")},
    "n_paired_safe": pl.Int64,
    "n_paired_unsafe": pl.Int64,
    "n_dialogues": pl.Int64,
    "reason": pl.String,
}


@dataclass(frozen=True)
class Comparison:
    """One quantity: `terms` are the (modality, transcript source) cells it combines. Two terms give
    M(first) - M(second); three give (M(first) - M(second)) / (M(third) - M(second))."""

    quantity: str
    source: str
    terms: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return f"{self.quantity}_{self.source}"

    @property
    def formula(self) -> str:
        first, second, *rest = (f"M({m}, {s})" for m, s in self.terms)
        if not rest:
            return f"{first} - {second}"
        return f"({first} - {second}) / ({rest[0]} - {second})"


def comparisons(sources: Sequence[str]) -> list[Comparison]:
    """Every quantity of a run whose text and audio_text cells have these transcript sources."""
    asr = [s for s in sources if TranscriptSource(s).is_asr]
    planned = [Comparison(GAIN, s, ((AUDIO_TEXT, s), (TEXT, s))) for s in sources]
    planned += [Comparison(ASR_LOSS, a, ((TEXT, GT), (TEXT, a))) for a in asr]
    planned += [Comparison(RESCUE, a, ((AUDIO_TEXT, a), (TEXT, a), (TEXT, GT))) for a in asr]
    planned.append(Comparison(OVER_AUDIO, GT, ((AUDIO_TEXT, GT), (AUDIO, NO_TRANSCRIPT))))
    return planned


def combine(terms: Sequence[np.ndarray]) -> np.ndarray:
    """A comparison's value from its terms' metric values (any shape, broadcast): a - b, or (a - b) / (c - b)."""
    if len(terms) == 2:
        return np.asarray(terms[0]) - np.asarray(terms[1])
    first, second, third = (np.asarray(t, dtype=float) for t in terms)
    return st.safe_ratio(first - second, np.where(third - second == 0.0, np.nan, third - second))


def _transcript_sources(cells: pl.DataFrame) -> list[str]:
    """gt first, then the ASR sources, of the text and audio_text cells."""
    sources = set(cells.filter(pl.col("modality").is_in([TEXT, AUDIO_TEXT]))["transcript_source"].to_list())
    return sorted(sources, key=lambda s: (s != GT, s))


def _usable_cells(cells: pl.DataFrame) -> dict[tuple[str, ...], int]:
    """(judge, prompt, condition, modality, source) -> cell index; an audio cell that is an ASR cascade reads a
    transcript, so it is no audio-only cell."""
    usable = {}
    for row in cells.iter_rows(named=True):
        if row["modality"] == AUDIO and cascade_source(row["audio_input"]) is not None:
            continue
        usable[(*(row[k] for k in GROUP_KEYS), row["modality"], row["transcript_source"])] = row["cell"]
    return usable


@dataclass
class _Planned:
    """A comparison of one group: the slices of its terms (None where a cell is missing) and why not."""

    group: tuple[str, ...]
    comparison: Comparison
    slices: tuple[int, ...] | None
    missing: str | None
    values: dict[str, tuple[float, float, float, tuple[float, ...]]] = dataclasses.field(default_factory=dict)
    n_dialogues: int = 0


def _plan(cells: pl.DataFrame, slice_of: dict[int, int]) -> list[_Planned]:
    usable = _usable_cells(cells)
    groups = sorted(set(cells.select(GROUP_KEYS).iter_rows()))
    planned = []
    for group in groups:
        for comparison in comparisons(_transcript_sources(cells.filter(pl.col("judge") == group[0]))):
            missing = [f"{m}/{s}" for m, s in comparison.terms if (*group, m, s) not in usable]
            unpaired = [
                f"{m}/{s}"
                for m, s in comparison.terms
                if (*group, m, s) in usable and usable[(*group, m, s)] not in slice_of
            ]
            slices = None
            reason = None
            if missing:
                reason = f"no {' or '.join(missing)} cell of this judge, prompt and condition"
            elif unpaired:
                reason = f"the {' and '.join(unpaired)} cell has no variant paired with a parsed safe original"
            else:
                slices = tuple(slice_of[usable[(*group, m, s)]] for m, s in comparison.terms)
            planned.append(_Planned(group, comparison, slices, reason))
    return planned


def _estimate(planned: list[_Planned], arrays: st.SeverityStatistics, settings: MetricSettings) -> None:
    """Point values and percentile intervals of every measurable comparison, on the dialogues all its cells share,
    resampled with one count matrix per dialogue set."""
    measurable = [p for p in planned if p.slices is not None]
    if not measurable:
        return
    present = contributing_dialogues(arrays)
    common = np.stack([present[:, list(p.slices)].all(axis=1) for p in measurable], axis=1)
    for members, dialogues, weights in resample_groups(common, settings.n_boot, settings.seed):
        chosen = [measurable[m] for m in members]
        involved = sorted({s for p in chosen for s in p.slices})
        subset = arrays.take_dialogues(dialogues).take_slices(np.asarray(involved))
        point = st.point_metrics(subset)
        resampled = dict(zip(TARGET_METRICS, st.bootstrap_metrics(subset, weights)))
        for item in chosen:
            where = [involved.index(s) for s in item.slices]
            item.n_dialogues = int(dialogues.size)
            for metric in TARGET_METRICS:
                terms = [getattr(point, metric)[w] for w in where]
                low, high = st.percentile_interval(combine([resampled[metric][:, w] for w in where]))
                item.values[metric] = (float(combine(terms)), float(low), float(high), tuple(map(float, terms)))


def _finite(value: float | None) -> float | None:
    return None if value is None or not np.isfinite(value) else value


def _effect_row(item: _Planned, metric: str, min_dialogues: int) -> dict[str, Any]:
    comparison = item.comparison
    row: dict[str, Any] = {
        **dict(zip(GROUP_KEYS, item.group)),
        "metric": metric,
        "quantity": comparison.quantity,
        "transcript_source": comparison.source,
        "name": comparison.name,
        "formula": comparison.formula,
        "n_dialogues": item.n_dialogues,
    }
    if item.slices is None:
        return row | {"status": NOT_MEASURED, "reason": item.missing}
    if metric not in item.values:
        return row | {"status": NOT_MEASURED, "reason": "no dialogue is scored in all of its cells"}
    value, low, high, terms = item.values[metric]
    row |= {f"term_{i + 1}": _finite(t) for i, t in enumerate(terms)}
    if _finite(value) is None:
        undefined = "the loss is 0" if comparison.quantity == RESCUE else f"{metric} is undefined in one of its cells"
        return row | {"status": NOT_MEASURED, "reason": undefined}
    row["value"] = value
    if not estimable(item.n_dialogues, min_dialogues):
        reason = f"rests on {item.n_dialogues} dialogues, fewer than the minimum of {min_dialogues}: no interval"
        return row | {"status": NOT_ESTIMABLE, "reason": reason}
    return row | {"value_lo": _finite(low), "value_hi": _finite(high), "status": ESTIMATED}


def _excludes_zero(row: dict[str, Any] | None) -> bool:
    if row is None or row["status"] != ESTIMATED or row["value_lo"] is None:
        return False
    return row["value_lo"] > 0.0 or row["value_hi"] < 0.0


def _rescue_only_beyond_loss(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Null the rescue where its loss's interval does not exclude 0 (status not_reported, with the reason)."""
    losses = {
        (*(r[k] for k in GROUP_KEYS), r["metric"], r["transcript_source"]): r for r in rows if r["quantity"] == ASR_LOSS
    }
    for row in rows:
        if row["quantity"] != RESCUE or row["status"] not in (ESTIMATED, NOT_ESTIMABLE):
            continue
        loss = losses.get((*(row[k] for k in GROUP_KEYS), row["metric"], row["transcript_source"]))
        if not _excludes_zero(loss):
            row.update(value=None, value_lo=None, value_hi=None, status=NOT_REPORTED)
            row["reason"] = f"the ASR loss {ASR_LOSS}_{row['transcript_source']} has no interval that excludes 0"
    return rows


def modality_effects(scores: pl.DataFrame, settings: MetricSettings) -> pl.DataFrame:
    """The effects table (EFFECT_SCHEMA): one row per (judge, prompt, condition, metric, quantity, source)."""
    encoded = encode_scores(scores)
    counts = cell_counts(encoded.rows)
    variants = paired_variants(encoded.rows).join(
        counts.filter(pl.col("n_safe") > 0).select("cell"), on="cell", how="semi"
    )
    dense = densify(slice_statistics(variants, ["cell"]), ["cell"], len(encoded.dialogues))
    slice_of = {cell: index for index, cell in enumerate(dense.slices["cell"].to_list())}
    planned = _plan(encoded.cells, slice_of)
    _estimate(planned, dense.arrays, settings)
    rows = [_effect_row(item, metric, settings.min_dialogues) for item in planned for metric in TARGET_METRICS]
    rows = _rescue_only_beyond_loss(rows)
    table = pl.DataFrame([{name: row.get(name) for name in EFFECT_SCHEMA} for row in rows], schema=EFFECT_SCHEMA)
    return table.sort([*GROUP_KEYS, "metric"], maintain_order=True)


def score_shifts(scores: pl.DataFrame, settings: MetricSettings) -> pl.DataFrame:
    """Per (judge, prompt, condition) and sample group (safe originals, unsafe variants): the mean paired shift
    s(audio_text, gt) - s(text, gt) over the samples both cells parsed, its interval and counts."""
    ok = scores.filter(pl.col("parse_status") == ParseStatus.OK, pl.col("transcript_source") == GT)
    keys = [*GROUP_KEYS, "dialogue_id", "variant_id", "severity"]
    text = ok.filter(pl.col("modality") == TEXT).select(*keys, text_score=pl.col("score"))
    joined = ok.filter(pl.col("modality") == AUDIO_TEXT).join(text, on=keys, nulls_equal=True)
    shifted = joined.select(
        *GROUP_KEYS,
        "dialogue_id",
        group=pl.when(pl.col("severity") > 0).then(pl.lit("unsafe")).otherwise(pl.lit("safe")),
        shift=pl.col("score") - pl.col("text_score"),
    )
    schema = {**dict.fromkeys([*GROUP_KEYS, "group"], pl.String), "mean": pl.Float64, "lo": pl.Float64}
    schema |= {"hi": pl.Float64, "n": pl.Int64, "n_dialogues": pl.Int64}
    if shifted.height == 0:
        return pl.DataFrame(schema=schema)
    dialogues = sorted(set(shifted["dialogue_id"].to_list()))
    per_dialogue = shifted.group_by(*GROUP_KEYS, "group", "dialogue_id").agg(total=pl.col("shift").sum(), n=pl.len())
    columns = per_dialogue.select(*GROUP_KEYS, "group").unique().sort(pl.all()).with_row_index("column")
    indexed = per_dialogue.join(columns, on=[*GROUP_KEYS, "group"]).with_columns(
        dialogue=pl.col("dialogue_id").replace_strict({d: i for i, d in enumerate(dialogues)}, return_dtype=pl.Int64)
    )
    sums, n = np.zeros((len(dialogues), columns.height)), np.zeros((len(dialogues), columns.height))
    d, c = indexed["dialogue"].to_numpy(), indexed["column"].to_numpy()
    sums[d, c], n[d, c] = indexed["total"].to_numpy(), indexed["n"].to_numpy()
    low, high = ratio_intervals(sums, n, settings.n_boot, settings.seed)
    return (
        columns.drop("column")
        .with_columns(
            pl.Series("mean", st.safe_ratio(sums.sum(axis=0), n.sum(axis=0))),
            pl.Series("lo", low),
            pl.Series("hi", high),
            pl.Series("n", n.sum(axis=0).astype(np.int64)),
            pl.Series("n_dialogues", (n > 0).sum(axis=0).astype(np.int64)),
        )
        .cast(schema)
    )


def _interval(row: dict[str, Any]) -> str:
    return f"{row['value']:+.3f} [{row['value_lo']:+.3f}, {row['value_hi']:+.3f}]"


def _below(row: dict[str, Any] | None) -> bool:
    return row is not None and row["status"] == ESTIMATED and row["value_hi"] is not None and row["value_hi"] < 0.0


def _above(row: dict[str, Any] | None) -> bool:
    return row is not None and row["status"] == ESTIMATED and row["value_lo"] is not None and row["value_lo"] > 0.0


def behaviour_pattern(
    effects: dict[tuple[str, str], dict[str, Any]], shifts: dict[str, dict[str, Any]], min_dialogues: int
) -> tuple[str | None, str]:
    """(pattern, the rule that decided it with its evidence) of one (judge, prompt, condition), from its effect
    rows keyed by (name, metric) and its score shifts keyed by group; pattern None when it cannot be determined."""
    gains = {m: effects.get((f"{GAIN}_{GT}", m)) for m in TARGET_METRICS}
    lacking = [m for m, row in gains.items() if row is None or row["status"] != ESTIMATED]
    if lacking:
        why = "; ".join(
            f"gain_gt of {m} is {gains[m]['status'] if gains[m] else NOT_MEASURED}"
            + (f" ({gains[m]['reason']})" if gains[m] and gains[m]["reason"] else "")
            for m in lacking
        )
        return None, f"not determined: {why}"
    worse = [m for m, row in gains.items() if _below(row)]
    if worse:
        evidence = ", ".join(f"{m} {_interval(gains[m])}" for m in worse)
        return INTERFERENCE, f"gain_gt lies below 0 ({evidence}): audio + transcript is worse than the transcript"
    supported = [shifts.get(g) for g in SHIFT_GROUPS]
    if all(s is not None and estimable(s["n_dialogues"], min_dialogues) and s["hi"] < 0.0 for s in supported):
        evidence = ", ".join(
            f"{g} {s['mean']:+.3f} [{s['lo']:+.3f}, {s['hi']:+.3f}]" for g, s in zip(SHIFT_GROUPS, supported)
        )
        return CONSERVATIVE, f"the audio lowers the scores of safe and unsafe dialogues alike (score shift {evidence})"
    if not any(_above(row) for row in gains.values()):
        evidence = ", ".join(f"{m} {_interval(row)}" for m, row in gains.items())
        return TEXT_ANCHORED, f"gain_gt contains 0 for both metrics ({evidence}): the audio changes nothing measurable"
    over_audio = {m: effects.get((f"{OVER_AUDIO}_{GT}", m)) for m in TARGET_METRICS}
    behind = [m for m, row in over_audio.items() if _below(row)]
    better = ", ".join(f"{m} {_interval(gains[m])}" for m in TARGET_METRICS if _above(gains[m]))
    if behind:
        evidence = ", ".join(f"{m} {_interval(over_audio[m])}" for m in behind)
        return UNCLASSIFIED, f"gain_gt above 0 ({better}) but behind the audio-only cell ({evidence})"
    measured = [m for m, row in over_audio.items() if row is not None and row["status"] == ESTIMATED]
    against_audio = (
        f"and not below the audio-only cell ({', '.join(f'{m} {_interval(over_audio[m])}' for m in measured)})"
        if measured
        else "(no audio-only cell to compare with)"
    )
    return BALANCED, f"gain_gt above 0 ({better}) {against_audio}"


def modality_patterns(effects: pl.DataFrame, shifts: pl.DataFrame, min_dialogues: int) -> pl.DataFrame:
    """The pattern table (PATTERN_SCHEMA): one row per (judge, prompt, condition) of the effects table."""
    rows = []
    for group, part in effects.group_by(list(GROUP_KEYS), maintain_order=True):
        keys = dict(zip(GROUP_KEYS, group))
        rows_of = {(r["name"], r["metric"]): r for r in part.iter_rows(named=True)}
        shift_rows = shifts.filter(*(pl.col(k) == v for k, v in keys.items()))
        by_group = {r["group"]: r for r in shift_rows.iter_rows(named=True)}
        pattern, rule = behaviour_pattern(rows_of, by_group, min_dialogues)
        row = keys | {"pattern": pattern, "rule": rule if pattern else None, "reason": None if pattern else rule}
        for name in SHIFT_GROUPS:
            shift = by_group.get(name)
            supported = shift is not None and estimable(shift["n_dialogues"], min_dialogues)
            row |= {
                f"shift_{name}": shift["mean"] if shift else None,
                f"shift_{name}_lo": shift["lo"] if supported else None,
                f"shift_{name}_hi": shift["hi"] if supported else None,
                f"n_paired_{name}": shift["n"] if shift else 0,
            }
        row["n_dialogues"] = max((r["n_dialogues"] for r in rows_of.values() if r["name"] == f"{GAIN}_{GT}"), default=0)
        rows.append(row)
    return pl.DataFrame([{name: row.get(name) for name in PATTERN_SCHEMA} for row in rows], schema=PATTERN_SCHEMA)


def compute_modality(scores: pl.DataFrame, settings: MetricSettings, condition: str = CLEAN) -> ModalityTables:
    """Both tables from a validated score table, on the cells of one condition (the clean one by default)."""
    scores = scores.filter(pl.col("condition") == condition)
    effects = modality_effects(scores, settings)
    shifts = score_shifts(scores, settings)
    return ModalityTables(effects=effects, patterns=modality_patterns(effects, shifts, settings.min_dialogues))


def run_modality(
    score_paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike, settings: MetricSettings
) -> list[Path]:
    """Read the score files, compute the modality tables, write `<out_dir>/{effects,patterns}.parquet`."""
    return settings.write_bootstrap_tables(compute_modality(read_scores(score_paths), settings), out_dir)
