"""Pairwise metrics against hand-computed cases: ties, swaps, parse failures, duration bins, and the
item-level bootstrap (an item's aspects are resampled together)."""

import json

import numpy as np
import polars as pl
import pytest

from lalm_judge.analysis.stats import bootstrap_weights
from lalm_judge.pairwise.metrics import (
    PairwiseMetricsError,
    PairwiseMetricSettings,
    compare_cells,
    compute_pairwise_metrics,
    estimate_cell,
    metrics_rows,
    read_predictions,
    run_pairwise_metrics,
    validate_predictions,
)

# item, aspect, label, forward answer, swapped answer (its "1" is the item's response 2), duration
ROWS = [
    ("a", "helpfulness", "1", "1\nResponse 1 answers.", "2\nThe second one answers.", 5.0),  # consistent, right
    ("a", "truthfulness", "Tie", "1", "1", 5.0),  # position-following: forward 1, swapped 1 -> back 2
    ("b", "helpfulness", "2", "Tie", "Tie", 15.0),  # consistent tie against a win: agreement 0.5
    ("b", "truthfulness", "1", "this answer has no verdict", "2", 15.0),  # forward unparseable
    ("c", "helpfulness", "2", "2", "", None),  # swapped unparseable, duration unknown
    ("c", "truthfulness", "1", "2", "1", None),  # consistent, wrong
]


def predictions(rows=ROWS) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema=["item_id", "aspect", "label", "prediction", "prediction_swapped", "duration_s"], orient="row"
    )


# Three items: the minimum support is lowered to 1 so that their intervals are computed (the default of 10 makes
# them not_estimable: test_values_on_fewer_items_than_the_minimum_are_not_estimable).
SETTINGS = PairwiseMetricSettings(n_boot=400, seed=3, duration_bins=(0.0, 10.0, 20.0), min_items=1)


def values(record):
    return {k: v["value"] for k, v in record.items() if isinstance(v, dict) and "value" in v}


def test_hand_computed_metrics_per_aspect_and_overall():
    document = compute_pairwise_metrics(predictions(), SETTINGS)
    assert set(document) == {"aspects", "overall", "splits", "by_duration", "settings"}
    helpfulness = values(document["aspects"]["helpfulness"])
    assert helpfulness == pytest.approx(
        {
            "accuracy": 2 / 3,
            "agreement": 2.5 / 3,
            "parse_failure_rate": 0.0,
            "swap_consistency": 2 / 3,
            "accuracy_combined": 1 / 3,  # a: 1; b: Tie vs 2; c: the swapped order failed
            "agreement_combined": 0.5,
            "parse_failure_rate_swapped": 1 / 3,
            "rationale_contradiction": 0.0,  # no rationale argues for a verdict (see test_rationale_consistency)
            "rationale_determined": 0.0,
            "rationale_contradiction_rate": None,
        }
    )
    truthfulness = values(document["aspects"]["truthfulness"])
    assert truthfulness == pytest.approx(
        {
            "accuracy": 0.0,
            "agreement": 0.5 / 3,  # 1 against Tie
            "parse_failure_rate": 1 / 3,
            "swap_consistency": 1 / 3,
            "accuracy_combined": 1 / 3,  # opposite wins combine to Tie, which is right for item a
            "agreement_combined": 1 / 3,
            "parse_failure_rate_swapped": 0.0,
            "rationale_contradiction": 0.0,  # no rationale argues for a verdict (see test_rationale_consistency)
            "rationale_determined": 0.0,
            "rationale_contradiction_rate": None,
        }
    )
    overall = document["overall"]
    assert values(overall) == pytest.approx(
        {
            "accuracy": 2 / 6,
            "agreement": 3 / 6,
            "parse_failure_rate": 1 / 6,
            "swap_consistency": 3 / 6,
            "accuracy_combined": 2 / 6,
            "agreement_combined": 2.5 / 6,
            "parse_failure_rate_swapped": 1 / 6,
            "accuracy_aspect_mean": (2 / 3 + 0) / 2,
            "agreement_aspect_mean": (2.5 / 3 + 0.5 / 3) / 2,
            "rationale_contradiction": 0.0,  # no rationale argues for a verdict (see test_rationale_consistency)
            "rationale_determined": 0.0,
            "rationale_contradiction_rate": None,
        }
    )
    assert overall["n"] == 6 and overall["n_items"] == 3
    assert overall["n_unparseable"] == 1 and overall["n_unparseable_swapped"] == 1
    assert overall["predictions"] == {"1": 2, "2": 2, "Tie": 1, "unparseable": 1}


def test_duration_bins_hold_whole_items_and_unknown_durations_are_their_own_bin():
    bins = {entry["bin"]: entry for entry in compute_pairwise_metrics(predictions(), SETTINGS)["by_duration"]}
    assert list(bins) == ["0-10", "10-20", ">=20", "unknown"]
    assert bins["0-10"]["n"] == 2 and bins["0-10"]["accuracy"]["value"] == 0.5
    assert bins["10-20"]["n_items"] == 1 and bins["10-20"]["agreement"]["value"] == pytest.approx(0.25)
    assert bins[">=20"]["n"] == 0 and bins[">=20"]["accuracy"]["value"] is None
    assert bins["unknown"]["n"] == 2 and (bins["0-10"]["low_s"], bins["0-10"]["high_s"]) == (0.0, 10.0)


def test_bootstrap_resamples_items_with_all_their_aspects():
    """The overall accuracy of every resample equals the one computed by hand from the item count matrix."""
    cell = estimate_cell(validate_predictions(predictions()), SETTINGS)
    weights = bootstrap_weights(3, SETTINGS.n_boot, SETTINGS.seed)  # items a, b, c (sorted)
    correct = np.array([1, 0, 1])  # per item: forward answers right, over both aspects
    expected = weights @ correct / (weights @ np.array([2, 2, 2]))
    column = cell.names.index("accuracy")
    np.testing.assert_allclose(cell.overall.boot[:, column], expected)
    interval = compute_pairwise_metrics(predictions(), SETTINGS)["overall"]["accuracy"]
    assert interval["ci_low"] <= interval["value"] <= interval["ci_high"]
    assert interval == compute_pairwise_metrics(predictions(), SETTINGS)["overall"]["accuracy"]  # seeded


def test_without_swapped_answers_only_single_order_metrics():
    document = compute_pairwise_metrics(predictions().drop("prediction_swapped", "duration_s"), SETTINGS)
    assert set(values(document["overall"])) == {
        "accuracy",
        "agreement",
        "parse_failure_rate",
        "rationale_contradiction",
        "rationale_determined",
        "rationale_contradiction_rate",
        "accuracy_aspect_mean",
        "agreement_aspect_mean",
    }
    assert document["by_duration"] == []


def test_rationale_consistency_counts_rationales_that_argue_against_their_verdict():
    rows = [
        ("a", "helpfulness", "1", "1\nResponse 1 is more helpful than Response 2.", None),  # consistent
        ("b", "helpfulness", "2", "1\nResponse 2 is clearly better.", None),  # contradicts its own verdict 1
        ("c", "helpfulness", "2", "Tie\nResponse 1 wins.", None),  # contradicts Tie
        ("d", "helpfulness", "1", "2\nIt uses a calm voice.", None),  # undetermined
        ("e", "helpfulness", "1", "no verdict here", None),  # unreadable: no verdict to contradict
    ]
    frame = pl.DataFrame(rows, schema=["item_id", "aspect", "label", "prediction", "duration_s"], orient="row")
    overall = values(compute_pairwise_metrics(frame.drop("duration_s"), SETTINGS)["overall"])
    assert overall["rationale_contradiction"] == pytest.approx(2 / 5)
    assert overall["rationale_determined"] == pytest.approx(3 / 5)
    assert overall["rationale_contradiction_rate"] == pytest.approx(2 / 3)


def test_jsonl_input_with_numeric_labels_through_the_file_api(tmp_path):
    path = tmp_path / "predictions.jsonl"
    lines = [
        {"item_id": "x", "aspect": "honesty", "label": 1, "prediction": "1"},
        {"item_id": "y", "aspect": "honesty", "label": "tie", "prediction": "2\nbecause"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "m.json"
    run_pairwise_metrics(path, out, SETTINGS)
    document = json.loads(out.read_text())
    assert document["overall"]["accuracy"]["value"] == 0.5
    assert document["overall"]["agreement"]["value"] == 0.75
    assert read_predictions(path).height == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.drop("label"), "lacks required column"),
        (lambda f: f.with_columns(label=pl.lit("3")), "row 0 .* is not 1, 2 or Tie"),
        (lambda f: pl.concat([f, f.head(1)]), "item 'a' has aspect 'helpfulness' 2 times"),
        (lambda f: f.with_columns(judge=pl.Series(["j1", "j2"] * 3)), "2 judge cells"),
    ],
)
def test_bad_inputs_are_rejected_naming_the_problem(change, message):
    with pytest.raises(PairwiseMetricsError, match=message):
        compute_pairwise_metrics(change(predictions()), SETTINGS)


def test_settings_are_checked():
    with pytest.raises(PairwiseMetricsError, match="starting at 0"):
        PairwiseMetricSettings(duration_bins=(5.0, 10.0))
    with pytest.raises(PairwiseMetricsError, match=">= 1"):
        PairwiseMetricSettings(n_boot=0)


def test_long_rows_and_paired_comparison_of_cells_on_the_same_items():
    frame = validate_predictions(predictions())
    better = validate_predictions(predictions().with_columns(prediction=pl.col("label")))
    a, b = estimate_cell(better, SETTINGS), estimate_cell(frame, SETTINGS)
    difference = compare_cells(a, b, "accuracy")
    assert difference["value"] == pytest.approx(1 - 2 / 6)
    assert difference["ci_low"] <= difference["value"] <= difference["ci_high"]
    keys = {"judge": "j", "modality": "audio", "transcript_source": "none", "prompt": "sagelm"}
    rows = pl.DataFrame(metrics_rows(b, keys))
    assert set(rows["mode"]) == {"audio_native"}
    assert set(rows["scope"]) == {"aspect", "overall", "duration", "dimension"}  # helpfulness, truthfulness: semantic
    overall = rows.filter((pl.col("group") == "all") & (pl.col("metric") == "agreement"))
    assert overall["value"].item() == pytest.approx(0.5)
    assert rows.filter(pl.col("group") == "aspect_mean").height == 2
    other_items = estimate_cell(validate_predictions(predictions().filter(pl.col("item_id") != "c")), SETTINGS)
    assert compare_cells(a, other_items, "accuracy") is None


# SageLM-layout rows: item, aspect, task format, label, forward answer (style follows from the aspect)
SPLIT_ROWS = [
    ("s1", "helpfulness", None, "1", "1"),  # right
    ("s1", "truthfulness", None, "2", "Tie"),  # agreement 0.5
    ("s2", "helpfulness", None, "Tie", "2"),  # agreement 0.5
    ("g1", "gender", "explicit_tts", "1", "1"),  # right
    ("g2", "gender", "explicit_dialogue", "2", "1"),  # opposite: 0
    ("e1", "emotion", "explicit_tts", "2", "2"),  # right
    ("e2", "emotion", "explicit_dialogue", "1", "Tie"),  # 0.5
    ("i1", "implicit_emotion", "implicit", "1", "1"),  # right
    ("i2", "implicit_emotion", "implicit", "2", "nothing readable"),  # unreadable: 0
    ("c1", "character", "explicit_dialogue", "Tie", "Tie"),  # right
    ("m1", "gender_emotion", "explicit_tts", "1", "2"),  # opposite: 0
]


def split_predictions() -> pl.DataFrame:
    frame = pl.DataFrame(SPLIT_ROWS, schema=["item_id", "aspect", "task_format", "label", "prediction"], orient="row")
    styles = {"gender": "gender", "emotion": "emotion", "implicit_emotion": "emotion", "character": "character"}
    return frame.with_columns(
        style=pl.col("aspect").replace_strict({**styles, "gender_emotion": "mixed"}, default=None)
    )


def test_sagelm_splits_by_dimension_task_format_and_style_against_a_hand_count():
    document = compute_pairwise_metrics(split_predictions(), SETTINGS)
    splits = document["splits"]
    accuracy = {scope: {g: r["accuracy"]["value"] for g, r in groups.items()} for scope, groups in splits.items()}
    agreement = {scope: {g: r["agreement"]["value"] for g, r in groups.items()} for scope, groups in splits.items()}
    assert accuracy["dimension"] == pytest.approx({"semantic": 1 / 3, "acoustic": 4 / 8})
    assert agreement["dimension"] == pytest.approx({"semantic": 2 / 3, "acoustic": 4.5 / 8})
    # by task format: TTS g1 e1 m1, dialogue g2 e2 c1, implicit i1 i2
    assert accuracy["task_format"] == pytest.approx(
        {"explicit_tts": 2 / 3, "explicit_dialogue": 1 / 3, "implicit": 0.5}
    )
    assert agreement["task_format"] == pytest.approx(
        {"explicit_tts": 2 / 3, "explicit_dialogue": 1.5 / 3, "implicit": 0.5}
    )
    # by style: implicit emotion is an emotion style; gender_emotion is the mixed control
    assert accuracy["style"] == pytest.approx({"emotion": 2 / 4, "gender": 0.5, "character": 1.0, "mixed": 0.0})
    assert splits["style"]["emotion"]["n"] == 4 and splits["style"]["emotion"]["n_items"] == 4
    assert accuracy["style_format"] == pytest.approx(
        {
            "emotion/explicit_tts": 1.0,
            "emotion/explicit_dialogue": 0.0,
            "emotion/implicit": 0.5,
            "gender/explicit_tts": 1.0,
            "gender/explicit_dialogue": 0.0,
            "character/explicit_dialogue": 1.0,
            "mixed/explicit_tts": 0.0,
        }
    )
    # SageLM averages its aspects: semantic (helpfulness 1/2, truthfulness 0), acoustic five aspects
    semantic, acoustic = splits["dimension"]["semantic"], splits["dimension"]["acoustic"]
    assert semantic["accuracy_aspect_mean"]["value"] == pytest.approx((0.5 + 0.0) / 2)
    acoustic_aspects = {"gender": 0.5, "emotion": 0.5, "implicit_emotion": 0.5, "character": 1.0, "gender_emotion": 0}
    assert acoustic["accuracy_aspect_mean"]["value"] == pytest.approx(sum(acoustic_aspects.values()) / 5)
    for record in (semantic, acoustic):
        interval = record["accuracy"]
        assert interval["ci_low"] <= interval["value"] <= interval["ci_high"]
    # The long rows carry the same groups, and a table without the columns still splits by aspect.
    rows = metrics_rows(estimate_cell(validate_predictions(split_predictions()), SETTINGS), {})
    found = {(r["scope"], r["group"]) for r in rows if r["metric"] == "accuracy"}
    assert {("dimension", "acoustic"), ("dimension", "acoustic_aspect_mean"), ("task_format", "implicit")} <= found
    bare = compute_pairwise_metrics(split_predictions().drop("task_format", "style"), SETTINGS)["splits"]
    assert set(bare["task_format"]) == {"implicit"}
    assert set(bare["style"]) == {"emotion", "gender", "character", "mixed"}


def test_a_judge_that_picks_the_longer_response_is_no_finding_however_far_above_chance():
    """Labels follow length on 24 of 30 items; a judge answering 'the longer one' is right exactly where the length
    baseline is: far above chance, no better than the baseline on the same rows, so no finding. A judge right
    everywhere beats both."""
    from lalm_judge.pairwise.metrics import accuracy_findings, longer_response

    assert [longer_response(*d) for d in ((3.0, 1.0), (1.0, 3.0), (2.0, 2.0), (None, 1.0))] == ["1", "2", "Tie", None]
    rows = []
    for item in range(30):
        first, second = (5.0, 2.0) if item % 2 else (2.0, 5.0)
        longer = longer_response(first, second)
        label = longer if item < 24 else ("2" if longer == "1" else "1")
        rows.append((f"i{item:02d}", label, longer, first, second))
    frame = pl.DataFrame(
        rows, schema=["item_id", "label", "longer", "response1_duration_s", "response2_duration_s"], orient="row"
    )
    settings = PairwiseMetricSettings(n_boot=300, seed=0)
    cells = []
    for judge, answers in (("lengthy", pl.col("longer")), ("right", pl.col("label"))):
        table = frame.with_columns(aspect=pl.lit("helpfulness"), prediction=answers).drop("longer")
        keys = {"judge": judge, "modality": "audio", "transcript_source": "none", "prompt": "sagelm"}
        cells.append((keys, estimate_cell(validate_predictions(table), settings)))
    found = {(r["judge"], r["scope"]): r for r in accuracy_findings(cells)}
    lengthy = found[("lengthy", "overall")]
    assert lengthy["accuracy"] == pytest.approx(0.8) and lengthy["ci_low"] > lengthy["chance"]  # above chance
    assert (lengthy["length_baseline"], lengthy["difference"], lengthy["finding"]) == (pytest.approx(0.8), 0.0, False)
    right = found[("right", "overall")]
    assert right["finding"] is True and right["difference"] == pytest.approx(0.2) and right["family_size"] == 6
    values = compute_pairwise_metrics(
        frame.with_columns(aspect=pl.lit("helpfulness"), prediction=pl.col("longer")), settings
    )
    assert values["overall"]["length_baseline_accuracy"]["value"] == pytest.approx(0.8)
