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
- tie_share = mean([a == Tie]) over the rows whose a is readable (a judge with no readable answer has no Tie
  share: it neither abstains nor fails to); on `identical` pairs (one clip as both responses) Tie is the only
  right verdict, and cue preference and flips are not defined.
Intervals: percentile bootstrap over the clean items (an item's aspects and both changed responses travel
together), the seeded resamples of `lalm_judge.analysis.stats.bootstrap_weights`; minimum support as for the
other pairwise metrics (`not_estimable` below `min_items` items, counting the items with a readable answer). The
headline measure (cue_preference; tie_share on `identical`) is tested against its no-effect value (0; 1) with a
two-sided bootstrap p-value (`families.bootstrap_p_value`), and every (cell, condition) of a run is one family,
its p-values adjusted by Holm's step-down (`flag_family`): a cell is flagged on a condition when its adjusted
p-value is at most 1 - level (a family of one: when the 95 % interval excludes the no-effect value).
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
from lalm_judge.pairwise.families import HOLM, TWO_SIDED, adjust, bootstrap_p_value

AUDIT_CELL_KEYS = ("judge", "modality", "transcript_source", "prompt")
CUE_PREFERENCE = "cue_preference"
SHOWN_FIRST, SHOWN_SECOND = "cue_preference_first", "cue_preference_second"
FLIP_RATE = "flip_rate"
TIE_SHARE = "tie_share"
CUE_MEASURES = (CUE_PREFERENCE, SHOWN_FIRST, SHOWN_SECOND, FLIP_RATE, TIE_SHARE)
IDENTICAL_MEASURES = (TIE_SHARE,)
ORDER_COLUMNS = ("verdict", "verdict_swapped")
FLAGS_FAMILY = "pairwise audit flags"
FLAGS_CORRECTION = HOLM


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
    tie = np.nan if a is None else float(a == TIE)
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


def _estimate(
    values: np.ndarray, rows: AuditRows, weights: np.ndarray, settings: AuditSettings, null: float | None = None
) -> dict[str, Any]:
    """Value, interval, status and support of one measure (nan entries left out); with a `null` value, the
    two-sided bootstrap p-value against it (estimable values only)."""
    defined = ~np.isnan(values)
    sums, counts = np.zeros(len(rows.items)), np.zeros(len(rows.items))
    np.add.at(sums, rows.item_index[defined], values[defined])
    np.add.at(counts, rows.item_index[defined], 1.0)
    n_items = int(np.count_nonzero(counts))
    record: dict[str, Any] = {"n": int(defined.sum()), "n_items": n_items, "value": None}
    record.update(ci_low=None, ci_high=None, status=None, p_value=None)
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
    if null is not None:
        record["p_value"] = bootstrap_p_value(boot, null, TWO_SIDED)
    return record


def _excludes(record: Mapping[str, Any], value: float) -> bool:
    return bool(record["status"] == ESTIMATED and not record["ci_low"] <= value <= record["ci_high"])


def _no_effect(condition: str) -> tuple[str, float]:
    """The headline measure of a condition and its no-effect value."""
    return (TIE_SHARE, 1.0) if AuditCondition(condition).kind == IDENTICAL else (CUE_PREFERENCE, 0.0)


def _same_side(record: Mapping[str, Any], sign: float) -> bool:
    return _excludes(record, 0.0) and bool(np.sign(record["value"]) == sign)


def audit_cell_rows(
    audit: pl.DataFrame, clean: pl.DataFrame, keys: Mapping[str, Any], condition: str, settings: AuditSettings
) -> list[dict[str, Any]]:
    """The `core.tables.PAIRWISE_AUDIT` rows of one (cell, condition): every measure, the headline one (cue
    preference, or the Tie share on identical pairs) with its p-value and its flag as a family of one (`audit_table`
    flags a run's cells and conditions as one family) and, for the cue, whether it survives the swap."""
    rows = audit_rows(audit, clean, condition)
    weights = bootstrap_weights(len(rows.items), settings.n_boot, settings.seed)
    headline, null = _no_effect(condition)
    estimates = {
        name: _estimate(values, rows, weights, settings, null if name == headline else None)
        for name, values in rows.values.items()
    }
    base = {**{key: keys[key] for key in AUDIT_CELL_KEYS}, "condition": condition}
    base["mode"] = pairwise_mode(keys["modality"], keys["transcript_source"])
    out = [{**base, "measure": name, **estimate} for name, estimate in estimates.items()]
    return flag_family(out, settings)


def _survives_swap(measures: Mapping[str, Mapping[str, Any]]) -> bool:
    """A cue preference holds with the changed response shown first and shown second: both intervals exclude 0 on
    its side (`measures`: one cell and condition's rows by measure)."""
    sign = float(np.sign(measures[CUE_PREFERENCE]["value"]))
    return _same_side(measures[SHOWN_FIRST], sign) and _same_side(measures[SHOWN_SECOND], sign)


def flag_family(rows: Sequence[Mapping[str, Any]], settings: AuditSettings) -> list[dict[str, Any]]:
    """`rows` (the audit rows of one or more cells and conditions) with the flags of their family: every headline
    row with a p-value is a test, the p-values Holm-adjusted (`p_adjusted`), `flagged` where the adjusted p-value is
    at most 1 - level, `survives_swap` for a cue, and the family's size on every headline row; other measures get
    none of these (null)."""
    out = [{**row, "p_adjusted": None, "flagged": None, "survives_swap": None, "family_size": None} for row in rows]
    by_test: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for row in out:
        by_test.setdefault(tuple(row[k] for k in (*AUDIT_CELL_KEYS, "condition")), {})[row["measure"]] = row
    headlines = [measures[_no_effect(key[-1])[0]] for key, measures in by_test.items()]
    tested = [row for row in headlines if row["p_value"] is not None]
    for row, p in zip(tested, adjust([row["p_value"] for row in tested], FLAGS_CORRECTION)):
        row["p_adjusted"] = float(p)
    for row, measures in zip(headlines, by_test.values()):
        row["flagged"] = row["p_adjusted"] is not None and row["p_adjusted"] <= 1 - settings.level
        row["family_size"] = len(tested)
        if row["measure"] == CUE_PREFERENCE:
            row["survives_swap"] = row["flagged"] and _survives_swap(measures)
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
    return PAIRWISE_AUDIT.frame(flag_family(rows, settings))


def audit_findings(audit: pl.DataFrame) -> list[dict[str, Any]]:
    """Findings rows (`core.tables.PAIRWISE_FINDINGS`, scope 'audit', group = the condition) of every tested
    (cell, condition) of the flags' family; `finding` on the flagged ones."""
    tested = audit.filter(pl.col("p_adjusted").is_not_null())
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
            "p_value": row["p_value"],
            "p_adjusted": row["p_adjusted"],
            "family": FLAGS_FAMILY,
            "family_size": row["family_size"],
            "correction": FLAGS_CORRECTION,
            "finding": row["flagged"],
        }
        for row in tested.iter_rows(named=True)
    ]


def audit_verdict(row: Mapping[str, Any]) -> str | None:
    """The verdict of a headline row of the audit table in words; None for the other measures."""
    if row["flagged"] is None:
        return None
    if row["value"] is None:
        what = "verdict" if row["measure"] == TIE_SHARE else "verdict pairs"
        return f"no readable {what}: every answer truncated or unreadable (not estimable)"
    if not row["flagged"]:
        return "not flagged" if row["status"] == ESTIMATED else "not estimable (too few items)"
    if row["measure"] == TIE_SHARE:
        return "flagged: fails to abstain"
    return "flagged, survives the swap" if row["survives_swap"] else "flagged, in one position only"


def family_text(row: Mapping[str, Any]) -> str:
    """'Holm-adjusted p 0.004 of 12 tests' (the flags' family), or '' for an untested row."""
    if row.get("p_adjusted") is None:
        return ""
    return f"{FLAGS_CORRECTION.capitalize()}-adjusted p {row['p_adjusted']:.3g} of {row['family_size']} tests"


def audit_verdict_line(row: Mapping[str, Any]) -> str:
    """One headline row: cell, condition, measure with its interval, the verdict and its adjusted p-value."""
    interval = (
        "no interval" if row["ci_low"] is None else f"95 % interval {row['ci_low']:+.3f} to {row['ci_high']:+.3f}"
    )
    value = "-" if row["value"] is None else f"{row['value']:+.3f}"
    cell = "/".join(str(row[key]) for key in AUDIT_CELL_KEYS)
    support = f"{interval}, {row['n_items']} items"
    family = family_text(row)
    return f"{cell} {row['condition']}: {row['measure']} {value} ({support}): {audit_verdict(row)}" + (
        f" ({family})" if family else ""
    )


def audit_sentence(finding: Mapping[str, Any]) -> str:
    """One flagged audit finding in words."""
    cell = f"{finding['judge']} ({finding['modality']}, {finding['transcript_source']}, {finding['prompt']} prompt)"
    interval = (
        f"95 % interval {finding['ci_low']:+.2f} to {finding['ci_high']:+.2f}, {finding['n_items']} items; "
        f"{family_text(finding)}"
    )
    if finding["measure"] == TIE_SHARE:
        return (
            f"{cell} answers Tie on only {finding['value']:.0%} of its readable answers on identical pairs (one clip "
            f"as both responses; {interval}): it fails to abstain."
        )
    direction = "prefers" if finding["value"] > 0 else "avoids"
    swap = "in both positions (survives the swap)" if finding.get("survives_swap") else "not in both positions"
    return (
        f"{cell} {direction} the response changed by {finding['group']}: its probability of choosing it shifts by "
        f"{finding['value']:+.2f} against the clean verdicts ({interval}), {swap}."
    )
