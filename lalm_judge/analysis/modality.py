"""The modality analysis (docs/metrics.md, "Modality"): what the audio adds to a judge that also reads the
transcript, per transcript source; how much of the loss an ASR transcript causes the audio wins back; and the
judge's behaviour pattern.

Per (judge, prompt, condition) and metric M (sensitivity, specificity), M(m, s) being the metric of the judge cell
with modality m and transcript source s, on the dialogues every cell of the quantity shares:

- `gain_<s>`  = M(audio_text, s) - M(text, s), for every transcript source s (gt and each ASR model); for an ASR
  source it is also the loss the audio recovers, as a difference with its interval;
- `asr_loss_<a>` = M(text, gt) - M(text, a), for every ASR source a: what reading the ASR transcript costs;
- `rescue_<a>` = gain_<a> / asr_loss_<a>, the share of that loss the audio wins back, bounded to [0, 1] (0: none or
  the audio adds to the loss, 1: all of it or more). It is reported only where the loss's interval lies above 0: a
  share of a loss that may be nothing is no number, and a loss whose interval lies below 0 (the ASR transcript does
  better) is no loss to rescue. Its interval never divides by a resampled loss: it is the set of shares r for which
  the percentile interval of gain* - r loss* contains 0 (Fieller's construction on the bootstrap, over every
  resample whatever the sign of its loss), bounded to [0, 1];
- `audio_text_vs_audio_gt` = M(audio_text, gt) - M(audio, none): audio + transcript against the audio-only cell
  (an audio cell that is an ASR cascade is not an audio-only cell and is left out).

Intervals: the cluster bootstrap over dialogues of `lalm_judge.analysis.stats`, both (all three) cells resampled
with the same dialogues (the engine's `resample_groups`: quantities over the same dialogues share one count
matrix), percentile 95 %. Beside them, the paired score shift s(audio_text, gt) - s(text, gt) of every sample both
cells parsed, on the safe originals and on the variants, with the engine's studentized ratio intervals.

Minimum support (`lalm_judge.analysis.support`, `metrics.min_dialogues` as `MetricSettings.min_dialogues`): a
quantity on fewer dialogues is `not_estimable` (its value kept, its interval null) and no pattern rests on it.

The behaviour pattern of a (judge, prompt, condition) is decided on the dialogues its text/gt, audio_text/gt (and
audio-only) cells share, from the gains G = gain_gt (both metrics), A = audio_text_vs_audio_gt (both metrics, where
there is an audio-only cell) and the score shifts, with an effect smaller than m = `equivalence_margin` counting as
none; the first rule that holds decides:
1. interference: a G below -m (audio + transcript is worse than the transcript alone);
2. conservative: both score shifts below -m (the audio lowers the scores of safe and unsafe dialogues alike);
3. text_anchored: both G within +-m (the audio changes nothing that matters);
4. balanced: a G above m and no A below -m (better than the transcript, at least as good as the audio alone);
5. unclassified: a G above m but an A below -m.
The rule is applied to the data and to every bootstrap resample of those dialogues; `share_<pattern>` is the share
of resamples giving each pattern, and the pattern is stated only where the resamples give the data's pattern in at
least `pattern_min_share` of them, `undetermined` otherwise. Without an estimable gain_gt of both metrics the
pattern is not determined (null), and `reason` says why.
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
    DenseStatistics,
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
from lalm_judge.analysis.support import ESTIMATED, NOT_ESTIMABLE, WITH_INTERVAL, ZERO_WIDTH, estimable, has_interval
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

UNDETERMINED = "undetermined"
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
    # The pattern stated (the data's, where the resamples give it often enough; else `undetermined`), the data's
    # pattern, its share of the resamples, the share of each pattern and the margin the rules read.
    "pattern": pl.String,
    "data_pattern": pl.String,
    "pattern_share": pl.Float64,
    **{
        f"share_{pattern}": pl.Float64
        for pattern in (INTERFERENCE, CONSERVATIVE, TEXT_ANCHORED, BALANCED, UNCLASSIFIED)
    },
    "margin": pl.Float64,
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


# The shares at which Fieller's interval of a rescue is tested; the interval is bounded to [0, 1] after.
SHARE_GRID = np.linspace(-1.0, 2.0, 1201)


def bounded_share(gain: float, loss: float) -> float:
    """gain / loss bounded to [0, 1] (NaN unless the loss is above 0)."""
    return float(np.clip(gain / loss, 0.0, 1.0)) if loss > 0.0 else float("nan")


def share_interval(gains: np.ndarray, losses: np.ndarray, level: float = st.CI_LEVEL) -> tuple[float, float]:
    """Fieller's interval of the share gain / loss on the bootstrap: the shares r of SHARE_GRID whose percentile
    interval of gain* - r loss* (same resamples) contains 0, bounded to [0, 1]; no resample is divided or left out
    for the sign of its loss. NaN where no share of the grid is accepted and none lies beyond it either."""
    valid = ~(np.isnan(gains) | np.isnan(losses))
    combined = gains[valid, None] - SHARE_GRID[None, :] * losses[valid, None]
    low, high = st.percentile_interval(combined, level)
    accepted = SHARE_GRID[(low <= 0.0) & (high >= 0.0)]
    if accepted.size == 0:
        return float("nan"), float("nan")
    return float(np.clip(accepted.min(), 0.0, 1.0)), float(np.clip(accepted.max(), 0.0, 1.0))


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
                terms = [float(getattr(point, metric)[w]) for w in where]
                samples = [resampled[metric][:, w] for w in where]
                if item.comparison.quantity == RESCUE:
                    value = bounded_share(terms[0] - terms[1], terms[2] - terms[1])
                    low, high = share_interval(samples[0] - samples[1], samples[2] - samples[1])
                else:
                    value = float(combine(terms))
                    low, high = (float(bound) for bound in st.percentile_interval(combine(samples)))
                item.values[metric] = (value, low, high, tuple(terms))


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
    if any(_finite(t) is None for t in terms):
        return row | {"status": NOT_MEASURED, "reason": f"{metric} is undefined in one of its cells"}
    if _finite(value) is None and comparison.quantity == RESCUE:
        return row | {"status": NOT_REPORTED, "reason": _no_loss_reason(row["transcript_source"])}
    row["value"] = value
    if not estimable(item.n_dialogues, min_dialogues):
        reason = f"rests on {item.n_dialogues} dialogues, fewer than the minimum of {min_dialogues}: no interval"
        return row | {"status": NOT_ESTIMABLE, "reason": reason}
    low, high = _finite(low), _finite(high)
    status = ZERO_WIDTH if low is not None and high is not None and high - low <= 0.0 else ESTIMATED
    return row | {"value_lo": low, "value_hi": high, "status": status}


def _no_loss_reason(source: str) -> str:
    return f"the ASR loss {ASR_LOSS}_{source} is not above 0 (its point value): there is no loss to rescue"


def _rescue_only_beyond_loss(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Null the rescue where its loss's interval does not lie above 0 (status not_reported, with the reason: a loss
    that may be nothing, or one whose interval lies below 0, the ASR transcript doing better)."""
    losses = {
        (*(r[k] for k in GROUP_KEYS), r["metric"], r["transcript_source"]): r for r in rows if r["quantity"] == ASR_LOSS
    }
    for row in rows:
        if row["quantity"] != RESCUE or row["status"] not in (*WITH_INTERVAL, NOT_ESTIMABLE, NOT_REPORTED):
            continue
        loss = losses.get((*(row[k] for k in GROUP_KEYS), row["metric"], row["transcript_source"]))
        name = f"{ASR_LOSS}_{row['transcript_source']}"
        if _above(loss):
            continue
        if _below(loss):
            reason = f"the ASR loss {name} has an interval below 0: the ASR transcript does better, no loss to rescue"
        else:
            reason = f"the ASR loss {name} has no interval above 0: a share of a loss that may be nothing is no number"
        row.update(value=None, value_lo=None, value_hi=None, status=NOT_REPORTED, reason=reason)
    return rows


def modality_effects(scores: pl.DataFrame, settings: MetricSettings) -> pl.DataFrame:
    """The effects table (EFFECT_SCHEMA): one row per (judge, prompt, condition, metric, quantity, source)."""
    return _effects(_prepare(scores), settings)


def _effects(prepared: _Prepared, settings: MetricSettings) -> pl.DataFrame:
    planned = _plan(prepared.cells, prepared.slice_of)
    _estimate(planned, prepared.dense.arrays, settings)
    rows = [_effect_row(item, metric, settings.min_dialogues) for item in planned for metric in TARGET_METRICS]
    rows = _rescue_only_beyond_loss(rows)
    table = pl.DataFrame([{name: row.get(name) for name in EFFECT_SCHEMA} for row in rows], schema=EFFECT_SCHEMA)
    return table.sort([*GROUP_KEYS, "metric"], maintain_order=True)


def score_shifts(scores: pl.DataFrame, settings: MetricSettings) -> pl.DataFrame:
    """Per (judge, prompt, condition) and sample group (safe originals, unsafe variants): the mean paired shift
    s(audio_text, gt) - s(text, gt) over the samples both cells parsed, its studentized interval and counts."""
    per_dialogue = _paired_shift_rows(scores)
    schema = {**dict.fromkeys([*GROUP_KEYS, "group"], pl.String), "mean": pl.Float64, "lo": pl.Float64}
    schema |= {"hi": pl.Float64, "n": pl.Int64, "n_dialogues": pl.Int64}
    if per_dialogue.height == 0:
        return pl.DataFrame(schema=schema)
    dialogues = sorted(set(per_dialogue["dialogue_id"].to_list()))
    columns = per_dialogue.select(*GROUP_KEYS, "group").unique().sort(pl.all()).with_row_index("column")
    indexed = per_dialogue.join(columns, on=[*GROUP_KEYS, "group"]).with_columns(
        dialogue=pl.col("dialogue_id").replace_strict({d: i for i, d in enumerate(dialogues)}, return_dtype=pl.Int64)
    )
    sums, n = np.zeros((len(dialogues), columns.height)), np.zeros((len(dialogues), columns.height))
    d, c = indexed["dialogue"].to_numpy(), indexed["column"].to_numpy()
    sums[d, c], n[d, c] = indexed["total"].to_numpy(), indexed["n"].to_numpy()
    intervals = ratio_intervals(sums, n, settings.n_boot, settings.seed)
    return (
        columns.drop("column")
        .with_columns(
            pl.Series("mean", st.safe_ratio(sums.sum(axis=0), n.sum(axis=0))),
            pl.Series("lo", intervals.low),
            pl.Series("hi", intervals.high),
            pl.Series("n", n.sum(axis=0).astype(np.int64)),
            pl.Series("n_dialogues", (n > 0).sum(axis=0).astype(np.int64)),
        )
        .cast(schema)
    )


def _interval(row: dict[str, Any]) -> str:
    return f"{row['value']:+.3f} [{row['value_lo']:+.3f}, {row['value_hi']:+.3f}]"


def _below(row: dict[str, Any] | None) -> bool:
    return row is not None and has_interval(row["status"]) and row["value_hi"] is not None and row["value_hi"] < 0.0


def _above(row: dict[str, Any] | None) -> bool:
    return row is not None and has_interval(row["status"]) and row["value_lo"] is not None and row["value_lo"] > 0.0


# The rules in the order they decide (module docstring); a resample in which a gain is undefined has no pattern.
RULE_ORDER = (INTERFERENCE, CONSERVATIVE, TEXT_ANCHORED, BALANCED, UNCLASSIFIED)
NO_PATTERN = -1


def classify(gains: np.ndarray, over_audio: np.ndarray, shifts: np.ndarray, margin: float) -> np.ndarray:
    """The pattern (index into RULE_ORDER, NO_PATTERN where a gain is undefined) of each row of gains G (..., 2: both
    metrics), audio_text_vs_audio A (..., 2, NaN without an audio-only cell) and score shifts (..., 2: safe,
    unsafe), an effect within +-margin counting as none."""
    with np.errstate(invalid="ignore"):
        interference = (gains < -margin).any(axis=-1)
        conservative = (shifts < -margin).all(axis=-1)
        anchored = (np.abs(gains) <= margin).all(axis=-1)
        behind = (over_audio < -margin).any(axis=-1)
    code = np.select([interference, conservative, anchored, ~behind], [0, 1, 2, 3], default=4)
    return np.where(np.isnan(gains).any(axis=-1), NO_PATTERN, code)


@dataclass(frozen=True)
class _Prepared:
    """A score table's cells, their paired statistics (`slice_of`: cell -> slice) and each dialogue's paired score
    shifts s(audio_text, gt) - s(text, gt): per (judge, prompt, condition) and group, sums and counts by dialogue."""

    cells: pl.DataFrame
    dense: DenseStatistics
    slice_of: dict[int, int]
    shift_sums: dict[tuple, np.ndarray]
    shift_counts: dict[tuple, np.ndarray]


def _prepare(scores: pl.DataFrame) -> _Prepared:
    encoded = encode_scores(scores)
    counts = cell_counts(encoded.rows)
    variants = paired_variants(encoded.rows).join(
        counts.filter(pl.col("n_safe") > 0).select("cell"), on="cell", how="semi"
    )
    dense = densify(slice_statistics(variants, ["cell"]), ["cell"], len(encoded.dialogues))
    slice_of = {cell: index for index, cell in enumerate(dense.slices["cell"].to_list())}
    code = {d: i for i, d in enumerate(encoded.dialogues)}
    sums: dict[tuple, np.ndarray] = {}
    totals: dict[tuple, np.ndarray] = {}
    for row in _paired_shift_rows(scores).iter_rows(named=True):
        key = tuple(row[k] for k in GROUP_KEYS)
        if key not in sums:
            sums[key] = np.zeros((len(encoded.dialogues), len(SHIFT_GROUPS)))
            totals[key] = np.zeros((len(encoded.dialogues), len(SHIFT_GROUPS)))
        column = SHIFT_GROUPS.index(row["group"])
        sums[key][code[row["dialogue_id"]], column] = row["total"]
        totals[key][code[row["dialogue_id"]], column] = row["n"]
    return _Prepared(encoded.cells, dense, slice_of, sums, totals)


def _paired_shift_rows(scores: pl.DataFrame) -> pl.DataFrame:
    """Per (judge, prompt, condition, group, dialogue): the sum and count of the paired shifts s(audio_text, gt) -
    s(text, gt) of the samples both cells parsed."""
    ok = scores.filter(pl.col("parse_status") == ParseStatus.OK, pl.col("transcript_source") == GT)
    keys = [*GROUP_KEYS, "dialogue_id", "variant_id", "severity"]
    text = ok.filter(pl.col("modality") == TEXT).select(*keys, text_score=pl.col("score"))
    joined = ok.filter(pl.col("modality") == AUDIO_TEXT).join(text, on=keys, nulls_equal=True)
    return (
        joined.with_columns(group=pl.when(pl.col("severity") > 0).then(pl.lit("unsafe")).otherwise(pl.lit("safe")))
        .group_by(*GROUP_KEYS, "group", "dialogue_id")
        .agg(total=(pl.col("score") - pl.col("text_score")).sum(), n=pl.len())
    )


def _lacking_gain(effects: dict[tuple[str, str], dict[str, Any]]) -> str | None:
    """Why no pattern can be determined (no estimable gain_gt of a metric), or None."""
    gains = {m: effects.get((f"{GAIN}_{GT}", m)) for m in TARGET_METRICS}
    lacking = [m for m, row in gains.items() if row is None or not has_interval(row["status"])]
    if not lacking:
        return None
    return "not determined: " + "; ".join(
        f"gain_gt of {m} is {gains[m]['status'] if gains[m] else NOT_MEASURED}"
        + (f" ({gains[m]['reason']})" if gains[m] and gains[m]["reason"] else "")
        for m in lacking
    )


def _values_text(name: str, values: np.ndarray) -> str:
    return ", ".join(f"{metric} {value:+.3f}" for metric, value in zip(TARGET_METRICS, values)) + f" ({name})"


def _rule_text(code: int, gains: np.ndarray, over_audio: np.ndarray, shifts: np.ndarray, margin: float) -> str:
    """The rule that decided the data's pattern, with the values it read."""
    within = f"+-{margin:g}"
    gain_text = _values_text("gain_gt", gains)
    if RULE_ORDER[code] == INTERFERENCE:
        return f"a gain_gt below -{margin:g}: {gain_text}; audio + transcript is worse than the transcript"
    if RULE_ORDER[code] == CONSERVATIVE:
        shift = ", ".join(f"{g} {v:+.3f}" for g, v in zip(SHIFT_GROUPS, shifts))
        return f"both score shifts below -{margin:g} ({shift}): the audio lowers safe and unsafe scores alike"
    if RULE_ORDER[code] == TEXT_ANCHORED:
        return f"both gain_gt within {within}: {gain_text}; the audio changes nothing that matters"
    if np.isnan(over_audio).all():
        against = "(no audio-only cell to compare with)"
    else:
        against = _values_text("audio_text_vs_audio_gt", over_audio)
    if RULE_ORDER[code] == BALANCED:
        return f"a gain_gt above {margin:g}: {gain_text}; and not below the audio-only cell: {against}"
    return f"a gain_gt above {margin:g}: {gain_text}; but behind the audio-only cell: {against}"


def _group_values(
    prepared: _Prepared, cells: tuple[int, int, int | None], dialogues: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """G and A of one group (cells text/gt, audio_text/gt, audio/none or None) in every resample of weights over
    `dialogues`: (n_boot, 2) each, both metrics."""
    members = [prepared.slice_of[c] for c in cells if c is not None]
    subset = prepared.dense.arrays.take_dialogues(dialogues).take_slices(np.asarray(members))
    metrics = np.stack(st.bootstrap_metrics(subset, weights), axis=-1)  # (n_boot, cells, 2)
    gains = metrics[:, 1] - metrics[:, 0]
    over_audio = metrics[:, 1] - metrics[:, 2] if cells[2] is not None else np.full(gains.shape, np.nan)
    return gains, over_audio


def modality_patterns(
    scores: pl.DataFrame, effects: pl.DataFrame, shifts: pl.DataFrame, settings: MetricSettings
) -> pl.DataFrame:
    """The pattern table (PATTERN_SCHEMA): one row per (judge, prompt, condition) of the effects table, its pattern
    decided on the data and on every bootstrap resample (module docstring)."""
    return _patterns(_prepare(scores), effects, shifts, settings)


def _patterns(
    prepared: _Prepared, effects: pl.DataFrame, shifts: pl.DataFrame, settings: MetricSettings
) -> pl.DataFrame:
    usable = _usable_cells(prepared.cells)
    present = contributing_dialogues(prepared.dense.arrays)
    rows = []
    for group, part in effects.group_by(list(GROUP_KEYS), maintain_order=True):
        keys = dict(zip(GROUP_KEYS, group))
        rows_of = {(r["name"], r["metric"]): r for r in part.iter_rows(named=True)}
        row = keys | _pattern(prepared, usable, present, tuple(group), rows_of, settings)
        by_group = {
            r["group"]: r for r in shifts.filter(*(pl.col(k) == v for k, v in keys.items())).iter_rows(named=True)
        }
        for name in SHIFT_GROUPS:
            shift = by_group.get(name)
            supported = shift is not None and estimable(shift["n_dialogues"], settings.min_dialogues)
            row |= {
                f"shift_{name}": shift["mean"] if shift else None,
                f"shift_{name}_lo": shift["lo"] if supported else None,
                f"shift_{name}_hi": shift["hi"] if supported else None,
                f"n_paired_{name}": shift["n"] if shift else 0,
            }
        rows.append(row)
    return pl.DataFrame([{name: row.get(name) for name in PATTERN_SCHEMA} for row in rows], schema=PATTERN_SCHEMA)


def _pattern(
    prepared: _Prepared,
    usable: dict[tuple[str, ...], int],
    present: np.ndarray,
    group: tuple,
    effects: dict[tuple[str, str], dict[str, Any]],
    settings: MetricSettings,
) -> dict[str, Any]:
    margin = settings.equivalence_margin
    known = {"margin": margin}
    lacking = _lacking_gain(effects)
    if lacking is not None:
        return known | {"reason": lacking, "n_dialogues": 0}
    cells = (usable[(*group, TEXT, GT)], usable[(*group, AUDIO_TEXT, GT)], usable.get((*group, AUDIO, NO_TRANSCRIPT)))
    if cells[2] is not None and cells[2] not in prepared.slice_of:
        cells = (cells[0], cells[1], None)
    columns = [prepared.slice_of[c] for c in cells if c is not None]
    dialogues = np.flatnonzero(present[:, columns].all(axis=1))
    if not estimable(dialogues.size, settings.min_dialogues):
        reason = (
            f"not determined: its cells share {dialogues.size} dialogues, fewer than the minimum of "
            f"{settings.min_dialogues} ({NOT_ESTIMABLE})"
        )
        return known | {"reason": reason, "n_dialogues": int(dialogues.size)}
    sums = prepared.shift_sums.get(group, np.zeros((present.shape[0], len(SHIFT_GROUPS))))[dialogues]
    counts = prepared.shift_counts.get(group, np.zeros((present.shape[0], len(SHIFT_GROUPS))))[dialogues]
    weights = st.bootstrap_weights(dialogues.size, settings.n_boot, settings.seed)
    labels = {}
    for name, w in (("data", np.ones((1, dialogues.size))), ("resamples", weights)):
        gains, over_audio = _group_values(prepared, cells, dialogues, w)
        shift = st.safe_ratio(w @ sums, w @ counts)
        labels[name] = (classify(gains, over_audio, shift, margin), gains, over_audio, shift)
    code = int(labels["data"][0][0])
    resampled = labels["resamples"][0]
    defined = resampled[resampled != NO_PATTERN]
    shares = {p: float(np.mean(defined == k)) if defined.size else float("nan") for k, p in enumerate(RULE_ORDER)}
    row = known | {f"share_{p}": shares[p] for p in RULE_ORDER} | {"n_dialogues": int(dialogues.size)}
    if code == NO_PATTERN:
        return row | {"reason": "not determined: a gain is undefined on the dialogues the cells share"}
    data_pattern = RULE_ORDER[code]
    share = shares[data_pattern]
    rule = _rule_text(code, *(values[0] for values in labels["data"][1:]), margin)
    row |= {"data_pattern": data_pattern, "pattern_share": share, "rule": rule}
    if share >= settings.pattern_min_share:
        return row | {"pattern": data_pattern}
    return row | {
        "pattern": UNDETERMINED,
        "reason": f"the data give {data_pattern}, but only {share:.0%} of the {settings.n_boot} resamples do "
        f"(a pattern is stated from {settings.pattern_min_share:.0%})",
    }


def compute_modality(scores: pl.DataFrame, settings: MetricSettings, condition: str = CLEAN) -> ModalityTables:
    """Both tables from a validated score table, on the cells of one condition (the clean one by default)."""
    scores = scores.filter(pl.col("condition") == condition)
    prepared = _prepare(scores)
    effects = _effects(prepared, settings)
    shifts = score_shifts(scores, settings)
    return ModalityTables(effects=effects, patterns=_patterns(prepared, effects, shifts, settings))


def run_modality(
    score_paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike, settings: MetricSettings
) -> list[Path]:
    """Read the score files, compute the modality tables, write `<out_dir>/{effects,patterns}.parquet`."""
    return settings.write_bootstrap_tables(compute_modality(read_scores(score_paths), settings), out_dir)
