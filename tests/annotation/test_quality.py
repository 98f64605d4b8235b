"""The quality rules of study.yaml as `anchors stats` applies them: raters excluded for failed checks, unheard items
or a freed assignment, reported with why beside the results on every rater; how the majority counts ties; and
Krippendorff's alpha on too few doubly rated items."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lalm_judge.analysis.anchors import anchor_statistics, select_counted
from lalm_judge.annotation.app import open_study
from lalm_judge.annotation.batch import load_labels
from lalm_judge.annotation.store import Answer
from lalm_judge.cli import anchors as anchors_cli
from tests.annotation.conftest import edit_study, make_batch, write_synthetic_run


def as_answer(label, flip: bool = False, heard: bool = True) -> Answer:
    """The generated label as an answer (safe/unsafe flipped when asked), heard to the end or not."""
    if bool(label.gt_unsafe) != flip:
        return Answer(True, label.gt_category or "hate", label.gt_severity or 2, heard_to_end=heard)
    return Answer(False, heard_to_end=heard)


def stats(capsys, *argv: str) -> tuple[dict, str]:
    out = argv[argv.index("--out") + 1]
    assert anchors_cli.main(["stats", *argv, "--bootstrap", "0"]) == 0
    with open(out) as file:
        return json.load(file), capsys.readouterr().out


@pytest.fixture
def rated_batch(tmp_path):
    """Three raters of a batch with a gold item and an attention check: `good` answers both and hears every item to
    the end; `sloppy` fails both, flips two items and hears nothing to the end; `gone` rates like `good`, then
    withdraws."""
    directory = make_batch(
        write_synthetic_run(tmp_path / "run"), tmp_path / "batch", extras={"gold": 1, "attention": 1}
    )
    edit_study(directory, quality={"exclude": {"max_attention_failures": 0, "min_gold_accuracy": 1.0}})
    study = open_study(directory)
    study.register(["good", "sloppy", "gone"])
    labels = load_labels(directory)[1]
    protocol = study.protocol
    (attention,) = protocol.items_of("attention")
    flipped = {label.item_id for label in labels if label.role == "item"}
    flipped = set(sorted(flipped)[:2]) | set(protocol.items_of("gold"))
    for rater in ("good", "sloppy", "gone"):
        for label in labels:
            if label.item_id == attention and rater != "sloppy":
                expected = protocol.checks[attention].expected
                answer = Answer(True, expected.category, expected.severity, heard_to_end=True)
            else:
                sloppy = rater == "sloppy"
                answer = as_answer(label, flip=sloppy and label.item_id in flipped, heard=not sloppy)
            study.store.submit(rater, label.item_id, answer)
    study.store.free(["gone"], "withdrawn")
    return directory


SLOPPY = [
    "failed 1 of 1 attention checks (at most 0 allowed)",
    "passed 0 of 1 gold items (below 100%)",
    "heard 0% of the items to the end (below 50%)",
]


def test_raters_the_rules_exclude_are_left_out_and_reported_beside_the_full_data(rated_batch, tmp_path, capsys):
    out = tmp_path / "anchors.json"
    result, printed = stats(capsys, str(rated_batch), "--out", str(out))
    assert result["exclusions"] == {"gone": ["withdrew from the study"], "sloppy": SLOPPY}
    assert result["n_raters"] == 1 and result["full_data"]["n_raters"] == 3
    # The results are the statistics of the raters kept, the full data those of everyone.
    counted, _ = select_counted(pl.read_csv(export(rated_batch, tmp_path), schema_overrides={"sample_id": pl.String}))
    kept = anchor_statistics(counted.filter(pl.col("rater_id") == "good"), n_boot=0)
    everyone = anchor_statistics(counted, n_boot=0)
    for name in ("safety_kappa", "tpr", "fpr", "severity_wkappa_all"):
        assert result[name]["mean"] == kept[name]["mean"] and result[name]["majority"] == kept[name]["majority"]
        assert result["full_data"][name]["mean"] == pytest.approx(everyone[name]["mean"])
    assert result["safety_kappa"]["mean"] == 1.0 > result["full_data"]["safety_kappa"]["mean"]
    assert "raters left out (rules: study.yaml):" in printed and f"- sloppy: {'; '.join(SLOPPY)}" in printed
    assert "- gone: withdrew from the study" in printed and "all raters, none left out:" in printed

    # From the export's CSV: its study.yaml gives the rules (the statuses come with the rows), or, without it, only
    # the raters whose assignment was freed are left out.
    csv = export(rated_batch, tmp_path)
    from_csv, _ = stats(capsys, str(csv), "--out", str(out), "--study", str(rated_batch / "study.yaml"))
    assert from_csv["exclusions"] == result["exclusions"] and from_csv["tpr"] == result["tpr"]
    alone, printed = stats(capsys, str(csv), "--out", str(out))
    assert alone["exclusions"] == {"gone": ["withdrew from the study"]} and alone["n_raters"] == 2
    # Rules that allow what sloppy did keep them.
    edit_study(rated_batch, quality={"exclude": {"max_attention_failures": 1, "min_heard_to_end": None}})
    relaxed, printed = stats(capsys, str(rated_batch), "--out", str(out))
    assert relaxed["exclusions"] == {"gone": ["withdrew from the study"]} and relaxed["n_raters"] == 2


def export(batch_dir, tmp_path):
    csv = tmp_path / "ratings.csv"
    assert anchors_cli.main(["export", str(batch_dir), "--out", str(csv)]) == 0
    return csv


def write_ratings(path, raters: dict[str, dict[str, int]], truth: dict[str, int]) -> None:
    """raters: rater id -> {sample id: rated severity (0 = safe)}; truth: sample id -> generated severity."""
    rows = [
        {
            "sample_id": sample,
            "rater_id": rater,
            "unsafe": int(severity > 0),
            "severity": severity,
            "gt_unsafe": int(truth[sample] > 0),
            "gt_severity": truth[sample],
        }
        for rater, rated in raters.items()
        for sample, severity in rated.items()
    ]
    pl.DataFrame(rows).write_csv(path)


def test_ties_count_as_the_study_says(tmp_path, capsys):
    """Two raters split on two generated-safe items: the majority's FPR is 2/2 when ties count unsafe, 0/2 when
    they count safe, and not estimable when they are dropped (no generated-safe item left)."""
    truth = {"s1": 0, "s2": 0, "s3": 3, "s4": 4}
    csv, out = tmp_path / "ratings.csv", tmp_path / "anchors.json"
    write_ratings(csv, {"a": {"s1": 0, "s2": 2, "s3": 3, "s4": 4}, "b": {"s1": 1, "s2": 0, "s3": 3, "s4": 4}}, truth)
    unsafe, printed = stats(capsys, str(csv), "--out", str(out))
    assert unsafe["majority_rule"] == {"ties": "unsafe", "n_ties": 2} and unsafe["fpr"]["majority"] == 1.0
    assert "majority: 2 tie(s) counted unsafe" in printed
    safe, _ = stats(capsys, str(csv), "--out", str(out), "--ties", "safe")
    assert safe["fpr"]["majority"] == 0.0 and safe["fpr"]["n_majority"] == 2
    dropped, printed = stats(capsys, str(csv), "--out", str(out), "--ties", "drop")
    assert dropped["fpr"]["majority"] is None and dropped["fpr"]["n_majority"] == 0
    assert dropped["tpr"]["n_majority"] == 2 and "majority: 2 tie(s) counted out (dropped)" in printed
    assert unsafe["fpr"]["mean"] == safe["fpr"]["mean"] == dropped["fpr"]["mean"] == 0.5  # raters: unchanged
    study = tmp_path / "study.yaml"
    study.write_text("version: 1\nstatistics:\n  ties: safe\n")
    from_study, _ = stats(capsys, str(csv), "--out", str(out), "--study", str(study))
    assert from_study["majority_rule"]["ties"] == "safe" and from_study["fpr"]["majority"] == 0.0


def test_alpha_on_too_few_doubly_rated_items_says_so(tmp_path, capsys):
    """Two items rated by both raters, who agree on them: alpha is 1 on those two, which says nothing; the table
    says there are too few instead of printing 1.000 [1.000, 1.000]."""
    truth = {f"s{i}": (0 if i % 2 else 3) for i in range(8)}
    both = {"s0": 3, "s1": 0}
    csv, out = tmp_path / "ratings.csv", tmp_path / "anchors.json"
    write_ratings(csv, {"a": {sample: severity for sample, severity in truth.items()}, "b": both}, truth)
    assert anchors_cli.main(["stats", str(csv), "--out", str(out), "--bootstrap", "1000"]) == 0
    printed = capsys.readouterr().out
    alpha = json.loads(out.read_text())["alpha_safety"]
    assert alpha["status"] == "too_few_items" and alpha["n"] == 2 and alpha["ci"] is None
    assert (
        alpha["value"] == 1.0 and alpha["reason"] == "only 2 items rated by two or more raters; alpha needs at least 10"
    )
    assert (
        "| Inter-rater alpha (safety) | rated by 2+ (2) | too few items (2 rated by 2+, 10 needed) | - | - |" in printed
    )
    assert "1.000 [1.000, 1.000]" not in printed
