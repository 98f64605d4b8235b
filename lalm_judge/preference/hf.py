"""The built preference data as a Hugging Face dataset folder: parquet shards with both responses' audio.

    DIR/README.md                                 dataset card (YAML header: features, splits and their files)
    DIR/data/<split>-00000-of-0000N.parquet       split `semantic` (UltraFeedback-derived) and `acoustic`
    DIR/lalm_judge_export.json                    what was written (rows and files per split, versions)

The shards are written by the benchmark export's writer (`lalm_judge.export.hf.write_split`: pyarrow alone,
each audio column an arrow struct of the wav `bytes` and its `path` with the `datasets` `Audio` feature in
the shards' metadata, shards bounded by `max_shard_mb`); the card lists both splits, so
`datasets.load_dataset(DIR)` reads them with the audio columns as audio.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from lalm_judge.core.files import atomic_directory, package_versions, write_json
from lalm_judge.export.card import SplitInfo, size_category
from lalm_judge.export.features import AudioColumn, Feature, Scalar, card_feature
from lalm_judge.export.hf import DATA_DIR, EXPORT_RECORD, ShardSettings, write_split
from lalm_judge.pairwise.items import response_paths

SPLITS = ("semantic", "acoustic")
TEXT_COLUMNS = ("item_id", "aspect", "aspect_text", "query", "label", "rationale", "response1_text", "response2_text")
AUDIO_COLUMNS = ("response1_audio", "response2_audio")
# datasets' own defaults (500 MB shards, 100 rows per row group), as the benchmark export uses them.
DEFAULT_SHARDS = ShardSettings()


def pair_features(sample_rate: int) -> dict[str, Feature]:
    return {
        **{name: Scalar("string") for name in TEXT_COLUMNS},
        **{name: AudioColumn(sample_rate) for name in AUDIO_COLUMNS},
    }


def _rows(items: pl.DataFrame) -> Iterator[dict[str, Any]]:
    for item in items.iter_rows(named=True):
        row = {name: item[name] for name in TEXT_COLUMNS}
        for column, path in zip(AUDIO_COLUMNS, response_paths(item), strict=True):
            row[column] = {"bytes": Path(path).read_bytes(), "path": os.path.basename(path)}
        yield row


def card(features: Mapping[str, Feature], splits: Sequence[SplitInfo]) -> str:
    header = {
        "pretty_name": "lalm-judge spoken pairwise preference data",
        "language": ["en"],
        "tags": ["audio", "speech", "preference", "pairwise", "llm-as-a-judge", "synthetic"],
        "size_categories": [size_category(sum(s.num_examples for s in splits))],
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": s.name, "path": f"{DATA_DIR}/{s.name}-*"} for s in splits],
            }
        ],
        "dataset_info": {
            "features": [card_feature(name, f) for name, f in features.items()],
            "splits": [{"name": s.name, "num_bytes": s.num_bytes, "num_examples": s.num_examples} for s in splits],
        },
    }
    counts = ", ".join(f"{s.num_examples} `{s.name}`" for s in splits)
    return f"""---
{yaml.safe_dump(header, sort_keys=False, allow_unicode=True)}---

# Spoken pairwise preference data

Pairs of spoken responses to one query, with the better one labelled (`1`, `2` or `Tie`) on an aspect and a
comparative rationale, built by lalm-judge's preference builder ({counts} rows). `semantic`: text preference
data in the UltraFeedback layout, spoken by several TTS engines, filtered by Whisper WER and duration and
labelled from the per-aspect ratings. `acoustic`: renderings of the same words that differ in one controlled
speaking style (emotion, gender, character voice), labelled from the style used. The same rows are in the
builder's `export/sagelm/` folder as SageLM/LLaMA-Factory records.
"""


def write_hf_pairs(
    items: pl.DataFrame,
    out_dir: str | os.PathLike,
    *,
    sample_rate: int = 16000,
    settings: ShardSettings = DEFAULT_SHARDS,
) -> dict[str, Any]:
    """Write the item-table rows (`source_file` = split) as the dataset folder; return what was written."""
    features = pair_features(sample_rate)
    with atomic_directory(out_dir, marker=EXPORT_RECORD) as tmp:
        splits = [
            write_split(_rows(items.filter(pl.col("source_file") == name)), features, tmp, name, settings)
            for name in SPLITS
            if items.filter(pl.col("source_file") == name).height
        ]
        (tmp / "README.md").write_text(card(features, splits), encoding="utf-8")
        record = {
            "dir": os.fspath(out_dir),
            "splits": {s.name: {"rows": s.num_examples, "files": list(s.files)} for s in splits},
            "sample_rate": sample_rate,
            "package_versions": package_versions(),
        }
        write_json(tmp / EXPORT_RECORD, record)
    return record
