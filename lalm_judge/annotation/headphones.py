"""The optional headphone check of a listening study (study.yaml `headphone_check`), after Woods et al. (2017,
Attention, Perception, & Psychophysics 79: 2064-2072): each trial plays three 200 Hz tones, one at the reference
level, one 6 dB quieter and one at the reference level in antiphase (the right channel the left one inverted); the
rater names the quietest. Over headphones the quieter tone is the quietest; over loudspeakers the antiphase tone's
channels cancel in the room and it sounds quietest, so a rater without headphones fails.

The order of the three tones in each trial is drawn per rater from the batch's seed, so the answers stay on the
server; the trial's audio is made on request (stereo 16-bit WAV).
"""

from __future__ import annotations

import io
import random

import numpy as np
import soundfile as sf

SAMPLE_RATE = 16000
TONE_HZ = 200.0
TONE_S = 1.0
RAMP_S = 0.1
GAP_S = 0.5
LEVEL = 0.25
QUIET_DB = -6.0
TONES = ("reference", "quiet", "antiphase")


def trial_orders(seed: int, rater_id: str, trials: int) -> list[tuple[str, ...]]:
    """The order of the three tones in each of a rater's trials."""
    rng = random.Random(f"{seed}:headphones:{rater_id}")
    return [tuple(rng.sample(TONES, len(TONES))) for _ in range(trials)]


def answers(orders: list[tuple[str, ...]]) -> list[int]:
    """The right answer of each trial: the position (1-3) of the quiet tone."""
    return [order.index("quiet") + 1 for order in orders]


def _tone() -> np.ndarray:
    t = np.arange(int(TONE_S * SAMPLE_RATE)) / SAMPLE_RATE
    tone = np.sin(2 * np.pi * TONE_HZ * t)
    ramp = int(RAMP_S * SAMPLE_RATE)
    envelope = np.ones_like(tone)
    envelope[:ramp] = 0.5 - 0.5 * np.cos(np.pi * np.arange(ramp) / ramp)
    envelope[-ramp:] = envelope[:ramp][::-1]
    return tone * envelope


def trial_wav(order: tuple[str, ...]) -> bytes:
    """The stereo audio of one trial: its three tones in `order`, with a pause between them."""
    tone, gap = _tone(), np.zeros((int(GAP_S * SAMPLE_RATE), 2))
    parts = []
    for number, kind in enumerate(order):
        level = LEVEL * (10 ** (QUIET_DB / 20) if kind == "quiet" else 1.0)
        right = -tone if kind == "antiphase" else tone
        parts.append(level * np.stack([tone, right], axis=1))
        if number < len(order) - 1:
            parts.append(gap)
    buffer = io.BytesIO()
    sf.write(buffer, np.concatenate(parts), SAMPLE_RATE, subtype="PCM_16", format="WAV")
    return buffer.getvalue()
