"""Several sampled answers per request: the majority verdict and sample agreement by hand, truncated samples that
do not vote, SageLM's per-seed metrics and their mean, and the judge stage recording every sample of a sampled tiny
random-weight Qwen2-Audio (three seeds) in its prediction rows."""

import json

import polars as pl
import pytest
import torch

from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.backends.hf import TransformersBackend
from lalm_judge.pairwise.judge import judge_items, pairwise_cell
from lalm_judge.pairwise.metrics import PairwiseMetricsError, PairwiseMetricSettings, compute_pairwise_metrics
from lalm_judge.pairwise.parsing import parse_swapped_verdict, parse_verdict
from lalm_judge.pairwise.samples import majority_verdict, sample_columns
from tests.pairwise.test_judge import items  # noqa: F401  (the fixture)

torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        (["1", "1", "2"], ("1", 2 / 3)),
        (["Tie", "Tie", "Tie"], ("Tie", 1.0)),
        (["1", "2", "Tie"], ("Tie", 1 / 3)),  # all different: the signed votes sum to 0
        (["1", "Tie"], ("1", 0.5)),  # a tie in counts between 1 and Tie: +1
        (["2", "2", "1", "1"], ("Tie", 0.5)),
        (["1", None, None], ("1", 1 / 3)),  # unreadable samples do not vote but count in the share
        ([None, None], (None, 0.0)),
        ([], (None, None)),
    ],
)
def test_majority_verdict_and_sample_agreement_by_hand(verdicts, expected):
    assert majority_verdict(verdicts) == expected


def test_sample_columns_map_the_swapped_samples_back():
    forward = [{"seed": 1, "text": "1\nfirst"}, {"seed": 2, "text": "2"}, {"seed": 3, "text": "1"}]
    swapped = [{"seed": 1, "text": "2"}, {"seed": 2, "text": "2"}, {"seed": 3, "text": "Tie"}]  # 2 names response 1
    columns = sample_columns(forward, swapped)
    assert columns["n_samples"] == 3
    assert (columns["verdict_majority"], columns["sample_agreement"]) == ("1", pytest.approx(2 / 3))
    assert (columns["verdict_majority_swapped"], columns["sample_agreement_swapped"]) == ("1", pytest.approx(2 / 3))
    assert [s["verdict_swapped"] for s in json.loads(columns["samples"])] == ["1", "1", "Tie"]
    assert sample_columns([], []) == {"n_samples": 1, "samples": None}


def test_truncated_samples_do_not_vote_and_all_truncated_gives_no_majority():
    """The first sample's answer is the request's, so it has the request's finish reason unless it records its own;
    a cut answer whose verdict line is complete keeps its verdict (parsing's rule)."""
    forward = [
        {"seed": 1, "text": "2"},  # the request was cut: no verdict
        {"seed": 2, "text": "1", "finish_reason": "length"},
        {"seed": 3, "text": "1\nbecause it", "finish_reason": "length"},  # the verdict line ended before the cut
    ]
    swapped = [{"seed": s, "text": "2", "finish_reason": "length"} for s in (1, 2, 3)]
    columns = sample_columns(forward, swapped, "sagelm", finish_reasons=("length", "length"))
    assert [s["verdict"] for s in json.loads(columns["samples"])] == [None, None, "1"]
    assert (columns["verdict_majority"], columns["sample_agreement"]) == ("1", pytest.approx(1 / 3))
    assert (columns["verdict_majority_swapped"], columns["sample_agreement_swapped"]) == (None, 0.0)
    assert [s["finish_reason"] for s in json.loads(columns["samples"])] == ["length", "length", "length"]
    # The same answers finished: every one votes.
    finished = sample_columns([{k: v for k, v in s.items() if k != "finish_reason"} for s in forward], swapped)
    assert (finished["verdict_majority"], finished["sample_agreement"]) == ("1", pytest.approx(2 / 3))


def sampled_row(item, label, answers, reasons=(None, None, None), seeds=(42, 123, 1234), first_reason=None):
    samples = [{"seed": seed, "answer": a, "finish_reason": r} for seed, a, r in zip(seeds, answers, reasons)]
    return {
        "item_id": item,
        "aspect": "helpfulness",
        "label": label,
        "prediction": answers[0],
        "finish_reason": first_reason,
        "n_samples": len(seeds),
        "samples": json.dumps(samples),
    }


def test_per_seed_metrics_their_mean_and_the_majority_over_readable_samples():
    rows = [
        sampled_row("a", "1", ["1", "1", "2"]),
        sampled_row("b", "2", ["2", "Tie", "2"]),
        sampled_row("c", "Tie", ["1", "Tie", "Tie"]),
        # Every sample cut before its verdict: no majority verdict (the first by the row's finish reason).
        sampled_row("d", "1", ["1", "1", "1"], (None, "length", "length"), first_reason="length"),
    ]
    document = compute_pairwise_metrics(pl.DataFrame(rows), PairwiseMetricSettings(n_boot=20, min_items=1))
    got = {name: e["value"] for name, e in document["overall"].items() if isinstance(e, dict) and "value" in e}
    seeds = {seed: (got[f"accuracy_seed_{seed}"], got[f"agreement_seed_{seed}"]) for seed in (42, 123, 1234)}
    assert seeds == {42: (0.5, 2.5 / 4), 123: (0.5, 2.5 / 4), 1234: (0.5, 0.5)}  # a Tie against a win counts 0.5
    assert got["accuracy_seed_mean"] == pytest.approx(0.5) and got["agreement_seed_mean"] == pytest.approx(1.75 / 3)
    assert got["accuracy"] == 0.5  # the first seed's answers, d's cut one unread
    assert got["accuracy_majority"] == pytest.approx(3 / 4) and got["parse_failure_rate_majority"] == 0.25
    assert got["sample_agreement"] == pytest.approx((2 / 3 + 2 / 3 + 2 / 3 + 0) / 4)
    # SageLM averages its aspects; with one aspect the mean is the aspect's value, seed means included.
    assert document["overall"]["accuracy_seed_mean_aspect_mean"]["value"] == pytest.approx(0.5)


def test_one_cell_is_sampled_with_one_list_of_seeds():
    rows = [sampled_row("a", "1", ["1", "1", "2"]), sampled_row("b", "2", ["2", "2"], seeds=(42, 7))]
    with pytest.raises(PairwiseMetricsError, match=r"item 'b' \(helpfulness\) has samples of the seeds \[42, 7\]"):
        compute_pairwise_metrics(pl.DataFrame(rows), PairwiseMetricSettings(n_boot=20))


def test_a_sampled_judge_records_every_sample_and_its_majority(items, qwen2audio_dir):  # noqa: F811
    spec = JudgeSpec(
        name="sampled",
        backend="transformers",
        model=str(qwen2audio_dir),
        modalities=("audio",),
        generation={"max_new_tokens": 6, "temperature": 0.95, "top_p": 0.7, "top_k": 50, "seeds": [42, 123, 1234]},
        options={"device": "cpu"},
    )
    rows = judge_items(items, pairwise_cell(spec, "audio", "none", "sagelm"), TransformersBackend(spec))
    assert len(rows) == items.height
    for row in rows:
        samples = json.loads(row["samples"])
        assert row["n_samples"] == 3 and [s["seed"] for s in samples] == [42, 123, 1234]
        assert row["prediction"] == samples[0]["answer"] and row["prediction_swapped"] == samples[0]["answer_swapped"]
        # The first sample is the request's answer, read with the request's finish reason, as the row's verdict is.
        assert samples[0]["finish_reason"] == row["finish_reason"] and samples[0]["verdict"] == row["verdict"]
        verdicts = [parse_verdict(s["answer"], "sagelm", s["finish_reason"]).label for s in samples]
        assert [s["verdict"] for s in samples] == verdicts
        assert (row["verdict_majority"], row["sample_agreement"]) == majority_verdict(verdicts)
        back = [parse_swapped_verdict(s["answer_swapped"], "sagelm", s["finish_reason_swapped"]).label for s in samples]
        assert row["verdict_majority_swapped"] == majority_verdict(back)[0]
    # The metrics read every sample beside the first seed's answer.
    document = compute_pairwise_metrics(pl.DataFrame(rows), PairwiseMetricSettings(n_boot=50))
    expected = {"accuracy_majority", "sample_agreement", "accuracy_seed_42", "accuracy_seed_1234", "accuracy_seed_mean"}
    assert expected <= set(document["overall"])
