"""The judge-cell stage: score every sample of a shard's manifests with one judge cell and write the scores.

A judge cell is (judge, modality, transcript source, prompt, condition). `score_cell` loads the backend
once, builds one request per sample (or per long-audio window, `lalm_judge.judging.windows`), sends them in
batches of `spec.batch_size`, parses every output (`lalm_judge.judging.scoring`) and writes one long-format
row per sample (`lalm_judge.core.tables.SCORES`) with provenance columns. Failures to parse are rows with
their status, never crashes. A chunked sample's score is the minimum over its windows when every window is ok;
when some are not, the sample is `incomplete_windows` (the windows that parsed may be exactly those without
the unsafe turn), and when none is, it has the first window's status.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from lalm_judge.core.files import canonical_json, stable_hash, with_provenance, write_parquet
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
from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import JudgeBackend, JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.capabilities import request_batch_size
from lalm_judge.judging.prompts import Prompt, build_request, load_prompt
from lalm_judge.judging.scoring import ParsedScore, resolve_score
from lalm_judge.judging.windows import AudioPlan, Window, plan_long_audio, turn_windows
from lalm_judge.manifest.samples import Manifest, Sample, assemble_waveform

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


@dataclass
class _SampleWork:
    sample: Sample
    plan: AudioPlan
    outputs: list[JudgeOutput] = field(default_factory=list)


def dialogue_audio(sample: Sample, sample_rate: int) -> tuple[np.ndarray, list[Window]]:
    """The assembled waveform of a sample and its turn windows."""
    assembled = assemble_waveform(sample, sample_rate)
    return assembled.waveform, turn_windows(assembled.turn_bounds)


AudioLoader = Callable[[Sample, int], tuple[np.ndarray, list[Window]]]


def _requests_for(
    sample: Sample, cell: CellSettings, load_audio: AudioLoader, max_audio_s: float | None
) -> tuple[AudioPlan, list[JudgeRequest]]:
    if cell.modality == TEXT:
        plan = AudioPlan("none", (Window(tuple(range(sample.n_turns)), 0, 0),))
        waveform = None
    else:
        waveform, segments = load_audio(sample, cell.audio_sample_rate)
        plan = plan_long_audio(segments, len(waveform), cell.audio_sample_rate, max_audio_s, cell.spec.long_audio)
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


def _row(work: _SampleWork, cell: CellSettings, described: dict[str, str], shard: int) -> dict[str, Any]:
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
        "model": described.get("model", cell.spec.model),
        "model_revision": described.get("model_revision", cell.spec.revision),
        "shard": shard,
    }


def cell_settings(
    spec: JudgeSpec,
    modality: str,
    transcript_source: str,
    prompt: Prompt | str | Path,
    condition: str = "clean",
    audio_sample_rate: int = 16000,
) -> CellSettings:
    """Validate a judge cell (the one check on the way from a job to its requests): a known condition, a
    modality the judge supports, a transcript source that fits the modality."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r} for judge {spec.name!r}; this stage scores {CONDITIONS}")
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
    cascade = TranscriptSource.asr(str(cascade_model).removeprefix("asr:")) if cascade_model else None
    return CellSettings(
        spec,
        modality,
        source,
        prompt if isinstance(prompt, Prompt) else load_prompt(prompt),
        condition,
        audio_sample_rate,
        cascade,
    )


def config_hash(cell: CellSettings, seed: int) -> str:
    """Hash of everything that determines a cell's scores (judge spec, prompt text, modality, source, ...)."""
    return stable_hash(
        {
            "judge": dataclasses.asdict(cell.spec),
            "prompt": cell.prompt.name,
            "prompt_version": cell.prompt.version,
            "prompt_content": cell.prompt.content_hash,
            "modality": cell.modality,
            "transcript_source": cell.transcript_source,
            "cascade_source": cell.cascade_source,
            "condition": cell.condition,
            "audio_sample_rate": cell.audio_sample_rate,
            "seed": seed,
        }
    )


def score_samples(
    samples: Iterable[Sample],
    cell: CellSettings,
    backend: JudgeBackend,
    shard: int = 0,
    progress: bool = False,
    total: int | None = None,
    load_audio: AudioLoader = dialogue_audio,
) -> list[dict[str, Any]]:
    """Score samples in batches of `spec.batch_size` requests (every request at once for backends that batch
    themselves, `capabilities.request_batch_size`); one row per sample, in input order."""
    batch_size = request_batch_size(cell.spec)
    # A backend may read less audio than the judge's max_audio_s (a processor's window, read at load).
    max_audio_s = getattr(backend, "max_audio_s", cell.spec.max_audio_s)
    works: list[_SampleWork] = []
    pending: list[tuple[_SampleWork, JudgeRequest]] = []

    def flush() -> None:
        outputs = backend.generate([request for _, request in pending])
        if len(outputs) != len(pending):
            raise RuntimeError(f"judge {cell.spec.name!r} returned {len(outputs)} outputs for {len(pending)} requests")
        for (work, _), output in zip(pending, outputs):
            work.outputs.append(output)
        pending.clear()

    for sample in tqdm(samples, total=total, disable=not progress, desc=f"{cell.spec.name} {cell.modality}"):
        plan, requests = _requests_for(sample, cell, load_audio, max_audio_s)
        work = _SampleWork(sample, plan)
        works.append(work)
        for request in requests:
            pending.append((work, request))
            if batch_size is not None and len(pending) >= batch_size:
                flush()
    if pending:
        flush()
    described = backend.describe()
    return [_row(work, cell, described, shard) for work in works]


def scores_frame(rows: list[dict[str, Any]], cell: CellSettings, seed: int) -> pl.DataFrame:
    frame = SCORES.frame(rows)
    generation = canonical_json(cell.spec.generation_settings)
    return with_provenance(frame, config_hash=config_hash(cell, seed), seed=seed, generation=generation)


def score_cell(
    manifest_paths: Sequence[str | Path],
    spec: JudgeSpec,
    modality: str,
    transcript_source: str,
    prompt_path: str | Path,
    condition: str,
    out_path: str | Path,
    shard: int,
    backend: JudgeBackend | None = None,
    audio_sample_rate: int = 16000,
    progress: bool = True,
    seed: int = 0,
) -> pl.DataFrame:
    """Score all samples of the manifests with one judge cell; write and return the scores table."""
    cell = cell_settings(spec, modality, transcript_source, prompt_path, condition, audio_sample_rate)
    backend = backend if backend is not None else BACKENDS.get(spec.backend)(spec)
    samples = [sample for path in manifest_paths for sample in Manifest.load(path).samples()]
    rows = score_samples(samples, cell, backend, shard=shard, progress=progress, total=len(samples))
    frame = scores_frame(rows, cell, seed)
    write_parquet(out_path, frame)
    return frame
