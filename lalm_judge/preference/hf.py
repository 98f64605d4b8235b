"""The built preference data as a Hugging Face dataset folder: parquet shards with both responses' audio.

    DIR/README.md                                 dataset card (YAML header: features, splits and their files)
    DIR/data/<split>-00000-of-0000N.parquet       split `semantic` (UltraFeedback-derived) and `acoustic`

Written with pyarrow alone (no `datasets`, whose audio encoding needs torchcodec): each audio column has the
arrow type of a `datasets` `Audio` feature (a struct of the wav `bytes` and its `path`) and the shards carry
the features in their `huggingface` schema metadata; the card lists the splits and their files, so
`datasets.load_dataset(DIR)` reads both splits with the audio columns as audio. A shard is closed before a
row would take it past `max_shard_mb`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from lalm_judge.core.files import atomic_path
from lalm_judge.pairwise.items import response_paths

SPLITS = ("semantic", "acoustic")
TEXT_COLUMNS = ("item_id", "aspect", "aspect_text", "query", "label", "rationale", "response1_text", "response2_text")
AUDIO_COLUMNS = ("response1_audio", "response2_audio")
AUDIO_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
MAX_SHARD_MB = 500.0


def features(sample_rate: int) -> dict[str, Any]:
    """The `datasets` feature spec of the rows (as the `huggingface` metadata spells it)."""
    spec: dict[str, Any] = {name: {"dtype": "string", "_type": "Value"} for name in TEXT_COLUMNS}
    spec.update({name: {"sampling_rate": sample_rate, "_type": "Audio"} for name in AUDIO_COLUMNS})
    return spec


def _schema(sample_rate: int) -> pa.Schema:
    fields = [pa.field(name, pa.string()) for name in TEXT_COLUMNS] + [pa.field(n, AUDIO_TYPE) for n in AUDIO_COLUMNS]
    metadata = {"huggingface": json.dumps({"info": {"features": features(sample_rate)}})}
    return pa.schema(fields, metadata=metadata)


def _row(item: Mapping[str, Any]) -> dict[str, Any]:
    row = {name: item[name] for name in TEXT_COLUMNS}
    for column, path in zip(AUDIO_COLUMNS, response_paths(item), strict=True):
        row[column] = {"bytes": Path(path).read_bytes(), "path": os.path.basename(path)}
    return row


def _write_split(
    rows: Sequence[Mapping[str, Any]], schema: pa.Schema, data_dir: Path, split: str, max_mb: float
) -> list[str]:
    shards: list[list[dict[str, Any]]] = [[]]
    size = 0.0
    for item in rows:
        row = _row(item)
        row_mb = sum(len(row[c]["bytes"]) for c in AUDIO_COLUMNS) / 2**20
        if shards[-1] and size + row_mb > max_mb:
            shards.append([])
            size = 0.0
        shards[-1].append(row)
        size += row_mb
    names = []
    for index, shard in enumerate(shards):
        name = f"{split}-{index:05d}-of-{len(shards):05d}.parquet"
        with atomic_path(data_dir / name) as tmp:
            pq.write_table(pa.Table.from_pylist(shard, schema=schema), tmp, compression="snappy")
        names.append(f"data/{name}")
    return names


def dataset_card(splits: Mapping[str, Sequence[str]], sample_rate: int, counts: Mapping[str, int]) -> str:
    configs = "\n".join(
        f"    - split: {split}\n      path: {json.dumps(list(files))}" for split, files in splits.items() if files
    )
    feature_lines = (
        "\n".join(f"  - name: {name}\n    dtype: string" for name in TEXT_COLUMNS)
        + "\n"
        + "\n".join(
            f"  - name: {name}\n    dtype:\n      audio:\n        sampling_rate: {sample_rate}"
            for name in AUDIO_COLUMNS
        )
    )
    summary = ", ".join(f"{counts[s]} {s}" for s in splits)
    return f"""---
configs:
  - config_name: default
    data_files:
{configs}
dataset_info:
  features:
{feature_lines}
---

# Spoken pairwise preference data

Pairs of spoken responses to one query with the better one labelled (`1`, `2` or `Tie`) per aspect and a
comparative rationale, built by lalm-judge's preference builder ({summary} rows). `semantic`: text preference
data in the UltraFeedback layout, spoken by several TTS engines, filtered by Whisper WER and duration, labelled
from per-aspect ratings. `acoustic`: renderings of the same words that differ in one controlled speaking style
(emotion, gender, character voice), labelled from the style used. The same rows as SageLM/LLaMA-Factory
records are in the builder's `export/sagelm/` folder.
"""


def write_hf_pairs(
    items: pl.DataFrame, out_dir: str | os.PathLike, *, sample_rate: int = 16000, max_shard_mb: float = MAX_SHARD_MB
) -> dict[str, Any]:
    """Write the item-table rows (`source_file` = split) as the dataset folder; return what was written."""
    out = Path(out_dir)
    data_dir = out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for stale in data_dir.glob("*.parquet"):
        stale.unlink()
    schema = _schema(sample_rate)
    splits, counts = {}, {}
    for split in SPLITS:
        rows = items.filter(pl.col("source_file") == split).to_dicts()
        counts[split] = len(rows)
        splits[split] = _write_split(rows, schema, data_dir, split, max_shard_mb) if rows else []
    with atomic_path(out / "README.md") as tmp:
        tmp.write_text(dataset_card(splits, sample_rate, counts), encoding="utf-8")
    return {"dir": os.fspath(out), "splits": splits, "rows": counts, "sample_rate": sample_rate}
