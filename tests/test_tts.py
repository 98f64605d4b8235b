import numpy as np
import pytest

from lalm_judge.tts import SynthesisRequest, Voice, synthesize, voice_for_speaker
from lalm_judge.tts_engines.xtts import choose_references

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
