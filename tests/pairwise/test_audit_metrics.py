"""The pairwise audit's measures (lalm_judge.pairwise.audit_metrics) against a hand count on a small table, the
flags (cue preference away from 0, Tie share on identical pairs below 1, surviving the swap; Holm across a run's
cells and conditions), a judge without any readable answer (no readable verdict, not "fails to abstain"), and the
metrics stage writing them with the flagged cells among its findings."""

from __future__ import annotations

import polars as pl
import pytest

from lalm_judge.cli.pairwise import main
from lalm_judge.core.tables import PAIRWISE_PREDICTIONS
from lalm_judge.pairwise.audit_metrics import (
    AuditSettings,
    audit_cell_rows,
    audit_verdict,
    audit_verdict_line,
    flag_family,
)
from lalm_judge.pairwise.metrics import (
    PairwiseMetricSettings,
    finding_sentence,
    read_pairwise_stage,
    run_pairwise_stage,
)
from lalm_judge.report.pairwise import build_pairwise_report

KEYS = {"judge": "omni", "modality": "audio", "transcript_source": "none", "prompt": "sagelm"}
HAND = AuditSettings(n_boot=200, seed=0, min_items=1)


def table(verdicts: dict[str, tuple[str | None, str | None]], condition: str | None = None) -> pl.DataFrame:
    """Prediction rows (aspect helpfulness) from item id -> (forward verdict, swapped verdict mapped back)."""
    rows = [
        {**KEYS, "item_id": item, "aspect": "helpfulness", "label": "1", "verdict": f, "verdict_swapped": s}
        for item, (f, s) in verdicts.items()
    ]
    return PAIRWISE_PREDICTIONS.frame(rows).with_columns(audit_condition=pl.lit(condition, pl.String))


CLEAN = table({"i1": ("1", "1"), "i2": ("2", "Tie")})
GAIN = table(
    {
        "i1__changed1": ("1", "1"),  # prefers response 1 as before: shifts 0, 0
        "i1__changed2": ("2", "1"),  # forward now prefers the changed response 2: shift +1, flip; swapped as before
        "i2__changed1": ("1", None),  # forward moves to the changed response 1: +1, flip; swapped unreadable: left out
        "i2__changed2": ("2", "Tie"),  # as before: shifts 0, 0; one Tie
    },
    "gain_6",
)


def measures(rows):
    return {row["measure"]: row for row in rows}


def test_cue_preference_flips_and_ties_against_a_hand_count():
    got = measures(audit_cell_rows(GAIN, CLEAN, KEYS, "gain_6", HAND))
    # Seven readable (row, order) pairs: shifts 0 0 | +1 0 | +1 . | 0 0.
    assert got["cue_preference"]["value"] == pytest.approx(2 / 7)
    assert (got["cue_preference"]["n"], got["cue_preference"]["n_items"]) == (7, 2)
    # Changed response shown first: i1c1 forward, i1c2 swapped, i2c1 forward, i2c2 swapped -> 0, 0, +1, 0.
    assert got["cue_preference_first"]["value"] == pytest.approx(1 / 4)
    # Shown second: i1c1 swapped, i1c2 forward, i2c2 forward (i2c1 swapped unreadable) -> 0, +1, 0.
    assert got["cue_preference_second"]["value"] == pytest.approx(1 / 3)
    assert got["flip_rate"]["value"] == pytest.approx(2 / 7)
    assert got["tie_share"]["value"] == pytest.approx(1 / 7)  # readable answers only
    assert got["tie_share"]["n"] == 7
    assert got["cue_preference"]["status"] == "ok" and got["cue_preference"]["ci_low"] <= 2 / 7
    assert got["flip_rate"]["flagged"] is None  # flags sit on the headline measure only


def test_identical_pairs_measure_the_tie_share_only():
    identical = table(
        {
            "i1__changed1": ("Tie", "Tie"),
            "i1__changed2": ("1", "Tie"),
            "i2__changed1": (None, "Tie"),
            "i2__changed2": ("Tie", "2"),
        },
        "identical",
    )
    got = measures(audit_cell_rows(identical, CLEAN, KEYS, "identical", HAND))
    assert set(got) == {"tie_share"}
    assert got["tie_share"]["value"] == pytest.approx(5 / 7)  # of the seven readable answers
    # No resample reaches 1 (each item has a non-Tie): p = 2 / 201, a family of one.
    assert got["tie_share"]["p_value"] == pytest.approx(2 / 201) == got["tie_share"]["p_adjusted"]
    assert got["tie_share"]["flagged"] is True and audit_verdict(got["tie_share"]) == "flagged: fails to abstain"
    always_tie = table({f"i{i}__changed{s}": ("Tie", "Tie") for i in (1, 2) for s in (1, 2)}, "identical")
    assert measures(audit_cell_rows(always_tie, CLEAN, KEYS, "identical", HAND))["tie_share"]["flagged"] is False


def test_a_judge_without_a_readable_answer_has_no_readable_verdict_not_a_failure_to_abstain():
    truncated = table({f"i{i}__changed{s}": (None, None) for i in (1, 2) for s in (1, 2)}, "identical")
    (row,) = audit_cell_rows(truncated, CLEAN, KEYS, "identical", HAND)
    assert (row["value"], row["n"], row["flagged"], row["p_value"]) == (None, 0, False, None)
    assert audit_verdict(row) == "no readable verdict: every answer truncated or unreadable (not estimable)"
    assert "fails to abstain" not in audit_verdict_line(row)


def test_the_flags_of_a_run_are_one_family_under_holm():
    """Two conditions of one cell, each a clear cue effect alone: Holm doubles the smaller p-value."""
    clean, pad = many(lambda side: (str(side), str(side)))
    _, louder = many(lambda side: ("1", "Tie") if side == 1 else ("Tie", "2"))
    settings = AuditSettings(n_boot=200, min_items=10)
    rows = audit_cell_rows(pad, clean, KEYS, "pad_1", settings)
    rows += audit_cell_rows(louder.with_columns(audit_condition=pl.lit("gain_6")), clean, KEYS, "gain_6", settings)
    family = [row for row in flag_family(rows, settings) if row["flagged"] is not None]
    assert [(r["condition"], r["family_size"]) for r in family] == [("pad_1", 2), ("gain_6", 2)]
    assert [r["p_value"] for r in family] == pytest.approx([2 / 201, 2 / 201])
    assert [r["p_adjusted"] for r in family] == pytest.approx([4 / 201, 4 / 201])
    assert all(r["flagged"] for r in family)
    # Below the minimum support a cell is untested: no p-value, not in the family.
    other = {**KEYS, "judge": "other"}
    small = audit_cell_rows(GAIN, CLEAN, other, "gain_6", AuditSettings(n_boot=50, min_items=10))
    assert [r["family_size"] for r in flag_family(rows + small, settings) if r["flagged"] is not None] == [2, 2, 2]


def many(verdict_of, n_items=12) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Clean Tie on every item; the audit verdicts from verdict_of(changed side) -> (forward, swapped)."""
    clean = table({f"i{i}": ("Tie", "Tie") for i in range(n_items)})
    audit = table({f"i{i}__changed{s}": verdict_of(s) for i in range(n_items) for s in (1, 2)}, "pad_1")
    return clean, audit


def test_a_judge_drawn_to_the_cue_in_both_positions_is_flagged_and_survives_the_swap():
    clean, audit = many(lambda side: (str(side), str(side)))
    got = measures(audit_cell_rows(audit, clean, KEYS, "pad_1", AuditSettings(n_boot=200, min_items=10)))
    assert got["cue_preference"]["value"] == 1.0 and got["cue_preference"]["flagged"] is True
    assert got["cue_preference"]["survives_swap"] is True


def test_position_bias_alone_is_no_cue_preference_and_a_first_position_effect_does_not_survive_the_swap():
    # Always the response shown first, in the clean and the audit pairs: no shift.
    clean = table({f"i{i}": ("1", "2") for i in range(12)})
    audit = table({f"i{i}__changed{s}": ("1", "2") for i in range(12) for s in (1, 2)}, "pad_1")
    got = measures(audit_cell_rows(audit, clean, KEYS, "pad_1", AuditSettings(n_boot=200)))
    assert got["cue_preference"]["value"] == 0.0 and got["cue_preference"]["flagged"] is False
    # The changed response chosen only when it is shown first (forward for side 1, swapped for side 2).
    clean, audit = many(lambda side: ("1", "Tie") if side == 1 else ("Tie", "2"))
    got = measures(audit_cell_rows(audit, clean, KEYS, "pad_1", AuditSettings(n_boot=200)))
    assert got["cue_preference"]["value"] == 0.5 and got["cue_preference"]["flagged"] is True
    assert got["cue_preference_first"]["value"] == 1.0 and got["cue_preference_second"]["value"] == 0.0
    assert got["cue_preference"]["survives_swap"] is False


def test_below_the_minimum_support_there_is_no_interval_and_no_flag():
    got = measures(audit_cell_rows(GAIN, CLEAN, KEYS, "gain_6", AuditSettings(n_boot=50, min_items=10)))
    assert got["cue_preference"]["status"] == "not_estimable" and got["cue_preference"]["ci_low"] is None
    assert got["cue_preference"]["flagged"] is False


def test_the_metrics_stage_writes_the_audit_and_notes_flagged_cells_among_its_findings(tmp_path, capsys):
    clean, audit = many(lambda side: (str(side), str(side)))
    paths = []
    for name, frame in (("clean", clean), ("audit", audit)):
        paths.append(tmp_path / f"{name}.parquet")
        frame.with_columns(prediction=pl.col("verdict"), prediction_swapped=pl.col("verdict_swapped")).write_parquet(
            paths[-1]
        )
    settings = PairwiseMetricSettings(n_boot=100, seed=0, min_items=10)
    run_pairwise_stage([paths[0]], tmp_path / "metrics", settings, audit_paths=[paths[1]])
    stage = read_pairwise_stage(tmp_path / "metrics")
    assert set(stage.audit["measure"]) == {
        "cue_preference",
        "cue_preference_first",
        "cue_preference_second",
        "flip_rate",
        "tie_share",
    }
    (finding,) = stage.findings.filter(pl.col("scope") == "audit").iter_rows(named=True)
    assert (finding["group"], finding["measure"], finding["value"]) == ("pad_1", "cue_preference", 1.0)
    assert (finding["finding"], finding["family"], finding["family_size"]) == (True, "pairwise audit flags", 1)
    assert finding["correction"] == "holm" and finding["p_adjusted"] == pytest.approx(2 / 101)
    (headline,) = stage.audit.filter(pl.col("flagged").is_not_null()).iter_rows(named=True)
    assert audit_verdict_line(headline) == (
        "omni/audio/none/sagelm pad_1: cue_preference +1.000 (95 % interval +1.000 to +1.000, 12 items): "
        "flagged, survives the swap (Holm-adjusted p 0.0198 of 1 tests)"
    )
    # `lalm-judge pairwise findings` states each family, then the claims, then every audit verdict.
    assert main(["findings", str(tmp_path / "metrics")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        "Family: pairwise findings: 3 hypotheses tested, false-discovery rate controlled by Benjamini-Hochberg; "
        "0 claimed.",
        "Family: pairwise audit flags: 1 hypotheses tested, family-wise error rate controlled by Holm's step-down; "
        "1 claimed.",
    ]
    assert lines[2].startswith("Finding: omni (audio, none, sagelm prompt) prefers the response changed by pad_1")
    assert lines[3] == f"Audit: {audit_verdict_line(headline)}"
    sentence = finding_sentence(finding)
    assert sentence.startswith("omni (audio, none, sagelm prompt) prefers the response changed by pad_1")
    assert "survives the swap" in sentence
    summary = tmp_path / "items_summary.json"
    summary.write_text('{"format": "jsonl", "files": ["items.jsonl"], "n_items_judged": 12, "n_rows": 12}')
    index = build_pairwise_report(
        metrics_dir=tmp_path / "metrics", items_summary_path=summary, config={}, out_dir=tmp_path / "report"
    )
    page = index.read_text()
    assert "<h2>Surface-cue audit</h2>" in page and "flagged, survives the swap" in page
    assert (tmp_path / "report" / "figures" / "audit_cue_preference.png").exists()
