"""Waveform I/O, resampling, loudness matching and in-memory assembly of full dialogues."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from math import gcd

import numpy as np
import soundfile as sf

from lalm_judge.core.files import atomic_path


class AudioError(RuntimeError):
    """An audio file that is missing, empty, unreadable or holds non-finite samples; the message names the file."""


# A clip whose loudest sample stays below this (-60 dBFS) is silence; one with more than CLIPPED_SHARE of its
# samples at full scale is clipped.
SILENCE_PEAK = 1e-3
FULL_SCALE = 0.999
CLIPPED_SHARE = 0.001


def _decode(source: str | io.BytesIO, where: str) -> tuple[np.ndarray, int]:
    """Mono float32 samples of a file or an in-memory file; `where` names it in the errors."""
    try:
        audio, sr = sf.read(source, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as err:
        raise AudioError(f"cannot read {where}: {err}") from err
    if audio.shape[0] == 0:
        raise AudioError(f"{where} is empty (0 samples)")
    bad = int(np.count_nonzero(~np.isfinite(audio)))
    if bad:
        raise AudioError(f"{where} holds {bad} non-finite samples (NaN or infinity); fix or replace the file")
    return audio.mean(axis=1).astype(np.float32), sr


def is_silent(audio: np.ndarray) -> bool:
    return not len(audio) or float(np.max(np.abs(audio))) < SILENCE_PEAK


def quality_problems(audio: np.ndarray) -> list[str]:
    """What is wrong with a clip that can still be used: silence, clipping (for warnings, not errors)."""
    if is_silent(audio):
        return [f"silent (peak below {20 * np.log10(SILENCE_PEAK):.0f} dBFS)"]
    clipped = float(np.mean(np.abs(audio) >= FULL_SCALE))
    return [f"clipped ({100 * clipped:.1f} % of samples at full scale)"] if clipped > CLIPPED_SHARE else []


def read_audio(path: str | os.PathLike, sample_rate: int | None = None) -> tuple[np.ndarray, int]:
    """Read a file as mono float32, optionally resampled; raise AudioError naming the file if unusable."""
    mono, sr = _decode(str(path), f"audio file {path}")
    if sample_rate is not None and sample_rate != sr:
        mono, sr = resample(mono, sr, sample_rate), sample_rate
    return mono, sr


def read_wav_bytes(data: bytes, where: str) -> tuple[np.ndarray, int]:
    """Decode in-memory audio (what `wav_bytes` writes, or any format soundfile reads) as mono float32."""
    return _decode(io.BytesIO(data), where)


def write_wav(path: str | os.PathLike, audio: np.ndarray, sample_rate: int) -> None:
    """Write 16-bit PCM mono atomically (deterministic bytes for equal input)."""
    data = wav_bytes(audio, sample_rate)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """16-bit PCM mono WAV in memory; decoding it and encoding the samples again gives the same bytes."""
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(audio, -1.0, 1.0), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


def resample(audio: np.ndarray, sr_from: int, sr_to: int) -> np.ndarray:
    if sr_from == sr_to:
        return audio.astype(np.float32)
    g = gcd(sr_from, sr_to)
    # Imported here: scipy.signal takes over a second to import, and every workflow parse imports this module.
    from scipy.signal import resample_poly

    return resample_poly(audio, sr_to // g, sr_from // g).astype(np.float32)


def active_level_db(audio: np.ndarray, sample_rate: int, window_s: float = 0.02, floor_db: float = 30.0) -> float:
    """RMS level (dBFS) over the frames within `floor_db` of the loudest frame, i.e. ignoring pauses."""
    hop = max(1, int(window_s * sample_rate))
    n = len(audio) // hop
    if n == 0:
        return float(20 * np.log10(np.sqrt(np.mean(audio**2)) + 1e-12))
    frames = audio[: n * hop].reshape(n, hop)
    energy_db = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    active = frames[energy_db >= energy_db.max() - floor_db]
    return float(10 * np.log10(np.mean(active**2) + 1e-12))


def match_level(audio: np.ndarray, sample_rate: int, target_db: float, peak: float = 0.99) -> tuple[np.ndarray, float]:
    """Scale `audio` to the active level `target_db`, limited so no sample exceeds `peak`; return (audio, gain_db)."""
    gain_db = target_db - active_level_db(audio, sample_rate)
    gain = 10 ** (gain_db / 20)
    max_abs = float(np.max(np.abs(audio))) if len(audio) else 0.0
    if max_abs * gain > peak:
        gain = peak / max_abs
        gain_db = 20 * np.log10(gain)
    return (audio * gain).astype(np.float32), float(gain_db)


def concatenate_turns(clips: Sequence[np.ndarray], gaps_s: Sequence[float], sample_rate: int) -> np.ndarray:
    """Join turn clips in order with `gaps_s[i]` seconds of silence after clip i (len(gaps_s) == len(clips) - 1)."""
    if len(gaps_s) != max(0, len(clips) - 1):
        raise ValueError(f"need {len(clips) - 1} gaps for {len(clips)} clips, got {len(gaps_s)}")
    pieces: list[np.ndarray] = []
    for i, clip in enumerate(clips):
        pieces.append(clip.astype(np.float32))
        if i < len(gaps_s):
            pieces.append(np.zeros(max(0, round(gaps_s[i] * sample_rate)), dtype=np.float32))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
