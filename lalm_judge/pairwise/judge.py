"""The pairwise judge stage: every (item, aspect) judged in both presentation orders by one judge cell.

A pairwise judge cell is (judge, modality, transcript source, prompt), in the safety track's vocabulary:
`audio` with source `none` hears both responses (audio-native), `text` with `asr:<model>` reads their
ASR transcripts (the cascade: any text judge behind an ASR model), `text` with `gt` reads the texts they
were spoken from (where the items have them), `audio_text` gets both. The backends are the safety track's
(`lalm_judge.judging.backends`); an audio request carries the two responses as two audio items in the
order shown, placed at the prompt's response slots.

Each (item, aspect) is asked twice: as the item has it (response 1 first) and swapped. Both raw answers,
both parsed verdicts (the swapped one mapped back to the item's numbering), and the verdict combined from
both orders (`lalm_judge.pairwise.parsing.combine_verdicts`) are one row of
`lalm_judge.core.tables.PAIRWISE_PREDICTIONS`; `verdict` alone is the single-order verdict SageLM reports.

Length policy, recorded in every row (`long_audio_action`, `audio_limit_s`), never silent: the limit per
response is the smallest of `max_response_s` (SageLM cuts each response to its first 60 s), the judge's
`max_audio_s` and the backend's own audio window (e.g. Qwen2-Audio's 30 s feature window). A longer
response is cut to its first `limit` seconds (`truncate`, action 'truncated') or the item is not judged
(`skip`, action 'skipped', status `skipped_long_audio`). The cascade transcribes the full responses.

The backend is built once per job by `load_backend`; a request-level cache can wrap it there (or be passed
in as `backend`), since the stage only calls `generate` and `describe`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from lalm_judge.audio.waveform import read_audio
from lalm_judge.core.files import canonical_json, stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import PAIRWISE_PREDICTIONS, PAIRWISE_TRANSCRIPTS
from lalm_judge.core.vocabulary import (
    PAIRWISE_LENGTH_POLICIES,
    TEXT,
    ParseStatus,
    TranscriptSource,
    modality_source_error,
)
from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import PAIRWISE_TRANSCRIPT, JudgeBackend, JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.decoding import SAMPLES
from lalm_judge.pairwise.items import ItemError, ItemSummary, read_items, response_paths
from lalm_judge.pairwise.parsing import (
    DEFAULT_VERDICT_RULE,
    ParsedVerdict,
    check_verdict_rule,
    combine_verdicts,
    parse_swapped_verdict,
    parse_verdict,
)
from lalm_judge.pairwise.prompts import PairwisePrompt, load_pairwise_prompt
from lalm_judge.pairwise.samples import sample_columns

ORDERS = ("ab", "ba")
# Backends that judge a pair from the texts alone (`judging.backends.embedding`, `judging.backends.likelihood`).
TEXT_ONLY_PAIRWISE_BACKENDS = ("embedding", "likelihood")


@dataclass(frozen=True)
class LengthPolicy:
    policy: str = "truncate"
    max_response_s: float | None = 60.0

    def __post_init__(self) -> None:
        if self.policy not in PAIRWISE_LENGTH_POLICIES:
            raise ValueError(f"unknown pairwise length policy {self.policy!r}; use one of {PAIRWISE_LENGTH_POLICIES}")
        if self.max_response_s is not None and self.max_response_s <= 0:
            raise ValueError(f"max_response_s must be > 0 or null, got {self.max_response_s}")


@dataclass(frozen=True)
class PairwiseCell:
    spec: JudgeSpec
    modality: str
    transcript_source: TranscriptSource
    prompt: PairwisePrompt
    length: LengthPolicy
    sample_rate: int
    # How answers become verdicts (`lalm_judge.pairwise.parsing`), recorded in every row.
    verdict_rule: str = DEFAULT_VERDICT_RULE

    @property
    def hears_audio(self) -> bool:
        return self.modality != TEXT

    @property
    def reads_transcripts(self) -> bool:
        return self.transcript_source.has_transcript


def pairwise_cell(
    spec: JudgeSpec,
    modality: str,
    transcript_source: str,
    prompt: PairwisePrompt | str | os.PathLike,
    length: LengthPolicy = LengthPolicy(),
    sample_rate: int = 16000,
    verdict_rule: str = DEFAULT_VERDICT_RULE,
) -> PairwiseCell:
    """Validate a pairwise judge cell: a modality the judge supports (the embedding baseline reads texts only), a
    source that fits the modality."""
    if spec.backend in TEXT_ONLY_PAIRWISE_BACKENDS and modality != TEXT:
        raise ValueError(f"judge {spec.name!r}: backend {spec.backend!r} judges pairs from their texts only")
    if modality not in spec.modalities:
        raise ValueError(f"judge {spec.name!r} does not support modality {modality!r}; it supports {spec.modalities}")
    source = TranscriptSource(transcript_source)
    problem = modality_source_error(modality, source)
    if problem:
        raise ValueError(f"judge {spec.name!r}: {problem}")
    loaded = prompt if isinstance(prompt, PairwisePrompt) else load_pairwise_prompt(prompt)
    return PairwiseCell(spec, modality, source, loaded, length, sample_rate, check_verdict_rule(verdict_rule))


def load_backend(spec: JudgeSpec) -> JudgeBackend:
    """The judge's backend, loaded once per job (where a request cache would wrap it)."""
    return BACKENDS.get(spec.backend)(spec)


def response_limit_s(cell: PairwiseCell, backend: JudgeBackend) -> float | None:
    """The per-response audio limit: the smallest of the policy's, the judge's and the backend's window."""
    limits = [cell.length.max_response_s, cell.spec.max_audio_s, getattr(backend, "max_audio_s", None)]
    present = [float(limit) for limit in limits if limit is not None]
    return min(present) if present else None


def read_transcripts(paths: Sequence[str | os.PathLike]) -> tuple[dict[str, str], str]:
    """(resolved audio path -> transcript, ASR model id) of one ASR model's pairwise transcript table."""
    table = PAIRWISE_TRANSCRIPTS.read(paths)
    models = sorted(set(table["asr_model"].to_list()))
    if len(models) != 1:
        raise ValueError(
            f"transcript tables {[os.fspath(p) for p in paths]} hold ASR models {models}; give one model's"
        )
    return dict(zip(table["audio"].to_list(), table["text"].to_list())), models[0]


@dataclass
class ItemAudio:
    waveforms: tuple[np.ndarray, np.ndarray] | None
    action: str
    limit_s: float | None


def _item_audio(row: Mapping[str, Any], cell: PairwiseCell, limit_s: float | None) -> ItemAudio:
    if not cell.hears_audio:
        return ItemAudio(None, "none", None)
    waveforms = [read_audio(path, cell.sample_rate)[0] for path in response_paths(row)]
    max_samples = None if limit_s is None else int(round(limit_s * cell.sample_rate))
    if max_samples is None or all(len(w) <= max_samples for w in waveforms):
        return ItemAudio((waveforms[0], waveforms[1]), "none", limit_s)
    if cell.length.policy == "skip":
        return ItemAudio(None, "skipped", limit_s)
    return ItemAudio((waveforms[0][:max_samples], waveforms[1][:max_samples]), "truncated", limit_s)


def _response_texts(
    row: Mapping[str, Any], cell: PairwiseCell, transcripts: Mapping[str, str] | None
) -> tuple[str, str] | None:
    if not cell.reads_transcripts:
        return None
    if cell.transcript_source == TranscriptSource.GT:
        texts = (row["response1_text"], row["response2_text"])
        if texts[0] is None or texts[1] is None:
            raise ItemError(
                f"item {row['item_id']!r} has no response texts (imported items have none); judge it from an "
                "'asr:<model>' transcript source instead of 'gt'"
            )
        return texts
    if transcripts is None:
        raise ValueError(f"transcript source {cell.transcript_source!r} needs its transcript table")
    found = []
    for path in response_paths(row):
        if path not in transcripts:
            raise ItemError(f"item {row['item_id']!r}: {path} has no {cell.transcript_source} transcript")
        found.append(transcripts[path])
    return found[0], found[1]


def build_requests(
    row: Mapping[str, Any], cell: PairwiseCell, audio: ItemAudio, texts: tuple[str, str] | None
) -> list[JudgeRequest]:
    """The two requests of one (item, aspect): responses in the item's order ('ab'), then swapped ('ba')."""
    requests = []
    for order in ORDERS:
        flip = order == "ba"
        shown = None if texts is None else (texts[1], texts[0]) if flip else texts
        system, user = cell.prompt.render(
            cell.modality, aspect=row["aspect"], aspect_text=row["aspect_text"], query=row["query"], transcripts=shown
        )
        audios: tuple[tuple[np.ndarray, int], ...] = ()
        if audio.waveforms is not None:
            first, second = (audio.waveforms[1], audio.waveforms[0]) if flip else audio.waveforms
            audios = ((first, cell.sample_rate), (second, cell.sample_rate))
        transcript = () if shown is None else tuple(zip(PAIRWISE_TRANSCRIPT, (row["query"], *shown)))
        requests.append(
            JudgeRequest(
                request_id=f"{row['item_id']}/{row['aspect']}/{order}",
                system=system,
                user=user,
                audios=audios,
                transcript=transcript,
            )
        )
    return requests


def _sum_or_none(values: Sequence[int | None]) -> int | None:
    return None if not values or any(v is None for v in values) else int(sum(values))  # type: ignore[arg-type]


def _row(
    row: Mapping[str, Any],
    cell: PairwiseCell,
    audio: ItemAudio,
    outputs: Sequence[JudgeOutput],
    described: Mapping[str, str],
    asr_model: str | None,
) -> dict[str, Any]:
    if audio.action == "skipped":
        skipped = ParsedVerdict(None, None, ParseStatus.SKIPPED_LONG_AUDIO)
        forward, back, answers = skipped, skipped, (None, None)
    else:
        answers = (outputs[0].text, outputs[1].text)
        forward = parse_verdict(answers[0], cell.verdict_rule, outputs[0].finish_reason)
        back = parse_swapped_verdict(answers[1], cell.verdict_rule, outputs[1].finish_reason)
    combined, combined_status = combine_verdicts(forward, back)
    durations = (row["response1_duration_s"], row["response2_duration_s"])
    return {
        "item_id": row["item_id"],
        "aspect": row["aspect"],
        "label": row["label"],
        "judge": cell.spec.name,
        "modality": cell.modality,
        "transcript_source": cell.transcript_source,
        "prompt": cell.prompt.name,
        "prompt_version": cell.prompt.version,
        "prediction": answers[0],
        "prediction_swapped": answers[1],
        "verdict": forward.label,
        "verdict_status": str(forward.status),
        "verdict_swapped": back.label,
        "verdict_swapped_status": str(back.status),
        "verdict_combined": combined,
        "verdict_combined_status": str(combined_status),
        "verdict_rule": cell.verdict_rule,
        "rationale": forward.rationale,
        "rationale_swapped": back.rationale,
        "task_format": row["task_format"],
        "style": row["style"],
        **sample_columns(*[output.extra.get(SAMPLES, []) for output in outputs] or [[], []]),
        "duration_s": None if None in durations else float(sum(durations)),
        "response1_duration_s": durations[0],
        "response2_duration_s": durations[1],
        "long_audio_action": audio.action,
        "audio_limit_s": audio.limit_s,
        "asr_model": asr_model,
        "latency_s": float(sum(o.latency_s for o in outputs)) if outputs else None,
        "n_input_tokens": _sum_or_none([o.n_input_tokens for o in outputs]),
        "n_output_tokens": _sum_or_none([o.n_output_tokens for o in outputs]),
        "model": described.get("model", cell.spec.model),
        "model_revision": described.get("model_revision", cell.spec.revision),
    }


def judge_items(
    items: pl.DataFrame,
    cell: PairwiseCell,
    backend: JudgeBackend,
    *,
    transcripts: Mapping[str, str] | None = None,
    asr_model: str | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Judge every row of an item table in both orders; one prediction row per (item, aspect), in order.

    An item's audio is read once for all its aspects; requests go to the backend in batches of
    `spec.batch_size`.
    """
    if cell.hears_audio and items.filter(~pl.col("audio_ok")).height:
        summary = ItemSummary.of(items)
        raise ItemError(f"{summary.missing_message()}; exclude them (missing-audio policy 'exclude') or fix the audio")
    limit_s = response_limit_s(cell, backend) if cell.hears_audio else None
    batch_size = max(1, int(cell.spec.batch_size))
    work: list[tuple[dict[str, Any], ItemAudio, list[JudgeOutput]]] = []
    pending: list[tuple[list[JudgeOutput], JudgeRequest]] = []

    def flush() -> None:
        outputs = backend.generate([request for _, request in pending])
        if len(outputs) != len(pending):
            raise RuntimeError(f"judge {cell.spec.name!r} returned {len(outputs)} outputs for {len(pending)} requests")
        for (collected, _), output in zip(pending, outputs):
            collected.append(output)
        pending.clear()

    grouped = items.group_by("item_id", maintain_order=True)
    n_items = items["item_id"].n_unique()
    for _, rows in tqdm(
        grouped, total=n_items, disable=not progress, desc=f"pairwise {cell.spec.name} {cell.modality}"
    ):
        first = rows.row(0, named=True)
        audio = _item_audio(first, cell, limit_s)
        texts = _response_texts(first, cell, transcripts)
        for row in rows.iter_rows(named=True):
            collected: list[JudgeOutput] = []
            work.append((row, audio, collected))
            if audio.action == "skipped":
                continue
            for request in build_requests(row, cell, audio, texts):
                pending.append((collected, request))
                if len(pending) >= batch_size:
                    flush()
    if pending:
        flush()
    described = backend.describe()
    return [_row(row, cell, audio, outputs, described, asr_model) for row, audio, outputs in work]


def config_hash(cell: PairwiseCell, seed: int) -> str:
    """Hash of everything that determines a pairwise cell's predictions."""
    return stable_hash(
        {
            "judge": dataclasses.asdict(cell.spec),
            "prompt": cell.prompt.name,
            "prompt_version": cell.prompt.version,
            "prompt_content": cell.prompt.content_hash,
            "modality": cell.modality,
            "transcript_source": cell.transcript_source,
            "length": dataclasses.asdict(cell.length),
            "sample_rate": cell.sample_rate,
            "verdict_rule": cell.verdict_rule,
            "seed": seed,
        }
    )


def judge_cell(
    items_path: str | os.PathLike,
    spec: JudgeSpec,
    modality: str,
    transcript_source: str,
    prompt_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    length: LengthPolicy = LengthPolicy(),
    sample_rate: int = 16000,
    transcript_paths: Sequence[str | os.PathLike] = (),
    backend: JudgeBackend | None = None,
    seed: int = 0,
    progress: bool = True,
    verdict_rule: str = DEFAULT_VERDICT_RULE,
) -> pl.DataFrame:
    """Judge an item table with one pairwise cell in both orders; write and return the predictions table."""
    cell = pairwise_cell(spec, modality, transcript_source, prompt_path, length, sample_rate, verdict_rule)
    transcripts, asr_model = read_transcripts(transcript_paths) if cell.transcript_source.is_asr else (None, None)
    items = read_items(items_path)
    backend = backend if backend is not None else load_backend(spec)
    rows = judge_items(items, cell, backend, transcripts=transcripts, asr_model=asr_model, progress=progress)
    generation = canonical_json(spec.generation_settings)
    frame = with_provenance(
        PAIRWISE_PREDICTIONS.frame(rows), config_hash=config_hash(cell, seed), seed=seed, generation=generation
    )
    write_parquet(out_path, frame)
    return frame
