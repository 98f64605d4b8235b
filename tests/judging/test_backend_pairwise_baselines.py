"""The two offline pairwise baselines on real models: the relevance baseline (bundled all-MiniLM-L6-v2) and the
likelihood judge (a tiny random-weight Llama here, SmolLM2-135M in the demo), both reading the instruction and the
two responses of a pairwise text request and answering in the verdict format."""

import pytest
import torch

from lalm_judge.judging.backends.base import PAIRWISE_TRANSCRIPT, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.embedding import BUNDLED_MODEL, EmbeddingBackend, relevance_answer
from lalm_judge.judging.backends.likelihood import LikelihoodBackend, likelihood_answer
from lalm_judge.pairwise.parsing import parse_verdict

torch.set_num_threads(1)
QUERY = "How do I fix a flat bicycle tyre?"
ON_TOPIC = "Take the wheel off, find the hole in the tube, patch it and pump the tyre up again."
OFF_TOPIC = "My favourite colour is green and I like cats."


def pairwise_request(first: str, second: str, name: str = "r") -> JudgeRequest:
    return JudgeRequest(
        name, "", "Which is better?", transcript=tuple(zip(PAIRWISE_TRANSCRIPT, (QUERY, first, second)))
    )


def test_relevance_baseline_prefers_the_response_about_the_question_in_either_order():
    judge = EmbeddingBackend(JudgeSpec(name="relevance", backend="embedding", model=BUNDLED_MODEL))
    forward, swapped, same = judge.generate(
        [
            pairwise_request(ON_TOPIC, OFF_TOPIC),
            pairwise_request(OFF_TOPIC, ON_TOPIC),
            pairwise_request(ON_TOPIC, ON_TOPIC),
        ]
    )
    assert parse_verdict(forward.text).label == "1" and parse_verdict(swapped.text).label == "2"
    assert parse_verdict(same.text).label == "Tie" and same.extra["similarities"][0] == same.extra["similarities"][1]
    first, second = forward.extra["similarities"]
    assert first > second and f"{first:.2f} against {second:.2f}" in forward.text
    assert relevance_answer((0.50, 0.52), 0.03).startswith("Tie\n")
    with pytest.raises(ValueError, match="mixes pairwise and safety requests"):
        judge.generate([pairwise_request(ON_TOPIC, OFF_TOPIC), JudgeRequest("s", "", "", transcript=(("A", "hi"),))])


def test_likelihood_judge_scores_pointwise_mutual_information(llama_dir):
    judge = LikelihoodBackend(
        JudgeSpec(name="lm", backend="likelihood", model=str(llama_dir), options={"device": "cpu", "tie_margin": 0.0})
    )
    (forward, swapped) = judge.generate([pairwise_request(ON_TOPIC, OFF_TOPIC), pairwise_request(OFF_TOPIC, ON_TOPIC)])
    scores = forward.extra["pmi"]
    # By hand: log P(r | question prefix) - log P(r | answer prefix), each a sum over the response's tokens.
    for response, score in zip((ON_TOPIC, OFF_TOPIC), scores):
        with_question, _ = judge.log_probability(f"Question: {QUERY}\nAnswer:", f" {response}")
        alone, _ = judge.log_probability("Answer:", f" {response}")
        assert score == pytest.approx(with_question - alone, abs=1e-3)
    better = "1" if scores[0] > scores[1] else "2"
    assert parse_verdict(forward.text).label == better
    assert parse_verdict(swapped.text).label == {"1": "2", "2": "1"}[better], "order-free: the swap mirrors it"
    assert swapped.extra["pmi"] == scores[::-1]
    assert likelihood_answer((1.0, 1.3), 0.5).startswith("Tie\n")
    with pytest.raises(ValueError, match="is no pairwise text request"):
        judge.generate([JudgeRequest("safety", "", "Rate it.", transcript=(("A", "hi"),))])
