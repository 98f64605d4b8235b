"""Pairwise metrics (definitions in docs/metrics.md, "Pairwise track"): tables in, tables out.

Input: a predictions table (JSONL or parquet) with `item_id`, `aspect`, `label` (1, 2 or Tie),
`prediction` (the judge's raw answer, or just its label) and optionally `prediction_swapped` (the raw
answer with the two responses shown in swapped order, so that its "1" names response 2) and `duration_s`
(combined duration of both responses). Answers are read by `lalm_judge.pairwise.parsing.parse_verdict`, with the
row's `verdict_rule` and finish reasons where the table has them (the judge stage records both), else SageLM's
rule; an unreadable answer counts as wrong everywhere and is counted in `parse_failure_rate`.

Per row, with f the forward verdict, b the swapped verdict mapped back and c = combine(f, b):
- accuracy = [f == label]; agreement = 1 if f == label, 0.5 if exactly one of them is Tie, else 0
  (SageLM's single-order numbers);
- parse_failure_rate = [f unreadable]; parse_failure_rate_swapped = [b unreadable];
- swap_consistency = [f and b readable and f == b];
- accuracy_combined, agreement_combined: as above with c (unreadable when either order is);
- with several samples per request (a `samples` record per row, `pairwise.samples`), every sample re-read with
  its finish reason: accuracy and agreement of each seed's answers (`accuracy_seed_42`, ...) and their mean over
  the seeds (`accuracy_seed_mean`, `agreement_seed_mean`: SageLM's protocol), accuracy_majority and
  agreement_majority of the majority verdict over the readable samples, parse_failure_rate_majority (no readable
  sample, so no majority) and sample_agreement, the share of samples that give the majority verdict;
- with both responses' durations: length_baseline_accuracy and length_baseline_agreement of 'the longer response
  wins' on the same rows (`longer_response`).
Each is a mean over rows, reported per aspect, overall (pooled over rows; plus `accuracy_aspect_mean` and
`agreement_aspect_mean`, the mean of the aspects' values as SageLM averages its aspects), per bin of
combined duration, and in SageLM's splits (`split_groups`): the semantic and the acoustic aspects apart
(pooled, and the mean of their aspects), the acoustic rows by task format (explicit TTS, explicit dialogue,
implicit), by style (emotion, gender, character, mixed) and by style and format. Intervals: percentile
bootstrap over items (an item's aspects travel together), B resamples of a seeded multinomial count matrix
over the sorted item ids, shared by every group, so cells judged on the same items are resampled identically
and their differences can be paired (`compare_cells`). Minimum support
(`lalm_judge.analysis.support`): a value resting on fewer than `min_items` items has the status
`not_estimable` and no interval.

Findings (`accuracy_findings`): each (cell, group) with enough items is one hypothesis of the findings family,
tested against chance and the length baseline (paired) and claimed under Benjamini-Hochberg
(`lalm_judge.pairwise.families`). With the item table of SageLM records, the `sagelm_compatible` evaluation
(`lalm_judge.pairwise.sagelm_eval`: SageLM's scripts' record handling) is computed beside the default one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from lalm_judge.analysis.stats import CI_LEVEL, bootstrap_weights, percentile_interval
from lalm_judge.analysis.support import DEFAULT_MIN_ITEMS, ESTIMATED, NOT_ESTIMABLE, estimable
from lalm_judge.core.files import jsonl_records, stable_hash, with_provenance, write_json, write_parquet
from lalm_judge.core.tables import (
    PAIRWISE_AUDIT,
    PAIRWISE_COMPARISONS,
    PAIRWISE_FINDINGS,
    PAIRWISE_ITEMS,
    PAIRWISE_METRIC_INPUT,
    PAIRWISE_METRICS,
    PAIRWISE_PREDICTIONS,
    PAIRWISE_STATUSES,
    TableError,
)
from lalm_judge.core.vocabulary import (
    ACOUSTIC_STYLES,
    IMPLICIT,
    RESPONSE_1,
    RESPONSE_2,
    TIE,
    VERDICTS,
    aspect_dimension,
    pairwise_mode,
)
from lalm_judge.pairwise.audit_metrics import AuditSettings, audit_findings, audit_sentence, audit_table
from lalm_judge.pairwise.consistency import contradicts
from lalm_judge.pairwise.families import BENJAMINI_HOCHBERG, GREATER, adjust, bootstrap_p_value
from lalm_judge.pairwise.parsing import (
    DEFAULT_VERDICT_RULE,
    VERDICT_READING_COLUMNS,
    agreement,
    combine_verdicts,
    majority_verdict,
    normalize_label,
    row_sample_verdicts,
    row_verdicts,
)
from lalm_judge.pairwise.sagelm_eval import SAGELM_COMPATIBLE, sagelm_compatible_view

SINGLE_ORDER_METRICS = ("accuracy", "agreement", "parse_failure_rate")
BOTH_ORDER_METRICS = (
    "swap_consistency",
    "accuracy_combined",
    "agreement_combined",
    "parse_failure_rate_swapped",
)
# Per row, of the forward answer: its rationale argues for another verdict than its own / for any verdict
# (`lalm_judge.pairwise.consistency`); their ratio is the contradiction rate among determined rationales.
RATIONALE_METRICS = ("rationale_contradiction", "rationale_determined")
RATIONALE_RATE = "rationale_contradiction_rate"
# Judges with several samples per request (`pairwise.samples`), single order: the majority verdict's accuracy and
# agreement, the mean share of samples that give it, the share of rows without a readable sample (no majority),
# and SageLM's protocol: each seed's accuracy and agreement (`seed_metric`) and their mean over the seeds.
SAMPLE_METRICS = (
    "accuracy_majority",
    "agreement_majority",
    "sample_agreement",
    "parse_failure_rate_majority",
    "accuracy_seed_mean",
    "agreement_seed_mean",
)
SEED_METRICS = ("accuracy", "agreement")
# 'The longer response wins' (full audio durations), on the same rows: what a judge must beat to be a finding.
LENGTH_BASELINE_METRICS = ("length_baseline_accuracy", "length_baseline_agreement")
# Averaged over aspects as SageLM averages its aspects (those a cell has).
ASPECT_MEAN_METRICS = ("accuracy", "agreement", "accuracy_seed_mean", "agreement_seed_mean")
DEFAULT_DURATION_BINS = (0.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0)
CELL_KEYS = ("judge", "modality", "transcript_source", "prompt")
UNKNOWN_DURATION = "unknown"
UNPARSEABLE = "unparseable"
# SageLM's splits (its evaluation scripts): the semantic and acoustic aspects apart, the acoustic rows by task
# format, by controlled style and by both (its "detailed TTS/QA split"). A row without a value is in no group.
DIMENSION, TASK_FORMAT, STYLE, STYLE_FORMAT = "dimension", "task_format", "style", "style_format"
SPLIT_SCOPES = (DIMENSION, TASK_FORMAT, STYLE, STYLE_FORMAT)
ASPECT_MEAN = "aspect_mean"


class PairwiseMetricsError(ValueError):
    """A predictions table that does not satisfy the input contract; the message names the file and row."""


@dataclass(frozen=True)
class PairwiseMetricSettings:
    n_boot: int = 1000
    seed: int = 0
    # Left edges of the duration bins (s); the last bin is open-ended.
    duration_bins: tuple[float, ...] = DEFAULT_DURATION_BINS
    level: float = CI_LEVEL
    # No interval rests on fewer items than this (`lalm_judge.analysis.support`).
    min_items: int = DEFAULT_MIN_ITEMS

    def __post_init__(self) -> None:
        if self.n_boot < 1:
            raise PairwiseMetricsError(f"bootstrap resamples must be >= 1, got {self.n_boot}")
        if self.min_items < 1:
            raise PairwiseMetricsError(f"the minimum number of items must be >= 1, got {self.min_items}")
        edges = list(self.duration_bins)
        if not edges or edges != sorted(set(edges)) or edges[0] != 0:
            raise PairwiseMetricsError(f"duration bins must be increasing left edges starting at 0, got {edges}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "bootstrap": self.n_boot,
            "seed": self.seed,
            "ci_level": self.level,
            "duration_bins": list(self.duration_bins),
            "min_items": self.min_items,
        }


# --- input -----------------------------------------------------------------------------------------------------
def read_predictions(path: str | os.PathLike) -> pl.DataFrame:
    """A predictions file: parquet, or JSONL (one JSON object per line)."""
    path = Path(path)
    if not path.is_file():
        raise PairwiseMetricsError(f"predictions file {path} does not exist")
    if path.suffix == ".parquet":
        return pl.read_parquet(path)
    rows = [record for _, record in jsonl_records(path, PairwiseMetricsError)]
    if not rows:
        raise PairwiseMetricsError(f"{path} holds no predictions")
    # Labels may be written as numbers in JSONL; read every column as given, then type the contract's.
    return pl.DataFrame(rows, infer_schema_length=None, strict=False)


def validate_predictions(frame: pl.DataFrame, source: str = "predictions") -> pl.DataFrame:
    """The contract's columns typed, labels normalized, each (item, aspect) once; raise naming what is wrong."""
    frame = frame.with_columns(pl.col(c).cast(pl.String) for c in ("label", "prediction") if c in frame.columns)
    try:
        PAIRWISE_METRIC_INPUT.conform(frame, source).collect()
    except TableError as err:
        raise PairwiseMetricsError(str(err)) from err
    labels = []
    for index, (item, aspect, label) in enumerate(frame.select("item_id", "aspect", "label").iter_rows()):
        try:
            labels.append(normalize_label(label, f"{source} row {index} (item {item!r}, aspect {aspect!r})"))
        except ValueError as err:
            raise PairwiseMetricsError(str(err)) from err
    frame = frame.with_columns(pl.Series("label", labels, dtype=pl.String))
    duplicated = frame.filter(pl.struct("item_id", "aspect").is_duplicated())
    if duplicated.height:
        first = duplicated.row(0, named=True)
        raise PairwiseMetricsError(
            f"{source}: item {first['item_id']!r} has aspect {first['aspect']!r} {duplicated.height} times; give each "
            "(item, aspect) once, or one file per judge cell"
        )
    optional = {
        "prediction_swapped": pl.String,
        "duration_s": pl.Float64,
        "task_format": pl.String,
        "style": pl.String,
        "response1_duration_s": pl.Float64,
        "response2_duration_s": pl.Float64,
        "n_samples": pl.Int64,
        "samples": pl.String,
    }
    return frame.with_columns(pl.col(c).cast(t) for c, t in optional.items() if c in frame.columns)


def cells_of(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """The distinct judge cells of a predictions table ([{}] when it has no cell columns)."""
    keys = [key for key in CELL_KEYS if key in frame.columns]
    if not keys:
        return [{}]
    return frame.select(keys).unique(maintain_order=True).sort(keys, nulls_last=True).to_dicts()


# --- per-row indicators ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RowIndicators:
    """0/1 (agreement: 0, 0.5, 1) indicators per row and metric, and the forward verdicts."""

    names: tuple[str, ...]
    values: np.ndarray  # (n_rows, n_metrics)
    forward: tuple[str | None, ...]
    labels: tuple[str, ...] = ()


def _is_sampled(frame: pl.DataFrame) -> bool:
    return "samples" in frame.columns and frame["samples"].drop_nulls().len() > 0


def seed_metric(metric: str, seed: object) -> str:
    """The name of one seed's value of `metric` ('accuracy_seed_42')."""
    return f"{metric}_seed_{seed}"


def _sample_indicators(frame: pl.DataFrame) -> tuple[tuple[str, ...], np.ndarray]:
    """Names and per-row values of the sample metrics (`SAMPLE_METRICS`, then accuracy and agreement of each seed):
    every sample re-read from the row's record (`parsing.row_sample_verdicts`, so a truncated sample has no
    verdict and does not vote). A row without samples (skipped for its length) has no verdict from any seed."""
    columns = [c for c in ("item_id", "aspect", "label", "samples", *VERDICT_READING_COLUMNS) if c in frame.columns]
    rows = list(frame.select(columns).iter_rows(named=True))
    readings = [row_sample_verdicts(row) for row in rows]
    seeds = next((tuple(sample.seed for sample in reading) for reading in readings if reading), ())
    if not seeds:
        return (), np.zeros((len(rows), 0))
    per_seed = tuple(seed_metric(m, seed) for seed in seeds for m in SEED_METRICS)
    values = []
    for row, reading in zip(rows, readings):
        found = tuple(sample.seed for sample in reading)
        if reading and found != seeds:
            raise PairwiseMetricsError(
                f"item {row['item_id']!r} ({row['aspect']}) has samples of the seeds {list(found)}, the cell's other "
                f"rows of {list(seeds)}; one judge cell is sampled with one list of seeds"
            )
        verdicts = [sample.verdict.label for sample in reading] or [None] * len(seeds)
        label = row["label"]
        majority, share = majority_verdict(verdicts)
        seed_values = [[float(v == label), agreement(v, label)] for v in verdicts]
        seed_mean = np.mean(seed_values, axis=0)
        values.append(
            [
                float(majority == label),
                agreement(majority, label),
                share or 0.0,
                float(majority is None),
                *seed_mean,
                *(x for pair in seed_values for x in pair),
            ]
        )
    names = SAMPLE_METRICS + per_seed
    return names, np.asarray(values, dtype=float).reshape(len(rows), len(names))


def _length_indicators(frame: pl.DataFrame) -> np.ndarray:
    """Per row: accuracy and agreement of 'the longer response wins' (`longer_response`)."""
    rows = frame.select("label", "response1_duration_s", "response2_duration_s").iter_rows()
    verdicts = [(label, longer_response(first, second)) for label, first, second in rows]
    return np.array([[float(v == label), agreement(v, label)] for label, v in verdicts], dtype=float).reshape(
        frame.height, len(LENGTH_BASELINE_METRICS)
    )


def longer_response(first_s: float | None, second_s: float | None) -> str | None:
    """The length baseline's verdict: the response with the longer full audio wins, equal lengths tie; None when
    either length is unknown."""
    if first_s is None or second_s is None or math.isnan(first_s) or math.isnan(second_s):
        return None
    return RESPONSE_1 if first_s > second_s else RESPONSE_2 if first_s < second_s else TIE


def _has_lengths(frame: pl.DataFrame) -> bool:
    return {"response1_duration_s", "response2_duration_s"} <= set(frame.columns)


def row_indicators(frame: pl.DataFrame) -> RowIndicators:
    indicators = _order_indicators(frame)
    names, blocks = list(indicators.names), [indicators.values]
    if _has_lengths(frame):
        names += LENGTH_BASELINE_METRICS
        blocks.append(_length_indicators(frame))
    if _is_sampled(frame):
        sample_names, sample_values = _sample_indicators(frame)
        names += sample_names
        blocks.append(sample_values)
    return RowIndicators(tuple(names), np.hstack(blocks), indicators.forward, indicators.labels)


def _order_indicators(frame: pl.DataFrame) -> RowIndicators:
    swapped = "prediction_swapped" in frame.columns
    names = SINGLE_ORDER_METRICS + RATIONALE_METRICS + (BOTH_ORDER_METRICS if swapped else ())
    values, forward_labels = [], []
    optional = [c for c in ("prediction_swapped", *VERDICT_READING_COLUMNS) if c in frame.columns]
    for row in frame.select("label", "prediction", *optional).iter_rows(named=True):
        label, (forward, back) = row["label"], row_verdicts(row)
        forward_labels.append(forward.label)
        indicators = [float(forward.label == label), agreement(forward.label, label), float(not forward.ok)]
        contradiction = contradicts(forward.label, forward.rationale) if forward.ok else None
        indicators += [float(contradiction is True), float(contradiction is not None)]
        if back is not None:
            combined, _ = combine_verdicts(forward, back)
            consistent = forward.ok and back.ok and forward.label == back.label
            indicators += [float(consistent), float(combined == label), agreement(combined, label), float(not back.ok)]
        values.append(indicators)
    matrix = np.asarray(values, dtype=float).reshape(len(values), len(names))
    return RowIndicators(names, matrix, tuple(forward_labels), tuple(frame["label"].to_list()))


def split_groups(frame: pl.DataFrame) -> dict[str, list[str | None]]:
    """Per split scope, each row's group (None: in no group of that scope). Style and task format come from the
    table's columns where it has them; otherwise the style follows from the aspect and only implicit emotion
    has a known format."""
    aspects = frame["aspect"].to_list()
    styles = frame["style"].to_list() if "style" in frame.columns else [ACOUSTIC_STYLES.get(a) for a in aspects]
    formats = (
        frame["task_format"].to_list()
        if "task_format" in frame.columns
        else [IMPLICIT if a == "implicit_emotion" else None for a in aspects]
    )
    return {
        DIMENSION: [aspect_dimension(aspect) for aspect in aspects],
        TASK_FORMAT: formats,
        STYLE: styles,
        STYLE_FORMAT: [f"{s}/{f}" if s is not None and f is not None else None for s, f in zip(styles, formats)],
    }


# --- statistics ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupEstimate:
    """One group's point values (n_metrics,), bootstrap values (n_boot, n_metrics) and counts."""

    point: np.ndarray
    boot: np.ndarray
    # Sum of each indicator over the group's rows (for a 0/1 indicator: how many rows have it).
    totals: np.ndarray
    n: int
    n_items: int
    prediction_counts: dict[str, int] = field(default_factory=dict)
    label_counts: dict[str, int] = field(default_factory=dict)


def _estimate(
    indicators: RowIndicators, rows: np.ndarray, item_index: np.ndarray, n_items: int, weights: np.ndarray
) -> GroupEstimate:
    n_metrics = len(indicators.names)
    sums = np.zeros((n_items, n_metrics))
    counts = np.zeros(n_items)
    np.add.at(sums, item_index[rows], indicators.values[rows])
    np.add.at(counts, item_index[rows], 1.0)
    total = counts.sum()
    point = sums.sum(axis=0) / total if total else np.full(n_metrics, np.nan)
    resampled_counts = weights @ counts
    boot = np.full((weights.shape[0], n_metrics), np.nan)
    np.divide(weights @ sums, resampled_counts[:, None], out=boot, where=resampled_counts[:, None] > 0)
    verdicts = [indicators.forward[i] for i in rows]
    prediction_counts = {label: verdicts.count(label) for label in VERDICTS}
    prediction_counts[UNPARSEABLE] = verdicts.count(None)
    labels = [indicators.labels[i] for i in rows] if indicators.labels else []
    label_counts = {label: labels.count(label) for label in VERDICTS}
    return GroupEstimate(
        point, boot, sums.sum(axis=0), int(rows.size), int(np.count_nonzero(counts)), prediction_counts, label_counts
    )


@dataclass(frozen=True)
class DurationBin:
    label: str
    low_s: float | None
    high_s: float | None


def duration_bins(edges: Sequence[float]) -> list[DurationBin]:
    bins = [DurationBin(f"{_num(lo)}-{_num(hi)}", lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]
    return [*bins, DurationBin(f">={_num(edges[-1])}", edges[-1], None)]


def _num(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class CellEstimates:
    """Every group's estimates of one judge cell, on the cell's sorted items and bootstrap weights."""

    names: tuple[str, ...]
    items: tuple[str, ...]
    aspects: dict[str, GroupEstimate]
    overall: GroupEstimate
    by_duration: list[tuple[DurationBin, GroupEstimate]]
    settings: PairwiseMetricSettings
    # scope (SPLIT_SCOPES) -> group -> estimate; scopes without any row are absent.
    splits: dict[str, dict[str, GroupEstimate]] = field(default_factory=dict)

    @property
    def mean_metrics(self) -> tuple[str, ...]:
        """The metrics of `ASPECT_MEAN_METRICS` this cell has, in that order."""
        return tuple(name for name in ASPECT_MEAN_METRICS if name in self.names)

    def aspect_means(self, aspects: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(point, boot) of the mean over aspects (all, or `aspects`) of `mean_metrics`, as SageLM averages its
        aspects."""
        chosen = [self.aspects[a] for a in (self.aspects if aspects is None else aspects) if a in self.aspects]
        columns = [self.names.index(name) for name in self.mean_metrics]
        points = np.array([estimate.point[columns] for estimate in chosen])
        boots = np.stack([estimate.boot[:, columns] for estimate in chosen])
        with np.errstate(all="ignore"):
            return np.nanmean(points, axis=0), _nanmean(boots, axis=0)


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    present = ~np.isnan(values)
    total = np.where(present, values, 0.0).sum(axis=axis)
    count = present.sum(axis=axis)
    out = np.full(total.shape, np.nan)
    np.divide(total, count, out=out, where=count > 0)
    return out


def estimate_cell(frame: pl.DataFrame, settings: PairwiseMetricSettings) -> CellEstimates:
    """Estimates of one judge cell's validated predictions (`validate_predictions`)."""
    if frame.height == 0:
        raise PairwiseMetricsError("no predictions to compute metrics from")
    indicators = row_indicators(frame)
    items = tuple(sorted(set(frame["item_id"].to_list())))
    position = {item: i for i, item in enumerate(items)}
    item_index = np.array([position[item] for item in frame["item_id"].to_list()], dtype=int)
    weights = bootstrap_weights(len(items), settings.n_boot, settings.seed)
    aspects_column = np.array(frame["aspect"].to_list(), dtype=object)

    def estimate(mask: np.ndarray) -> GroupEstimate:
        return _estimate(indicators, np.flatnonzero(mask), item_index, len(items), weights)

    aspects = {aspect: estimate(aspects_column == aspect) for aspect in sorted(set(aspects_column))}
    overall = estimate(np.ones(frame.height, dtype=bool))
    splits = {}
    for scope, groups in split_groups(frame).items():
        column = np.array(groups, dtype=object)
        present = sorted({group for group in groups if group is not None})
        if present:
            splits[scope] = {group: estimate(column == group) for group in present}
    by_duration = []
    if "duration_s" in frame.columns:
        durations = frame["duration_s"].to_numpy().astype(float)
        if np.any(durations[~np.isnan(durations)] < 0):
            raise PairwiseMetricsError("duration_s must be >= 0")
        for duration_bin in duration_bins(settings.duration_bins):
            high = math.inf if duration_bin.high_s is None else duration_bin.high_s
            by_duration.append((duration_bin, estimate((durations >= duration_bin.low_s) & (durations < high))))
        unknown = np.isnan(durations)
        if unknown.any():
            by_duration.append((DurationBin(UNKNOWN_DURATION, None, None), estimate(unknown)))
    return CellEstimates(indicators.names, items, aspects, overall, by_duration, settings, splits)


# --- output ----------------------------------------------------------------------------------------------------
def _value(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _interval(point: float, boot: np.ndarray, settings: PairwiseMetricSettings, n_items: int) -> dict[str, Any]:
    """Value, percentile interval and support status; below `min_items` items no interval."""
    value = _value(point)
    if value is None:
        return {"value": None, "ci_low": None, "ci_high": None, "status": None}
    if not estimable(n_items, settings.min_items):
        return {"value": value, "ci_low": None, "ci_high": None, "status": NOT_ESTIMABLE}
    low, high = percentile_interval(boot[:, None], settings.level)
    return {"value": value, "ci_low": _value(low[0]), "ci_high": _value(high[0]), "status": ESTIMATED}


def _with_rate(names: Sequence[str], estimate: GroupEstimate) -> list[tuple[str, float, np.ndarray]]:
    """(metric, point, bootstrap values) of every metric, plus the rationale contradiction rate: contradicting
    rationales over determined ones (nan where no rationale of the group is determined)."""
    metrics = [(name, estimate.point[column], estimate.boot[:, column]) for column, name in enumerate(names)]
    contradicting, determined = (names.index(name) for name in RATIONALE_METRICS)
    with np.errstate(all="ignore"):
        point = estimate.point[contradicting] / estimate.point[determined]
        boot = estimate.boot[:, contradicting] / estimate.boot[:, determined]
    return [*metrics, (RATIONALE_RATE, point, boot)]


def _record(names: Sequence[str], estimate: GroupEstimate, settings: PairwiseMetricSettings) -> dict[str, Any]:
    record: dict[str, Any] = {"n": estimate.n, "n_items": estimate.n_items}
    for name, point, boot in _with_rate(names, estimate):
        record[name] = _interval(point, boot, settings, estimate.n_items)
    record["n_unparseable"] = estimate.prediction_counts.get(UNPARSEABLE, 0)
    if "parse_failure_rate_swapped" in names:
        column = names.index("parse_failure_rate_swapped")
        record["n_unparseable_swapped"] = int(estimate.totals[column])
    record["predictions"] = dict(estimate.prediction_counts)
    return record


def metrics_document(cell: CellEstimates) -> dict[str, Any]:
    """The JSON layout of `lalm-judge pairwise metrics`: {"aspects", "overall", "by_duration", "settings"}."""
    settings = cell.settings
    overall = _record(cell.names, cell.overall, settings)
    mean_point, mean_boot = cell.aspect_means()
    for column, name in enumerate(cell.mean_metrics):
        overall[f"{name}_aspect_mean"] = _interval(
            mean_point[column], mean_boot[:, column], settings, cell.overall.n_items
        )
    return {
        "aspects": {aspect: _record(cell.names, estimate, settings) for aspect, estimate in cell.aspects.items()},
        "overall": overall,
        "splits": _split_records(cell),
        "by_duration": [
            {"bin": b.label, "low_s": b.low_s, "high_s": b.high_s, **_record(cell.names, estimate, settings)}
            for b, estimate in cell.by_duration
        ],
        "settings": cell.settings.as_dict(),
    }


def dimension_aspects(cell: CellEstimates, dimension: str) -> list[str]:
    return [aspect for aspect in cell.aspects if aspect_dimension(aspect) == dimension]


def _split_records(cell: CellEstimates) -> dict[str, dict[str, Any]]:
    """{scope: {group: record}}; a dimension's record also has the mean over its aspects, as SageLM averages."""
    settings = cell.settings
    records: dict[str, dict[str, Any]] = {}
    for scope, groups in cell.splits.items():
        records[scope] = {group: _record(cell.names, estimate, settings) for group, estimate in groups.items()}
    for dimension, record in records.get(DIMENSION, {}).items():
        mean_point, mean_boot = cell.aspect_means(dimension_aspects(cell, dimension))
        n_items = cell.splits[DIMENSION][dimension].n_items
        for column, name in enumerate(cell.mean_metrics):
            record[f"{name}_{ASPECT_MEAN}"] = _interval(mean_point[column], mean_boot[:, column], settings, n_items)
    return records


def metrics_rows(cell: CellEstimates, keys: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Long-format rows (`core.tables.PAIRWISE_METRICS`) of one cell's estimates."""
    settings = cell.settings
    mode = pairwise_mode(keys["modality"], keys["transcript_source"]) if "modality" in keys else None
    base = {**{key: keys.get(key) for key in CELL_KEYS}, "mode": mode}
    rows = []

    def add(scope: str, group: str, estimate: GroupEstimate, low: float | None = None, high: float | None = None):
        for name, point, boot in _with_rate(cell.names, estimate):
            interval = _interval(point, boot, settings, estimate.n_items)
            rows.append(
                {
                    **base,
                    "scope": scope,
                    "group": group,
                    "low_s": low,
                    "high_s": high,
                    "metric": name,
                    **interval,
                    "n": estimate.n,
                    "n_items": estimate.n_items,
                }
            )

    def add_mean(scope: str, group: str, aspects: Sequence[str] | None, counted: GroupEstimate) -> None:
        mean_point, mean_boot = cell.aspect_means(aspects)
        for column, name in enumerate(cell.mean_metrics):
            interval = _interval(mean_point[column], mean_boot[:, column], settings, counted.n_items)
            rows.append(
                {
                    **base,
                    "scope": scope,
                    "group": group,
                    "low_s": None,
                    "high_s": None,
                    "metric": name,
                    **interval,
                    "n": counted.n,
                    "n_items": counted.n_items,
                }
            )

    for aspect, estimate in cell.aspects.items():
        add("aspect", aspect, estimate)
    add("overall", "all", cell.overall)
    add_mean("overall", ASPECT_MEAN, None, cell.overall)
    for scope, groups in cell.splits.items():
        for group, estimate in groups.items():
            add(scope, group, estimate)
            if scope == DIMENSION:
                add_mean(scope, f"{group}_{ASPECT_MEAN}", dimension_aspects(cell, group), estimate)
    for duration_bin, estimate in cell.by_duration:
        add("duration", duration_bin.label, estimate, duration_bin.low_s, duration_bin.high_s)
    return rows


def has_sagelm_records(items: pl.DataFrame | None) -> bool:
    """Whether an item table holds SageLM records (their stored instructions), which SageLM's scripts can count."""
    return items is not None and items["source_instruction"].drop_nulls().len() > 0


def sagelm_compatible_estimates(
    predictions: pl.DataFrame, items: pl.DataFrame, settings: PairwiseMetricSettings
) -> tuple[CellEstimates | None, dict[str, Any]]:
    """One cell's estimates in the `sagelm_compatible` evaluation (`sagelm_eval`) of its validated predictions, and
    its document: what the scripts count and leave out, and the metrics (none when they count no row)."""
    view = sagelm_compatible_view(predictions, items)
    cell = estimate_cell(view.frame, settings) if view.frame.height else None
    return cell, {**view.summary(), **(metrics_document(cell) if cell is not None else {})}


def compute_pairwise_metrics(
    frame: pl.DataFrame, settings: PairwiseMetricSettings, items: pl.DataFrame | None = None
) -> dict[str, Any]:
    """The metrics document of one judge cell's predictions (any table satisfying the input contract); with the
    item table of SageLM records they were judged on, the `sagelm_compatible` evaluation beside it."""
    cells = cells_of(frame)
    if len(cells) > 1:
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in cell.items()) for cell in cells[:5])
        raise PairwiseMetricsError(
            f"the predictions hold {len(cells)} judge cells ({shown}); give the predictions of one cell"
        )
    validated = validate_predictions(frame)
    document = metrics_document(estimate_cell(validated, settings))
    if items is not None:
        if not has_sagelm_records(items):
            raise PairwiseMetricsError(
                "the item table holds no SageLM records (no stored instructions): the sagelm_compatible evaluation "
                "counts SageLM's records as its scripts do; import them with `lalm-judge pairwise import`"
            )
        document[SAGELM_COMPATIBLE] = sagelm_compatible_estimates(validated, items, settings)[1]
    return document


def run_pairwise_metrics(
    predictions_path: str | os.PathLike,
    out_path: str | os.PathLike,
    settings: PairwiseMetricSettings,
    items_path: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """`lalm-judge pairwise metrics`: read a predictions file (and the item table, for the `sagelm_compatible`
    evaluation), write the metrics JSON, return it."""
    items = None if items_path is None else PAIRWISE_ITEMS.read(items_path)
    document = compute_pairwise_metrics(read_predictions(predictions_path), settings, items)
    write_json(out_path, document)
    return document


# --- paired comparison of cells ---------------------------------------------------------------------------------
def compare_cells(
    a: CellEstimates, b: CellEstimates, metric: str, group: str = "all"
) -> dict[str, float | None] | None:
    """a - b of `metric` in `group` ('all' or an aspect) with a paired bootstrap interval: both cells must have
    been estimated on the same items with the same settings (then their resamples are the same); None
    otherwise or when the metric or group is absent from either."""
    if a.items != b.items or a.settings != b.settings or metric not in a.names or metric not in b.names:
        return None
    estimates = []
    for cell in (a, b):
        estimate = cell.overall if group == "all" else cell.aspects.get(group)
        if estimate is None:
            return None
        estimates.append(estimate)
    column_a, column_b = a.names.index(metric), b.names.index(metric)
    point = estimates[0].point[column_a] - estimates[1].point[column_b]
    boot = estimates[0].boot[:, column_a] - estimates[1].boot[:, column_b]
    return _interval(point, boot, a.settings, min(e.n_items for e in estimates))


def metrics_frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    return PAIRWISE_METRICS.frame(rows)


# --- the workflow's metrics stage ---------------------------------------------------------------------------------
COMPARED_MODES = ("audio_native", "cascade")
COMPARED_METRICS = ("agreement", "accuracy")
STATUS_ORDERS = {
    "forward": "verdict_status",
    "swapped": "verdict_swapped_status",
    "combined": "verdict_combined_status",
}


@dataclass(frozen=True)
class PairwiseStageTables:
    metrics: pl.DataFrame
    documents: list[dict[str, Any]]
    comparisons: pl.DataFrame
    statuses: pl.DataFrame
    findings: pl.DataFrame
    # The pairwise audit (`pairwise.conditions`; lalm_judge.pairwise.audit_metrics), empty without conditions.
    audit: pl.DataFrame = field(default_factory=PAIRWISE_AUDIT.empty)
    # The metrics in SageLM's scripts' record handling (`sagelm_eval`), for the rows of SageLM records.
    sagelm_compatible: pl.DataFrame = field(default_factory=PAIRWISE_METRICS.empty)


def cell_label(keys: Mapping[str, Any]) -> str:
    return f"{keys['judge']}/{keys['modality']}-{keys['transcript_source']}/{keys['prompt']}"


def verdict_rule(predictions: pl.DataFrame) -> str:
    """The rule a cell's answers were read with (`verdict_rule` column; a table without one: the default)."""
    if "verdict_rule" not in predictions.columns:
        return DEFAULT_VERDICT_RULE
    rules = sorted(set(predictions["verdict_rule"].drop_nulls().to_list())) or [DEFAULT_VERDICT_RULE]
    return ", ".join(rules)


def status_rows(predictions: pl.DataFrame, keys: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Verdict statuses of each order and the length-policy actions of one cell's prediction table."""
    rows = []
    for order, column in [*STATUS_ORDERS.items(), ("long_audio", "long_audio_action")]:
        for status, n in sorted(predictions.group_by(column).len().iter_rows(), key=lambda r: str(r[0])):
            rows.append({**{k: keys[k] for k in CELL_KEYS}, "order": order, "status": status, "n": n})
    return rows


def mode_comparisons(cells: Sequence[tuple[Mapping[str, Any], CellEstimates]]) -> list[dict[str, Any]]:
    """Per group and metric: the best audio-native cell against the best cascade cell, paired."""
    by_mode: dict[str, list[tuple[Mapping[str, Any], CellEstimates]]] = {}
    for keys, cell in cells:
        by_mode.setdefault(pairwise_mode(keys["modality"], keys["transcript_source"]), []).append((keys, cell))
    mode_a, mode_b = COMPARED_MODES
    if mode_a not in by_mode or mode_b not in by_mode:
        return []
    groups = ["all", *sorted({aspect for _, cell in cells for aspect in cell.aspects})]
    rows = []
    for group in groups:
        for metric in COMPARED_METRICS:
            best = [_best(by_mode[mode], group, metric) for mode in COMPARED_MODES]
            if best[0] is None or best[1] is None:
                continue
            (keys_a, cell_a, value_a), (keys_b, cell_b, value_b) = best
            difference = compare_cells(cell_a, cell_b, metric, group) or {
                "value": None,
                "ci_low": None,
                "ci_high": None,
                "status": None,
            }
            rows.append(
                {
                    "group": group,
                    "metric": metric,
                    "mode_a": mode_a,
                    "cell_a": cell_label(keys_a),
                    "value_a": value_a,
                    "mode_b": mode_b,
                    "cell_b": cell_label(keys_b),
                    "value_b": value_b,
                    "difference": difference["value"],
                    "ci_low": difference["ci_low"],
                    "ci_high": difference["ci_high"],
                    "status": difference["status"],
                    "n_items": len(cell_a.items),
                }
            )
    return rows


def _best(
    cells: Sequence[tuple[Mapping[str, Any], CellEstimates]], group: str, metric: str
) -> tuple[Mapping[str, Any], CellEstimates, float] | None:
    candidates = []
    for keys, cell in cells:
        estimate = cell.overall if group == "all" else cell.aspects.get(group)
        if estimate is not None and metric in cell.names:
            value = _value(estimate.point[cell.names.index(metric)])
            if value is not None:
                candidates.append((value, cell_label(keys), keys, cell))
    if not candidates:
        return None
    value, _, keys, cell = max(candidates, key=lambda c: (c[0], c[1]))
    return keys, cell, value


def compute_pairwise_stage(
    predictions: Sequence[pl.DataFrame],
    settings: PairwiseMetricSettings,
    audit_predictions: Sequence[pl.DataFrame] = (),
    items: pl.DataFrame | None = None,
) -> PairwiseStageTables:
    """Every table of the metrics stage from the judge stage's prediction tables (one per cell, and one per cell
    and audit condition); with the item table, also the `sagelm_compatible` evaluation of the rows of SageLM
    records."""
    cells, metric_rows, documents, statuses, compatible_rows = [], [], [], [], []
    records = items if has_sagelm_records(items) else None
    for frame in predictions:
        (keys,) = cells_of(frame)
        validated = validate_predictions(frame, f"predictions of {cell_label(keys)}")
        cell = estimate_cell(validated, settings)
        cells.append((keys, cell))
        metric_rows += metrics_rows(cell, keys)
        mode = pairwise_mode(keys["modality"], keys["transcript_source"])
        document = {**keys, "mode": mode, "verdict_rule": verdict_rule(frame), **metrics_document(cell)}
        if records is not None:
            compatible, document[SAGELM_COMPATIBLE] = sagelm_compatible_estimates(validated, records, settings)
            compatible_rows += metrics_rows(compatible, keys) if compatible is not None else []
        documents.append(document)
        statuses += status_rows(frame, keys)
    clean_by_cell = {tuple(keys[k] for k in CELL_KEYS): frame for (keys, _), frame in zip(cells, predictions)}
    audit_settings = AuditSettings(settings.n_boot, settings.seed, settings.level, settings.min_items)
    audit = audit_table(audit_predictions, clean_by_cell, audit_settings)
    return PairwiseStageTables(
        metrics=PAIRWISE_METRICS.frame(metric_rows),
        documents=documents,
        comparisons=PAIRWISE_COMPARISONS.frame(mode_comparisons(cells)),
        statuses=PAIRWISE_STATUSES.frame(statuses),
        findings=PAIRWISE_FINDINGS.frame(accuracy_findings(cells) + audit_findings(audit)),
        audit=audit,
        sagelm_compatible=PAIRWISE_METRICS.frame(compatible_rows),
    )


STAGE_FILES = {
    "metrics": "metrics.parquet",
    "comparisons": "comparisons.parquet",
    "statuses": "statuses.parquet",
    "findings": "findings.parquet",
    "audit": "audit.parquet",
    "sagelm_compatible": "metrics_sagelm_compatible.parquet",
}
DOCUMENT_FILE = "metrics.json"


def run_pairwise_stage(
    prediction_paths: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    settings: PairwiseMetricSettings,
    audit_paths: Sequence[str | os.PathLike] = (),
    items_path: str | os.PathLike | None = None,
) -> PairwiseStageTables:
    """Read the prediction tables (clean, and of the audit conditions) and the item table they were judged on,
    write the tables of `STAGE_FILES` and metrics.json."""
    if not prediction_paths:
        raise PairwiseMetricsError("no pairwise prediction tables given")
    read = PAIRWISE_PREDICTIONS.read
    items = None if items_path is None else PAIRWISE_ITEMS.read(items_path)
    tables = compute_pairwise_stage(
        [read(p) for p in prediction_paths], settings, [read(p) for p in audit_paths], items
    )
    config_hash = stable_hash(settings.as_dict())
    out_dir = Path(out_dir)
    for name, file_name in STAGE_FILES.items():
        frame = with_provenance(getattr(tables, name), config_hash=config_hash, seed=settings.seed)
        frame = frame.with_columns(n_bootstrap=pl.lit(settings.n_boot), min_items=pl.lit(settings.min_items))
        write_parquet(out_dir / file_name, frame)
    write_json(out_dir / DOCUMENT_FILE, {"cells": tables.documents, "settings": settings.as_dict()})
    return tables


def read_pairwise_stage(metrics_dir: str | os.PathLike) -> PairwiseStageTables:
    """The tables written by `run_pairwise_stage`."""
    metrics_dir = Path(metrics_dir)
    frames = {}
    for name, file_name in STAGE_FILES.items():
        path = metrics_dir / file_name
        if not path.exists():
            raise FileNotFoundError(f"pairwise metric table {path} is missing; run the pairwise metrics stage")
        frames[name] = pl.read_parquet(path)
    documents = json.loads((metrics_dir / DOCUMENT_FILE).read_text(encoding="utf-8"))["cells"]
    return PairwiseStageTables(
        frames["metrics"],
        documents,
        frames["comparisons"],
        frames["statuses"],
        frames["findings"],
        frames["audit"],
        frames["sagelm_compatible"],
    )


# --- findings ----------------------------------------------------------------------------------------------------
# The accuracy a judge reaches without judging: the better of a uniform guess among 1, 2 and Tie, and always
# answering the group's most frequent label.
UNIFORM_GUESS = 1 / len(VERDICTS)


def chance_accuracy(label_counts: Mapping[str, int]) -> float:
    total = sum(label_counts.values())
    return max(UNIFORM_GUESS, max(label_counts.values()) / total) if total else UNIFORM_GUESS


FINDINGS_FAMILY = "pairwise findings"
FINDINGS_CORRECTION = BENJAMINI_HOCHBERG


def _finding_groups(cell: CellEstimates) -> list[tuple[str, str, GroupEstimate]]:
    groups = [("overall", "all", cell.overall)]
    groups += [(DIMENSION, group, estimate) for group, estimate in cell.splits.get(DIMENSION, {}).items()]
    return groups + [("aspect", aspect, estimate) for aspect, estimate in cell.aspects.items()]


def _hypothesis(
    keys: Mapping[str, Any], cell: CellEstimates, scope: str, group: str, estimate: GroupEstimate
) -> dict[str, Any] | None:
    """One (cell, group)'s test row, or None when it cannot be tested (too few items, no resample). H0: the
    accuracy is at most chance or at most the length baseline's on the same rows; its p-value is the larger of the
    two one-sided bootstrap p-values (the claim needs both), the baseline's from the paired resamples."""
    settings = cell.settings
    column = cell.names.index("accuracy")
    boot = estimate.boot[:, column]
    interval = _interval(estimate.point[column], boot, settings, estimate.n_items)
    if interval["status"] != ESTIMATED:
        return None
    chance = chance_accuracy(estimate.label_counts)
    p_values = [bootstrap_p_value(boot, chance, GREATER)]
    row = {
        **{key: keys[key] for key in CELL_KEYS},
        "mode": pairwise_mode(keys["modality"], keys["transcript_source"]),
        "scope": scope,
        "group": group,
        "accuracy": interval["value"],
        "measure": "accuracy",
        "value": interval["value"],
        "ci_low": interval["ci_low"],
        "ci_high": interval["ci_high"],
        "chance": chance,
        "n": estimate.n,
        "n_items": estimate.n_items,
    }
    if LENGTH_BASELINE_METRICS[0] in cell.names:
        baseline = cell.names.index(LENGTH_BASELINE_METRICS[0])
        difference_boot = boot - estimate.boot[:, baseline]
        difference = _interval(
            estimate.point[column] - estimate.point[baseline], difference_boot, settings, estimate.n_items
        )
        row.update(
            length_baseline=_value(estimate.point[baseline]),
            difference=difference["value"],
            difference_ci_low=difference["ci_low"],
            difference_ci_high=difference["ci_high"],
        )
        p_values.append(bootstrap_p_value(difference_boot, 0.0, GREATER))
    if any(p is None for p in p_values):
        return None
    return {**row, "p_value": max(p_values)}  # type: ignore[type-var]


def accuracy_findings(cells: Sequence[tuple[Mapping[str, Any], CellEstimates]]) -> list[dict[str, Any]]:
    """Findings rows (`core.tables.PAIRWISE_FINDINGS`) of the findings family: every (cell, group) of the overall,
    dimension and aspect scopes with enough items, tested against chance (`chance_accuracy`) and the length
    baseline, the p-values Benjamini-Hochberg-adjusted across the family; a finding where the adjusted p-value is
    at most the one-sided tail of the intervals, (1 - level) / 2. Findings first, best first."""
    rows = [
        row
        for keys, cell in cells
        for scope, group, estimate in _finding_groups(cell)
        if (row := _hypothesis(keys, cell, scope, group, estimate)) is not None
    ]
    adjusted = adjust([row["p_value"] for row in rows], FINDINGS_CORRECTION)
    for row, p in zip(rows, adjusted):
        row.update(
            p_adjusted=float(p),
            family=FINDINGS_FAMILY,
            family_size=len(rows),
            correction=FINDINGS_CORRECTION,
            finding=bool(p <= (1 - cells[0][1].settings.level) / 2),
        )
    return sorted(
        rows, key=lambda r: (not r["finding"], r["scope"] != "overall", -r["ci_low"], cell_label(r), r["group"])
    )


def _family_words(finding: Mapping[str, Any]) -> str:
    name = "Benjamini-Hochberg" if finding["correction"] == BENJAMINI_HOCHBERG else str(finding["correction"])
    return f"{name}-adjusted p {finding['p_adjusted']:.3g} among {finding['family_size']} {finding['family']}"


def finding_sentence(finding: Mapping[str, Any]) -> str:
    """One finding in words: what it beats (chance and the length baseline on the same rows) and its family."""
    if finding["scope"] == "audit":
        return audit_sentence(finding)
    where = "all its verdicts" if finding["group"] == "all" else f"its {finding['group'].replace('_', ' ')} verdicts"
    if finding["scope"] == DIMENSION:
        where = f"its verdicts on the {finding['group']} aspects"
    if finding.get("length_baseline") is None:
        baseline = "; no length baseline (the table has no response durations)"
    else:
        baseline = (
            f", and above 'the longer response wins', right on {finding['length_baseline']:.0%} of the same rows "
            f"(difference {finding['difference']:+.0%}, 95 % interval {finding['difference_ci_low']:+.0%} to "
            f"{finding['difference_ci_high']:+.0%})"
        )
    return (
        f"{finding['judge']} ({finding['modality']}, {finding['transcript_source']}, {finding['prompt']} prompt, "
        f"{finding['mode'].replace('_', ' ')}) is right on {finding['accuracy']:.0%} of {where} "
        f"(95 % interval {finding['ci_low']:.0%} to {finding['ci_high']:.0%}, {finding['n']} verdicts on "
        f"{finding['n_items']} items): above chance, {finding['chance']:.0%} (the better of a uniform guess among "
        f"1, 2 and Tie and always giving the most frequent label){baseline}; {_family_words(finding)}."
    )
