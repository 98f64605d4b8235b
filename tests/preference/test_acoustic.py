import numpy as np
import pytest

from lalm_judge.pairwise.consistency import rationale_verdict
from lalm_judge.preference.acoustic import (
    AcousticError,
    AcousticText,
    _draw,
    acoustic_pairs,
    instruction,
    rationale,
    read_texts,
)
from tests.support.workflow import ROOT

TEXTS = ROOT / "data" / "preference_demo" / "acoustic.yaml"
ESPEAK = {"engine": "espeak", "voice": "en-us+m3"}


def test_the_shipped_texts_have_every_format():
    texts = read_texts(TEXTS)
    assert {t.task_format for t in texts} == {"explicit_tts", "explicit_dialogue", "implicit_dialogue"}
    implicit = [t for t in texts if t.task_format == "implicit_dialogue"]
    assert {t.emotion for t in implicit} == {"happy", "sad"}


def test_a_bad_texts_file_names_the_entry(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("explicit_dialogue:\n  - question: Why?\n")
    with pytest.raises(AcousticError, match=r"explicit_dialogue\[0\] needs question, answer"):
        read_texts(path)


def test_instructions_ask_for_the_style_or_only_imply_it():
    tts = AcousticText("explicit_tts", 0, "The train leaves at nine.")
    assert instruction("emotion", tts, "sad") == "Speak the following text with a sad voice: The train leaves at nine."
    assert instruction("gender", tts, "female").startswith("Read the following text aloud in a woman's voice")
    dialogue = AcousticText("explicit_dialogue", 0, "Pack water.", "What should I pack?")
    assert instruction("character", dialogue, "giant") == "What should I pack? Answer in the voice of a giant."
    implicit = AcousticText("implicit_dialogue", 0, "So sorry.", "My dog died.", "sad")
    assert instruction("emotion", implicit, "sad") == "My dog died."


def test_labels_come_from_the_styles_used():
    variants = {"neutral": [ESPEAK], "happy": [ESPEAK], "sad": [ESPEAK, ESPEAK]}
    text = AcousticText("explicit_tts", 0, "Hello there.")
    ties = 0
    for seed in range(60):
        requested, (first, second), label = _draw("emotion", text, variants, 0.3, np.random.default_rng(seed))
        assert requested != "neutral"  # neutral is only ever the distractor
        matches = (first.style == requested, second.style == requested)
        if label == "Tie":
            ties += 1
            assert matches[0] == matches[1] and first != second
        else:
            assert matches == ((True, False) if label == "1" else (False, True))
        assert rationale_verdict(rationale("emotion", text, requested, (first.style, second.style), label)) == label
    assert 0 < ties < 60


def test_two_styles_with_one_voice_each_have_no_ties():
    text = AcousticText("explicit_tts", 0, "Hello there.")
    variants = {"male": [ESPEAK], "female": [ESPEAK]}
    labels = {_draw("gender", text, variants, 1.0, np.random.default_rng(s))[2] for s in range(20)}
    assert labels == {"1", "2"}


def test_implicit_texts_ask_for_their_own_emotion():
    text = AcousticText("implicit_dialogue", 0, "Great news!", "I got the job!", "happy")
    variants = {"neutral": [ESPEAK], "happy": [ESPEAK], "sad": [ESPEAK]}
    assert all(_draw("emotion", text, variants, 0.0, np.random.default_rng(s))[0] == "happy" for s in range(10))
    with pytest.raises(AcousticError, match="calls for emotion 'angry'"):
        _draw(
            "emotion", AcousticText("implicit_dialogue", 1, "a", "q", "angry"), variants, 0.0, np.random.default_rng(0)
        )


def test_a_category_is_spoken_once_per_rendering(tmp_path):
    """Real espeak-ng: the gender pairs of the shipped texts (explicit formats only)."""
    styles = {"male": {"engine": "espeak", "voice": "en-us+m3"}, "female": {"engine": "espeak", "voice": "en-us+f3"}}
    table = acoustic_pairs(TEXTS, "gender", styles, tmp_path, tmp_path / "gender.parquet", progress=False)
    assert table.height == 4 and set(table["task_format"]) == {"explicit_tts", "explicit_dialogue"}
    assert set(table["aspect"]) == {"gender"} and set(table["label"]) <= {"1", "2"}
    clips = set(table["response1_audio"]) | set(table["response2_audio"])
    assert len(list((tmp_path / "acoustic" / "gender").glob("*.wav"))) == len(clips) <= 8
    again = acoustic_pairs(TEXTS, "gender", styles, tmp_path, tmp_path / "again.parquet", progress=False)
    assert again.drop("package_versions").equals(table.drop("package_versions"))  # seeded


EMOTION_STYLES = {  # espeak-ng prosody: quick and high, slow and low, plain
    "happy": {"engine": "espeak", "voice": "en-us+f3", "speed": 200, "pitch": 80},
    "sad": {"engine": "espeak", "voice": "en-us+f3", "speed": 120, "pitch": 25},
    "neutral": {"engine": "espeak", "voice": "en-us+f3"},
}


def test_mixed_pairs_control_gender_and_emotion_at_once(tmp_path):
    """SageLM's mixed control (83 of its 410 acoustic test records): a gender and an emotion asked for together."""
    styles = {
        "female_happy": {"engine": "espeak", "voice": "en-us+f3", "speed": 200, "pitch": 80},
        "male_happy": {"engine": "espeak", "voice": "en-us+m3", "speed": 200, "pitch": 80},
        "female_sad": {"engine": "espeak", "voice": "en-us+f3", "speed": 120, "pitch": 25},
        "male_neutral": {"engine": "espeak", "voice": "en-us+m3"},
    }
    table = acoustic_pairs(TEXTS, "gender_emotion", styles, tmp_path, tmp_path / "mixed.parquet", progress=False)
    assert table.height == 4 and set(table["aspect"]) == {"gender_emotion"}
    assert set(table["task_format"]) == {"explicit_tts", "explicit_dialogue"}  # no implicit mixed format
    for row in table.iter_rows(named=True):
        assert row["requested"] != "male_neutral"  # neutral styles are only distractors
        gender, emotion = row["requested"].split("_")
        assert f"{'a woman' if gender == 'female' else 'a man'}'s voice and a {emotion} tone" in row["query"]
        styles_used = (row["style1"], row["style2"])
        assert row["label"] == (
            "Tie"
            if (styles_used[0] == row["requested"]) == (styles_used[1] == row["requested"])
            else str(styles_used.index(row["requested"]) + 1)
        )
        assert rationale_verdict(row["rationale"]) == row["label"]


def test_clip_names_carry_the_task_format_and_the_implicit_subset_through_export_and_reimport(tmp_path):
    """The exported records are named as SageLM names its audio, so importing them back (the pairwise track's SageLM
    importer, SageLM's own evaluation rule) finds the implicit subset and the task formats the builder made."""
    import polars as pl

    from lalm_judge.core.tables import PAIRWISE_ITEMS, PREFERENCE_PAIRS
    from lalm_judge.pairwise.sagelm import export_sagelm, import_sagelm
    from lalm_judge.preference.stage import item_rows

    table = acoustic_pairs(TEXTS, "emotion", EMOTION_STYLES, tmp_path, tmp_path / "emotion.parquet", progress=False)
    assert sorted(set(table["task_format"])) == ["explicit_dialogue", "explicit_tts", "implicit_dialogue"]
    implicit = table.filter(pl.col("task_format") == "implicit_dialogue")
    assert all("/Implicit-Emotion/" in path for path in implicit["response1_audio"])
    items = PAIRWISE_ITEMS.frame(item_rows(PREFERENCE_PAIRS.empty(), table, str(tmp_path)))
    export_sagelm(items, tmp_path / "export")
    back, _ = import_sagelm([tmp_path / "export" / "acoustic.json"], tmp_path)
    built = table.group_by("aspect").len().sort("aspect").rows()
    assert back.group_by("aspect").len().sort("aspect").rows() == built == [("emotion", 4), ("implicit_emotion", 2)]
    formats = {
        "explicit_tts": "explicit_tts",
        "explicit_dialogue": "explicit_dialogue",
        "implicit_dialogue": "implicit",
    }
    assert back["task_format"].to_list() == [formats[f] for f in table["task_format"]]
    assert set(back["style"]) == {"emotion"}
