"""The ASR stage: transcribe each original turn and each ok variant turn of one dialogue once.

A variant's full transcript is its source's transcript with one turn replaced (see
`lalm_judge.manifest.samples`), so no full variant dialogue is ever transcribed. Each row stores the turn's
WER against its ground-truth text (`lalm_judge.core.tables.ASR`).

`TranscriptCache` keeps the transcripts of a job that transcribes changed turns (the condition ASR job of a
dialogue, `lalm_judge.manifest.conditions.transcribe_conditions`) across its reruns: keyed by what determines a
transcript (the model's settings and the exact waveform), so a rerun because a condition was added transcribes
only the new condition's turns.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.asr import load_asr, word_error_rate
from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import canonical_json, stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import ASR, TTS
from lalm_judge.core.taxonomy import original_id

logger = logging.getLogger(__name__)

# Keys of an `asr.models` entry that schedule the job rather than configure the model.
SCHEDULING_KEYS = ("model", "gpu")
# Keys of an `asr.models` entry that change where or how fast a transcript is made, not its text.
NOT_IN_TRANSCRIPT_KEY = ("gpu", "cpu_threads")
# New transcripts a `TranscriptCache` holds in memory before it writes them: a killed job loses at most these.
CACHE_FLUSH_EVERY = 32


# What gives the text of one turn clip: (sample id, turn index, audio, sample rate) -> transcript.
TurnTranscriber = Callable[[str, int, np.ndarray, int], str]


def transcript_rows(
    dialogue: Dialogue, tts_tables: Sequence[str], transcribe: TurnTranscriber, *, desc: str, progress: bool = True
) -> pl.DataFrame:
    """The ASR table of one dialogue (without provenance): each original turn and each ok variant turn once."""
    jobs = [(original_id(dialogue.dialogue_id), t.index, t.clip, t.text) for t in dialogue.turns]
    if dialogue.status == "ok" and tts_tables:
        spoken = TTS.read(tts_tables).filter(pl.col("status") == "ok")
        jobs += [(r["variant_id"], r["turn_index"], r["clip"], r["text"]) for r in spoken.iter_rows(named=True)]
    rows = []
    for sample_id, turn_index, clip, reference in tqdm(jobs, desc=desc, disable=not progress):
        audio, sr = waveform.read_audio(clip)
        hypothesis = transcribe(sample_id, turn_index, audio, sr)
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
    return ASR.frame(rows)


def transcribe_dialogue(
    dialogue_json: str,
    tts_tables: Sequence[str],
    model_name: str,
    model_options: Mapping[str, Any],
    out_table: str,
    *,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Write the ASR table of one dialogue for one ASR model; return it."""
    dialogue = Dialogue.load(dialogue_json)
    options = {k: v for k, v in model_options.items() if k not in SCHEDULING_KEYS}
    asr = load_asr(model_options["model"], **options)
    frame = with_provenance(
        transcript_rows(
            dialogue,
            tts_tables,
            lambda _sample, _turn, audio, sr: asr.transcribe(audio, sr).text,
            desc=f"asr {model_name} {dialogue.dialogue_id}",
            progress=progress,
        ),
        config_hash=stable_hash(dict(model_options)),
        seed=seed,
        asr_name=model_name,
        asr_model=model_options["model"],
        generation=canonical_json(options),
    )
    write_parquet(out_table, frame)
    return frame


def transcript_key(model_options: Mapping[str, Any], audio: np.ndarray, sample_rate: int) -> str:
    """What determines a transcript: the model's settings (those that change its text) and the waveform, sample by
    sample, at its rate."""
    identity = {k: v for k, v in model_options.items() if k not in NOT_IN_TRANSCRIPT_KEY}
    digest = hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest()
    return stable_hash({"model": identity, "sample_rate": int(sample_rate), "waveform": digest}, length=40)


class TranscriptCache:
    """The transcripts of one partition (an ASR model and a dialogue) in one parquet file, by `transcript_key`.

    New entries are added to what the file holds and written atomically every `CACHE_FLUSH_EVERY` entries and at
    `flush`, so a killed job keeps all but its last few transcripts. A file that cannot be read is moved aside as
    `<file>.corrupt-<UTC time>` with a warning naming it, and its turns are transcribed again. path None: no cache.
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path is not None else None
        self._entries: dict[str, str] = self._read() if self.path is not None else {}
        self._new = 0

    def _read(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        try:
            frame = pl.read_parquet(self.path, columns=["key", "text"])
        except Exception as err:  # noqa: BLE001 - any unreadable file is set aside, whatever the reader raised
            aside = self.path.with_name(f"{self.path.name}.corrupt-{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
            self.path.rename(aside)
            logger.warning("transcript cache %s could not be read (%s); moved aside as %s", self.path, err, aside)
            return {}
        return dict(frame.iter_rows())

    def get(self, key: str) -> str | None:
        return self._entries.get(key)

    def add(self, key: str, text: str) -> None:
        self._entries[key] = text
        self._new += 1
        if self._new >= CACHE_FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.path is None or not self._new:
            return
        frame = pl.DataFrame(
            {"key": list(self._entries), "text": list(self._entries.values())},
            schema={"key": pl.String, "text": pl.String},
        ).sort("key")
        write_parquet(self.path, frame)
        self._new = 0
