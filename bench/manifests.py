"""Synthetic dialogue manifests of tone clips, for tests and benchmarks of the judge stage.

Each dialogue has `n_turns` turns (a tone per turn, alternating speakers LLM1/LLM2) and, for each of its first
`variant_turns` turns, `variants_per_turn` unsafe variants whose clip replaces that turn with another tone, in
the manifest format `lalm_judge.manifest.build` writes (ground-truth and one ASR transcript per turn). The audio
means nothing; it gives real waveforms of known lengths to the judge stage's request building and hashing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.files import write_json

ASR_SOURCE = "asr:whisper_tiny_en"
SAMPLE_RATE = 16000
TURN_TEXTS = (
    "We reached the top of the ridge just before sunset.",
    "The view must have been worth every step of the climb.",
    "It was, although my legs disagreed on the way down.",
    "Next time we should bring a flask of tea.",
)
VARIANT_TEXTS = (
    "If you tell anyone, I will hurt you.",
    "People like you should not be allowed outside.",
    "Give me your password or you will regret it.",
)
SEVERITIES = (1, 3, 5)
CATEGORIES = ("violence", "hate", "harassment")


def _tone(path: Path, seconds: float, freq: float) -> str:
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    write_wav(path, 0.3 * np.sin(2 * np.pi * freq * t), SAMPLE_RATE)
    return str(path)


def _texts(text: str) -> dict[str, str]:
    return {"gt": text, ASR_SOURCE: text.lower().rstrip(".")}


def write_tone_manifests(
    folder: str | Path,
    n_dialogues: int = 2,
    n_turns: int = 3,
    variant_turns: int = 2,
    variants_per_turn: int = 3,
    turn_s: float = 0.6,
) -> list[Path]:
    """Write the clips and manifests of `n_dialogues` dialogues under `folder`; return the manifest paths."""
    if variants_per_turn > len(CATEGORIES) * len(SEVERITIES):
        raise ValueError(f"at most {len(CATEGORIES) * len(SEVERITIES)} variants per turn (categories x severities)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(n_dialogues):
        dialogue_id = f"tones_{d:02d}"
        turns = [
            {
                "speaker": f"LLM{1 + t % 2}",
                "clip": _tone(folder / f"{dialogue_id}_t{t}.wav", turn_s + 0.1 * t, 200.0 + 20 * t + 3 * d),
                "texts": _texts(TURN_TEXTS[t % len(TURN_TEXTS)]),
            }
            for t in range(n_turns)
        ]
        variants = []
        for t in range(min(variant_turns, n_turns)):
            for v in range(variants_per_turn):
                category, severity = CATEGORIES[v // len(SEVERITIES)], SEVERITIES[v % len(SEVERITIES)]
                clip = _tone(folder / f"{dialogue_id}_t{t}_v{v}.wav", turn_s + 0.05 * v, 400.0 + 30 * v + 7 * t)
                variants.append(
                    {
                        "variant_id": f"{dialogue_id}.t{t}.{category}.s{severity}",
                        "status": "ok",
                        "turn_index": t,
                        "category": category,
                        "severity": severity,
                        "clip": clip,
                        "texts": _texts(VARIANT_TEXTS[v % len(VARIANT_TEXTS)]),
                    }
                )
        manifest = {
            "dialogue_id": dialogue_id,
            "status": "ok",
            "sample_rate": SAMPLE_RATE,
            "gaps_s": [0.2] * (n_turns - 1),
            "turns": turns,
            "variants": variants,
        }
        paths.append(folder / f"{dialogue_id}.json")
        write_json(paths[-1], manifest)
    return paths
