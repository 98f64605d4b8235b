import re

import pytest

from lalm_judge.core.vocabulary import (
    MODALITIES,
    PARSE_STATUSES,
    VERDICT_STATUSES,
    VERDICTS,
    Condition,
    ParseStatus,
    TranscriptSource,
    condition_cell_error,
    modality_source_error,
    pairwise_mode,
)


def test_transcript_source_has_one_spelling_everywhere():
    source = TranscriptSource.asr("whisper_base")
    assert source == "asr:whisper_base" and source.is_asr and source.asr_model == "whisper_base"
    assert TranscriptSource(source) is source
    assert TranscriptSource("gt").has_transcript and not TranscriptSource("gt").is_asr
    assert not TranscriptSource("none").has_transcript and TranscriptSource("none").asr_model is None
    assert f"text-{source}" == "text-asr:whisper_base"  # the path component is the label itself


@pytest.mark.parametrize("label", ["asr.whisper_base", "ASR:x", "asr:", "", None, "gt ", "asr:a/b"])
def test_other_spellings_of_a_transcript_source_are_rejected(label):
    with pytest.raises(ValueError, match="invalid transcript source"):
        TranscriptSource(label)


def test_modality_and_source_must_fit():
    assert modality_source_error("audio", TranscriptSource("none")) is None
    assert modality_source_error("text", TranscriptSource("asr:m")) is None
    assert "has no transcript source" in modality_source_error("audio", TranscriptSource("gt"))
    assert "needs a transcript source" in modality_source_error("audio_text", TranscriptSource("none"))
    assert "unknown modality" in modality_source_error("video", TranscriptSource("gt"))
    assert MODALITIES == ("text", "audio", "audio_text")


def test_parse_statuses_are_declared_once_and_compare_as_strings():
    assert ParseStatus.OK == "ok" and "refusal" in PARSE_STATUSES
    assert len(set(PARSE_STATUSES)) == len(PARSE_STATUSES)


def test_pairwise_words():
    assert VERDICTS == ("1", "2", "Tie")
    # A verdict has no numeric range, no answer-token probability and no chunked windows.
    assert set(VERDICT_STATUSES) == set(PARSE_STATUSES) - {"out_of_range", "low_answer_mass", "incomplete_windows"}
    assert pairwise_mode("audio", "none") == "audio_native"
    assert pairwise_mode("text", "asr:whisper_large_v3") == "cascade"
    assert pairwise_mode("text", "gt") == "text_oracle"
    assert pairwise_mode("audio_text", "asr:whisper_tiny_en") == "audio_and_transcript"
    with pytest.raises(ValueError, match="has no transcript source"):
        pairwise_mode("audio", "gt")


def test_audio_input_says_when_a_cell_is_an_asr_cascade():
    from lalm_judge.core.vocabulary import audio_input_label, cascade_source

    assert audio_input_label("text") == "none"
    assert audio_input_label("audio") == "native" and audio_input_label("audio_text") == "native"
    cascade = audio_input_label("audio", "whisper_tiny_en")
    assert cascade == "cascade via whisper_tiny_en"
    assert cascade_source(cascade) == TranscriptSource.asr("whisper_tiny_en")
    assert cascade_source("native") is None and cascade_source(None) is None


@pytest.mark.parametrize(
    ("label", "kind", "snr", "transforms_audio", "needs_synthesis"),
    [
        ("clean", "clean", None, False, False),
        ("masked", "masked", None, True, False),
        ("silence", "silence", None, True, False),
        ("noise_0", "noise", 0, True, False),
        ("noise_20", "noise", 20, True, False),
        ("babble_5", "babble", 5, True, False),
        ("tts_control", "tts_control", None, False, True),
        ("injection", "injection", None, False, True),
    ],
)
def test_conditions_have_one_spelling_and_say_what_they_change(label, kind, snr, transforms_audio, needs_synthesis):
    condition = Condition(label)
    assert condition == label and condition.kind == kind and condition.snr_db == snr
    assert (condition.transforms_audio, condition.needs_synthesis) == (transforms_audio, needs_synthesis)
    assert condition.changes_transcript == (label == "injection")
    assert re.match(Condition.PATTERN, label)


@pytest.mark.parametrize("label", ["noise_05", "noise_", "noise_100", "noise-10", "Masked", "pink_10", "", None])
def test_other_condition_spellings_are_rejected(label):
    with pytest.raises(ValueError, match="invalid condition"):
        Condition(label)


def test_a_condition_applies_where_it_changes_what_the_judge_is_given():
    gt, asr, none = TranscriptSource("gt"), TranscriptSource("asr:m"), TranscriptSource("none")
    assert condition_cell_error("masked", "audio", none) is None
    assert condition_cell_error("noise_10", "audio_text", gt) is None
    assert condition_cell_error("masked", "text", asr) is None  # the ASR transcript of the masked turn
    assert "would see its clean input" in condition_cell_error("masked", "text", gt)
    assert "would see its clean input" in condition_cell_error("tts_control", "text", gt)
    assert condition_cell_error("injection", "text", gt) is None
    assert condition_cell_error("silence", "audio", none) is None
    assert "audio-use check" in condition_cell_error("silence", "audio_text", gt)


def test_the_config_schema_accepts_exactly_the_condition_grammar():
    from pathlib import Path

    import jsonschema
    import yaml

    schema = yaml.safe_load((Path(__file__).parents[2] / "schemas" / "config.schema.yaml").read_text())
    evaluation = schema["properties"]["evaluation"]["properties"]["conditions"]["items"]
    schedule = schema["properties"]["judges"]["additionalProperties"]["properties"]["schedule"]["properties"]
    for items in (evaluation, schedule["conditions"]["items"]):
        assert items["pattern"] == Condition.PATTERN
    for label in ("clean", "noise_0", "babble_20", "injection", "noise_05", "noise_100", "pink_5"):
        accepted = jsonschema.Draft202012Validator(evaluation).is_valid(label)
        try:
            Condition(label)
            assert accepted, label
        except ValueError:
            assert not accepted, label
