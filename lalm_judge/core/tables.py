"""The column schema of every table that crosses a stage boundary, declared once and used by its writer and
every reader (`docs/architecture.md` lists them with the stage that writes each).

A `TableSchema` builds a typed frame from rows (`frame`), checks and types a frame read from disk
(`conform`: missing columns, and columns of a type that does not convert to the schema's (text where a number
belongs), are errors naming the file; numbers convert between widths; missing `optional` columns are added as
nulls; extra columns, e.g. provenance, pass), and reads parquet files (`read`, `scan`; a file that is not
parquet is an error naming it). Provenance columns
(`lalm_judge.core.files.with_provenance`) are appended by the writers and are not part of a schema.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl


class TableError(ValueError):
    """A table that does not satisfy its schema; the message names the file or the rows and the rule."""


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: Mapping[str, pl.DataType]
    # Columns a reader uses when a table has them (null when it does not), for tables written elsewhere.
    optional: Mapping[str, pl.DataType] = field(default_factory=dict)

    def frame(self, rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
        """A frame of exactly these columns, in this order, from row mappings (missing keys are null)."""
        return pl.DataFrame([{name: row.get(name) for name in self.columns} for row in rows], schema=self.columns)

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.columns)

    def conform(self, frame: pl.DataFrame | pl.LazyFrame, source: str, keep_extra: bool = False) -> pl.LazyFrame:
        """The schema's columns (typed; plus the others if `keep_extra`); raise TableError naming what is missing."""
        lazy = frame.lazy()
        schema = lazy.collect_schema()
        present = schema.names()
        missing = [name for name in self.columns if name not in present]
        if missing:
            raise TableError(
                f"{source} lacks required column(s) {', '.join(missing)}; a {self.name} table needs "
                f"{', '.join(self.columns)}"
            )
        wanted = {**self.columns, **{k: v for k, v in self.optional.items() if k in present}}
        wrong = [
            f"{name} is {schema[name]} (needs {dtype})"
            for name, dtype in wanted.items()
            if not _converts(schema[name], dtype)
        ]
        if wrong:
            raise TableError(f"{source} has column(s) of the wrong type: {'; '.join(wrong)}")
        typed = [pl.col(name).cast(dtype) for name, dtype in self.columns.items()]
        typed += [
            (pl.col(name) if name in present else pl.lit(None)).cast(dtype).alias(name)
            for name, dtype in self.optional.items()
        ]
        known = {*self.columns, *self.optional}
        extra = [pl.col(name) for name in present if name not in known] if keep_extra else []
        return lazy.select(*typed, *extra)

    def scan(self, paths: Sequence[str | os.PathLike], keep_extra: bool = False) -> pl.LazyFrame:
        if not paths:
            raise TableError(f"no {self.name} files given")
        return pl.concat(
            [self.conform(_scan_parquet(p), f"{self.name} file {os.fspath(p)!r}", keep_extra) for p in paths]
        )

    def read(self, paths: str | os.PathLike | Sequence[str | os.PathLike], keep_extra: bool = False) -> pl.DataFrame:
        paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        return self.scan(paths, keep_extra).collect()


def _converts(present: pl.DataType, wanted: pl.DataType) -> bool:
    """Whether a column of type `present` reads as `wanted` without changing what it says."""
    if present == wanted or present == pl.Null:
        return True
    if present.is_numeric() and wanted.is_numeric():
        return True
    return wanted == pl.String and present.base_type() in (pl.Categorical, pl.Enum)


def read_parquet_table(path: str | os.PathLike) -> pl.DataFrame:
    """A parquet file as a frame; TableError naming the file when it is missing or not a readable parquet table."""
    if not os.path.isfile(path):
        raise TableError(f"table {os.fspath(path)!r} does not exist")
    return _scan_parquet(path).collect()


def _scan_parquet(path: str | os.PathLike) -> pl.LazyFrame:
    lazy = pl.scan_parquet(path)
    try:
        lazy.collect_schema()
    except pl.exceptions.PolarsError as err:
        raise TableError(
            f"{os.fspath(path)!r} is not a readable parquet table ({type(err).__name__}: {' '.join(str(err).split())})"
        ) from None
    return lazy


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
        # The RAVDESS clips the emotion was cloned from (tts.emotion_reference); null when none is configured.
        "emotion_references": pl.List(pl.String),
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

# TTS control stage: per target turn, the safe turn re-synthesized with the variants' voice (`kind` 'tts_control',
# `sample_id` '<d>.t<t>.tts_control') and the evaluator-addressed sentence of the injection control in the
# speaker's voice (`kind` 'injection', `sample_id` '<d>.t<t>.injection', a clip rather than a sample).
CONTROL_CLIPS = TableSchema(
    "TTS control",
    {
        "dialogue_id": pl.String,
        "sample_id": pl.String,
        "kind": pl.String,
        "turn_index": pl.Int32,
        "speaker": pl.String,
        "text": pl.String,
        "emotion": pl.String,
        "clip": pl.String,
        "duration_s": pl.Float64,
        "gain_db": pl.Float64,
        "tts_engine": pl.String,
        "tts_model": pl.String,
        "tts_revision": pl.String,
        "emotion_references": pl.List(pl.String),
    },
)

# ASR under a condition: one row per sample of the condition, its target turn as the judge hears it transcribed;
# `reference` is the text spoken in that turn (with the injected sentence under 'injection').
CONDITION_ASR = TableSchema("condition ASR", {**ASR.columns, "condition": pl.String})

# Energy and pitch of each original turn and each ok variant's replaced turn (lalm_judge.audio.prosody).
PROSODY_FEATURES = (
    "duration_s",
    "rms_db_mean",
    "rms_db_std",
    "rms_db_max",
    "f0_median_hz",
    "f0_iqr_semitones",
    "voiced_fraction",
)
PROSODY = TableSchema(
    "prosody",
    {
        "dialogue_id": pl.String,
        "sample_id": pl.String,
        "turn_index": pl.Int64,
        **{name: pl.Float64 for name in PROSODY_FEATURES},
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
        # What the judge took in place of the dialogue audio: 'none' (text modality), 'native' (the audio itself)
        # or 'cascade via <asr model>' (an ASR transcript of the audio; `core.vocabulary.audio_input_label`).
        "audio_input": pl.String,
        # 'p_safe' (answer-token probabilities, calibrated prompt) or 'parsed' (the output text); null if skipped.
        "score_source": pl.String,
        # Probability the answer words' first tokens carry at the first generated position (p_safe rows; the
        # lowest over a chunked sample's windows); below `judging.scoring.MIN_ANSWER_MASS` the row is a failure.
        "answer_mass": pl.Float64,
        "raw_output": pl.String,
        "latency_s": pl.Float64,
        "n_input_tokens": pl.Int64,
        "n_output_tokens": pl.Int64,
        "long_audio_action": pl.String,
        # Why generation stopped (`JudgeOutput.finish_reason`: stop, length, content_filter; null when the backend
        # does not say); of a chunked sample, that of a window cut or filtered if any.
        "finish_reason": pl.String,
        "model": pl.String,
        "model_revision": pl.String,
        # The model that answered: an endpoint's response `model`, a local backend's loaded checkpoint, and its
        # resolved commit where known (null otherwise).
        "served_model": pl.String,
        "served_revision": pl.String,
        "shard": pl.Int64,
    },
)

# Columns that record what a row cost to make, not what it says: the time its requests took (score and pairwise
# prediction tables) and the requests a rewrite took, retries after an endpoint's transient faults included
# (variant and TTS tables). They are the only cells in which two runs of one config may differ, and are left out
# when runs are compared (docs/reliability.md, "Determinism").
EFFORT_COLUMNS = ("latency_s", "attempts")

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
    optional={"audio_input": SCORES.columns["audio_input"]},
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

# Pairwise track, items: one row per (item, aspect). An item is one query with two spoken responses; its
# aspects (helpfulness, honesty, ... or an acoustic aspect) are rows that share the item's audio. Response
# audio paths are relative to `audio_root` (as in SageLM/LLaMA-Factory records) unless absolute. The
# `source_*` columns keep what a record held beyond the other columns, so that exporting writes it back
# unchanged (`lalm_judge.pairwise.sagelm`); they are null for items made by the project.
PAIRWISE_ITEMS = TableSchema(
    "pairwise item",
    {
        "item_id": pl.String,
        "aspect": pl.String,
        # The aspect as the judge reads it ('instruction_following', 'gender instruction following').
        "aspect_text": pl.String,
        "query": pl.String,
        "response1_audio": pl.String,
        "response2_audio": pl.String,
        "audio_root": pl.String,
        "response1_duration_s": pl.Float64,
        "response2_duration_s": pl.Float64,
        # Both response files exist and are readable (false rows are kept and reported, never dropped silently).
        "audio_ok": pl.Boolean,
        # '1', '2' or 'Tie' (the better response); null for unlabelled items.
        "label": pl.String,
        "rationale": pl.String,
        # The texts the responses were spoken from, where known (project-made items); null for imported ones.
        "response1_text": pl.String,
        "response2_text": pl.String,
        # Acoustic items only (null for the semantic aspects): the task format ('explicit_tts', 'explicit_dialogue',
        # 'implicit'; null where the source does not tell) and the controlled style ('emotion', 'gender',
        # 'character', 'mixed'), as SageLM splits its acoustic results (core.vocabulary).
        "task_format": pl.String,
        "style": pl.String,
        "source_format": pl.String,
        "source_file": pl.String,
        "source_row": pl.Int64,
        "source_instruction": pl.String,
        "source_input": pl.String,
        # JSON object of the record's other keys ('{}' when none).
        "source_extra": pl.String,
    },
)

# Pairwise track, ASR: one row per distinct response audio file and ASR model (the cascade's transcripts).
PAIRWISE_TRANSCRIPTS = TableSchema(
    "pairwise transcript",
    {
        "audio": pl.String,
        "asr_model": pl.String,
        "text": pl.String,
        "reference": pl.String,
        "wer": pl.Float64,
        "audio_s": pl.Float64,
    },
)

# Pairwise track, judge stage: one row per (item, aspect) and judge cell (judge, modality, transcript source,
# prompt). Each item is judged in both orders: `prediction` is the raw answer with the responses in their
# order, `prediction_swapped` the raw answer with them swapped (its '1' names response 2). `verdict*` are
# the parsed labels in the item's numbering (the swapped one mapped back), `verdict_combined` the label of
# both orders (`lalm_judge.pairwise.parsing.combine_verdicts`).
PAIRWISE_PREDICTIONS = TableSchema(
    "pairwise prediction",
    {
        "item_id": pl.String,
        "aspect": pl.String,
        "label": pl.String,
        "judge": pl.String,
        "modality": pl.String,
        "transcript_source": pl.String,
        "prompt": pl.String,
        "prompt_version": pl.String,
        "prediction": pl.String,
        "prediction_swapped": pl.String,
        "verdict": pl.String,
        "verdict_status": pl.String,
        "verdict_swapped": pl.String,
        "verdict_swapped_status": pl.String,
        "verdict_combined": pl.String,
        "verdict_combined_status": pl.String,
        # How the answers were read: 'sagelm' (SageLM's first-character rule) or 'lenient' (docs/metrics.md).
        "verdict_rule": pl.String,
        "rationale": pl.String,
        "rationale_swapped": pl.String,
        # The item's task format and style (acoustic items; null otherwise), for SageLM's splits of the metrics.
        "task_format": pl.String,
        "style": pl.String,
        # Sampled judges (`generation.seeds`, lalm_judge.pairwise.samples): answers per order (1 when greedy;
        # `prediction` is the first seed's), every sample as JSON [{seed, answer, answer_swapped, verdict,
        # verdict_swapped}], each order's majority verdict and the share of its samples that give it.
        "n_samples": pl.Int64,
        "samples": pl.String,
        "verdict_majority": pl.String,
        "verdict_majority_swapped": pl.String,
        "sample_agreement": pl.Float64,
        "sample_agreement_swapped": pl.Float64,
        # Combined full duration of both responses (before any cut), and each response's.
        "duration_s": pl.Float64,
        "response1_duration_s": pl.Float64,
        "response2_duration_s": pl.Float64,
        # 'none', 'truncated' or 'skipped', under the per-response limit `audio_limit_s` (null: no limit).
        "long_audio_action": pl.String,
        "audio_limit_s": pl.Float64,
        # The ASR model of an 'asr:<m>' transcript source (its model id), else null.
        "asr_model": pl.String,
        "latency_s": pl.Float64,
        "n_input_tokens": pl.Int64,
        "n_output_tokens": pl.Int64,
        "model": pl.String,
        "model_revision": pl.String,
        # Why generation stopped in each order (as in SCORES), and the model that answered.
        "finish_reason": pl.String,
        "finish_reason_swapped": pl.String,
        "served_model": pl.String,
        "served_revision": pl.String,
    },
    # The audit condition of the items judged (`pairwise.conditions`; item ids '<item>__changed<1 or 2>'), null
    # for the clean items.
    optional={"audit_condition": pl.String},
)

# What `lalm-judge pairwise metrics` needs of a predictions table (prediction_swapped and duration_s are
# optional: without them there is no swap consistency or duration breakdown).
PAIRWISE_METRIC_INPUT = TableSchema(
    "pairwise prediction",
    {name: pl.String for name in ("item_id", "aspect", "label", "prediction")},
)

# A pairwise judge cell, its mode and a group of its rows (the keys of the pairwise metric and finding tables).
_PAIRWISE_GROUP = {
    "judge": pl.String,
    "modality": pl.String,
    "transcript_source": pl.String,
    "prompt": pl.String,
    "mode": pl.String,
    "scope": pl.String,
    "group": pl.String,
}

# A pairwise value with its interval; status 'ok', or 'not_estimable' below pairwise.metrics.min_items items (no
# interval).
_PAIRWISE_ESTIMATE = {
    "value": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "status": pl.String,
    "n": pl.Int64,
    "n_items": pl.Int64,
}

# Pairwise metrics in long format: one row per (judge cell, scope, group, metric); scope 'aspect' (group =
# the aspect), 'overall' (group 'all' or 'aspect_mean'), 'duration' (group = the bin of combined response
# duration), or one of SageLM's splits 'dimension', 'task_format', 'style', 'style_format' (pairwise.metrics).
PAIRWISE_METRICS = TableSchema(
    "pairwise metric",
    {
        **_PAIRWISE_GROUP,
        "low_s": pl.Float64,
        "high_s": pl.Float64,
        "metric": pl.String,
        **_PAIRWISE_ESTIMATE,
    },
)

# Pairwise metrics stage: every hypothesis of the two families of tests (lalm_judge.pairwise.families), `finding`
# true for the claimed ones. Family 'pairwise findings': each (judge cell, group) of scope 'overall' (group 'all'),
# 'dimension' (semantic, acoustic) or 'aspect' with enough items, its single-order accuracy tested against chance
# (`chance`: the better of a uniform guess and always giving the group's most frequent label) and against the
# length baseline on the same rows (`length_baseline`: 'the longer response wins'; `difference` = accuracy minus
# it, with its paired interval), Benjamini-Hochberg across the family.
PAIRWISE_FINDINGS = TableSchema(
    "pairwise finding",
    {
        **_PAIRWISE_GROUP,
        "accuracy": pl.Float64,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
        "chance": pl.Float64,
        "n": pl.Int64,
        "n_items": pl.Int64,
        # Scope 'audit' (group = the audit condition), family 'pairwise audit flags': a cell and condition of the
        # pairwise audit, its headline measure (cue_preference, or tie_share on identical pairs), the value
        # (ci_low, ci_high its interval) and whether the cue preference holds with the changed response shown
        # first and second; Holm across the family.
        "measure": pl.String,
        "value": pl.Float64,
        "survives_swap": pl.Boolean,
        "length_baseline": pl.Float64,
        "difference": pl.Float64,
        "difference_ci_low": pl.Float64,
        "difference_ci_high": pl.Float64,
        # The hypothesis' bootstrap p-value, adjusted across its family (name, size, correction).
        "p_value": pl.Float64,
        "p_adjusted": pl.Float64,
        "family": pl.String,
        "family_size": pl.Int64,
        "correction": pl.String,
        "finding": pl.Boolean,
    },
)

# Pairwise metrics stage: the audit measures (lalm_judge.pairwise.audit_metrics) per judge cell, audit condition
# and measure (cue_preference, cue_preference_first, cue_preference_second, flip_rate, tie_share); the p-value,
# its Holm adjustment across the run's (cell, condition) family and its size, `flagged` and `survives_swap` on the
# headline measure only (cue_preference; tie_share on identical pairs), null elsewhere.
PAIRWISE_AUDIT = TableSchema(
    "pairwise audit",
    {
        **{key: _PAIRWISE_GROUP[key] for key in ("judge", "modality", "transcript_source", "prompt", "mode")},
        "condition": pl.String,
        "measure": pl.String,
        **_PAIRWISE_ESTIMATE,
        "p_value": pl.Float64,
        "p_adjusted": pl.Float64,
        "family_size": pl.Int64,
        "flagged": pl.Boolean,
        "survives_swap": pl.Boolean,
    },
)

# Pairwise metrics stage: verdict statuses per judge cell and order ('forward', 'swapped', 'combined'), and the
# length-policy actions ('long_audio' order, status = the action), so the report reads no prediction table.
PAIRWISE_STATUSES = TableSchema(
    "pairwise status",
    {
        "judge": pl.String,
        "modality": pl.String,
        "transcript_source": pl.String,
        "prompt": pl.String,
        "order": pl.String,
        "status": pl.String,
        "n": pl.Int64,
    },
)

# Pairwise metrics stage: per group (an aspect or 'all') and metric, the best audio-native cell against the
# best cascade cell (best = highest value), with the paired bootstrap interval of their difference.
PAIRWISE_COMPARISONS = TableSchema(
    "pairwise comparison",
    {
        "group": pl.String,
        "metric": pl.String,
        "mode_a": pl.String,
        "cell_a": pl.String,
        "value_a": pl.Float64,
        "mode_b": pl.String,
        "cell_b": pl.String,
        "value_b": pl.Float64,
        "difference": pl.Float64,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
        "status": pl.String,
        "n_items": pl.Int64,
    },
)

# Preference builder (the pairwise track's training data, `lalm_judge.preference`): the selected items, one row
# per completion, with the text its clips are spoken from (the response made speakable).
PREFERENCE_COMPLETIONS = TableSchema(
    "preference completion",
    {
        "item_id": pl.String,
        "shard": pl.Int32,
        "source": pl.String,
        "origin": pl.String,
        "instruction": pl.String,
        "completion": pl.Int32,
        "model": pl.String,
        "response": pl.String,
        "text": pl.String,
    },
)

# One row per (item, completion, aspect): the annotators' rating (null when unrated) and its rationale.
PREFERENCE_RATINGS = TableSchema(
    "preference rating",
    {
        "item_id": pl.String,
        "completion": pl.Int32,
        "aspect": pl.String,
        "rating": pl.Int32,
        "rationale": pl.String,
    },
)

# One row per (completion, engine) of a shard: the spoken clip (path relative to the builder's folder).
PREFERENCE_CLIPS = TableSchema(
    "preference clip",
    {
        "item_id": pl.String,
        "completion": pl.Int32,
        "engine": pl.String,
        "text": pl.String,
        "clip": pl.String,
        "duration_s": pl.Float64,
        "tts_model": pl.String,
        "tts_revision": pl.String,
    },
)

# The clip rows with their Whisper transcript and its WER against the text (the filters read these).
PREFERENCE_TRANSCRIPTS = TableSchema(
    "preference transcript",
    {
        **PREFERENCE_CLIPS.columns,
        "asr_model": pl.String,
        "transcript": pl.String,
        "wer": pl.Float64,
    },
)

# One row per (pair, aspect): which completions are Response 1 and 2, in which engine, their ratings and the
# annotators' notes, the label and the comparative rationale (`rationale_status` ok, or why there is none).
PREFERENCE_PAIRS = TableSchema(
    "preference pair",
    {
        "item_id": pl.String,
        "source_item": pl.String,
        "aspect": pl.String,
        "query": pl.String,
        "engine": pl.String,
        "completion1": pl.Int32,
        "completion2": pl.Int32,
        "response1_text": pl.String,
        "response2_text": pl.String,
        "response1_audio": pl.String,
        "response2_audio": pl.String,
        "rating1": pl.Int32,
        "rating2": pl.Int32,
        "note1": pl.String,
        "note2": pl.String,
        "label": pl.String,
        "rationale": pl.String,
        "rationale_source": pl.String,
        "rationale_status": pl.String,
        "rationale_error": pl.String,
    },
)

# Acoustic pairs: two renderings of one text that differ in one controlled speaking style; the label comes from
# the styles used (the control), never from a judge.
PREFERENCE_ACOUSTIC = TableSchema(
    "acoustic pair",
    {
        "item_id": pl.String,
        "aspect": pl.String,
        "style_category": pl.String,
        "task_format": pl.String,
        "requested": pl.String,
        "style1": pl.String,
        "style2": pl.String,
        "query": pl.String,
        "response_text": pl.String,
        "response1_audio": pl.String,
        "response2_audio": pl.String,
        "label": pl.String,
        "rationale": pl.String,
    },
)
