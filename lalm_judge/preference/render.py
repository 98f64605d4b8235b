"""Speaking the responses: every completion of a shard with one TTS engine, then Whisper on every clip.

Job grain (the safety track's): one job per (item shard, engine) for synthesis and one per (item shard,
engine) for transcription, never one per clip. Engines are voices of the TTS registry
(`lalm_judge.audio.tts`: Piper and espeak-ng offline, XTTS in its GPU environment), named in the config.

A response is made speakable first (`speakable_text`): Markdown markup is removed (headings, emphasis, list
bullets and numbers, links keep their text, inline code keeps its text), line breaks become sentence breaks.
Each clip is resampled to the builder's sample rate and brought to one active speech level, so that loudness
does not tell the engines or the responses apart. Clips are written below the builder's folder and their
paths stored relative to it (the records' audio root).

The filters (`filter_clips`) run on the transcripts: a clip is dropped when its WER against the text exceeds
`max_wer` or when it is shorter than `min_duration_s`; every drop is counted by engine and reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.asr import load_asr, word_error_rate
from lalm_judge.audio.transcription import SCHEDULING_KEYS
from lalm_judge.audio.tts import SynthesisRequest, Voice, get_engine, synthesize
from lalm_judge.core.files import stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import PREFERENCE_CLIPS, PREFERENCE_COMPLETIONS, PREFERENCE_TRANSCRIPTS

# Active speech level of every clip (dBFS), as the safety track's TTS stage levels its turns.
CLIP_LEVEL_DB = -23.0
DROP_WER = "wer"
DROP_SHORT = "short"

_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_URL = re.compile(r"https?://\S+")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*", re.MULTILINE)
_MD_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+", re.MULTILINE)
_MD_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)(?=\S)(.+?)(?<=\S)\1")
_MD_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$", re.MULTILINE)


def speakable_text(response: str) -> str:
    """The response as a TTS engine should read it (module docstring); '' when nothing is left to say."""
    text = _MD_LINK.sub(r"\1", response)
    text = _MD_URL.sub("", text)
    text = _MD_RULE.sub("", text)
    text = _MD_HEADING.sub("", text)
    text = _MD_BULLET.sub("", text)
    previous = None
    while previous != text:  # nested emphasis ("**_word_**")
        previous, text = text, _MD_EMPHASIS.sub(r"\2", text)
    sentences = []
    for line in (part.strip() for part in text.splitlines()):
        if line:
            sentences.append(line if line[-1] in ".!?:;," else f"{line}.")
    return " ".join(" ".join(sentences).split())


def clip_path(engine: str, shard: int, item_id: str, completion: int) -> str:
    """A clip's path relative to the builder's folder."""
    return f"audio/{engine}/shard{shard}/{item_id}-c{completion}.wav"


def render_shard(
    completions_path: str | os.PathLike,
    shard: int,
    engine: str,
    voice: Mapping[str, Any],
    root: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    sample_rate: int = 16000,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Speak every completion of `shard` with the engine's voice; write and return the clip table."""
    completions = PREFERENCE_COMPLETIONS.read(completions_path).filter(pl.col("shard") == shard)
    spoken_voice = Voice.from_config(voice)
    described = get_engine(spoken_voice).describe()
    rows = []
    for row in tqdm(
        completions.iter_rows(named=True),
        total=completions.height,
        desc=f"speak {engine} shard {shard}",
        disable=not progress,
    ):
        audio, rate = synthesize(spoken_voice, SynthesisRequest(row["text"]))
        audio, _ = waveform.match_level(waveform.resample(audio, rate, sample_rate), sample_rate, CLIP_LEVEL_DB)
        relative = clip_path(engine, shard, row["item_id"], row["completion"])
        waveform.write_wav(Path(root) / relative, audio, sample_rate)
        rows.append(
            {
                "item_id": row["item_id"],
                "completion": row["completion"],
                "engine": engine,
                "text": row["text"],
                "clip": relative,
                "duration_s": len(audio) / sample_rate,
                "tts_model": described.get("tts_model"),
                "tts_revision": described.get("tts_revision"),
            }
        )
    frame = with_provenance(
        PREFERENCE_CLIPS.frame(rows), config_hash=stable_hash({"engine": engine, "voice": dict(voice)}), seed=seed
    )
    write_parquet(out_path, frame)
    return frame


def transcribe_shard(
    clips_path: str | os.PathLike,
    root: str | os.PathLike,
    model_options: Mapping[str, Any],
    out_path: str | os.PathLike,
    *,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Transcribe every clip of a clip table with one Whisper model; write and return the transcript table."""
    clips = PREFERENCE_CLIPS.read(clips_path)
    options = {k: v for k, v in model_options.items() if k not in SCHEDULING_KEYS}
    asr = load_asr(model_options["model"], **options)
    rows = []
    for row in tqdm(clips.iter_rows(named=True), total=clips.height, desc="transcribe clips", disable=not progress):
        audio, rate = waveform.read_audio(Path(root) / row["clip"])
        transcript = asr.transcribe(audio, rate).text
        rows.append(
            {
                **row,
                "asr_model": model_options["model"],
                "transcript": transcript,
                "wer": word_error_rate(row["text"], transcript),
            }
        )
    frame = with_provenance(PREFERENCE_TRANSCRIPTS.frame(rows), config_hash=stable_hash(dict(model_options)), seed=seed)
    write_parquet(out_path, frame)
    return frame


@dataclass(frozen=True)
class ClipFilter:
    max_wer: float
    min_duration_s: float

    def reason(self, wer: float, duration_s: float) -> str | None:
        """Why a clip is dropped (shortness first: a clip too short to hear has no meaningful WER), or None."""
        if duration_s < self.min_duration_s:
            return DROP_SHORT
        if wer > self.max_wer:
            return DROP_WER
        return None


def filter_clips(transcripts: pl.DataFrame, clip_filter: ClipFilter) -> tuple[pl.DataFrame, dict[str, Any]]:
    """(the kept transcript rows, counts per engine: clips, kept, dropped per reason)."""
    reasons = [
        clip_filter.reason(wer, duration)
        for wer, duration in zip(transcripts["wer"].to_list(), transcripts["duration_s"].to_list(), strict=True)
    ]
    marked = transcripts.with_columns(pl.Series("drop_reason", reasons, dtype=pl.String))
    counts: dict[str, Any] = {}
    for engine in sorted(set(marked["engine"].to_list())):
        part = marked.filter(pl.col("engine") == engine)
        counts[engine] = {
            "clips": part.height,
            "kept": part.filter(pl.col("drop_reason").is_null()).height,
            "dropped_wer": part.filter(pl.col("drop_reason") == DROP_WER).height,
            "dropped_short": part.filter(pl.col("drop_reason") == DROP_SHORT).height,
        }
    return marked.filter(pl.col("drop_reason").is_null()).drop("drop_reason"), counts


def merge_counts(parts: Sequence[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """Per-engine counts of several shards added up."""
    total: dict[str, dict[str, int]] = {}
    for part in parts:
        for engine, counts in part.items():
            into = total.setdefault(engine, {})
            for key, value in counts.items():
                into[key] = into.get(key, 0) + value
    return dict(sorted(total.items()))
