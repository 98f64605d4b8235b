"""Measures of the pairwise audit (docs/metrics.md, "Pairwise audit"): how a judge cell's verdicts move when one
response of a pair is changed in a surface property only (`lalm_judge.pairwise.audit`). Tables in, tables out.

Per audit row (clean item i, aspect, changed response s) and order o (forward: the item's order, swapped: the
responses exchanged; both verdicts are in the item's numbering), with a the audit verdict and c the clean verdict
of the same item, aspect and order:
- cue_preference = mean([a == s] - [c == s]) over the rows whose a and c are both readable: the shift in the
  probability of preferring the changed response (> 0: the cue attracts, < 0: it repels);
- cue_preference_first / cue_preference_second: the same over the rows where the changed response is shown
  first (s = 1 forward, s = 2 swapped) / second; the effect `survives the swap` when both intervals exclude 0 on
  the side of cue_preference;
- flip_rate = mean([a != c]) over the same rows;
- tie_share = mean([a == Tie]) over every row (an unreadable answer is not a Tie); on `identical` pairs (one
  clip as both responses) Tie is the only right verdict, and cue preference and flips are not defined.
Intervals: percentile bootstrap over the clean items (an item's aspects and both changed responses travel
together), the seeded resamples of `lalm_judge.analysis.stats.bootstrap_weights`; minimum support as for the
other pairwise metrics (`not_estimable` below `min_items` items). A cell is flagged on a condition when its
cue_preference interval excludes 0, or, on `identical`, when its tie_share interval excludes 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from lalm_judge.analysis.stats import CI_LEVEL, bootstrap_weights, percentile_interval
from lalm_judge.analysis.support import ESTIMATED, NOT_ESTIMABLE, estimable
from lalm_judge.core.tables import PAIRWISE_AUDIT
from lalm_judge.core.vocabulary import IDENTICAL, TIE, AuditCondition, pairwise_mode, split_audit_item_id

AUDIT_CELL_KEYS = ("judge", "modality", "transcript_source", "prompt")
CUE_PREFERENCE = "cue_preference"
SHOWN_FIRST, SHOWN_SECOND = "cue_preference_first", "cue_preference_second"
FLIP_RATE = "flip_rate"
TIE_SHARE = "tie_share"
CUE_MEASURES = (CUE_PREFERENCE, SHOWN_FIRST, SHOWN_SECOND, FLIP_RATE, TIE_SHARE)
IDENTICAL_MEASURES = (TIE_SHARE,)
ORDER_COLUMNS = ("verdict", "verdict_swapped")


@dataclass(frozen=True)
class AuditSettings:
    n_boot: int = 1000
    seed: int = 0
    level: float = CI_LEVEL
    min_items: int = 10


@dataclass(frozen=True)
class AuditRows:
    """One entry per (audit row, order): the clean item's index, each measure's value (nan: not defined)."""

    item_index: np.ndarray
    values: dict[str, np.ndarray]
    items: tuple[str, ...]


def _clean_verdicts(clean: pl.DataFrame) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    return {
        (row["item_id"], row["aspect"]): (row["verdict"], row["verdict_swapped"])
        for row in clean.select("item_id", "aspect", *ORDER_COLUMNS).iter_rows(named=True)
    }


def audit_rows(audit: pl.DataFrame, clean: pl.DataFrame, condition: str) -> AuditRows:
    """The per-(row, order) indicators of one cell's audit predictions against its clean predictions."""
    clean_by_key = _clean_verdicts(clean)
    identical = AuditCondition(condition).kind == IDENTICAL
    records = []
    for row in audit.select("item_id", "aspect", *ORDER_COLUMNS).iter_rows(named=True):
        item, side = split_audit_item_id(row["item_id"])
        clean_orders = clean_by_key.get((item, row["aspect"]), (None, None))
        for order, column in enumerate(ORDER_COLUMNS):
            a, c = row[column], clean_orders[order]
            shown_first = (side == 1) == (order == 0)
            records.append((item, _indicators(a, c, str(side), shown_first, identical)))
    items = tuple(sorted({item for item, _ in records}))
    position = {item: i for i, item in enumerate(items)}
    measures = IDENTICAL_MEASURES if identical else CUE_MEASURES
    values = {name: np.array([r[name] for _, r in records], dtype=float) for name in measures}
    return AuditRows(np.array([position[item] for item, _ in records], dtype=int), values, items)


def _indicators(a: str | None, c: str | None, side: str, shown_first: bool, identical: bool) -> dict[str, float]:
    tie = float(a == TIE)
    if identical:
        return {TIE_SHARE: tie}
    if a is None or c is None:
        shift = flip = np.nan
    else:
        shift, flip = float(a == side) - float(c == side), float(a != c)
    return {
        CUE_PREFERENCE: shift,
        SHOWN_FIRST: shift if shown_first else np.nan,
        SHOWN_SECOND: np.nan if shown_first else shift,
        FLIP_RATE: flip,
        TIE_SHARE: tie,
    }


def _estimate(values: np.ndarray, rows: AuditRows, weights: np.ndarray, settings: AuditSettings) -> dict[str, Any]:
    """Value, interval, status and support of one measure (nan entries left out)."""
    defined = ~np.isnan(values)
    sums, counts = np.zeros(len(rows.items)), np.zeros(len(rows.items))
    np.add.at(sums, rows.item_index[defined], values[defined])
    np.add.at(counts, rows.item_index[defined], 1.0)
    n_items = int(np.count_nonzero(counts))
    record: dict[str, Any] = {"n": int(defined.sum()), "n_items": n_items, "value": None}
    record.update(ci_low=None, ci_high=None, status=None)
    if not counts.sum():
        return record
    record["value"] = float(sums.sum() / counts.sum())
    if not estimable(n_items, settings.min_items):
        record["status"] = NOT_ESTIMABLE
        return record
    resampled = weights @ counts
    boot = np.full(weights.shape[0], np.nan)
    np.divide(weights @ sums, resampled, out=boot, where=resampled > 0)
    low, high = percentile_interval(boot[:, None], settings.level)
    record.update(ci_low=float(low[0]), ci_high=float(high[0]), status=ESTIMATED)
    return record


def _excludes(record: Mapping[str, Any], value: float) -> bool:
    return bool(record["status"] == ESTIMATED and not record["ci_low"] <= value <= record["ci_high"])


def _same_side(record: Mapping[str, Any], sign: float) -> bool:
    return _excludes(record, 0.0) and bool(np.sign(record["value"]) == sign)


def audit_cell_rows(
    audit: pl.DataFrame, clean: pl.DataFrame, keys: Mapping[str, Any], condition: str, settings: AuditSettings
) -> list[dict[str, Any]]:
    """The `core.tables.PAIRWISE_AUDIT` rows of one (cell, condition): every measure, the headline one (cue
    preference, or the Tie share on identical pairs) with its flag and, for the cue, whether it survives the swap."""
    rows = audit_rows(audit, clean, condition)
    weights = bootstrap_weights(len(rows.items), settings.n_boot, settings.seed)
    estimates = {name: _estimate(values, rows, weights, settings) for name, values in rows.values.items()}
    identical = AuditCondition(condition).kind == IDENTICAL
    headline = TIE_SHARE if identical else CUE_PREFERENCE
    flagged = _excludes(estimates[headline], 1.0 if identical else 0.0)
    survives = None
    if not identical and flagged:
        sign = float(np.sign(estimates[CUE_PREFERENCE]["value"]))
        survives = _same_side(estimates[SHOWN_FIRST], sign) and _same_side(estimates[SHOWN_SECOND], sign)
    elif not identical:
        survives = False
    base = {**{key: keys[key] for key in AUDIT_CELL_KEYS}, "condition": condition}
    base["mode"] = pairwise_mode(keys["modality"], keys["transcript_source"])
    out = []
    for name, estimate in estimates.items():
        is_headline = name == headline
        extra = {"flagged": flagged if is_headline else None, "survives_swap": survives if is_headline else None}
        out.append({**base, "measure": name, **estimate, **extra})
    return out


def audit_table(
    audit_predictions: Sequence[pl.DataFrame], clean_by_cell: Mapping[tuple[str, ...], pl.DataFrame], settings
) -> pl.DataFrame:
    """The audit table of every (cell, condition) prediction table, each against its cell's clean predictions."""
    rows = []
    for frame in audit_predictions:
        (condition,) = set(frame["audit_condition"].to_list())
        keys = frame.row(0, named=True)
        cell = tuple(keys[key] for key in AUDIT_CELL_KEYS)
        if cell not in clean_by_cell:
            raise ValueError(f"audit predictions of {'/'.join(cell)} ({condition}) have no clean predictions")
        rows += audit_cell_rows(frame, clean_by_cell[cell], keys, condition, settings)
    return PAIRWISE_AUDIT.frame(rows)


def audit_findings(audit: pl.DataFrame) -> list[dict[str, Any]]:
    """Findings rows (`core.tables.PAIRWISE_FINDINGS`, scope 'audit', group = the condition) of the flagged cells."""
    flagged = audit.filter(pl.col("flagged").fill_null(False))
    return [
        {
            **{key: row[key] for key in (*AUDIT_CELL_KEYS, "mode")},
            "scope": "audit",
            "group": row["condition"],
            "measure": row["measure"],
            "value": row["value"],
            "ci_low": row["ci_low"],
            "ci_high": row["ci_high"],
            "survives_swap": row["survives_swap"],
            "n": row["n"],
            "n_items": row["n_items"],
        }
        for row in flagged.iter_rows(named=True)
    ]


def audit_verdict(row: Mapping[str, Any]) -> str | None:
    """The verdict of a headline row of the audit table in words; None for the other measures."""
    if row["flagged"] is None:
        return None
    if row["value"] is None:
        return "no readable verdict pairs (not estimable)"
    if not row["flagged"]:
        return "not flagged" if row["status"] == ESTIMATED else "not estimable (too few items)"
    if row["measure"] == TIE_SHARE:
        return "flagged: fails to abstain"
    return "flagged, survives the swap" if row["survives_swap"] else "flagged, in one position only"


def audit_verdict_line(row: Mapping[str, Any]) -> str:
    """One headline row: cell, condition, measure with its interval and the verdict."""
    interval = (
        "no interval" if row["ci_low"] is None else f"95 % interval {row['ci_low']:+.3f} to {row['ci_high']:+.3f}"
    )
    value = "-" if row["value"] is None else f"{row['value']:+.3f}"
    cell = "/".join(str(row[key]) for key in AUDIT_CELL_KEYS)
    support = f"{interval}, {row['n_items']} items"
    return f"{cell} {row['condition']}: {row['measure']} {value} ({support}): {audit_verdict(row)}"


def audit_sentence(finding: Mapping[str, Any]) -> str:
    """One flagged audit finding in words."""
    cell = f"{finding['judge']} ({finding['modality']}, {finding['transcript_source']}, {finding['prompt']} prompt)"
    interval = f"95 % interval {finding['ci_low']:+.2f} to {finding['ci_high']:+.2f}, {finding['n_items']} items"
    if finding["measure"] == TIE_SHARE:
        return (
            f"{cell} answers Tie on only {finding['value']:.0%} of identical pairs (one clip as both responses; "
            f"{interval}): it fails to abstain."
        )
    direction = "prefers" if finding["value"] > 0 else "avoids"
    swap = "in both positions (survives the swap)" if finding.get("survives_swap") else "not in both positions"
    return (
        f"{cell} {direction} the response changed by {finding['group']}: its probability of choosing it shifts by "
        f"{finding['value']:+.2f} against the clean verdicts ({interval}), {swap}."
    )
