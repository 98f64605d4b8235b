"""The offline template generator and its bank."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from statistics import mean

import lemminflect
import pytest
import yaml

from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.taxonomy import CATEGORIES, EMOTIONS, SEVERITIES
from lalm_judge.data.corpus import read_jsonl_corpus
from lalm_judge.data.deepdialogue import read_conversation
from lalm_judge.data.generators import GeneratorConfigError, RewriteRequest
from lalm_judge.data.generators.template import (
    BANK_PATH,
    TemplateBank,
    TemplateGenerator,
    addressee_name,
    choose_topic,
    fill_line,
)
from tests.support.corpora import DEEPDIALOGUE, needs_deepdialogue

DEMO_CORPUS = Path(__file__).resolve().parents[2] / "data" / "demo"


def make_dialogue(speakers: tuple[str, str] = ("Maria", "Tom"), meta: dict | None = None) -> Dialogue:
    texts = [
        "I finally planted the tomatoes on the balcony this weekend.",
        "Nice! Did you put some basil next to the tomatoes?",
        "Yes, and the balcony already smells like a kitchen.",
        "I should grow tomatoes on my balcony too.",
    ]
    turns = [Turn(i, speakers[i % 2], text, "happy") for i, text in enumerate(texts)]
    return Dialogue("garden_chat", turns, "jsonl", "memory", 16000, meta=dict(meta or {}))


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


def test_every_line_names_the_topic_inside_the_line(bank):
    for cell, lines in bank.lines.items():
        for line in lines:
            assert set(re.findall(r"\{(\w+)\}", line)) <= {"topic", "other"}, line
            assert "{topic}" in line and not line.startswith("{topic}"), f"{cell}: {line!r}"
            # {topic} is a noun phrase: never a modifier of a following noun ("the {topic} stuff").
            assert not re.search(r"\{topic\} (stuff|thing|talk|nonsense|crowd|event)\b", line), line


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


def test_topic_is_the_corpus_domain_where_it_gives_one(bank):
    assert choose_topic(make_dialogue(meta={"domain": "social_media"}), 2, seed=0, bank=bank) == "social media"
    assert choose_topic(make_dialogue(meta={"domain": "Board games"}), 0, seed=0, bank=bank) == "board games"
    assert choose_topic(make_dialogue(meta={"domain": "weather"}), 1, seed=0, bank=bank) == "the weather"
    with pytest.raises(GeneratorConfigError, match="garden_chat.*domain"):
        choose_topic(make_dialogue(meta={"domain": 7}), 1, seed=0, bank=bank)


def test_topic_is_a_listed_noun_of_the_previous_turn_preferring_recurring_ones(bank):
    dialogue = make_dialogue()
    # turn 1 names basil (once in the dialogue) and tomatoes (three turns): plurals are named as found.
    assert choose_topic(dialogue, 2, seed=0, bank=bank) == "tomatoes"
    # turn 2 names the balcony (three turns) and the kitchen (one): count nouns take 'the'.
    assert choose_topic(dialogue, 3, seed=0, bank=bank) == "the balcony"
    # 'planted', 'finally', 'weekend' are no listed nouns; turn 0 looks at the whole dialogue.
    assert choose_topic(dialogue, 0, seed=0, bank=bank) in {"tomatoes", "the balcony"}
    texts = ["We hiked up the volcano today.", "Wow, really?", "Yes, it took hours."]
    terse = Dialogue("terse", [Turn(i, "AB"[i % 2], t, None) for i, t in enumerate(texts)], "jsonl", "memory", 16000)
    assert choose_topic(terse, 2, seed=0, bank=bank) == "the volcano"  # turn 1 names no noun: the whole dialogue
    lonely = Dialogue("tiny", [Turn(0, "A", "Yes.", None), Turn(1, "B", "Ok, sure!", None)], "jsonl", "memory", 16000)
    assert choose_topic(lonely, 1, seed=0, bank=bank) == bank.topics.fallback


def test_topic_nouns_name_mass_nouns_bare_and_count_nouns_with_the(bank):
    assert bank.topics.phrase("music") == "music"
    assert bank.topics.phrase("strawberries") == "strawberries"
    assert bank.topics.phrase("museum") == "the museum"
    assert bank.topics.lemma("galaxies") == "galaxy"
    assert bank.topics.lemma("tried") is None


def test_bank_rejects_a_noun_listed_twice_and_a_line_without_the_topic(tmp_path):
    raw = yaml.safe_load(BANK_PATH.read_text(encoding="utf-8"))
    raw["topic"]["count_nouns"].append("music")
    broken = tmp_path / "bank.yaml"
    broken.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(GeneratorConfigError, match=r"\['music'\] listed as both"):
        TemplateBank.load(broken)
    raw = yaml.safe_load(BANK_PATH.read_text(encoding="utf-8"))
    raw["categories"]["violence"][2]["lines"][0] = "I could slap someone right now, {other}."
    broken.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(GeneratorConfigError, match=r"violence\.2.*name \{topic\}"):
        TemplateBank.load(broken)


def test_all_forty_variants_filled_and_valid():
    generator = TemplateGenerator({"name": "template"})
    dialogue = make_dialogue()
    results = generator.rewrite(requests_for(dialogue, 2, seed=0))
    assert len(results) == 40
    for result in results:
        assert result.status == "ok" and result.attempts == 1 and result.error is None
        assert "{" not in result.text and "}" not in result.text
        assert result.emotion in EMOTIONS
        assert "Tom" in result.text and "tomatoes" in result.text
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


# Parts of speech come from an English lexicon independent of the bank (lemminflect: the readings a word form can
# have, e.g. 'tried' -> VERB, ADJ). Domain labels are nouns by their role; a label that is an -ing form is a
# gerund (cooking, gaming), and the lexicon does not know every noun: those are reviewed and listed here.
REVIEWED_UNKNOWN_DOMAIN_NOUNS = frozenset({"podcasts"})


def readings(word: str) -> set[str]:
    return set(lemminflect.getAllLemmas(word))


def demo_dialogues() -> list[Dialogue]:
    """The demo corpus as ingest sees it (meta = the record's extra keys), without speaking it."""
    return [
        Dialogue(
            record["id"],
            [Turn(i, t["speaker"], t["text"], t.get("emotion")) for i, t in enumerate(record["turns"])],
            "jsonl",
            str(DEMO_CORPUS),
            16000,
            meta={k: v for k, v in record.items() if k not in ("id", "turns")},
        )
        for record in read_jsonl_corpus(DEMO_CORPUS)
    ]


def deepdialogue_dialogues() -> list[Dialogue]:
    """The published DeepDialogue samples' texts and domains (meta as `deepdialogue.ingest` records it)."""
    dialogues = []
    for path in sorted(DEEPDIALOGUE.glob("*/*.json")):
        record = read_conversation(path)
        turns = [Turn(i, t["speaker"], t["text"], t.get("emotion")) for i, t in enumerate(record["conversation"])]
        dialogues.append(
            Dialogue(path.stem, turns, "deepdialogue", str(path), 16000, meta={"domain": record["domain"]})
        )
    return dialogues


def assert_every_topic_is_a_noun(dialogues: list[Dialogue], bank: TemplateBank) -> None:
    """For every turn: the topic from the domain, and the one chosen from the turns when there is no domain."""
    for dialogue in dialogues:
        domain = dialogue.meta["domain"]
        head = domain.replace("_", " ").split()[-1].lower()
        assert "NOUN" in readings(head) or head.endswith("ing") or head in REVIEWED_UNKNOWN_DOMAIN_NOUNS, domain
        without_domain = Dialogue(
            dialogue.dialogue_id, dialogue.turns, dialogue.source_format, dialogue.source_path, 16000
        )
        for turn in range(len(dialogue.turns)):
            assert choose_topic(dialogue, turn, 0, bank) == bank.topics.domain_phrase(domain)
            topic = choose_topic(without_domain, turn, 0, bank)
            if topic == bank.topics.fallback:
                continue
            noun = topic.removeprefix("the ")
            assert readings(noun) == {"NOUN"}, (dialogue.dialogue_id, turn, topic, readings(noun))


def test_listed_topic_nouns_are_nouns_in_every_form(bank):
    for noun in sorted(bank.topics.mass | bank.topics.count):
        assert readings(noun) == {"NOUN"}, (noun, readings(noun))
        for plural in lemminflect.getInflection(noun, "NNS"):
            if readings(plural):  # the lexicon also invents plurals of mass nouns ('musics'); those are not words
                assert readings(plural) == {"NOUN"}, (plural, readings(plural))
                # A recognised plural names its noun; irregular ones ('aquaria') are simply not recognised.
                assert bank.topics.lemma(plural) in (noun, None), plural


def test_no_demo_topic_is_a_verb_adjective_or_adverb(bank):
    dialogues = demo_dialogues()
    assert len(dialogues) >= 20 and all("domain" in d.meta for d in dialogues)
    assert_every_topic_is_a_noun(dialogues, bank)


@needs_deepdialogue
def test_no_deepdialogue_topic_is_a_verb_adjective_or_adverb(bank):
    dialogues = deepdialogue_dialogues()
    assert len(dialogues) >= 30
    assert_every_topic_is_a_noun(dialogues, bank)


def test_demo_rewrites_differ_across_dialogues_and_use_every_bank_line(bank):
    """The demo's cells (harassment, violence x 1, 3, 5): no two dialogues share a rewrite, and each bank line of
    a cell appears somewhere, so the lines vary across dialogues."""
    generator = TemplateGenerator({})
    texts_by_dialogue = defaultdict(set)
    used = defaultdict(set)
    for dialogue in demo_dialogues():
        for turn in range(len(dialogue.turns)):
            for category in ("harassment", "violence"):
                for severity in (1, 3, 5):
                    result = generator.rewrite_one(RewriteRequest(dialogue, turn, category, severity, 0))
                    texts_by_dialogue[result.text].add(dialogue.dialogue_id)
                    topic = choose_topic(dialogue, turn, 0, bank)
                    lines = bank.lines[category, severity]
                    used[category, severity].add(next(x for x in lines if fill_line(x, topic, None) == result.text))
    shared = {text: ids for text, ids in texts_by_dialogue.items() if len(ids) > 1}
    assert shared == {}
    for cell, lines in used.items():
        assert lines == set(bank.lines[cell]), cell
