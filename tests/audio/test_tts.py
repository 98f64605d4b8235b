import numpy as np
import pytest

from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize, voice_for_speaker
from lalm_judge.audio.tts.xtts import choose_references
from tests.support.coqui import install_coqui_stand_in

PIPER = Voice("piper", {"voice": "joe"})
PIPER_HIGH = Voice("piper", {"voice": "joe", "pitch_shift": 1.25})
ESPEAK = Voice("espeak", {"voice": "en-us+f3"})


def pitch_hz(audio, sr):
    """Median fundamental frequency from autocorrelation over voiced frames (70-400 Hz)."""
    frame, estimates = int(0.04 * sr), []
    for start in range(0, len(audio) - frame, frame):
        x = audio[start : start + frame] - audio[start : start + frame].mean()
        if np.sqrt(np.mean(x**2)) < 0.02:
            continue
        corr = np.correlate(x, x, "full")[frame - 1 :]
        lo, hi = int(sr / 400), int(sr / 70)
        estimates.append(sr / (lo + np.argmax(corr[lo:hi])))
    return float(np.median(estimates))


def test_piper_is_bit_exact():
    a1, sr = synthesize(PIPER, SynthesisRequest("The garden looks lovely today."))
    a2, _ = synthesize(PIPER, SynthesisRequest("The garden looks lovely today."))
    assert sr == 22050 and len(a1) > sr
    assert np.array_equal(a1, a2)


def test_two_demo_voices_are_clearly_different():
    text = SynthesisRequest("I finally planted tomatoes on my balcony.")
    joe, sr_joe = synthesize(PIPER, text)
    female, sr_f = synthesize(ESPEAK, text)
    high, sr_h = synthesize(PIPER_HIGH, text)
    assert pitch_hz(female, sr_f) > 1.5 * pitch_hz(joe, sr_joe)
    assert pitch_hz(high, sr_h) == pytest.approx(1.25 * pitch_hz(joe, sr_joe), rel=0.15)
    assert len(high) == pytest.approx(len(joe), rel=0.1)  # pitch up, about the same duration


def test_espeak_speaks_a_text_longer_than_a_command_line_argument_may_be():
    """espeak-ng reads the text on stdin: as an argument, over 128 KiB failed with E2BIG ('Argument list too long')."""
    text = "Hello" + " " * 140_000 + "there."
    audio, sr = synthesize(ESPEAK, SynthesisRequest(text))
    assert len(audio) > sr / 2  # speech, not an error


def test_empty_text_is_refused():
    with pytest.raises(ValueError, match="empty"):
        synthesize(PIPER, SynthesisRequest("  "))


def test_voice_for_unknown_speakers_uses_defaults_in_order():
    voices = {"default_a": {"engine": "piper"}, "default_b": {"engine": "espeak"}}
    assert voice_for_speaker(voices, "LLM2", ["LLM1", "LLM2"]).engine == "espeak"
    with pytest.raises(KeyError, match="no voice configured"):
        voice_for_speaker({"A": {"engine": "piper"}}, "B", ["A", "B"])


def test_xtts_reference_choice_prefers_the_target_emotion():
    """XTTS itself needs hub weights and a GPU; its reference selection is tested here."""
    request = SynthesisRequest("x", "angry", ("a.wav", "b.wav", "c.wav", "d.wav"), ("happy", "angry", "sad", "angry"))
    assert choose_references(request) == ["b.wav", "d.wav", "a.wav"]
    with pytest.raises(ValueError, match="reference clips"):
        choose_references(SynthesisRequest("x", "angry"))
    # A voice with clips of its own (the preference builder's engines) clones them when the request has none.
    assert choose_references(SynthesisRequest("x"), default=("s1.wav", "s2.wav")) == ["s1.wav", "s2.wav"]


def test_variant_turns_keep_the_voice_and_match_the_neighbours_loudness(tmp_path):
    import polars as pl

    from lalm_judge.audio.synthesis import synthesize_turn_variants
    from lalm_judge.audio.waveform import active_level_db, read_audio, write_wav
    from lalm_judge.core.dialogue import Dialogue, Turn
    from lalm_judge.core.tables import VARIANTS

    voices = {"A": {"engine": "piper", "voice": "joe"}, "B": {"engine": "espeak", "voice": "en-us+f3"}}
    turns = []
    for i, (speaker, gain) in enumerate([("A", 0.3), ("B", 0.3), ("A", 0.1)]):
        audio, sr = synthesize(Voice.from_config(voices[speaker]), SynthesisRequest(f"This is turn number {i}."))
        write_wav(tmp_path / f"t{i}.wav", gain * audio / np.max(np.abs(audio)), sr)
        turns.append(Turn(i, speaker, f"This is turn number {i}.", "happy", clip=str(tmp_path / f"t{i}.wav")))
    Dialogue("d", turns, "jsonl", "-", 22050).save(tmp_path / "dialogue.json")
    variants = VARIANTS.frame(
        {"dialogue_id": "d", "variant_id": f"d.t1.hate.s{s}", "turn_index": 1, "severity": s, "category": "hate"}
        | fields
        for s, fields in [
            (1, {"text": "You are a bit annoying.", "emotion": "angry", "status": "ok"}),
            (5, {"text": "I really despise you.", "emotion": "angry", "status": "ok"}),
            (3, {"text": None, "emotion": None, "status": "refusal"}),
        ]
    )
    variants.write_parquet(tmp_path / "variants.parquet")

    def run(out):
        return synthesize_turn_variants(
            str(tmp_path / "dialogue.json"),
            str(tmp_path / "variants.parquet"),
            str(tmp_path / out),
            str(tmp_path / f"{out}.parquet"),
            voices,
            match_loudness=True,
            progress=False,
        )

    every_variant = run("clips")
    assert every_variant["variant_id"].to_list() == ["d.t1.hate.s1", "d.t1.hate.s5", "d.t1.hate.s3"]
    assert every_variant["clip"][2] is None  # the refusal keeps its row and is not spoken
    table = every_variant.filter(pl.col("clip").is_not_null())
    assert set(table["tts_engine"]) == {"espeak"}  # turn 1 belongs to speaker B
    neighbours = [active_level_db(*read_audio(tmp_path / f"t{i}.wav")) for i in (0, 2)]
    for clip in table["clip"]:
        audio, sr = read_audio(clip)
        assert sr == 22050
        assert active_level_db(audio, sr) == pytest.approx(np.mean(neighbours), abs=0.5)
    again = run("clips_again").filter(pl.col("clip").is_not_null())
    assert [read_audio(c)[0].tobytes() for c in table["clip"]] == [read_audio(c)[0].tobytes() for c in again["clip"]]


@pytest.fixture
def coqui_stand_in(monkeypatch):
    return install_coqui_stand_in(monkeypatch)


def test_xtts_refuses_to_start_without_the_accepted_licence(monkeypatch, coqui_stand_in):
    """coqui-tts would ask for the CPML on stdin: EOFError or a hang in a batch job."""
    from lalm_judge.audio.tts.xtts import XTTSEngine

    monkeypatch.delenv("COQUI_TOS_AGREED", raising=False)
    with pytest.raises(RuntimeError, match="COQUI_TOS_AGREED=1"):
        XTTSEngine(device="cpu")


def test_xtts_utterances_do_not_depend_on_the_order_of_synthesis(monkeypatch, coqui_stand_in):
    from lalm_judge.audio.tts.xtts import XTTSEngine

    monkeypatch.setenv("COQUI_TOS_AGREED", "1")
    engine = XTTSEngine(device="cpu", seed=3)
    first = SynthesisRequest("First line.", "happy", ("a.wav",), ("happy",))
    second = SynthesisRequest("Second line.", "sad", ("a.wav",), ("happy",))
    one, sr = engine.synthesize(first)
    engine.synthesize(second)
    again, _ = engine.synthesize(first)
    other_order = XTTSEngine(device="cpu", seed=3)
    other_order.synthesize(second)
    assert sr == 24000 and np.array_equal(one, again) and np.array_equal(one, other_order.synthesize(first)[0])
    assert not np.array_equal(one, engine.synthesize(second)[0])
    assert engine.describe() == {
        "tts_model": "tts_models/multilingual/multi-dataset/xtts_v2",
        "tts_revision": "coqui-tts==0.28.0",
    }


def test_a_pinned_xtts_voice_loads_that_commits_snapshot(monkeypatch, coqui_stand_in, tmp_path):
    """`revision` (written by `lalm-judge pin-revisions`): huggingface_hub's real snapshot lookup, offline, in a cache
    that holds that commit of tts-hub/XTTS-v2; coqui-tts then loads the folder by path."""
    from lalm_judge.audio.tts.xtts import XTTS_REPOSITORY, XTTSEngine

    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / f"models--{XTTS_REPOSITORY.replace('/', '--')}" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    # huggingface_hub reads these when imported: set where it looks them up, whether it was imported or not.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setenv("COQUI_TOS_AGREED", "1")
    engine = XTTSEngine(device="cpu", revision=commit)
    assert (engine.tts.model_path, engine.tts.config_path) == (str(snapshot), str(snapshot / "config.json"))
    assert engine.describe()["tts_revision"] == f"coqui-tts==0.28.0 {XTTS_REPOSITORY}@{commit}"
