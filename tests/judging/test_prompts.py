"""Prompt YAML loading and validation, and the requests built from a sample for each modality."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from lalm_judge.core.vocabulary import MODALITIES
from lalm_judge.judging.prompts import PROMPTS_DIR, PromptError, build_request, load_prompt
from lalm_judge.judging.scoring import parse_score
from lalm_judge.manifest.samples import Sample

STRATEGIES = ("basic", "cot", "fewshot", "rubric", "calibrated")
AUDIO = (np.zeros(1600, dtype=np.float32), 16000)


@pytest.fixture
def sample():
    return Sample(
        sample_id="chat.t1.violence.s4",
        dialogue_id="chat",
        category="violence",
        severity=4,
        turn_index=1,
        speakers=("LLM1", "LLM2", "LLM1"),
        clips=("t0.wav", "t1.wav", "t2.wav"),
        gaps_s=(0.3, 0.3),
        sample_rate=16000,
        texts={
            "gt": ("We reached the ridge at sunset.", "Push him off the edge next time.", "That is not funny."),
            "asr:whisper_tiny_en": (
                "we reached the ridge at sunset",
                "push him off the edge next time",
                "that's not funny",
            ),
        },
    )


def _write_variant(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load((PROMPTS_DIR / "basic.yaml").read_text())
    edit(raw)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_loads_with_version_and_contract(name):
    prompt = load_prompt(name)
    assert prompt.name == name
    assert prompt.version == f"{name}-v1"
    assert set(prompt.instructions) == set(MODALITIES)
    for modality in MODALITIES:
        _, user = prompt.render(modality, [("LLM1", "Hello.")])
        assert user.rstrip().endswith("SAFETY_SCORE: <number in [0,1]>")
        assert prompt.instructions[modality] in user


def test_prompt_loads_from_a_path():
    assert load_prompt(PROMPTS_DIR / "cot.yaml").version == "cot-v1"


def test_fewshot_examples_are_rendered_with_parseable_scores():
    prompt = load_prompt("fewshot")
    assert len(prompt.examples) >= 3
    _, user = prompt.render("text", [("LLM1", "Hello.")])
    for number, example in enumerate(prompt.examples, 1):
        block = user.split(f"Example {number}:\n", 1)[1].split("\n\n", 1)[0]
        assert f"Speaker {example.turns[0][0]}: {example.turns[0][1]}" in block
        assert parse_score(block).score == pytest.approx(example.score)
    assert user.index("Example 1:") < user.index("Speaker LLM1: Hello.")


def test_rubric_levels_are_rendered_in_order():
    prompt = load_prompt("rubric")
    _, user = prompt.render("text", [("LLM1", "Hello.")])
    lines = [line for line in user.splitlines() if line.startswith("- ")]
    assert [float(line[2:].split(" =")[0]) for line in lines] == [level.score for level in prompt.rubric]
    assert lines[0] == f"- 1.0 = safe: {prompt.rubric[0].description}"


def test_calibrated_prompt_carries_its_answer_tokens(sample):
    request = build_request(load_prompt("calibrated"), sample, "text", "gt")
    assert request.answer_tokens == ("Yes", "No")
    assert build_request(load_prompt("basic"), sample, "text", "gt").answer_tokens is None


def test_text_request_shows_speaker_labelled_turns(sample):
    request = build_request(load_prompt("basic"), sample, "text", "gt")
    assert request.request_id == sample.sample_id
    assert request.audio is None
    assert "Transcript:\nSpeaker LLM1: We reached the ridge at sunset.\nSpeaker LLM2: Push him off" in request.user
    assert request.transcript == tuple(sample.transcript("gt"))
    assert "Read the transcript" in request.user


def test_asr_transcript_source_is_used(sample):
    request = build_request(load_prompt("basic"), sample, "text", "asr:whisper_tiny_en", request_id="r7")
    assert "Speaker LLM1: that's not funny" in request.user
    assert request.request_id == "r7"


def test_audio_request_has_no_transcript(sample):
    request = build_request(load_prompt("cot"), sample, "audio", "none", audio=AUDIO)
    assert request.audio is AUDIO
    assert "Speaker" not in request.user and "Transcript:" not in request.user
    assert request.transcript == ()
    assert "Listen to the dialogue" in request.user
    assert build_request(load_prompt("cot"), sample, "audio", "none", audio=AUDIO).user == request.user


def test_audio_text_request_has_both(sample):
    request = build_request(load_prompt("basic"), sample, "audio_text", "gt", audio=AUDIO)
    assert request.audio is AUDIO and "Speaker LLM2: Push him off the edge next time." in request.user


def test_turn_indices_limit_the_transcript(sample):
    request = build_request(load_prompt("basic"), sample, "audio_text", "gt", audio=AUDIO, turn_indices=[1, 2])
    assert "ridge" not in request.user and "Speaker LLM1: That is not funny." in request.user
    assert len(request.transcript) == 2


def test_cascade_transcript_travels_without_entering_the_prompt(sample):
    request = build_request(
        load_prompt("basic"), sample, "audio", "none", audio=AUDIO, cascade_source="asr:whisper_tiny_en"
    )
    assert request.transcript == tuple(sample.transcript("asr:whisper_tiny_en"))
    assert "ridge" not in request.user


@pytest.mark.parametrize(
    ("modality", "source", "audio", "message"),
    [
        ("text", "none", None, "needs a transcript source"),
        ("text", "gt", AUDIO, "takes no audio"),
        ("audio", "gt", AUDIO, "has no transcript source"),
        ("audio", "none", None, "needs audio"),
        ("audio_text", "gt", None, "needs audio"),
        ("video", "gt", None, "unknown modality"),
    ],
)
def test_inconsistent_requests_are_rejected(sample, modality, source, audio, message):
    with pytest.raises(ValueError, match=message):
        build_request(load_prompt("basic"), sample, modality, source, audio=audio)


def test_unknown_transcript_source_names_the_sample(sample):
    with pytest.raises(KeyError, match="chat.t1.violence.s4"):
        build_request(load_prompt("basic"), sample, "text", "asr:large_v3")


def test_missing_key_names_file_and_key(tmp_path):
    path = _write_variant(tmp_path, lambda raw: raw.pop("user"))
    with pytest.raises(PromptError, match=rf"{path}.*missing key 'user'"):
        load_prompt(path)


def test_missing_modality_instruction_is_named(tmp_path):
    path = _write_variant(tmp_path, lambda raw: raw["instructions"].pop("audio_text"))
    with pytest.raises(PromptError, match=r"missing key 'instructions.audio_text'"):
        load_prompt(path)


def test_unknown_template_field_is_named(tmp_path):
    path = _write_variant(tmp_path, lambda raw: raw.update(user=raw["user"] + "{speaker_names}"))
    with pytest.raises(PromptError, match=r"unknown fields \['speaker_names'\]"):
        load_prompt(path)


def test_examples_field_without_examples_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda raw: raw.update(user="{examples}\n" + raw["user"]))
    with pytest.raises(PromptError, match="'examples' must be given exactly when"):
        load_prompt(path)


def test_prompt_without_output_contract_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda raw: raw.update(user="{instructions}\n{transcript}\nIs it safe?"))
    with pytest.raises(PromptError, match="output contract"):
        load_prompt(path)


def test_unknown_prompt_name_lists_known_prompts():
    with pytest.raises(PromptError, match=r"known prompts: .*\bbasic\b.*\bcot\b"):
        load_prompt("socratic")


def test_content_hash_changes_with_text(tmp_path):
    path = _write_variant(tmp_path, lambda raw: raw.update(system=raw["system"] + " Be brief."))
    assert load_prompt(path).content_hash != load_prompt("basic").content_hash


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # A text cell would be scored on a dialogue it never saw.
        (lambda raw: raw.update(user=raw["user"].replace("{transcript}", "")), r"never use \{transcript\}"),
        # Nothing would tell an audio cell that the dialogue is the attached audio.
        (lambda raw: raw.update(user=raw["user"].replace("{instructions}", "")), r"never use \{instructions\}"),
        # The audio's place is the judge's prompt format, not the template's.
        (lambda raw: raw.update(user="{audio}\n" + raw["user"]), r"unknown fields \['audio'\]"),
        (lambda raw: raw.update(user=raw["user"] + "{}"), r"unknown fields \[''\]"),
        (lambda raw: raw.update(user=raw["user"] + "{transcript.upper}"), r"unknown fields \['transcript.upper'\]"),
        (lambda raw: raw.update(user=raw["user"] + "{transcript"), "not a valid format template"),
    ],
)
def test_templates_are_checked_for_the_placeholders_each_modality_needs(tmp_path, edit, message):
    path = _write_variant(tmp_path, edit)
    with pytest.raises(PromptError, match=rf"prompt file {path}: .*{message}"):
        load_prompt(path)
