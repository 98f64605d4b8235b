import pytest

from lalm_judge.pairwise.consistency import consistency, contradicts, rationale_verdict

# Rationales in the forms SageLM's records and judges write them, with the verdict each argues for.
ARGUED = [
    ("Response 2 is more helpful as it lists the steps. In contrast, Response 1 lacks any detail.", "2"),
    ("Response 1 is better than Response 2 because it answers the question directly.", "1"),
    ("Response 2 is less accurate than Response 1, which cites the correct date.", "1"),
    ("Compared to Response 1, Response 2 provides a clearer and more complete explanation.", "2"),
    ("I would choose Response 1: it follows the instruction.", "1"),
    ("Response 1 is more verbose and repeats itself, while Response 2 is concise.", "2"),
    ("Response 2 is not better than Response 1; it misses the main point.", "1"),
    ("The first response fails to mention the risks, whereas the second one covers them.", "2"),
    ("Both responses are equally helpful and accurate.", "Tie"),
    ("Neither response is better: they give the same facts.", "Tie"),
    ("Response one falls short of the request; response two meets it.", "2"),
]


@pytest.mark.parametrize(("rationale", "verdict"), ARGUED)
def test_the_verdict_a_rationale_argues_for(rationale, verdict):
    assert rationale_verdict(rationale) == verdict


@pytest.mark.parametrize(
    "rationale",
    [
        None,
        "",
        # SageLM's templated acoustic rationales state facts, not a preference: the rules read no verdict.
        "The Instruction requires using woman's voice. Response 1 uses woman's voice, Response 2 uses man's voice.",
        # One merit each: no side has more votes.
        "Response 1 is more concise, but Response 2 is more accurate.",
    ],
)
def test_rationales_without_a_readable_verdict_are_undetermined(rationale):
    assert rationale_verdict(rationale) is None


def test_a_tie_claim_gives_way_to_a_stated_preference():
    assert rationale_verdict("Both are equally fluent in tone, but Response 2 is more accurate.") == "2"


def test_contradiction_compares_the_argued_verdict_with_the_label():
    rationale = "Response 2 is more helpful than Response 1."
    assert contradicts("2", rationale) is False
    assert contradicts("1", rationale) is True
    assert contradicts("Tie", rationale) is True
    assert contradicts("1", "Both responses are equally good.") is True
    assert contradicts("1", "Response 1 uses a calm voice.") is None
    with pytest.raises(ValueError, match="label must be one of"):
        contradicts("A", rationale)


def test_the_rate_counts_only_determined_rationales():
    summary = consistency(
        [
            ("1", "Response 1 is better."),  # consistent
            ("2", "Response 1 is better."),  # contradicts
            ("Tie", "Response 2 wins clearly."),  # contradicts
            ("1", "Response 1 uses a calm voice."),  # undetermined
        ]
    )
    assert (summary.n, summary.n_determined, summary.n_contradicting) == (4, 3, 2)
    assert summary.rate == pytest.approx(2 / 3)
    assert summary.coverage == pytest.approx(3 / 4)
    assert summary.as_dict()["contradiction_rate"] == pytest.approx(2 / 3)
    assert consistency([]).rate is None
