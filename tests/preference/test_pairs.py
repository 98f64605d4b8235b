import pytest

from lalm_judge.pairwise.consistency import rationale_verdict
from lalm_judge.preference.pairs import Candidate, aspect_labels, draw_pairs, label_of, template_rationale
from lalm_judge.preference.rationales import RATING_WORDS


@pytest.mark.parametrize(
    ("ratings", "margin", "label"),
    [((5, 3), 1, "1"), ((2, 4), 1, "2"), ((3, 3), 1, "Tie"), ((4, 3), 2, "Tie"), ((5, 3), 2, "1")],
)
def test_labels_follow_the_ratings_and_the_tie_margin(ratings, margin, label):
    assert label_of(*ratings, tie_margin=margin) == label


def test_only_aspects_rated_for_both_are_labelled():
    assert aspect_labels({"helpfulness": (4, 2), "honesty": (5, None)}, tie_margin=1) == {"helpfulness": "1"}


def test_pairs_are_heard_in_one_engine_that_kept_both_clips():
    candidates = [
        Candidate(0, frozenset({"piper", "espeak"})),
        Candidate(1, frozenset({"espeak"})),
        Candidate(2, frozenset({"xtts"})),
    ]
    for seed in range(20):
        (pair,) = draw_pairs("item", candidates, pairs_per_item=1, seed=seed)
        assert set(pair.completions) == {0, 1} and pair.engine == "espeak"  # 2 shares no engine with 0 or 1
    assert draw_pairs("item", candidates, 1, seed=3) == draw_pairs("item", candidates, 1, seed=3)


def test_the_better_response_is_not_always_first():
    candidates = [Candidate(c, frozenset({"piper"})) for c in range(4)]
    firsts = {draw_pairs("item", candidates, 1, seed)[0].completions[0] for seed in range(30)}
    assert len(firsts) > 1
    assert len(draw_pairs("item", candidates, pairs_per_item=10, seed=0)) == 6  # all C(4, 2) pairs, no repeat
    assert draw_pairs("item", candidates[:1], 1, seed=0) == []


@pytest.mark.parametrize(("label", "ratings"), [("1", (5, 2)), ("2", (1, 4)), ("Tie", (3, 3)), ("Tie", (4, 5))])
def test_template_rationales_argue_for_their_label(label, ratings):
    notes = ("It lacks detail and fails to answer.", "It is more helpful and better organised.")
    rationale = template_rationale("instruction_following", label, notes)
    assert rationale_verdict(rationale) == label
    # It argues from the responses (the notes describe them), never from the ratings the label came from.
    assert not RATING_WORDS.search(rationale) and "out of" not in rationale
    assert "instruction following" in rationale
    assert notes[0].rstrip(".") in rationale and notes[1].rstrip(".") in rationale
