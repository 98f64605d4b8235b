"""The column schema of every table that crosses a stage boundary, declared once and used by its writer and
every reader (`docs/architecture.md` lists them with the stage that writes each).

A `TableSchema` builds a typed frame from rows (`frame`), checks and types a frame read from disk
(`conform`: missing columns are an error naming the file; extra columns, e.g. provenance, pass), and reads
parquet files (`read`, `scan`). Provenance columns (`lalm_judge.core.files.with_provenance`) are appended by
the writers and are not part of a schema.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl


class TableError(ValueError):
    """A table that does not satisfy its schema; the message names the file or the rows and the rule."""


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: Mapping[str, pl.DataType]

    def frame(self, rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
        """A frame of exactly these columns, in this order, from row mappings (missing keys are null)."""
        return pl.DataFrame([{name: row.get(name) for name in self.columns} for row in rows], schema=self.columns)

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.columns)

    def conform(self, frame: pl.DataFrame | pl.LazyFrame, source: str, keep_extra: bool = False) -> pl.LazyFrame:
        """The schema's columns (typed; plus the others if `keep_extra`); raise TableError naming what is missing."""
        lazy = frame.lazy()
        present = lazy.collect_schema().names()
        missing = [name for name in self.columns if name not in present]
        if missing:
            raise TableError(
                f"{source} lacks required column(s) {', '.join(missing)}; a {self.name} table needs "
                f"{', '.join(self.columns)}"
            )
        typed = [pl.col(name).cast(dtype) for name, dtype in self.columns.items()]
        extra = [pl.col(name) for name in present if name not in self.columns] if keep_extra else []
        return lazy.select(*typed, *extra)

    def scan(self, paths: Sequence[str | os.PathLike], keep_extra: bool = False) -> pl.LazyFrame:
        if not paths:
            raise TableError(f"no {self.name} files given")
        return pl.concat(
            [self.conform(pl.scan_parquet(p), f"{self.name} file {os.fspath(p)!r}", keep_extra) for p in paths]
        )

    def read(self, paths: str | os.PathLike | Sequence[str | os.PathLike], keep_extra: bool = False) -> pl.DataFrame:
        paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        return self.scan(paths, keep_extra).collect()


# Rewrite stage: one row per (category, severity) of one replaced turn; `text`/`emotion` null unless ok.
VARIANTS = TableSchema(
    "variant",
    {
        "dialogue_id": pl.String,
        "variant_id": pl.String,
        "turn_index": pl.Int32,
        "n_turns": pl.Int32,
        "speaker": pl.String,
        "original_text": pl.String,
        "original_emotion": pl.String,
        "category": pl.String,
        "severity": pl.Int8,
        "text": pl.String,
        "emotion": pl.String,
        "generator": pl.String,
        "model": pl.String,
        "prompt_version": pl.String,
        "seed": pl.Int64,
        "status": pl.String,
        "attempts": pl.Int32,
        "error": pl.String,
    },
)

# TTS stage: the variant rows of one turn with the spoken clip (null unless the variant is ok), so the ASR
# and manifest stages read this table alone.
TTS = TableSchema(
    "TTS",
    {
        **VARIANTS.columns,
        "clip": pl.String,
        "duration_s": pl.Float64,
        "gain_db": pl.Float64,
        "tts_engine": pl.String,
        "tts_model": pl.String,
        "tts_revision": pl.String,
    },
)

# ASR stage: one row per transcribed turn clip (every original turn, every ok variant's replaced turn).
ASR = TableSchema(
    "ASR",
    {
        "dialogue_id": pl.String,
        "sample_id": pl.String,
        "turn_index": pl.Int64,
        "clip": pl.String,
        "reference": pl.String,
        "text": pl.String,
        "wer": pl.Float64,
        "audio_s": pl.Float64,
    },
)

# Judge stage: one row per sample (safe original or variant) and judge cell.
SCORES = TableSchema(
    "score",
    {
        "dialogue_id": pl.String,
        "variant_id": pl.String,
        "category": pl.String,
        "severity": pl.Int64,
        "turn_index": pl.Int64,
        "n_turns": pl.Int64,
        "judge": pl.String,
        "modality": pl.String,
        "transcript_source": pl.String,
        "prompt": pl.String,
        "prompt_version": pl.String,
        "condition": pl.String,
        "score": pl.Float64,
        "parse_status": pl.String,
        # 'p_safe' (answer-token probabilities, calibrated prompt) or 'parsed' (the output text); null if skipped.
        "score_source": pl.String,
        "raw_output": pl.String,
        "latency_s": pl.Float64,
        "n_input_tokens": pl.Int64,
        "n_output_tokens": pl.Int64,
        "long_audio_action": pl.String,
        "model": pl.String,
        "model_revision": pl.String,
        "shard": pl.Int64,
    },
)

# What the metrics stage reads of a score table: any long-format table with these columns qualifies.
METRIC_INPUT = TableSchema(
    "score",
    {
        name: SCORES.columns[name]
        for name in (
            "dialogue_id",
            "variant_id",
            "category",
            "severity",
            "turn_index",
            "n_turns",
            "judge",
            "modality",
            "transcript_source",
            "prompt",
            "condition",
            "score",
            "parse_status",
        )
    },
)

# Human-anchor ratings: one row per (sample, rater) with the generated labels beside the rated ones; severity 0
# means safe. `lalm-judge anchors export` writes them (with more columns), `anchors stats` reads them.
RATINGS = TableSchema(
    "ratings",
    {
        "sample_id": pl.String,
        "rater_id": pl.String,
        "unsafe": pl.Int64,
        "severity": pl.Int64,
        "gt_unsafe": pl.Int64,
        "gt_severity": pl.Int64,
    },
)
