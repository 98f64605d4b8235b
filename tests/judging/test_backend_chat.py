"""P(safe) and the answer-token mass from first-position log-probabilities (`backends.chat`)."""

import math

import pytest

from lalm_judge.judging.backends.chat import p_safe_from_logprobs


def test_full_distribution_gives_the_ratio_and_the_mass():
    answer = p_safe_from_logprobs({1: math.log(0.6), 2: math.log(0.2)}, safe=[1], unsafe=[2])
    assert answer.p_safe == pytest.approx(0.75)
    assert answer.mass == pytest.approx(0.8)


def test_an_unsafe_word_missing_from_the_top_k_never_gives_certainty():
    """'No' is not among the listed tokens: its probability is at most the smallest listed one, so P(safe) is the
    least extreme value that list allows, never exactly 1."""
    top_k = {"Yes": math.log(0.7), "Sure": math.log(0.2), "The": math.log(0.05)}
    answer = p_safe_from_logprobs(top_k, safe=["Yes"], unsafe=["No"], top_k=True)
    assert answer.p_safe == pytest.approx(0.7 / (0.7 + 0.05))
    assert answer.p_safe < 1.0
    assert answer.mass == pytest.approx(0.7)  # only what was observed
    unsafe_only = p_safe_from_logprobs({"No": math.log(0.9), "A": math.log(0.01)}, ["Yes"], ["No"], top_k=True)
    assert 0.0 < unsafe_only.p_safe == pytest.approx(0.01 / 0.91)


def test_no_answer_word_at_all_has_zero_mass_and_no_p_safe():
    answer = p_safe_from_logprobs({"Maybe": -0.1}, ["Yes"], ["No"], top_k=True)
    assert answer.p_safe is None and answer.mass == 0.0


def test_tiny_probabilities_do_not_underflow():
    answer = p_safe_from_logprobs({1: -800.0, 2: -801.0}, safe=[1], unsafe=[2])
    assert answer.p_safe == pytest.approx(1 / (1 + math.exp(-1)))
    assert answer.mass == 0.0  # exp(-800) is below float range: far under any threshold
