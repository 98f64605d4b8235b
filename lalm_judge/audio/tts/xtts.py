"""Coqui XTTS-v2 voice cloning (paper configuration; runs in envs/tts-xtts.yaml on a GPU node).

The speaker reference is the set of original clips of the same speaker. XTTS has no emotion input
(coqui-tts refuses `emotion=` for every model but the discontinued Coqui Studio ones): the emotion label
steers the style by choosing, among the speaker's clips, those whose original emotion matches the target
(all of the speaker's clips when none match), since XTTS copies the prosody of its reference. A voice without a
speaker of its own in the request (the preference builder's engines and styles) names its reference clips in
its config (`references`); for an emotion style these are clips spoken with that emotion.

Emotion references (`tts.emotion_reference`: RAVDESS clips of the new emotion, `SynthesisRequest.emotion_references`)
go into XTTS's two conditioning inputs apart, through coqui-tts 0.28's `Xtts.get_conditioning_latents` and
`Xtts.inference` (the steps `Xtts.synthesize` takes for one reference list): the GPT conditioning latent, which
carries the prosody XTTS copies, from the emotion clips followed by the speaker's clips (the latent reads the first
`gpt_cond_len` seconds of the list joined, so the emotion clips come first), and the speaker embedding of the
decoder, the voice, from the speaker's clips alone. Handing both lists to `TTS.tts(speaker_wav=...)` would average
the RAVDESS actor's voice into the speaker's. The conditioning and sampling settings are the checkpoint's own
(`model.config`), as `Xtts.synthesize` uses them; the temperature is the voice's.

Licence: the XTTS-v2 weights are under the Coqui Public Model License. coqui-tts asks for it on stdin
unless `COQUI_TOS_AGREED=1` (coqui-tts 0.28 `TTS/utils/manage.py`), which fails or hangs inside a batch
job; the engine refuses to start without the variable, and the workflow checks it when it parses the config.

Determinism: XTTS samples (`do_sample=True`) and takes no seed, so the torch RNG is seeded before every
utterance from (seed, text, emotion, references): a clip does not depend on which clips the job made before it.
Weights: coqui-tts 0.28 downloads them from the hub repository `tts-hub/XTTS-v2` into the Hugging Face cache, from
its main branch (`TTS/.models.json`, `snapshot_download` without a revision). A voice with `revision` (a commit,
written by `lalm-judge pin-revisions`) loads that commit's snapshot instead, through coqui-tts's load by path.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import numpy as np

from lalm_judge.core.files import stable_hash

XTTS_MODEL = "tts_models/multilingual/multi-dataset/xtts_v2"
XTTS_REPOSITORY = "tts-hub/XTTS-v2"  # coqui-tts 0.28 `.models.json`: the repository behind XTTS_MODEL
XTTS_IGNORED = ["samples/*", "dvae.pth"]  # what coqui-tts leaves out of the download
LICENCE_ENV = "COQUI_TOS_AGREED"
# `Xtts.get_conditioning_latents` argument -> the checkpoint config key `Xtts.synthesize` reads it from.
CONDITIONING_KEYS = {
    "gpt_cond_len": "gpt_cond_len",
    "gpt_cond_chunk_len": "gpt_cond_chunk_len",
    "max_ref_length": "max_ref_len",
    "sound_norm_refs": "sound_norm_refs",
}
# The sampling settings of `Xtts.inference` that `Xtts.synthesize` takes from the checkpoint config.
SAMPLING_KEYS = ("temperature", "length_penalty", "repetition_penalty", "top_k", "top_p")


def choose_references(request, max_clips: int = 3, default: tuple[str, ...] = ()) -> list[str]:
    """Reference clips for cloning: same-emotion clips first, then the speaker's other clips; the voice's own
    `default` clips when the request brings none."""
    if not request.reference_clips:
        if default:
            return list(default)[:max_clips]
        raise ValueError(
            "XTTS needs reference clips of the original speaker; none were given (set `references` on the voice)"
        )
    matching = [c for c, e in zip(request.reference_clips, request.reference_emotions) if e == request.emotion]
    others = [c for c in request.reference_clips if c not in matching]
    return (matching + others)[:max_clips]


def utterance_seed(seed: int, text: str, emotion: str | None, references: list[str]) -> int:
    """The torch seed of one utterance: fixed by what is spoken and cloned, not by the order of synthesis."""
    return int(stable_hash({"seed": seed, "text": text, "emotion": emotion, "references": references}, 15), 16)


class XTTSEngine:
    def __init__(
        self,
        model: str = XTTS_MODEL,
        language: str = "en",
        device: str = "auto",
        temperature: float = 0.65,
        seed: int = 0,
        references: tuple[str, ...] | list[str] = (),
        revision: str | None = None,
    ):
        if os.environ.get(LICENCE_ENV) != "1":
            raise RuntimeError(
                f"XTTS-v2 is under the Coqui Public Model License (non-commercial): read it, and if you accept it "
                f"export {LICENCE_ENV}=1 before starting the workflow; without it coqui-tts asks on stdin"
            )
        import torch
        from TTS.api import TTS

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.torch = torch
        self.model_name, self.language, self.temperature, self.seed = model, language, temperature, seed
        self.references = tuple(references)
        self.revision = revision
        self.tts = (TTS(model) if revision is None else self._pinned(TTS, revision)).to(device)
        self._conditioning: dict[tuple[str, ...], tuple] = {}

    @staticmethod
    def _pinned(tts_class, revision: str):
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(XTTS_REPOSITORY, revision=revision, ignore_patterns=XTTS_IGNORED))
        return tts_class(model_path=str(folder), config_path=str(folder / "config.json"))

    def synthesize(self, request) -> tuple[np.ndarray, int]:
        speaker = choose_references(request, default=self.references)
        style = [*request.emotion_references, *speaker]
        self.torch.manual_seed(utterance_seed(self.seed, request.text, request.emotion, style))
        model = self.tts.synthesizer.tts_model
        gpt_latent = self._latents(style)[0]
        speaker_embedding = self._latents(speaker)[1]
        sampling = {key: model.config[key] for key in SAMPLING_KEYS}
        output = model.inference(
            request.text,
            self.language,
            gpt_latent,
            speaker_embedding,
            **{**sampling, "temperature": self.temperature},
            enable_text_splitting=True,
        )
        return np.asarray(output["wav"], dtype=np.float32), int(self.tts.synthesizer.output_sample_rate)

    def _latents(self, clips: list[str]):
        """(GPT conditioning latent, speaker embedding) of a reference list, computed once per list."""
        key = tuple(clips)
        if key not in self._conditioning:
            model = self.tts.synthesizer.tts_model
            settings = {argument: model.config[name] for argument, name in CONDITIONING_KEYS.items()}
            self._conditioning[key] = model.get_conditioning_latents(audio_path=list(clips), **settings)
        return self._conditioning[key]

    def describe(self) -> dict[str, str]:
        revision = f"coqui-tts=={importlib.metadata.version('coqui-tts')}"
        if self.revision is not None:
            revision += f" {XTTS_REPOSITORY}@{self.revision}"
        return {"tts_model": self.model_name, "tts_revision": revision}
