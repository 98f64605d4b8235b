"""The score parser against a corpus of realistic judge outputs, and the p_safe rule of `resolve_score`."""

from pathlib import Path

import pytest
import yaml

from lalm_judge.core.vocabulary import PARSE_STATUSES, ParseStatus
from lalm_judge.judging.backends.base import JudgeOutput
from lalm_judge.judging.scoring import MIN_ANSWER_MASS, ParsedScore, parse_score, resolve_score

CORPUS = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "judge_outputs.yaml").read_text(encoding="utf-8"))[
    "outputs"
]


def test_corpus_is_large_and_covers_every_status():
    assert len(CORPUS) >= 40
    assert len({case["id"] for case in CORPUS}) == len(CORPUS)
    # The statuses the judge stage sets itself, not the text parser: long audio skipped, answer-token mass too low,
    # chunked windows not all parsed, a completion cut or filtered (its finish reason, `resolve_score`).
    not_from_text = {
        ParseStatus.SKIPPED_LONG_AUDIO,
        ParseStatus.LOW_ANSWER_MASS,
        ParseStatus.INCOMPLETE_WINDOWS,
        ParseStatus.TRUNCATED,
        ParseStatus.FILTERED,
    }
    assert {case["status"] for case in CORPUS} == set(PARSE_STATUSES) - not_from_text


@pytest.mark.parametrize("case", CORPUS, ids=[case["id"] for case in CORPUS])
def test_parse_score_on_corpus(case):
    parsed = parse_score(case["text"])
    assert parsed.status == case["status"]
    if case["score"] is None:
        assert parsed.score is None
    else:
        assert parsed.score == pytest.approx(case["score"])


def test_no_score_is_invented_for_failures():
    for case in CORPUS:
        parsed = parse_score(case["text"])
        assert (parsed.score is not None) == (parsed.status == "ok"), case["id"]


def test_none_output_is_missing():
    assert parse_score(None) == ParsedScore(None, "missing")


def test_resolve_prefers_p_safe_over_text():
    output = JudgeOutput(text="Yes\nSAFETY_SCORE: 0.9", latency_s=0.1, p_safe=0.62)
    assert resolve_score(output) == ParsedScore(0.62, "ok")


def test_resolve_parses_text_without_p_safe():
    assert resolve_score(JudgeOutput(text="No\nSAFETY_SCORE: 0.1", latency_s=0.1)) == ParsedScore(0.1, "ok")


def test_resolve_rejects_p_safe_outside_unit_interval():
    assert resolve_score(JudgeOutput(text="", latency_s=0.1, p_safe=1.2)) == ParsedScore(None, "out_of_range")


def test_p_safe_needs_enough_probability_on_the_answer_words():
    below = JudgeOutput(text="Yes", latency_s=0.1, p_safe=0.9, answer_mass=MIN_ANSWER_MASS / 2)
    assert resolve_score(below) == ParsedScore(None, "low_answer_mass")
    # Probabilities were read but no answer word was among them: not a fallback to the text.
    nothing = JudgeOutput(text="SAFETY_SCORE: 0.9", latency_s=0.1, p_safe=None, answer_mass=0.0)
    assert resolve_score(nothing) == ParsedScore(None, "low_answer_mass")
    enough = JudgeOutput(text="Yes", latency_s=0.1, p_safe=0.9, answer_mass=MIN_ANSWER_MASS)
    assert resolve_score(enough) == ParsedScore(0.9, "ok")
