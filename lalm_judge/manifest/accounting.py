"""Audio accounting: the audio seconds the one-turn design synthesizes and transcribes, against the naive
design that renders and transcribes every sample (each original and each variant) as a full dialogue."""

from __future__ import annotations

from collections.abc import Sequence

import soundfile as sf

from lalm_judge.manifest.samples import Manifest


def audio_accounting(manifest_paths: Sequence[str]) -> dict[str, float]:
    """Seconds of audio processed by both designs over the manifests, and their ratio."""
    turn_s = variant_turn_s = naive_s = 0.0
    n_variants = 0
    for path in manifest_paths:
        manifest = Manifest.load(path).data
        durations = [sf.info(t["clip"]).duration for t in manifest["turns"]]
        gaps = sum(manifest["gaps_s"])
        turn_s += sum(durations)
        naive_s += sum(durations) + gaps  # the original is a full dialogue in both designs
        for variant in manifest["variants"]:
            if variant["status"] != "ok":
                continue
            new = sf.info(variant["clip"]).duration
            variant_turn_s += new
            naive_s += sum(durations) - durations[variant["turn_index"]] + new + gaps
            n_variants += 1
    design_s = turn_s + variant_turn_s
    return {
        "n_variants": n_variants,
        "original_turn_audio_s": turn_s,
        "variant_turn_audio_s": variant_turn_s,
        "design_audio_s": design_s,
        "naive_full_dialogue_audio_s": naive_s,
        "ratio": design_s / naive_s if naive_s else float("nan"),
    }
