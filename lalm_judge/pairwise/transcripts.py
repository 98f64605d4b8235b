"""ASR transcripts of the pairwise responses: the cascade's input (one table per ASR model).

Each distinct response file of the item table is transcribed once, in full (the judges' length policy cuts
audio, not the cascade's transcripts), with the WER against the text it was spoken from where the items
have one (`lalm_judge.core.tables.PAIRWISE_TRANSCRIPTS`). The ASR model id travels in every row, so the
judge stage records which model the cascade read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import polars as pl
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.asr import load_asr, word_error_rate
from lalm_judge.audio.transcription import SCHEDULING_KEYS
from lalm_judge.core.files import stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import PAIRWISE_TRANSCRIPTS
from lalm_judge.pairwise.items import ItemError, ItemSummary, read_items, response_paths


def response_files(items: pl.DataFrame) -> dict[str, str | None]:
    """Resolved response path -> the text it was spoken from (None when unknown), each file once."""
    files: dict[str, str | None] = {}
    for row in items.iter_rows(named=True):
        for path, text in zip(response_paths(row), (row["response1_text"], row["response2_text"])):
            files.setdefault(path, text)
    return files


def transcribe_responses(
    items_path: str | os.PathLike,
    model_name: str,
    model_options: Mapping[str, Any],
    out_path: str | os.PathLike,
    *,
    seed: int = 0,
    progress: bool = True,
    known: str | os.PathLike | None = None,
) -> pl.DataFrame:
    """Write the transcript table of every response of the items for one ASR model; return it. `known`: a
    transcript table of the same model whose files are not transcribed again (an audit condition's table holds
    only its changed clips; the unchanged ones are the clean table's)."""
    items = read_items(items_path)
    if items.filter(~pl.col("audio_ok")).height:
        raise ItemError(f"{ItemSummary.of(items).missing_message()}; the cascade cannot transcribe them")
    options = {k: v for k, v in model_options.items() if k not in SCHEDULING_KEYS}
    asr = load_asr(model_options["model"], **options)
    done = set(PAIRWISE_TRANSCRIPTS.read(known)["audio"].to_list()) if known else set()
    files = {path: text for path, text in response_files(items).items() if path not in done}
    rows = []
    for path, reference in tqdm(files.items(), desc=f"asr {model_name} responses", disable=not progress):
        audio, rate = waveform.read_audio(path)
        text = asr.transcribe(audio, rate).text
        rows.append(
            {
                "audio": path,
                "asr_model": model_options["model"],
                "text": text,
                "reference": reference,
                "wer": None if reference is None else word_error_rate(reference, text),
                "audio_s": len(audio) / rate,
            }
        )
    frame = with_provenance(
        PAIRWISE_TRANSCRIPTS.frame(rows), config_hash=stable_hash(dict(model_options)), seed=seed, asr_name=model_name
    )
    write_parquet(out_path, frame)
    return frame
