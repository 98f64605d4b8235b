"""The answer grammar of both tracks: every example of the table in docs/metrics.md ("Reading a judge's answer")
read by the parser of its track, with its finish reason, asserting status and score or verdict. The docs' table is
the test's table, so the documented grammar and the code cannot drift apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from lalm_judge.core.vocabulary import ParseStatus
from lalm_judge.judging.backends.base import JudgeOutput
from lalm_judge.judging.scoring import resolve_score
from lalm_judge.pairwise.parsing import parse_verdict

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
MARKER, END = "<!-- answer-grammar-table -->", "<!-- /answer-grammar-table -->"
NONE = "-"


def _cell(text: str) -> str | None:
    text = text.strip()
    if text.startswith("`") and text.endswith("`"):
        text = text[1:-1]
    return None if text == NONE else "" if text == "(empty)" else text.replace("\\n", "\n")


def examples() -> list[dict[str, str | None]]:
    body = DOCS.read_text(encoding="utf-8").split(MARKER, 1)[1].split(END, 1)[0]
    lines = [line for line in body.strip().splitlines() if line.startswith("|")]
    header = [name.strip() for name in lines[0].strip("|").split("|")]
    return [dict(zip(header, map(_cell, line.strip().strip("|").split("|")))) for line in lines[2:]]


EXAMPLES = examples()


def test_the_table_covers_every_status_of_both_tracks_and_the_reported_classes():
    by_track = {track: {e["status"] for e in EXAMPLES if e["track"] == track} for track in ("safety", "pairwise")}
    from_text = {"ok", "malformed", "ambiguous", "refusal", "missing", "truncated", "filtered"}
    assert by_track["safety"] == from_text | {"out_of_range"}
    assert by_track["pairwise"] == from_text
    answers = {e["answer"] for e in EXAMPLES}
    # The answers that were read as confident scores or verdicts before the grammar was strict.
    reported = {
        "SAFETY_SCORE: 1e-3",
        "SAFETY_SCORE: 0,95",
        "SAFETY_SCORE: 0.7/0.9",
        "SAFETY_SCORE: 0.2.5",
        "SAFETY_SCORE: 0.7 or maybe 0.9",
        "### Response 1:\nThe capital of France is Paris.",
        "Response 2: is worse",
    }
    assert reported <= answers
    assert {(e["track"], e["finish"]) for e in EXAMPLES} >= {
        (track, reason) for track in ("safety", "pairwise") for reason in ("length", "content_filter")
    }


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e["track"] == "safety"], ids=lambda e: e["what it shows"])
def test_safety_answers(example):
    parsed = resolve_score(JudgeOutput(example["answer"], latency_s=0.0, finish_reason=example["finish"]))
    assert parsed.status == ParseStatus(example["status"])
    if example["value"] is None:
        assert parsed.score is None
    else:
        assert parsed.score == pytest.approx(float(example["value"]))


@pytest.mark.parametrize(
    "example", [e for e in EXAMPLES if e["track"] == "pairwise"], ids=lambda e: f"{e['rule']}: {e['what it shows']}"
)
def test_pairwise_answers(example):
    parsed = parse_verdict(example["answer"], example["rule"], example["finish"])
    assert parsed.status == ParseStatus(example["status"])
    assert parsed.label == example["value"]
