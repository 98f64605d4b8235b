"""A stand-in for coqui-tts 0.28's XTTS-v2 API (its weights come from the hub and it imports only with a CUDA
torchaudio), for the tests of the XTTS engine: `TTS.api.TTS(model_name).to(device)`, `synthesizer.output_sample_rate`
(24 kHz) and `synthesizer.tts_model`, the `Xtts` model with its `config` and the two methods the engine calls.

The methods have the parameters of coqui-tts 0.28.0 (`TTS/tts/models/xtts.py`: `Xtts.get_conditioning_latents`,
`Xtts.inference`; `TTS/api.py`: `TTS.tts`), names and defaults as there, so a call the real API would refuse (an
unknown keyword, a missing argument) fails here too. Like XTTS the stand-in samples from the torch RNG and takes no
seed; the latents it returns are fixed tensors of the reference list, and every call is recorded."""

from __future__ import annotations

import importlib.metadata
import sys
import types
from typing import Any

import numpy as np

# The checkpoint settings of XTTS-v2's config.json that the engine reads (`Xtts.synthesize` reads the same keys).
XTTS_CONFIG = {
    "gpt_cond_len": 30,
    "gpt_cond_chunk_len": 4,
    "max_ref_len": 30,
    "sound_norm_refs": False,
    "temperature": 0.75,
    "length_penalty": 1.0,
    "repetition_penalty": 5.0,
    "top_k": 50,
    "top_p": 0.85,
}


class XttsStandIn:
    def __init__(self):
        import torch

        self.torch = torch
        self.config = dict(XTTS_CONFIG)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get_conditioning_latents(
        self,
        audio_path,
        max_ref_length: int = 30,
        gpt_cond_len: int = 6,
        gpt_cond_chunk_len: int = 6,
        librosa_trim_db: int | None = None,
        sound_norm_refs: bool = False,
        load_sr: int = 22050,
    ):
        paths = audio_path if isinstance(audio_path, list) else [audio_path]
        self.calls.append(
            (
                "get_conditioning_latents",
                {
                    "audio_path": list(paths),
                    "max_ref_length": max_ref_length,
                    "gpt_cond_len": gpt_cond_len,
                    "gpt_cond_chunk_len": gpt_cond_chunk_len,
                    "sound_norm_refs": sound_norm_refs,
                },
            )
        )
        return ("gpt_latent", tuple(paths)), ("speaker_embedding", tuple(paths))

    def inference(
        self,
        text,
        language,
        gpt_cond_latent,
        speaker_embedding,
        temperature: float = 0.75,
        length_penalty: float = 1.0,
        repetition_penalty: float = 10.0,
        top_k: int = 50,
        top_p: float = 0.85,
        do_sample: bool = True,
        num_beams: int = 1,
        speed: float = 1.0,
        enable_text_splitting: bool = False,
        **hf_generate_kwargs: Any,
    ):
        self.calls.append(
            (
                "inference",
                {
                    "text": text,
                    "language": language,
                    "gpt_cond_latent": gpt_cond_latent,
                    "speaker_embedding": speaker_embedding,
                    "temperature": temperature,
                    "length_penalty": length_penalty,
                    "repetition_penalty": repetition_penalty,
                    "top_k": top_k,
                    "top_p": top_p,
                    "enable_text_splitting": enable_text_splitting,
                    **hf_generate_kwargs,
                },
            )
        )
        wav = (self.torch.rand(240) * 0.1).numpy()
        return {"wav": wav, "gpt_latents": np.zeros((1, 1)), "speaker_embedding": speaker_embedding}


class CoquiStandIn:
    """`TTS.api.TTS`: `TTS(model_name)` or `TTS(model_path=<checkpoint folder>, config_path=...)` (a pinned
    snapshot); the model it loads is the stand-in `Xtts`; `tts` keeps coqui-tts's refusal of `emotion=`."""

    instances: list[CoquiStandIn] = []

    def __init__(self, model_name="", model_path=None, config_path=None):
        self.model_name, self.device = model_name, None
        self.model_path, self.config_path = model_path, config_path
        self.synthesizer = types.SimpleNamespace(output_sample_rate=24000, tts_model=XttsStandIn())
        CoquiStandIn.instances.append(self)

    def to(self, device):
        self.device = device
        return self

    def tts(self, text, speaker=None, language=None, speaker_wav=None, emotion=None, split_sentences=True, **kwargs):
        if emotion is not None:
            raise ValueError("Emotion can only be used with Coqui Studio models. Which is discontinued.")
        raise AssertionError("the XTTS engine conditions through get_conditioning_latents and inference, not tts()")


def install_coqui_stand_in(monkeypatch) -> type[CoquiStandIn]:
    """Make `from TTS.api import TTS` give the stand-in, and coqui-tts's version read 0.28.0."""
    package, api = types.ModuleType("TTS"), types.ModuleType("TTS.api")
    api.TTS = CoquiStandIn
    package.api = api
    monkeypatch.setitem(sys.modules, "TTS", package)
    monkeypatch.setitem(sys.modules, "TTS.api", api)
    # Only coqui-tts's version is faked: other packages' versions (torch's, read by transformers) stay real.
    real_version = importlib.metadata.version
    monkeypatch.setattr(
        "importlib.metadata.version", lambda name: "0.28.0" if name == "coqui-tts" else real_version(name)
    )
    CoquiStandIn.instances.clear()
    return CoquiStandIn
