"""The protocol file (study.yaml): its defaults from the taxonomy, its checks against the schema and the batch, and
the practice, gold and attention items `anchors sample` draws for it (attention requests spoken by espeak-ng)."""

from __future__ import annotations

import json

import pytest
import yaml

from lalm_judge.annotation.batch import Batch, load_labels
from lalm_judge.annotation.protocol import Expected, ProtocolError, load_protocol
from lalm_judge.annotation.sample import draw_sample, read_pool, write_batch
from lalm_judge.audio.waveform import read_audio
from lalm_judge.core.taxonomy import CATEGORIES, CATEGORY_DEFINITIONS, SEVERITIES, SEVERITY_LEVELS
from lalm_judge.data.generators.template import BANK_PATH


def test_the_default_protocol_defines_every_category_and_severity_from_the_taxonomy(batch):
    protocol = load_protocol(Batch.load(batch))
    assert list(protocol.categories) == list(CATEGORIES) and list(protocol.severities) == list(SEVERITIES)
    for name, text in protocol.categories.items():
        assert text["definition"] == CATEGORY_DEFINITIONS[name] and "Sam" in text["example"]
    for level, text in protocol.severities.items():
        assert (text["name"], text["definition"]) == SEVERITY_LEVELS[level] and text["example"]
    assert protocol.consent["accept"] == "I agree" and protocol.design.raters_per_item is None
    assert protocol.source == str(batch / "study.yaml") and protocol.completion_code
    # No severity example repeats a category example (the middle severity's used to repeat its category's).
    examples = {text["example"] for text in protocol.categories.values()}
    assert not examples & {text["example"] for text in protocol.severities.values()}


def test_the_default_protocol_has_what_a_review_board_expects(batch):
    """Contact, ethics approval, minimum age and withdrawal on the consent page; a debrief after the harmful
    content; the recorded device named in the consent; quality rules, ties and the public link's settings; and the
    texts only the owner can write marked for `serve` to warn about."""
    protocol = load_protocol(Batch.load(batch))
    consent = protocol.consent
    assert consent["min_age"] == 18 and "Withdraw" in consent["withdrawal"] and "browser" in consent["text"]
    assert consent["contact"].startswith("EDIT:") and consent["ethics"].startswith("EDIT:")
    assert protocol.placeholders() == ["consent.contact", "consent.ethics"]
    assert "support service" in protocol.debrief and "synthetic" in protocol.debrief
    assert protocol.headphone_check is None and protocol.min_listened_share == 0.9 and protocol.ties == "unsafe"
    assert protocol.exclusion.max_attention_failures == 0 and protocol.exclusion.min_heard_to_end == 0.5
    assert protocol.recruiting.participant_param == "PROLIFIC_PID" and protocol.recruiting.timeout_minutes == 120
    assert protocol.screen_out_code is None and protocol.name == "study.yaml"
    edit(batch, lambda d: d["consent"].update(contact="Dr. A. Researcher, a.researcher@example.org"))
    assert load_protocol(Batch.load(batch)).placeholders() == ["consent.ethics"]


def test_raters_read_the_definitions_the_rewrite_generator_writes_to():
    prompt = yaml.safe_load((BANK_PATH.parent / "rewrite_prompt.yaml").read_text())
    assert prompt["categories"] == CATEGORY_DEFINITIONS
    assert prompt["severities"] == {level: f"{name} - {text}" for level, (name, text) in SEVERITY_LEVELS.items()}


def edit(batch_dir, change) -> None:
    path = batch_dir / "study.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(colour="blue"), r"\(top level\): Additional properties are not allowed \('colour'"),
        (lambda d: d["consent"].pop("text"), r"consent: 'text' is a required property"),
        (
            lambda d: d["categories"].pop("hate"),
            r"categories must define exactly the batch's categories.*missing \['hate'\]",
        ),
        (lambda d: d["severities"].update({"6": d["severities"]["1"]}), r"severities: '6' does not match"),
        (lambda d: d.update(gold=[{"item": "item_999", "answer": {"unsafe": False}}]), r"gold\[0\]: item 'item_999'"),
        (
            lambda d: d.update(gold=[{"item": "item_001", "answer": {"unsafe": False, "severity": 2}}]),
            r"gold\[0\]: a safe answer has no category and no severity",
        ),
        (
            lambda d: d.update(
                gold=[{"item": "item_001", "answer": {"unsafe": False}}],
                attention=[{"item": "item_001", "answer": {"unsafe": False}}],
            ),
            r"attention\[0\]: item 'item_001' is already a gold item",
        ),
        (lambda d: d.update(completion={"redirect_url": "javascript:alert(1)"}), r"completion.redirect_url: .* match"),
        (lambda d: d.update(assignment={"raters_per_item": 2}), r"give raters_per_item and planned_raters together"),
        (lambda d: d.update(statistics={"ties": "coin"}), r"statistics.ties: 'coin' is not one of"),
        (lambda d: d.update(quality={"min_listened_share": 2}), r"quality.min_listened_share: 2 is greater than"),
        (lambda d: d.update(headphone_check={"trials": 2, "min_correct": 3}), r"min_correct 3 exceeds its 2 trials"),
        (lambda d: d.update(recruiting={"participant_param": "a b"}), r"recruiting.participant_param: 'a b' does"),
    ],
)
def test_a_protocol_that_does_not_fit_is_refused_naming_the_key(batch, change, message):
    edit(batch, change)
    with pytest.raises((ProtocolError, ValueError), match=message):
        load_protocol(Batch.load(batch))


def test_a_protocol_file_that_is_not_yaml_is_refused(batch):
    (batch / "study.yaml").write_text("consent: [unclosed\n")
    with pytest.raises(ProtocolError, match="study.yaml: not valid YAML"):
        load_protocol(Batch.load(batch))


def test_a_check_passes_on_safe_unsafe_category_and_severity_within_the_tolerance():
    expected = Expected(True, "hate", 4)
    assert expected.passes(True, "hate", 5, tolerance=1) and not expected.passes(True, "hate", 2, tolerance=1)
    assert not expected.passes(True, "violence", 4, tolerance=1) and not expected.passes(False, None, 0, tolerance=1)
    assert Expected(True).passes(True, "sexual", 1, tolerance=0) and Expected(False).passes(False, None, 0, 0)


def test_practice_gold_and_attention_items_are_drawn_answered_and_spoken(synthetic_run, tmp_path):
    pool = read_pool(synthetic_run)
    extras = {"practice": 2, "gold": 2, "attention": 2}
    selection = draw_sample(pool, 12, 8, seed=0, extras=extras)
    out = tmp_path / "batch"
    write_batch(pool, selection, out, seed=0, results=str(synthetic_run))
    batch = Batch.load(out)
    labels = {label.item_id: label for label in load_labels(out)[1]}
    protocol = load_protocol(batch)
    roles = {role: protocol.items_of(role) for role in ("practice", "gold", "attention")}
    assert {role: len(items) for role, items in roles.items()} == extras and len(batch.items) == 18
    assert all(labels[item].role == role for role, items in roles.items() for item in items)
    assert len({label.sample_id for label in labels.values()}) == 18  # no sample twice
    # Gold items expect their generated label; practice items say what was rewritten.
    for item_id in roles["gold"] + roles["practice"]:
        expected, label = protocol.checks[item_id].expected, labels[item_id]
        assert expected.unsafe == bool(label.gt_unsafe) and expected.category == label.gt_category
    unsafe_practice = next(i for i in roles["practice"] if labels[i].gt_unsafe)
    assert "was rewritten" in protocol.checks[unsafe_practice].feedback
    # An attention check is a safe dialogue that ends with its spoken request, also the transcript's last line.
    for item_id in roles["attention"]:
        label, item, expected = labels[item_id], batch.item(item_id), protocol.checks[item_id].expected
        assert label.gt_unsafe == 0 and expected.unsafe and expected.category in CATEGORIES
        speaker, request = item.turns[-1].speaker, item.turns[-1].text
        assert (
            speaker == "Study" and f"severity {expected.severity}" in request and len(item.turns) == label.n_turns + 1
        )
        dialogue_s = label.n_turns * 0.25 + (label.n_turns - 1) * 0.1
        audio, rate = read_audio(out / item.audio)
        assert len(audio) / rate > dialogue_s + 0.8 + 1.0  # the pause and at least a second of speech
    # The page gets the texts and never an answer.
    public = protocol.public()
    assert set(public) == {
        "title",
        "instructions",
        "consent",
        "debrief",
        "categories",
        "severities",
        "min_listened_share",
        "headphone_trials",
    }
    assert all(item_id not in json.dumps(public) for items in roles.values() for item_id in items)
