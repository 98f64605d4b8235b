import numpy as np
import pytest

from lalm_judge.audio.waveform import (
    active_level_db,
    concatenate_turns,
    match_level,
    read_audio,
    resample,
    write_wav,
)


def tone(seconds, sr=16000, amplitude=0.1, freq=220.0):
    t = np.arange(int(seconds * sr)) / sr
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_wav_round_trip_and_resample(tmp_path):
    write_wav(tmp_path / "a.wav", tone(1.0, 22050), 22050)
    audio, sr = read_audio(tmp_path / "a.wav", sample_rate=16000)
    assert sr == 16000
    assert len(audio) == 16000
    assert abs(active_level_db(audio, sr) - active_level_db(tone(1.0), 16000)) < 0.2


def test_active_level_ignores_pauses():
    speech = tone(1.0, amplitude=0.1)
    with_pause = np.concatenate([speech, np.zeros(16000 * 3, dtype=np.float32)])
    assert abs(active_level_db(with_pause, 16000) - active_level_db(speech, 16000)) < 0.5


def test_match_level_hits_target_and_limits_peaks():
    quiet = tone(1.0, amplitude=0.01)
    louder, gain_db = match_level(quiet, 16000, target_db=active_level_db(tone(1.0, amplitude=0.1), 16000))
    assert gain_db == pytest.approx(20.0, abs=0.1)
    assert np.max(np.abs(louder)) == pytest.approx(0.1, rel=0.01)
    limited, _ = match_level(quiet, 16000, target_db=0.0)
    assert np.max(np.abs(limited)) <= 0.99 + 1e-6


def test_concatenate_turns_inserts_gaps():
    joined = concatenate_turns([tone(1.0), tone(0.5)], [0.25], 16000)
    assert len(joined) == 16000 + 4000 + 8000
    assert np.all(joined[16000:20000] == 0)
    with pytest.raises(ValueError, match="need 1 gaps"):
        concatenate_turns([tone(1.0), tone(0.5)], [], 16000)


def test_resample_identity_keeps_samples():
    audio = tone(0.1)
    assert np.array_equal(resample(audio, 16000, 16000), audio)
