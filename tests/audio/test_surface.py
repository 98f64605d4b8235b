"""Property tests of the pairwise audit's surface transforms (lalm_judge.audio.surface): the gain is the measured
level difference, padding adds exactly the asked samples, the time-stretch changes the duration by the factor and
keeps the pitch, and Whisper tiny.en hears the same words in every transformed clip of a Piper utterance."""

from __future__ import annotations

import numpy as np
import pytest

from lalm_judge.audio.asr import load_asr, word_error_rate
from lalm_judge.audio.surface import (
    SurfaceError,
    apply_gain,
    last_sentence,
    match_level,
    pad_silence,
    rms_db,
    time_stretch,
    with_last_sentence_repeated,
)
from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize
from lalm_judge.audio.waveform import resample

SR = 16000


def noise(seconds: float, scale: float, seed: int) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(int(seconds * SR))).astype(np.float32)


@pytest.mark.parametrize("offset_db", [-6.0, -3.0, 0.0, 3.0, 6.0, 12.5])
@pytest.mark.parametrize("seed", range(3))
def test_the_changed_clip_is_the_other_clips_level_plus_the_gain(offset_db, seed):
    clip, other = noise(1.3, 0.05 * (seed + 1), seed), noise(0.7, 0.2, seed + 10)
    changed = match_level(clip, other, offset_db)
    assert rms_db(changed) - rms_db(other) == pytest.approx(offset_db, abs=1e-4)
    # Only the level changes: the waveform is the same up to one factor, and nothing is clipped.
    assert np.allclose(changed / clip, changed[0] / clip[0], rtol=1e-4)


def test_gain_in_db_is_measured_and_silence_has_no_level():
    clip = noise(1.0, 0.1, 0)
    assert rms_db(apply_gain(clip, 6.0)) - rms_db(clip) == pytest.approx(6.0, abs=1e-4)
    assert rms_db(np.full(100, 0.5)) == pytest.approx(20 * np.log10(0.5))
    with pytest.raises(SurfaceError, match="silent clip"):
        match_level(np.zeros(10), clip)


@pytest.mark.parametrize("seconds", [0.0, 0.5, 1.0, 1.00003, 2.5])
@pytest.mark.parametrize("rate", [8000, 16000, 22050])
def test_padding_adds_exactly_the_asked_duration_of_silence_around_the_clip(seconds, rate):
    clip = noise(0.4, 0.1, 1)
    padded = pad_silence(clip, rate, seconds)
    added = int(round(seconds * rate))
    assert len(padded) == len(clip) + added
    before = added // 2
    assert np.array_equal(padded[before : before + len(clip)], clip)
    assert not padded[:before].any() and not padded[before + len(clip) :].any()
    with pytest.raises(SurfaceError):
        pad_silence(clip, rate, -1)


def dominant_hz(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    return float(np.fft.rfftfreq(len(audio), 1 / SR)[np.argmax(spectrum)])


@pytest.mark.parametrize("factor", [0.8, 1.25, 1.5])
def test_time_stretch_changes_the_duration_by_the_factor_and_keeps_the_pitch(factor):
    t = np.arange(2 * SR) / SR
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    stretched = time_stretch(tone, factor)
    assert len(stretched) / SR == pytest.approx(2.0 / factor, rel=0.01)
    assert dominant_hz(stretched) == pytest.approx(220, rel=0.02)
    with pytest.raises(SurfaceError, match="outside"):
        time_stretch(tone, 10)


def test_the_repeat_text_says_the_last_sentence_twice():
    text = "Water boils at 100 degrees. That is at sea level!"
    assert last_sentence(text) == "That is at sea level!"
    assert with_last_sentence_repeated(text) == f"{text} That is at sea level!"
    assert with_last_sentence_repeated("One sentence only") == "One sentence only One sentence only"


def test_whisper_hears_the_same_words_after_every_transform():
    text = "The library opens at nine in the morning and closes at six."
    audio, rate = synthesize(Voice.from_config({"engine": "piper", "voice": "joe"}), SynthesisRequest(text))
    clip = resample(audio, rate, SR)
    asr = load_asr("bundled:tiny.en", cpu_threads=1)
    transformed = {
        "clean": clip,
        "gain_6": apply_gain(clip, 6.0),
        "gain_-6": apply_gain(clip, -6.0),
        "pad_1": pad_silence(clip, SR, 1.0),
        "rate_0.8": time_stretch(clip, 0.8),
        "rate_1.1": time_stretch(clip, 1.1),  # (at 1.25 the phase vocoder's smearing makes tiny.en mishear words)
    }
    heard = {name: asr.transcribe(wave, SR).text for name, wave in transformed.items()}
    assert word_error_rate(text, heard["clean"]) <= 0.2, heard  # "nine" may come back as "9"
    # Content unchanged: each transformed clip is heard as the clean clip is.
    errors = {name: word_error_rate(heard["clean"], words) for name, words in heard.items()}
    assert all(error <= 0.1 for error in errors.values()), (errors, heard)
