"""The `hf_benchmark` corpus format: a released benchmark (`lalm-judge export`) brought back by `lalm-judge
import`, with the speech, texts, labels and transcripts of every sample, so that the workflow judges it
without rewriting or synthesizing anything.

Layout of the folder (`corpus.path`), written by `data.benchmark_tables.BenchmarkWriter` and read by the functions
below:

    benchmark.json                 the index: format version, sample rate, dialogues (id, n_turns, the turns
                                   with variants),
                                   categories, severities and transcript sources present
    <d>/dialogue.json              the safe original (`core.dialogue.Dialogue`, clips relative to <d>/)
    <d>/turns/t<i>.wav             its turn clips
    <d>/variants.parquet           one row per variant: the TTS table (`core.tables.TTS`), clips relative to <d>/
    <d>/variants/<variant>.wav     the replaced turn of each variant
    <d>/transcripts.parquet        the released ASR transcripts (`benchmark_tables.TRANSCRIPTS`) of each original
                                   turn and each replaced turn

The workflow reads it in four places: the plan (`list_dialogues`: the index), ingest (`ingest`: the original's
dialogue.json and turn clips), the variant stage when `variants.source` is `imported` and the ASR stage for models
configured as `model: imported` (`data.benchmark_tables`: the variant and TTS tables of one turn with the released
clips, the released transcripts instead of running a recognizer). The tables live in a module of their own, so
that the workflow's parse, which every job repeats, reads the index without importing the table library.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from lalm_judge.audio import waveform
from lalm_judge.core.dialogue import CorpusError, Dialogue, SourceDialogue
from lalm_judge.core.files import read_json
from lalm_judge.core.taxonomy import validate_dialogue_id

FORMAT = "hf_benchmark"
FORMAT_VERSION = 1
INDEX = "benchmark.json"
# `variants.source` of a benchmark judged as released, and the `asr.models.<name>.model` that takes the
# released transcripts of source 'asr:<name>' instead of recognizing the audio again.
IMPORTED = "imported"


def dialogue_path(root: str | os.PathLike, dialogue_id: str) -> Path:
    return Path(root) / validate_dialogue_id(dialogue_id) / "dialogue.json"


def variants_path(root: str | os.PathLike, dialogue_id: str) -> Path:
    return Path(root) / validate_dialogue_id(dialogue_id) / "variants.parquet"


def transcripts_path(root: str | os.PathLike, dialogue_id: str) -> Path:
    return Path(root) / validate_dialogue_id(dialogue_id) / "transcripts.parquet"


def read_index(root: str | os.PathLike) -> dict[str, Any]:
    """The benchmark index; an error names the folder when it is not an imported benchmark."""
    path = Path(root) / INDEX
    if not path.is_file():
        raise CorpusError(
            f"{root} is not an imported benchmark (no {INDEX}); write one with "
            f"'lalm-judge import --format hf DATASET_DIR --out {root}'"
        )
    index = read_json(path)
    if index.get("format") != FORMAT or index.get("version") != FORMAT_VERSION:
        raise CorpusError(
            f"{path}: format {index.get('format')!r} version {index.get('version')!r}; this code reads "
            f"{FORMAT!r} version {FORMAT_VERSION} (import the dataset again)"
        )
    return index


def list_dialogues(root: str | os.PathLike) -> list[SourceDialogue]:
    """The benchmark's dialogues in index order (the workflow plan reads the index): each is defined by its
    released dialogue.json and turn clips, and has variants of the turns the index lists (a benchmark written before
    the index listed them: of the turns in its variant table)."""
    listed = []
    for entry in read_index(root)["dialogues"]:
        path = dialogue_path(root, entry["id"])
        clips = [str(path.parent / f"turns/t{i}.wav") for i in range(entry["n_turns"])]
        files = (str(path), *clips)
        turns = entry.get("variant_turns")
        if turns is None:
            import polars as pl  # only for a benchmark written before the index listed its variant turns

            table = pl.read_parquet(variants_path(root, entry["id"]), columns=["turn_index"])
            turns = table["turn_index"].unique().sort().to_list()
        listed.append(
            SourceDialogue(
                entry["id"], entry["n_turns"], str(path), location=str(path), files=files, variant_turns=tuple(turns)
            )
        )
    return listed


def ingest(corpus: Mapping[str, Any], dialogue_id: str, clips_dir: str | Path, sample_rate: int) -> Dialogue:
    """The released safe original as the canonical dialogue, its turn clips copied into `clips_dir`."""
    source = dialogue_path(corpus["path"], dialogue_id)
    if not source.is_file():
        raise CorpusError(f"dialogue {dialogue_id!r} is not in the benchmark {corpus['path']} (no {source})")
    released = Dialogue.load(source)
    turns = []
    for turn in released.turns:
        audio, _ = waveform.read_audio(source.parent / turn.clip, sample_rate)
        clip = Path(clips_dir) / f"t{turn.index}.wav"
        waveform.write_wav(clip, audio, sample_rate)
        turns.append(replace(turn, clip=str(clip)))
    return Dialogue(
        dialogue_id,
        turns,
        FORMAT,
        str(source),
        sample_rate,
        meta={"released": {"source_format": released.source_format, "source_path": released.source_path}},
    )
