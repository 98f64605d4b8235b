"""RAVDESS emotion references on a small RAVDESS-layout folder the test writes (RAVDESS itself is never copied
here): the mapping of every DeepDialogue label, the intensity, the actor chosen per (dialogue, speaker), the errors,
the check before the first job, and the XTTS call they reach. XTTS needs hub weights: its coqui-tts 0.28 API is a
stand-in with the real signatures (tests/support/coqui.py)."""

from __future__ import annotations

import inspect
import json

import numpy as np
import polars as pl
import pytest

from lalm_judge.audio import emotion_reference as er
from lalm_judge.core.files import stable_hash
from lalm_judge.core.taxonomy import EMOTIONS
from tests.support.coqui import XttsStandIn, install_coqui_stand_in
from tests.support.corpora import write_ravdess

GENDERS = {"LLM1": "male", "LLM2": "female"}


@pytest.fixture(scope="module")
def ravdess(tmp_path_factory):
    return write_ravdess(tmp_path_factory.mktemp("ravdess"))


def chooser(folder, **settings) -> er.EmotionReferences:
    spec = {"corpus": "ravdess", "path": str(folder), "speaker_genders": GENDERS} | settings
    return er.EmotionReferences(er.EmotionReferenceSettings.from_config(spec))


def test_the_mapping_covers_every_deepdialogue_label_with_the_eight_ravdess_emotions():
    assert set(er.EMOTION_TO_RAVDESS) == set(EMOTIONS)
    assert set(er.EMOTION_TO_RAVDESS.values()) == set(er.RAVDESS_EMOTIONS.values())


def test_file_names_follow_the_ravdess_convention():
    clip = er.parse_name("Actor_12/03-01-06-02-01-02-12.wav")
    assert (clip.emotion, clip.intensity, clip.statement, clip.repetition, clip.actor) == (
        "fearful",
        "02",
        "01",
        "02",
        12,
    )
    assert clip.gender == "female" and er.parse_name("03-01-06-02-01-02-07.wav").gender == "male"
    # Song (vocal channel 02) and audio-visual (modality 01) files are no speech references.
    assert er.parse_name("03-02-06-02-01-02-12.wav") is None and er.parse_name("01-01-06-02-01-02-12.wav") is None
    assert er.parse_name("notes.wav") is None


@pytest.mark.parametrize("label", EMOTIONS)
def test_each_label_is_cloned_from_its_ravdess_emotion_at_strong_intensity(ravdess, label):
    references = chooser(ravdess)
    emotion = er.EMOTION_TO_RAVDESS[label]
    actor = references.actor("dlg_a", "LLM2")
    code = next(c for c, e in er.RAVDESS_EMOTIONS.items() if e == emotion)
    intensity = "01" if emotion == "neutral" else "02"  # RAVDESS has no strong neutral
    # The first two of the actor's clips: both statements, first repetition.
    expected = [
        str(ravdess / f"Actor_{actor:02d}" / f"03-01-{code}-{intensity}-{statement}-01-{actor:02d}.wav")
        for statement in ("01", "02")
    ]
    assert list(references.references("dlg_a", "LLM2", label)) == expected


def test_a_speaker_keeps_one_actor_of_its_gender_in_a_dialogue(ravdess):
    references = chooser(ravdess)
    dialogues = [f"dlg_{i:02d}" for i in range(12)]
    for dialogue in dialogues:
        male, female = references.actor(dialogue, "LLM1"), references.actor(dialogue, "LLM2")
        assert male in (1, 3) and female in (2, 4)
        used = {er.parse_name(p).actor for label in EMOTIONS for p in references.references(dialogue, "LLM1", label)}
        assert used == {male}
        assert male == (1, 3)[int(stable_hash({"dialogue": dialogue, "speaker": "LLM1"}), 16) % 2]
    # The same on a second scan of the folder (another job), and spread over the actors of a gender.
    again = chooser(ravdess)
    assert [again.actor(d, "LLM1") for d in dialogues] == [references.actor(d, "LLM1") for d in dialogues]
    assert {references.actor(d, "LLM1") for d in dialogues} == {1, 3}


def test_a_dialogue_key_gives_one_dialogue_its_own_gender(ravdess):
    references = chooser(ravdess, speaker_genders={"LLM1": "male", "dlg_x/LLM1": "female"})
    assert references.gender("dlg_x", "LLM1") == "female" and references.actor("dlg_x", "LLM1") % 2 == 0
    assert references.gender("dlg_y", "LLM1") == "male"


def test_an_unknown_gender_or_label_is_an_error_naming_what_to_set(ravdess):
    references = chooser(ravdess)
    with pytest.raises(er.EmotionReferenceError, match=r"speaker_genders\.LLM3 .* 'dlg_a/LLM3'"):
        references.references("dlg_a", "LLM3", "happy")
    with pytest.raises(
        er.EmotionReferenceError, match=r"emotion 'worried' has no RAVDESS emotion: add it to .*mapping"
    ):
        references.references("dlg_a", "LLM1", "worried")
    mapped = chooser(ravdess, mapping={"worried": "fearful"})
    assert {er.parse_name(p).emotion for p in mapped.references("dlg_a", "LLM1", "worried")} == {"fearful"}
    with pytest.raises(er.EmotionReferenceError, match="map to no RAVDESS emotion"):
        chooser(ravdess, mapping={"worried": "anxious"})
    assert references.references("dlg_a", "LLM1", None) == ()


def test_a_missing_folder_an_empty_one_and_an_incomplete_actor(tmp_path):
    with pytest.raises(er.EmotionReferenceError, match="is not a folder; unpack RAVDESS"):
        chooser(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(er.EmotionReferenceError, match="holds no RAVDESS speech file"):
        chooser(tmp_path / "empty")
    # Actor 4 lacks one strong angry clip: with clips: 4 only actor 2 can speak every emotion.
    folder = write_ravdess(tmp_path / "partial", actors=(2, 4), skip=("03-01-05-02-02-02-04.wav",))
    references = chooser(folder, clips=4)
    assert {references.actor(f"d{i}", "LLM2") for i in range(8)} == {2}
    with pytest.raises(er.EmotionReferenceError, match="no male actor has 4 clip"):
        references.actor("d0", "LLM1")


def test_the_problems_before_the_first_job_name_each_dialogue_and_speaker(ravdess):
    references = chooser(ravdess, speaker_genders={"LLM1": "male"})
    problems = references.problems([("d1", "LLM1", None), ("d1", "LLM2", None), ("d2", "LLM1", "worried")])
    assert len(problems) == 2
    assert "dialogue 'd1', speaker 'LLM2': no gender" in problems[0] and "emotion 'worried'" in problems[1]


# --- the XTTS call --------------------------------------------------------------------------------------------


def test_the_stand_in_has_the_signatures_of_coqui_tts_0_28():
    """The parameters of `Xtts.get_conditioning_latents` and `Xtts.inference` in coqui-tts 0.28.0
    (TTS/tts/models/xtts.py), as read there."""
    assert list(inspect.signature(XttsStandIn.get_conditioning_latents).parameters)[1:] == [
        "audio_path",
        "max_ref_length",
        "gpt_cond_len",
        "gpt_cond_chunk_len",
        "librosa_trim_db",
        "sound_norm_refs",
        "load_sr",
    ]
    assert list(inspect.signature(XttsStandIn.inference).parameters)[1:] == [
        "text",
        "language",
        "gpt_cond_latent",
        "speaker_embedding",
        "temperature",
        "length_penalty",
        "repetition_penalty",
        "top_k",
        "top_p",
        "do_sample",
        "num_beams",
        "speed",
        "enable_text_splitting",
        "hf_generate_kwargs",
    ]


def test_xtts_takes_the_prosody_from_the_emotion_clips_and_the_voice_from_the_speaker(monkeypatch):
    from lalm_judge.audio.tts import SynthesisRequest
    from lalm_judge.audio.tts.xtts import XTTSEngine

    stand_in = install_coqui_stand_in(monkeypatch)
    monkeypatch.setenv("COQUI_TOS_AGREED", "1")
    engine = XTTSEngine(device="cpu", temperature=0.65, seed=1)
    own = ("t0.wav", "t2.wav")
    emotion = ("Actor_03/03-01-05-02-01-01-03.wav", "Actor_03/03-01-05-02-02-01-03.wav")
    audio, rate = engine.synthesize(SynthesisRequest("Get out of here.", "angry", own, ("happy", "sad"), emotion))
    assert rate == 24000 and audio.dtype == np.float32 and len(audio) == 240
    calls = stand_in.instances[0].synthesizer.tts_model.calls
    latents = [arguments for name, arguments in calls if name == "get_conditioning_latents"]
    # The style (GPT latent) from the emotion clips first, then the speaker's; the voice from the speaker's alone.
    assert [c["audio_path"] for c in latents] == [[*emotion, *own], list(own)]
    # The checkpoint's conditioning settings, as Xtts.synthesize reads them (max_ref_len -> max_ref_length).
    assert latents[0] | {"audio_path": None} == {
        "audio_path": None,
        "max_ref_length": 30,
        "gpt_cond_len": 30,
        "gpt_cond_chunk_len": 4,
        "sound_norm_refs": False,
    }
    (inference,) = [arguments for name, arguments in calls if name == "inference"]
    assert inference == {
        "text": "Get out of here.",
        "language": "en",
        "gpt_cond_latent": ("gpt_latent", (*emotion, *own)),
        "speaker_embedding": ("speaker_embedding", own),
        "temperature": 0.65,  # the voice's; the rest from the checkpoint config
        "length_penalty": 1.0,
        "repetition_penalty": 5.0,
        "top_k": 50,
        "top_p": 0.85,
        "enable_text_splitting": True,
    }


def test_the_tts_stage_records_the_ravdess_clips_of_every_variant(ravdess, tmp_path, monkeypatch):
    from lalm_judge.audio.synthesis import synthesize_turn_variants
    from lalm_judge.audio.waveform import write_wav
    from lalm_judge.core.dialogue import Dialogue, Turn
    from lalm_judge.core.tables import VARIANTS

    stand_in = install_coqui_stand_in(monkeypatch)
    monkeypatch.setenv("COQUI_TOS_AGREED", "1")
    turns = []
    for i, speaker in enumerate(("LLM1", "LLM2", "LLM1")):
        write_wav(tmp_path / f"t{i}.wav", 0.2 * np.sin(np.arange(16000) / 9.0), 16000)
        turns.append(Turn(i, speaker, f"Turn {i}.", "happy", clip=str(tmp_path / f"t{i}.wav")))
    Dialogue("dlg_r", turns, "jsonl", "-", 16000).save(tmp_path / "dialogue.json")
    labels = {1: "frustrated", 5: "anxious"}
    VARIANTS.frame(
        {"dialogue_id": "dlg_r", "variant_id": f"dlg_r.t1.hate.s{s}", "turn_index": 1, "severity": s}
        | {"category": "hate", "text": "You never listen.", "emotion": label, "status": "ok", "speaker": "LLM2"}
        for s, label in labels.items()
    ).write_parquet(tmp_path / "variants.parquet")
    spec = {"corpus": "ravdess", "path": str(ravdess), "speaker_genders": GENDERS, "clips": 2, "mapping": {}}
    table = synthesize_turn_variants(
        str(tmp_path / "dialogue.json"),
        str(tmp_path / "variants.parquet"),
        str(tmp_path / "clips"),
        str(tmp_path / "tts.parquet"),
        {"LLM1": {"engine": "xtts", "device": "cpu"}, "LLM2": {"engine": "xtts", "device": "cpu"}},
        match_loudness=False,
        emotion_reference=spec,
        progress=False,
    )
    expected = chooser(ravdess)
    for row in table.iter_rows(named=True):
        assert row["emotion_references"] == list(expected.references("dlg_r", "LLM2", row["emotion"]))
    assert {er.parse_name(p).emotion for p in table["emotion_references"][0]} == {"angry"}
    assert {er.parse_name(p).emotion for p in table["emotion_references"][1]} == {"fearful"}
    # What XTTS was given: the recorded clips, then turn 1's speaker's own clip.
    model = stand_in.instances[0].synthesizer.tts_model
    styles = [a["audio_path"] for n, a in model.calls if n == "get_conditioning_latents"]
    assert [*table["emotion_references"][0], str(tmp_path / "t1.wav")] in styles
    assert json.loads(pl.read_parquet(tmp_path / "tts.parquet")["generation"][0])["emotion_reference"] == spec
