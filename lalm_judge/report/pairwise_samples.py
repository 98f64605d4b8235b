"""The pairwise track's item viewer, `results/pairwise/report/samples/` (`lalm_judge.report.viewer` has the
layout): per item the query, both responses playable with their texts and transcripts (with WER), the label and
its rationale, and every judge cell's answer in both orders with the parsed verdicts, their statuses and every
other column the prediction tables carry (the rule a verdict was read by, finish reasons, ...).

Data files: `catalog` (the judge cells with the columns constant within each, the statuses and verdicts found,
and every (item, aspect) row with its label), `cells/<n>` (one cell's verdicts and status codes per order, in the
catalog's row order: what the list filters) and `items/<item>` (the item and every prediction row for it). The
response audio is the items stage's own files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.core.tables import PAIRWISE_ITEMS, PAIRWISE_PREDICTIONS, PAIRWISE_TRANSCRIPTS
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.pairwise.items import response_paths
from lalm_judge.pairwise.metrics import CELL_KEYS
from lalm_judge.report.viewer import (
    PER_ROW,
    CellFile,
    cell_constants,
    columnar,
    copy_assets,
    file_url,
    rounded,
    split_columns,
    write_data,
)

ROW_KEYS = ("item_id", "aspect")
# The verdict of each order and of both combined, each with the status beside it (`<verdict>_status`).
VERDICTS = ("verdict", "verdict_swapped", "verdict_combined")
# Columns every row carries, whether or not they vary within a table: both raw answers and what was read.
ROW_COLUMNS = ("prediction", "prediction_swapped", *VERDICTS, *(f"{v}_status" for v in VERDICTS))
# What the list shows of each (item, aspect) row.
LISTED = (*ROW_KEYS, "label", "response1_duration_s", "response2_duration_s")
# What the item file holds once per item rather than per row.
ITEM_COLUMNS = ("label", "duration_s", "response1_duration_s", "response2_duration_s")


def pairwise_cell_id(keys: Mapping[str, Any]) -> str:
    """A pairwise cell's name in the viewer, its prediction table's path: '<judge>/<modality>-<source>/<prompt>'."""
    return f"{keys['judge']}/{keys['modality']}-{keys['transcript_source']}/{keys['prompt']}"


def read_predictions(paths: Sequence[str | os.PathLike]) -> tuple[pl.DataFrame, list[CellFile], set[str]]:
    """Every prediction row (with a `cell` name), each table's constant columns, and the columns that vary."""
    frames, files, varying = [], [], set()
    for path in sorted(map(os.fspath, paths)):
        frame = PAIRWISE_PREDICTIONS.conform(
            pl.scan_parquet(path), f"pairwise prediction table {path!r}", keep_extra=True
        ).collect()
        if frame.height == 0:
            continue
        cell = pairwise_cell_id(frame.row(0, named=True))
        extra = [c for c in frame.columns if c not in (*CELL_KEYS, *ROW_KEYS, *ROW_COLUMNS, *ITEM_COLUMNS)]
        constant, changing = split_columns(frame, extra)
        varying |= changing | {c for c in PER_ROW if c in frame.columns}
        files.append(CellFile(path, cell, None, constant))
        frames.append(frame.with_columns(cell=pl.lit(cell)))
    if not frames:
        raise ValueError("no pairwise prediction rows to show: every prediction table given is empty")
    return pl.concat(frames, how="diagonal_relaxed"), files, varying


def _transcripts(paths: Sequence[str | os.PathLike]) -> dict[str, dict[str, dict[str, Any]]]:
    """Response file -> transcript source ('asr:<name>') -> {text, wer}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in paths:
        source = TranscriptSource.asr(Path(path).stem)
        for row in PAIRWISE_TRANSCRIPTS.read(path).iter_rows(named=True):
            out.setdefault(row["audio"], {})[source] = {"text": row["text"], "wer": rounded(row["wer"])}
    return out


def _response(path: str, duration: Any, text: Any, transcripts: Mapping, viewer_dir: Path) -> dict[str, Any]:
    return {
        "audio": file_url(path, viewer_dir),
        "duration": rounded(duration),
        "text": text,
        "transcripts": transcripts.get(path, {}),
    }


def item_payload(rows: pl.DataFrame, transcripts: Mapping, viewer_dir: Path) -> dict[str, Any]:
    """The item (its query, responses and aspects) from its rows of the item table."""
    first = rows.row(0, named=True)
    paths = response_paths(first)
    return {
        "id": first["item_id"],
        "query": first["query"],
        "audio_ok": first["audio_ok"],
        "responses": [
            _response(
                paths[i], first[f"response{i + 1}_duration_s"], first[f"response{i + 1}_text"], transcripts, viewer_dir
            )
            for i in range(2)
        ],
        "aspects": rows.select("aspect", "aspect_text", "label", "rationale").to_dicts(),
    }


@dataclass(frozen=True)
class PairwiseViewerInputs:
    """The tables the item viewer reads: the item table, every cell's predictions, the cascade's transcripts."""

    items_path: str | os.PathLike
    prediction_paths: Sequence[str | os.PathLike]
    transcript_paths: Sequence[str | os.PathLike] = ()


def write_pairwise_viewer(inputs: PairwiseViewerInputs, out_dir: str | os.PathLike) -> Path:
    """Write the pairwise track's item viewer into out_dir (module docstring); return its index.html."""
    viewer_dir = Path(out_dir)
    items = PAIRWISE_ITEMS.read(inputs.items_path).sort(ROW_KEYS)
    predictions, files, varying = read_predictions(inputs.prediction_paths)
    constants = cell_constants(files, varying)
    cells = sorted(predictions.select(*CELL_KEYS, "cell").unique().to_dicts(), key=lambda c: c["cell"])
    cell_index = {c["cell"]: i for i, c in enumerate(cells)}
    statuses = sorted({s for v in VERDICTS for s in predictions[f"{v}_status"].drop_nulls().to_list()})
    code = {status: i for i, status in enumerate(statuses)}
    row_keys = items.select(ROW_KEYS)
    for cell in cells:
        part = row_keys.join(predictions.filter(pl.col("cell") == cell["cell"]), on=list(ROW_KEYS), how="left")
        arrays = {v: part[v].to_list() for v in VERDICTS}
        arrays |= {f"{v}_status": [code.get(s, -1) for s in part[f"{v}_status"].to_list()] for v in VERDICTS}
        write_data(viewer_dir, f"cells/{cell_index[cell['cell']]}", arrays)
    transcripts = _transcripts(inputs.transcript_paths)
    columns = [*ROW_COLUMNS, *sorted(varying)]
    numbered = predictions.with_columns(pl.col("cell").replace_strict(cell_index, return_dtype=pl.Int64))
    judged = numbered.sort("cell", "aspect").partition_by("item_id", as_dict=True)
    # Item files are numbered: imported item ids may hold characters a file name cannot.
    item_ids = items["item_id"].unique(maintain_order=True).to_list()
    for number, (_, rows) in enumerate(items.partition_by("item_id", as_dict=True, maintain_order=True).items()):
        payload = item_payload(rows, transcripts, viewer_dir)
        answers = judged.get((item_ids[number],), numbered.clear())
        payload["rows"] = {"columns": columns, **columnar(answers.to_dicts(), ["cell", "aspect", *columns])}
        write_data(viewer_dir, f"items/{number}", payload)
    catalog = {
        "track": "pairwise",
        "cells": [
            {"id": c["cell"], **{k: c[k] for k in CELL_KEYS}, "fixed": constants.get(c["cell"], {})} for c in cells
        ],
        "statuses": statuses,
        "verdicts": sorted(set(items["label"].drop_nulls().to_list()) | set(predictions["verdict"].drop_nulls())),
        "rows": columnar(items.select(*LISTED).to_dicts(), LISTED),
        "items": item_ids,
    }
    write_data(viewer_dir, "catalog", catalog)
    return copy_assets(viewer_dir, "pairwise")
