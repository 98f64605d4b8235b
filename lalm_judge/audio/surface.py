"""Surface transforms of a spoken response: what the pairwise audit conditions change while the words stay.

- `match_level` / `apply_gain`: the level of a clip is its RMS in dB relative to full scale (`rms_db`); the
  `gain_<dB>` condition sets the changed response to the other response's level plus <dB>, so the pair differs
  in loudness by exactly that many dB and in nothing else of level;
- `pad_silence`: <s> seconds of digital silence, half before the speech and half after (the sample count grows
  by exactly round(<s> x rate));
- `time_stretch`: the speech made `factor` times faster (duration / factor) without changing its pitch, by
  librosa's phase vocoder (`librosa.effects.time_stretch`).

The sentence helpers (`last_sentence`, `with_last_sentence_repeated`) give the text of the `repeat` condition,
spoken again by the TTS engine of the response (lalm_judge.pairwise.audit). Every function is pure: float
waveforms in, float waveforms out, no clipping (a louder clip may exceed full scale; the audit writes float WAV).
"""

from __future__ import annotations

import re

import numpy as np

# RMS of digital silence in dB: a floor, so that the level of an all-zero clip is finite.
SILENCE_DB = -200.0
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class SurfaceError(ValueError):
    """A transform that cannot be applied as asked; the message names the value."""


def rms_db(audio: np.ndarray) -> float:
    """Level of a waveform: 20 log10 of its RMS (full scale = 1.0), SILENCE_DB for silence."""
    audio = np.asarray(audio, dtype=np.float64)
    rms = float(np.sqrt(np.mean(np.square(audio)))) if audio.size else 0.0
    return 20.0 * float(np.log10(rms)) if rms > 0 else SILENCE_DB


def apply_gain(audio: np.ndarray, gain_db: float) -> np.ndarray:
    """The waveform scaled by `gain_db` dB (float32, not clipped)."""
    return (np.asarray(audio, dtype=np.float64) * 10.0 ** (gain_db / 20.0)).astype(np.float32)


def match_level(audio: np.ndarray, reference: np.ndarray, offset_db: float = 0.0) -> np.ndarray:
    """`audio` scaled so that its RMS level is the reference's plus `offset_db` dB."""
    level = rms_db(audio)
    if level == SILENCE_DB:
        raise SurfaceError("cannot set the level of a silent clip")
    return apply_gain(audio, rms_db(reference) + offset_db - level)


def pad_silence(audio: np.ndarray, sample_rate: int, seconds: float) -> np.ndarray:
    """`seconds` of silence in all, half before and half after (the odd sample after); float32."""
    if seconds < 0:
        raise SurfaceError(f"padding must be >= 0 s, got {seconds}")
    total = int(round(seconds * sample_rate))
    before = total // 2
    return np.concatenate(
        [np.zeros(before, np.float32), np.asarray(audio, np.float32), np.zeros(total - before, np.float32)]
    )


def time_stretch(audio: np.ndarray, factor: float) -> np.ndarray:
    """The speech `factor` times as fast (> 1 quicker, < 1 slower), pitch kept (librosa's phase vocoder)."""
    if not 0.25 <= factor <= 4.0:
        raise SurfaceError(f"rate factor {factor} is outside 0.25-4")
    import librosa  # imported here: numba compiles on first import, and only the rate condition needs it

    return librosa.effects.time_stretch(np.asarray(audio, np.float32), rate=float(factor)).astype(np.float32)


def sentences(text: str) -> list[str]:
    """The sentences of a text (split after '.', '!' or '?' followed by space)."""
    return [part for part in _SENTENCE_END.split(text.strip()) if part]


def last_sentence(text: str) -> str:
    found = sentences(text)
    if not found:
        raise SurfaceError("an empty text has no last sentence")
    return found[-1]


def with_last_sentence_repeated(text: str) -> str:
    """The text with its last sentence said once more at its end."""
    return f"{text.strip()} {last_sentence(text)}"
