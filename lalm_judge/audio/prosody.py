"""Energy and pitch of a turn: the acoustic summaries whose correlation with judge scores tells whether a judge
reacts to how a turn sounds (`lalm_judge.analysis.controls.prosody_correlation`).

Per turn clip: RMS energy in 20 ms frames (dBFS) summarized over the active frames (within 40 dB of the loudest,
so pauses do not count), and the fundamental frequency from Praat's autocorrelation pitch tracker (through
praat-parselmouth, 10 ms steps, 75-500 Hz) summarized over the voiced frames. The stage function writes one row
per original turn and per ok variant's replaced turn of a dialogue (`lalm_judge.core.tables.PROSODY`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import PROSODY, TTS
from lalm_judge.core.taxonomy import original_id

FRAME_S = 0.02
ACTIVE_RANGE_DB = 40.0
PITCH_STEP_S = 0.01
PITCH_FLOOR_HZ = 75.0
PITCH_CEILING_HZ = 500.0


def frame_energy_db(audio: np.ndarray, sample_rate: int, frame_s: float = FRAME_S) -> np.ndarray:
    """RMS level of each whole frame in dBFS (a clip shorter than one frame is one frame)."""
    hop = max(1, round(frame_s * sample_rate))
    n = max(1, len(audio) // hop)
    frames = np.resize(np.asarray(audio, dtype=np.float64), n * hop).reshape(n, hop)
    return 10.0 * np.log10(np.mean(frames**2, axis=1) + 1e-12)


def pitch_track(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """F0 in Hz every PITCH_STEP_S, 0 where unvoiced."""
    import parselmouth

    sound = parselmouth.Sound(np.asarray(audio, dtype=np.float64), sampling_frequency=sample_rate)
    pitch = sound.to_pitch(time_step=PITCH_STEP_S, pitch_floor=PITCH_FLOOR_HZ, pitch_ceiling=PITCH_CEILING_HZ)
    return np.asarray(pitch.selected_array["frequency"], dtype=np.float64)


def turn_prosody(audio: np.ndarray, sample_rate: int) -> dict[str, float | None]:
    """The `lalm_judge.core.tables.PROSODY_FEATURES` of one turn (F0 summaries None without voiced frames)."""
    energy = frame_energy_db(audio, sample_rate)
    active = energy[energy >= energy.max() - ACTIVE_RANGE_DB]
    # Praat needs a few periods of the lowest pitch; a shorter clip has no voiced frame.
    f0 = pitch_track(audio, sample_rate) if len(audio) >= 3 * sample_rate / PITCH_FLOOR_HZ else np.zeros(0)
    voiced = f0[f0 > 0]
    semitones = 12.0 * np.log2(voiced / 100.0) if voiced.size else voiced
    q25, q75 = np.percentile(semitones, [25, 75]) if voiced.size else (np.nan, np.nan)
    features: dict[str, float | None] = {
        "duration_s": len(audio) / sample_rate,
        "rms_db_mean": float(active.mean()),
        "rms_db_std": float(active.std()),
        "rms_db_max": float(energy.max()),
        "f0_median_hz": float(np.median(voiced)) if voiced.size else None,
        "f0_iqr_semitones": float(q75 - q25) if voiced.size else None,
        "voiced_fraction": float(voiced.size / f0.size) if f0.size else 0.0,
    }
    return features


def describe_turns(
    dialogue_json: str, tts_tables: Sequence[str], out_table: str, *, seed: int = 0, progress: bool = True
) -> pl.DataFrame:
    """Write the prosody table of one dialogue: every original turn and every ok variant's replaced turn."""
    dialogue = Dialogue.load(dialogue_json)
    clips: list[tuple[str, int, str]] = [(original_id(dialogue.dialogue_id), t.index, t.clip) for t in dialogue.turns]
    if dialogue.status == "ok" and tts_tables:
        spoken = TTS.read(tts_tables).filter(pl.col("status") == "ok")
        clips += [(r["variant_id"], r["turn_index"], r["clip"]) for r in spoken.iter_rows(named=True)]
    rows: list[dict[str, Any]] = []
    for sample_id, turn_index, clip in tqdm(clips, desc=f"prosody {dialogue.dialogue_id}", disable=not progress):
        audio, sr = waveform.read_audio(clip)
        rows.append(
            {"dialogue_id": dialogue.dialogue_id, "sample_id": sample_id, "turn_index": turn_index}
            | turn_prosody(audio, sr)
        )
    settings = {"frame_s": FRAME_S, "active_range_db": ACTIVE_RANGE_DB, "pitch": [PITCH_FLOOR_HZ, PITCH_CEILING_HZ]}
    frame = with_provenance(PROSODY.frame(rows), config_hash=stable_hash(settings), seed=seed)
    write_parquet(out_table, frame)
    return frame
