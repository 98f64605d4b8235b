import numpy as np
import polars as pl
import pytest

from lalm_judge.audio.prosody import describe_turns, turn_prosody
from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.tables import PROSODY_FEATURES, TTS

SR = 16000


def voiced(seconds, f0, amplitude=0.2):
    """A harmonic-rich periodic signal at f0 (a glottal-pulse-like stand-in for a vowel)."""
    t = np.arange(int(seconds * SR)) / SR
    return (amplitude * sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, 6)) / 2).astype(np.float32)


@pytest.mark.parametrize("f0", [110.0, 220.0])
def test_f0_and_energy_of_a_voiced_turn(f0):
    audio = np.concatenate([voiced(0.6, f0), np.zeros(SR // 2, np.float32), voiced(0.6, f0)])
    features = turn_prosody(audio, SR)
    assert tuple(features) == PROSODY_FEATURES
    assert features["f0_median_hz"] == pytest.approx(f0, rel=0.02)
    assert features["f0_iqr_semitones"] < 0.5
    assert 0.55 < features["voiced_fraction"] < 0.85  # the pause is unvoiced
    # Pauses do not count towards the energy summary.
    steady = turn_prosody(voiced(1.2, f0), SR)
    assert features["rms_db_mean"] == pytest.approx(steady["rms_db_mean"], abs=0.5)
    assert features["duration_s"] == pytest.approx(1.7)


def test_louder_and_higher_turns_read_louder_and_higher():
    calm, loud = turn_prosody(voiced(1.0, 120, 0.05), SR), turn_prosody(voiced(1.0, 240, 0.4), SR)
    assert loud["rms_db_mean"] - calm["rms_db_mean"] == pytest.approx(20 * np.log10(8), abs=0.3)
    assert loud["f0_median_hz"] > 1.9 * calm["f0_median_hz"]


def test_a_silent_turn_has_no_pitch():
    features = turn_prosody(np.zeros(SR, np.float32), SR)
    assert features["f0_median_hz"] is None and features["voiced_fraction"] == 0.0
    assert turn_prosody(np.full(10, 0.1, np.float32), SR)["f0_median_hz"] is None  # shorter than a pitch period


def test_the_table_has_every_original_turn_and_every_spoken_variant(tmp_path):
    turns = []
    for i, f0 in enumerate([110.0, 220.0]):
        write_wav(tmp_path / f"t{i}.wav", voiced(0.5, f0), SR)
        turns.append(Turn(i, "AB"[i], f"turn {i}", "happy", clip=str(tmp_path / f"t{i}.wav")))
    Dialogue("d", turns, "jsonl", "-", SR).save(tmp_path / "dialogue.json")
    write_wav(tmp_path / "v.wav", voiced(0.5, 300.0), SR)
    TTS.frame(
        [
            {"variant_id": "d.t1.hate.s1", "turn_index": 1, "status": "ok", "clip": str(tmp_path / "v.wav")},
            {"variant_id": "d.t1.hate.s3", "turn_index": 1, "status": "refusal"},
        ]
    ).write_parquet(tmp_path / "tts.parquet")
    table = describe_turns(
        str(tmp_path / "dialogue.json"), [str(tmp_path / "tts.parquet")], str(tmp_path / "p.parquet")
    )
    assert table["sample_id"].to_list() == ["d.original", "d.original", "d.t1.hate.s1"]
    assert table["turn_index"].to_list() == [0, 1, 1]
    assert table["f0_median_hz"].to_list() == pytest.approx([110, 220, 300], rel=0.02)
    assert pl.read_parquet(tmp_path / "p.parquet").height == 3
