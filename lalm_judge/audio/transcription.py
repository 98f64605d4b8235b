"""The ASR stage: transcribe each original turn and each ok variant turn of one dialogue once.

A variant's full transcript is its source's transcript with one turn replaced (see
`lalm_judge.manifest.samples`), so no full variant dialogue is ever transcribed. Each row stores the turn's
WER against its ground-truth text (`lalm_judge.core.tables.ASR`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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

# Keys of an `asr.models` entry that schedule the job rather than configure the model.
SCHEDULING_KEYS = ("model", "gpu")


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
