"""Coqui XTTS-v2 voice cloning (paper configuration; runs in envs/tts-xtts.yaml on a GPU node).

The speaker reference is the set of original clips of the same speaker. XTTS has no emotion input:
the emotion label steers the style by choosing, among the speaker's clips, those whose original
emotion matches the target (all of the speaker's clips when none match), since XTTS copies the
prosody of its reference.
"""

from __future__ import annotations

import numpy as np

XTTS_MODEL = "tts_models/multilingual/multi-dataset/xtts_v2"


def choose_references(request, max_clips: int = 3) -> list[str]:
    """Reference clips for cloning: same-emotion clips first, then the speaker's other clips."""
    if not request.reference_clips:
        raise ValueError("XTTS needs reference clips of the original speaker; none were given")
    matching = [c for c, e in zip(request.reference_clips, request.reference_emotions) if e == request.emotion]
    others = [c for c in request.reference_clips if c not in matching]
    return (matching + others)[:max_clips]


class XTTSEngine:
    def __init__(
        self,
        model: str = XTTS_MODEL,
        language: str = "en",
        device: str = "auto",
        temperature: float = 0.65,
        seed: int = 0,
    ):
        import torch
        from TTS.api import TTS

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.manual_seed(seed)
        self.model_name, self.language, self.temperature = model, language, temperature
        self.tts = TTS(model).to(device)

    def synthesize(self, request) -> tuple[np.ndarray, int]:
        wav = self.tts.tts(
            text=request.text,
            speaker_wav=choose_references(request),
            language=self.language,
            temperature=self.temperature,
            split_sentences=True,
        )
        return np.asarray(wav, dtype=np.float32), int(self.tts.synthesizer.output_sample_rate)

    def describe(self) -> dict[str, str]:
        return {"tts_model": self.model_name, "tts_revision": "coqui-tts"}
