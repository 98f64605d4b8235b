"""The pairwise verdict parser on answers of the shapes judges give, the swap and the combination rule."""

import pytest

from lalm_judge.core.vocabulary import ParseStatus
from lalm_judge.pairwise.parsing import (
    ParsedVerdict,
    agreement,
    combine_verdicts,
    normalize_label,
    parse_swapped_verdict,
    parse_verdict,
    swap_verdict,
)

OK = ParseStatus.OK
WHOLE = object()  # the rationale is the whole answer (a verdict found in a labelled statement)


@pytest.mark.parametrize(
    ("answer", "label", "rationale"),
    [
        # SageLM's own output layout: label line, then the rationale.
        (
            "1\nResponse 1 is more helpful as it answers the question.",
            "1",
            "Response 1 is more helpful as it answers the question.",
        ),
        ("Tie\nBoth responses give the same facts.", "Tie", "Both responses give the same facts."),
        ("2", "2", None),
        ("tie", "Tie", None),
        ("  **2**\n\nResponse 2 follows the instruction.", "2", "Response 2 follows the instruction."),
        ("[[1]]", "1", None),
        ("Verdict: Response 1 - it states the boiling point correctly.", "1", "it states the boiling point correctly."),
        ("Answer: Tie.", "Tie", None),
        ("Better response: 2\nIt is shorter.", "2", "It is shorter."),
        ("1. Response 1 is correct.", "1", "Response 1 is correct."),
        # Thinking aloud before a labelled conclusion: the last labelled statement decides.
        (
            "Response 1 sounds calm. Response 2 sounds angry, as asked.\nVerdict: 1\nOn reflection, final verdict: 2",
            "2",
            WHOLE,
        ),
        ("Both are fine, but the answer is: Response 2", "2", WHOLE),
    ],
)
def test_verdicts_are_read_by_the_lenient_rule(answer, label, rationale):
    parsed = parse_verdict(answer, "lenient")
    assert parsed.status == OK and parsed.label == label
    assert parsed.rationale == (answer.strip() if rationale is WHOLE else rationale)


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ("", ParseStatus.MISSING),
        ("   \n ", ParseStatus.MISSING),
        (None, ParseStatus.MISSING),
        # Free prose comparisons are not read: they are too often half of an argument.
        ("Response 1 is better in tone, but Response 2 is better overall.", ParseStatus.MISSING),
        ("1.5 seconds of silence", ParseStatus.MISSING),
        ("12", ParseStatus.MISSING),
        ("Verdict: both", ParseStatus.MALFORMED),
        ("Answer: 3", ParseStatus.MALFORMED),
        ("I'm sorry, but I can't compare audio recordings.", ParseStatus.REFUSAL),
        ("As an AI language model I cannot listen to audio.", ParseStatus.REFUSAL),
        ("random tokens from a random-weight model", ParseStatus.MISSING),
    ],
)
def test_lenient_failures_are_statuses_without_a_label(answer, status):
    parsed = parse_verdict(answer, "lenient")
    assert parsed.status == status and parsed.label is None


def test_swapped_answers_map_back_to_the_items_numbering():
    assert [swap_verdict(v) for v in ("1", "2", "Tie", None)] == ["2", "1", "Tie", None]
    assert parse_swapped_verdict("1\nThe first one.").label == "2"
    assert parse_swapped_verdict("nonsense").status == ParseStatus.MALFORMED
    assert parse_swapped_verdict("nonsense", "lenient").status == ParseStatus.MISSING
    with pytest.raises(ValueError, match="not a pairwise verdict"):
        swap_verdict("3")


def verdict(label):
    return ParsedVerdict(label, None, OK)


@pytest.mark.parametrize(
    ("forward", "back", "combined"),
    [
        ("1", "1", "1"),
        ("2", "2", "2"),
        ("Tie", "Tie", "Tie"),
        # A win against a Tie keeps the win.
        ("1", "Tie", "1"),
        ("Tie", "2", "2"),
        # Opposite wins: the judge followed the position, not the response.
        ("1", "2", "Tie"),
        ("2", "1", "Tie"),
    ],
)
def test_combination_of_both_orders_sums_signed_votes(forward, back, combined):
    assert combine_verdicts(verdict(forward), verdict(back)) == (combined, OK)


def test_a_failed_order_fails_the_combination():
    refusal = ParsedVerdict(None, "I cannot", ParseStatus.REFUSAL)
    missing = ParsedVerdict(None, None, ParseStatus.MISSING)
    assert combine_verdicts(verdict("1"), refusal) == (None, ParseStatus.REFUSAL)
    assert combine_verdicts(missing, refusal) == (None, ParseStatus.MISSING)


def test_agreement_gives_half_credit_for_exactly_one_tie():
    assert agreement("1", "1") == 1.0 and agreement("Tie", "Tie") == 1.0
    assert agreement("1", "Tie") == 0.5 and agreement("Tie", "2") == 0.5
    assert agreement("1", "2") == 0.0 and agreement(None, "1") == 0.0


def test_gold_labels_are_normalized_or_rejected():
    assert [normalize_label(v, "x") for v in ("1", 2, "tie", "TIE", " Tie ")] == ["1", "2", "Tie", "Tie", "Tie"]
    for bad in ("3", True, None, "Response 1", 1.0):
        with pytest.raises(ValueError, match="row 7"):
            normalize_label(bad, "row 7")
