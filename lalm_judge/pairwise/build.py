"""The pairwise item stage: the item table of a run from its configured source (`pairwise.items`).

`format: sagelm` imports SageLM record files (`files`, audio under `audio_root`); `format: jsonl` speaks the
project's own items (`path`, voices from `voices`) into `audio_dir`. `max_items` keeps the first items (in
source order), and the missing-audio policy (`fail`, or `exclude` with the excluded items on record in the
summary) applies to both; excluding every item is an error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import polars as pl

from lalm_judge.pairwise.items import (
    JSONL_FORMAT,
    ItemError,
    apply_missing_audio_policy,
    items_config_hash,
    missing_audio_warning,
    synthesize_items,
    write_items,
)
from lalm_judge.pairwise.sagelm import FORMAT as SAGELM_FORMAT
from lalm_judge.pairwise.sagelm import import_sagelm

log = logging.getLogger(__name__)


def first_items(items: pl.DataFrame, max_items: int | None) -> pl.DataFrame:
    """The rows of the first `max_items` items in table order (all rows when None)."""
    if max_items is None:
        return items
    keep = items["item_id"].unique(maintain_order=True).head(max_items)
    return items.filter(pl.col("item_id").is_in(keep.implode()))


def build_items(
    settings: Mapping[str, Any],
    out_path: str | os.PathLike,
    summary_path: str | os.PathLike,
    audio_dir: str | os.PathLike | None,
    *,
    sample_rate: int = 16000,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Write the item table and its summary JSON from validated `pairwise.items` settings; return the table."""
    source_format = settings["format"]
    if source_format == SAGELM_FORMAT:
        items, _ = import_sagelm(settings["files"], settings["audio_root"])
        items = first_items(items, settings["max_items"])
        sources = {"files": list(settings["files"]), "audio_root": settings["audio_root"]}
    elif source_format == JSONL_FORMAT:
        if audio_dir is None:
            raise ItemError("the project's items (format jsonl) are spoken into an audio folder; give audio_dir")
        items = synthesize_items(
            settings["path"],
            settings["voices"],
            audio_dir,
            sample_rate,
            max_items=settings["max_items"],
            progress=progress,
        )
        sources = {"files": [os.fspath(settings["path"])], "audio_root": os.fspath(audio_dir)}
    else:
        raise ItemError(f"unknown pairwise item format {source_format!r}; use {SAGELM_FORMAT!r} or {JSONL_FORMAT!r}")
    kept, summary = apply_missing_audio_policy(items, settings["missing_audio"], "pairwise.items.missing_audio")
    if summary.n_missing_audio_rows:
        log.warning("%s", missing_audio_warning(summary, settings["missing_audio"]))
    extra = {
        "format": source_format,
        **sources,
        "missing_audio": settings["missing_audio"],
        "n_items_judged": kept["item_id"].n_unique(),
    }
    write_items(kept, out_path, summary_path, summary, config_hash=items_config_hash(settings), seed=seed, extra=extra)
    return kept
