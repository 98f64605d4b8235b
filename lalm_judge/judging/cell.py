"""Judge cells: their settings, the requests of one sample in a cell, and the score row of one sample.

A judge cell is (judge, modality, transcript source, prompt, condition). `cell_requests` builds one request
per sample (or per long-audio window, `lalm_judge.judging.windows`) from the sample's audio after the cell's
condition (`lalm_judge.judging.conditions`); `score_row` parses the outputs (`lalm_judge.judging.scoring`)
into one long-format row (`lalm_judge.core.tables.SCORES`) with provenance columns. Failures to parse are rows
with their status, never crashes. A chunked sample's score is the minimum over its windows when every window
is ok; when some are not, the sample is `incomplete_windows` (the windows that parsed may be exactly those
without the unsafe turn), and when none is, it has the first window's status. The judge job
(`lalm_judge.judging.job`) runs every cell of a judge for a shard.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.core.files import canonical_json, stable_hash, with_provenance
from lalm_judge.core.tables import SCORES
from lalm_judge.core.vocabulary import (
    AUDIO,
    CONDITIONS,
    LONG_AUDIO_POLICIES,
    TEXT,
    ParseStatus,
    TranscriptSource,
    audio_input_label,
    modality_source_error,
)
from lalm_judge.judging.backends.base import JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.conditions import DialogueAudio
from lalm_judge.judging.prompts import Prompt, build_request, load_prompt
from lalm_judge.judging.scoring import ParsedScore, resolve_score
from lalm_judge.judging.windows import AudioPlan, Window, plan_long_audio, turn_windows
from lalm_judge.manifest.samples import Sample, assemble_waveform

RAW_OUTPUT_MAX_CHARS = 2000
WINDOW_SEPARATOR = "\n--- next window ---\n"


@dataclass(frozen=True)
class CellSettings:
    """Everything that is the same for every request of a judge cell."""

    spec: JudgeSpec
    modality: str
    transcript_source: TranscriptSource
    prompt: Prompt
    condition: str
    audio_sample_rate: int
    # The ASR source a text-only judge reads in the audio modality (an ASR cascade), else None.
    cascade_source: TranscriptSource | None
    # The longest audio of one request: the judge's max_audio_s, or a ready backend's own lower limit (a
    # processor's window, read when the model loads; `job.with_backend_limits`).
    max_audio_s: float | None


@dataclass
class SampleWork:
    """One sample in one cell: what the long-audio policy made of it, and the outputs of its windows."""

    sample: Sample
    plan: AudioPlan
    outputs: list[JudgeOutput] = field(default_factory=list)


def dialogue_audio(sample: Sample, sample_rate: int) -> DialogueAudio:
    """The assembled waveform of a sample and its turn windows."""
    assembled = assemble_waveform(sample, sample_rate)
    return assembled.waveform, turn_windows(assembled.turn_bounds)


AudioLoader = Callable[[Sample, int], DialogueAudio]


def cell_requests(
    sample: Sample, cell: CellSettings, audio: DialogueAudio | None
) -> tuple[AudioPlan, list[JudgeRequest]]:
    """The long-audio plan of a sample in a cell and its requests, one per window; `audio` is the sample's
    audio under the cell's condition (None for the text modality)."""
    if cell.modality == TEXT:
        plan = AudioPlan("none", (Window(tuple(range(sample.n_turns)), 0, 0),))
        waveform = None
    else:
        if audio is None:
            raise ValueError(f"cell {cell.modality!r} of judge {cell.spec.name!r} needs audio for {sample.sample_id}")
        waveform, segments = audio
        plan = plan_long_audio(segments, len(waveform), cell.audio_sample_rate, cell.max_audio_s, cell.spec.long_audio)
    requests = []
    for k, window in enumerate(plan.windows):
        audio = None if waveform is None else (waveform[window.start : window.end], cell.audio_sample_rate)
        # Only chunk windows restrict the transcript; truncation keeps the whole text.
        turns = window.turn_indices if plan.chunked else None
        request_id = sample.sample_id if len(plan.windows) == 1 else f"{sample.sample_id}#w{k}"
        requests.append(
            build_request(
                cell.prompt,
                sample,
                cell.modality,
                cell.transcript_source,
                audio,
                request_id,
                turn_indices=turns,
                cascade_source=cell.cascade_source,
            )
        )
    return plan, requests


def combine_windows(parsed: Sequence[ParsedScore]) -> ParsedScore:
    """The minimum score over the windows if every window is ok; `incomplete_windows` if only some are; the
    first window's failure if none is."""
    scores = [p.score for p in parsed if p.status == ParseStatus.OK and p.score is not None]
    if len(scores) == len(parsed):
        return ParsedScore(min(scores), ParseStatus.OK)
    return ParsedScore(None, ParseStatus.INCOMPLETE_WINDOWS) if scores else parsed[0]


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    values = list(values)
    return None if not values or any(v is None for v in values) else int(sum(values))


def row_finish_reason(outputs: Sequence[JudgeOutput]) -> str | None:
    """Why generation stopped, for a row of one or more outputs (a chunked sample's windows, a pairwise item's
    orders): `content_filter` or `length` if any output was filtered or cut, else None if any does not say,
    else `stop`."""
    reasons = [o.finish_reason for o in outputs]
    for worst in ("content_filter", "length", None):
        if worst in reasons:
            return worst
    return "stop" if reasons else None


def served(outputs: Sequence[JudgeOutput], field_name: str) -> str | None:
    """The served model (`served_model`) or its revision (`served_revision`) the outputs name, distinct values
    joined by ', ' in order; None when none says."""
    values = [o.extra.get(field_name) for o in outputs if o.extra.get(field_name) is not None]
    return ", ".join(dict.fromkeys(str(v) for v in values)) or None


def score_row(work: SampleWork, cell: CellSettings, described: dict[str, str], shard: int) -> dict[str, Any]:
    """The score row of one sample in one cell; `described` is the backend's model and revision."""
    sample, outputs = work.sample, work.outputs
    if work.plan.action == "skipped":
        parsed, raw, source = ParsedScore(None, ParseStatus.SKIPPED_LONG_AUDIO), None, None
    else:
        parsed = combine_windows([resolve_score(o) for o in outputs])
        raw = WINDOW_SEPARATOR.join(o.text for o in outputs)[:RAW_OUTPUT_MAX_CHARS]
        source = "p_safe" if any(o.p_safe is not None or o.answer_mass is not None for o in outputs) else "parsed"
    masses = [o.answer_mass for o in outputs if o.answer_mass is not None]
    return {
        "dialogue_id": sample.dialogue_id,
        "variant_id": sample.sample_id,
        "category": sample.category,
        "severity": sample.severity,
        "turn_index": sample.turn_index,
        "n_turns": sample.n_turns,
        "judge": cell.spec.name,
        "modality": cell.modality,
        "transcript_source": cell.transcript_source,
        "prompt": cell.prompt.name,
        "prompt_version": cell.prompt.version,
        "condition": cell.condition,
        "score": parsed.score,
        "parse_status": str(parsed.status),
        "audio_input": audio_input_label(cell.modality, cell.cascade_source.asr_model if cell.cascade_source else None),
        "score_source": source,
        "answer_mass": min(masses) if masses else None,
        "raw_output": raw,
        "latency_s": float(sum(o.latency_s for o in outputs)) if outputs else None,
        "n_input_tokens": _sum_or_none(o.n_input_tokens for o in outputs),
        "n_output_tokens": _sum_or_none(o.n_output_tokens for o in outputs),
        "long_audio_action": work.plan.action,
        "finish_reason": row_finish_reason(outputs),
        "model": described.get("model", cell.spec.model),
        "model_revision": described.get("model_revision", cell.spec.revision),
        "served_model": served(outputs, "served_model"),
        "served_revision": served(outputs, "served_revision"),
        "shard": shard,
    }


def cell_settings(
    spec: JudgeSpec,
    modality: str,
    transcript_source: str,
    prompt: Prompt | str | Path,
    condition: str = "clean",
    audio_sample_rate: int = 16000,
    conditions: Collection[str] = CONDITIONS,
) -> CellSettings:
    """Validate a judge cell (the one check on the way from a job to its requests): a known condition (one of
    `conditions`), a modality the judge supports, a transcript source that fits the modality."""
    if condition not in conditions:
        known = tuple(conditions)
        raise ValueError(f"unknown condition {condition!r} for judge {spec.name!r}; this stage scores {known}")
    if modality not in spec.modalities:
        raise ValueError(f"judge {spec.name!r} does not support modality {modality!r}; it supports {spec.modalities}")
    if spec.long_audio not in LONG_AUDIO_POLICIES:
        raise ValueError(
            f"judge {spec.name!r}: unknown long_audio policy {spec.long_audio!r}; use {LONG_AUDIO_POLICIES}"
        )
    source = TranscriptSource(transcript_source)
    problem = modality_source_error(modality, source)
    if problem:
        raise ValueError(f"judge {spec.name!r}: {problem}")
    cascade_model = spec.options.get("cascade_asr") if modality == AUDIO else None
    cascade = TranscriptSource.asr(str(cascade_model)) if cascade_model else None
    return CellSettings(
        spec,
        modality,
        source,
        prompt if isinstance(prompt, Prompt) else load_prompt(prompt),
        condition,
        audio_sample_rate,
        cascade,
        spec.max_audio_s,
    )


def config_hash(spec: JudgeSpec, prompt: Any, seed: int, **cell: Any) -> str:
    """Hash of everything that determines a judge cell's rows, of either track: the judge spec, the prompt (its
    name, version and content hash) and the cell's own settings (modality, transcript source, condition, ...)."""
    return stable_hash(
        {
            "judge": dataclasses.asdict(spec),
            "prompt": prompt.name,
            "prompt_version": prompt.version,
            "prompt_content": prompt.content_hash,
            **cell,
            "seed": seed,
        }
    )


def scores_frame(rows: list[dict[str, Any]], cell: CellSettings, seed: int) -> pl.DataFrame:
    frame = SCORES.frame(rows)
    generation = canonical_json(cell.spec.generation_settings)
    cell_hash = config_hash(
        cell.spec,
        cell.prompt,
        seed,
        modality=cell.modality,
        transcript_source=cell.transcript_source,
        cascade_source=cell.cascade_source,
        condition=cell.condition,
        audio_sample_rate=cell.audio_sample_rate,
    )
    return with_provenance(frame, config_hash=cell_hash, seed=seed, generation=generation)
