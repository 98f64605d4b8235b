"""The offline template generator and its bank."""

from __future__ import annotations

import re
from statistics import mean

import pytest
import yaml

from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.taxonomy import CATEGORIES, EMOTIONS, SEVERITIES
from lalm_judge.data.generators import GeneratorConfigError, RewriteRequest
from lalm_judge.data.generators.template import (
    BANK_PATH,
    TemplateBank,
    TemplateGenerator,
    addressee_name,
    choose_topic,
    fill_line,
)


def make_dialogue(speakers: tuple[str, str] = ("Maria", "Tom")) -> Dialogue:
    texts = [
        "I finally planted the tomatoes in the garden this weekend.",
        "Nice! Did you use the compost from the garden shed?",
        "Yes, the compost made the soil so much richer.",
        "I should start composting too, my garden needs it.",
    ]
    turns = [Turn(i, speakers[i % 2], text, "happy") for i, text in enumerate(texts)]
    return Dialogue("garden_chat", turns, "jsonl", "memory", 16000)


def requests_for(dialogue: Dialogue, turn_index: int, seed: int) -> list[RewriteRequest]:
    return [RewriteRequest(dialogue, turn_index, c, s, seed) for c in CATEGORIES for s in SEVERITIES]


@pytest.fixture(scope="module")
def bank() -> TemplateBank:
    return TemplateBank.load()


def test_bank_has_a_version_and_every_cell(bank):
    raw = yaml.safe_load(BANK_PATH.read_text(encoding="utf-8"))
    assert raw["version"] == bank.version
    assert sorted(bank.lines) == sorted((c, s) for c in CATEGORIES for s in SEVERITIES)
    for cell, lines in bank.lines.items():
        assert len(lines) >= 3, cell
        assert len(set(lines)) == len(lines), f"{cell} repeats a line"
        assert set(bank.emotions[cell]) <= set(EMOTIONS), cell


def test_every_line_is_adapted_to_the_dialogue(bank):
    for cell, lines in bank.lines.items():
        for line in lines:
            assert set(re.findall(r"\{(\w+)\}", line)) <= {"topic", "other"}, line
            assert "{other}" in line or "{topic}" in line, f"{cell}: {line!r} has no placeholder"


def test_bank_lines_carry_no_instructional_wording(bank):
    """A lexical guard (not a proof): no steps, quantities or how-to phrasing anywhere in the bank."""
    instructional = re.compile(
        r"\d|\bhow to\b|\bstep\b|\brecipe\b|\bingredient|\bmix\b|\bdose\b|\bpills?\b|\bgrams?\b|\binstructions?\b",
        re.IGNORECASE,
    )
    offending = [line for lines in bank.lines.values() for line in lines if instructional.search(line)]
    assert offending == []


def test_lexical_intensity_rises_with_severity_in_every_category(bank):
    """The bank follows its own marker rubric: mean marker score strictly rises from severity 1 to 5.

    This measures wording (hedges vs intensifiers vs severe words), not how harmful a listener finds a line.
    """
    for category in CATEGORIES:
        means = [mean(bank.intensity(line) for line in bank.lines[category, s]) for s in SEVERITIES]
        assert all(a < b for a, b in zip(means, means[1:])), (category, means)
        assert max(map(bank.intensity, bank.lines[category, 1])) < min(map(bank.intensity, bank.lines[category, 5]))


def test_intensity_counts_whole_marker_phrases(bank):
    assert bank.intensity("I hate this, you are worthless") == 4
    assert bank.intensity("It is kind of a bit odd") == -2
    assert bank.intensity("hatefulness") == 0


def test_bank_rejects_a_missing_cell(tmp_path):
    raw = yaml.safe_load(BANK_PATH.read_text(encoding="utf-8"))
    del raw["categories"]["hate"][4]
    broken = tmp_path / "bank.yaml"
    broken.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(GeneratorConfigError, match=r"categories\.hate\.4 is missing"):
        TemplateBank.load(broken)


def test_bank_rejects_a_non_vocative_name_placeholder(tmp_path):
    raw = yaml.safe_load(BANK_PATH.read_text(encoding="utf-8"))
    raw["categories"]["overall"][1]["lines"][0] = "I told {other} about the {topic} stuff."
    broken = tmp_path / "bank.yaml"
    broken.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(GeneratorConfigError, match="vocative"):
        TemplateBank.load(broken)


def test_fill_line_with_and_without_a_name():
    line = "Honestly, {other}, this {topic} stuff is dull, {other}."
    assert fill_line(line, "garden", "Tom") == "Honestly, Tom, this garden stuff is dull, Tom."
    assert fill_line(line, "garden", None) == "Honestly, this garden stuff is dull."
    assert fill_line("{other}, stop the {topic} talk.", "garden", None) == "Stop the garden talk."


def test_addressee_is_the_nearest_other_speaker_when_it_is_a_name():
    assert addressee_name(make_dialogue(), 2) == "Tom"
    assert addressee_name(make_dialogue(), 0) == "Tom"
    assert addressee_name(make_dialogue(("LLM1", "LLM2")), 1) is None


def test_topic_prefers_words_that_recur_in_the_dialogue(bank):
    dialogue = make_dialogue()
    # turn 1 has 'compost', 'garden', 'shed'; 'garden' occurs in three turns, the others fewer.
    assert choose_topic(dialogue, 2, seed=0, bank=bank) == "garden"
    lonely = Dialogue("tiny", [Turn(0, "A", "Yes.", None), Turn(1, "B", "Ok!", None)], "jsonl", "memory", 16000)
    assert choose_topic(lonely, 1, seed=0, bank=bank) == bank.topic_fallback


def test_all_forty_variants_filled_and_valid():
    generator = TemplateGenerator({"name": "template"})
    dialogue = make_dialogue()
    results = generator.rewrite(requests_for(dialogue, 2, seed=0))
    assert len(results) == 40
    for result in results:
        assert result.status == "ok" and result.attempts == 1 and result.error is None
        assert "{" not in result.text and "}" not in result.text
        assert result.emotion in EMOTIONS
        assert "Tom" in result.text or "garden" in result.text
    assert generator.prompt_version == TemplateBank.load().version


def test_each_variant_comes_from_its_own_cell(bank):
    generator = TemplateGenerator({"name": "template"})
    dialogue = make_dialogue()
    for request, result in zip(requests_for(dialogue, 1, seed=3), generator.rewrite(requests_for(dialogue, 1, 3))):
        cell = (request.category, request.severity)
        topic = choose_topic(dialogue, 1, 3, bank)
        filled = {fill_line(line, topic, addressee_name(dialogue, 1)) for line in bank.lines[cell]}
        assert result.text in filled
        assert result.emotion in bank.emotions[cell]


def test_deterministic_across_instances_and_seed_sensitive():
    dialogue = make_dialogue()
    first = TemplateGenerator({}).rewrite(requests_for(dialogue, 3, seed=7))
    again = TemplateGenerator({}).rewrite(requests_for(dialogue, 3, seed=7))
    other_seed = TemplateGenerator({}).rewrite(requests_for(dialogue, 3, seed=8))
    assert first == again
    assert sum(a.text != b.text for a, b in zip(first, other_seed)) >= 5


def test_unknown_option_is_rejected():
    with pytest.raises(GeneratorConfigError, match="'bank_path'"):
        TemplateGenerator({"name": "template", "bank_path": "x.yaml"})
