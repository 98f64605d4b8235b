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

Requests go through the safety track's request engine (`lalm_judge.judging.runner`): the job plans every
request of the cell and keys it, serves those in the judge's request cache (`pairwise.cache_dir`, one SQLite
file per cell, `<cache_dir>/<judge>/<modality>-<source>.<prompt>.sqlite`), builds the backend (loads the model)
only if something is left to compute, and commits each backend call's answers to the cache when it returns: a
rerun, or a job killed and run again, computes only the requests not yet answered. The requests of an item are
built again for the compute pass (its audio read once for all its aspects), so a job never holds more than one
backend call's audio. The job's request counts go to `<predictions log>.requests.json`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from lalm_judge.audio.waveform import read_audio
from lalm_judge.core.files import canonical_json, with_provenance, write_parquet
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
from lalm_judge.judging.backends.capabilities import request_batch_size
from lalm_judge.judging.backends.decoding import SAMPLES
from lalm_judge.judging.cache import judge_identity
from lalm_judge.judging.cell import config_hash, row_finish_reason, served
from lalm_judge.judging.runner import EngineRun, KeyedRequest, RequestCounts, RequestEngine, ServedModelCheck
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

logger = logging.getLogger(__name__)

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
    # The audit condition of the items (`pairwise.conditions`), None for the clean items: its own cache file.
    audit_condition: str | None = None

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
    """The judge's backend, loaded now (the job's request engine loads it only when something is to compute)."""
    return BACKENDS.get(spec.backend)(spec)


def response_limit_s(cell: PairwiseCell, backend: JudgeBackend | None) -> float | None:
    """The per-response audio limit: the smallest of the policy's, the judge's and a ready backend's window (a
    backend still to be built is not loaded for this: the config check holds max_audio_s to the known families'
    windows, and a longer response fails in the backend, naming it)."""
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
        **sample_columns(
            *[output.extra.get(SAMPLES, []) for output in outputs] or [[], []],
            rule=cell.verdict_rule,
            finish_reasons=(outputs[0].finish_reason, outputs[1].finish_reason) if outputs else (None, None),
        ),
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
        "finish_reason": row_finish_reason(outputs[:1]) if outputs else None,
        "finish_reason_swapped": row_finish_reason(outputs[1:]) if outputs else None,
        "served_model": served(outputs, "served_model"),
        "served_revision": served(outputs, "served_revision"),
    }


def request_context(cell: PairwiseCell) -> dict[str, str]:
    """A pairwise cell's part of its requests' cache keys; the rendered texts and the audio are hashed with them."""
    return {
        "track": "pairwise",
        "prompt_version": cell.prompt.version,
        "prompt_content": cell.prompt.content_hash,
        "modality": cell.modality,
    }


def cache_partition(cell: PairwiseCell) -> str:
    """The cell's request-cache file name, `<modality>-<source>.<prompt>` (one writer per file: one job per cell),
    `.audit-<condition>` appended for an audit condition's items (their own job)."""
    audit = f".audit-{cell.audit_condition}" if cell.audit_condition else ""
    return f"{cell.modality}-{cell.transcript_source}.{cell.prompt.name}{audit}".replace(":", "_")


@dataclass(frozen=True)
class _Slot:
    """One request of the plan: the item table row, the presentation order (0: 'ab', 1: 'ba'), its key."""

    row: int
    order: int
    key: str
    partition: str


@dataclass
class PairwiseJobStats(RequestCounts):
    """What a pairwise judge job computed and what it took from the request cache."""

    judge: str
    cell: str
    items: int


class _ItemRequests:
    """Builds the two requests of each (item, aspect) row of an item table; an item's audio is read once for all
    its aspects (the rows of an item are consecutive, `read_items`)."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        cell: PairwiseCell,
        limit_s: float | None,
        transcripts: Mapping[str, str] | None,
        engine: RequestEngine,
    ):
        self.rows, self.cell, self.limit_s, self.transcripts, self.engine = rows, cell, limit_s, transcripts, engine
        self.context, self.partition = request_context(cell), cache_partition(cell)
        self._item: tuple[str, ItemAudio, tuple[str, str] | None] | None = None
        # Per row, what the length policy did (without the waveforms), recorded by `plan`.
        self.actions: list[ItemAudio] = []

    def item_inputs(self, r: int) -> tuple[ItemAudio, tuple[str, str] | None]:
        row = self.rows[r]
        if self._item is None or self._item[0] != row["item_id"]:
            audio = _item_audio(row, self.cell, self.limit_s)
            self._item = (row["item_id"], audio, _response_texts(row, self.cell, self.transcripts))
        return self._item[1], self._item[2]

    def keyed(self, r: int) -> list[KeyedRequest]:
        """The row's requests in both orders, keyed (none when its item is skipped for its length)."""
        audio, texts = self.item_inputs(r)
        if audio.action == "skipped":
            return []
        requests = build_requests(self.rows[r], self.cell, audio, texts)
        return [KeyedRequest(self.engine.key(q, self.context), self.partition, q) for q in requests]

    def plan(self, progress: bool) -> list[_Slot]:
        slots = []
        bar = tqdm(range(len(self.rows)), disable=not progress, desc=f"pairwise {self.cell.spec.name}: planning")
        for r in bar:
            slots += [_Slot(r, order, item.key, item.partition) for order, item in enumerate(self.keyed(r))]
            audio = self.item_inputs(r)[0]
            self.actions.append(ItemAudio(None, audio.action, audio.limit_s))
        self._item = None
        return slots

    def missing(self, slots: Sequence[_Slot]) -> Iterator[KeyedRequest]:
        """The requests of `slots`, built again in this order; a key that differs from the plan's is an error."""
        for slot in slots:
            item = self.keyed(slot.row)[slot.order]
            if item.key != slot.key:
                raise RuntimeError(
                    f"judge {self.cell.spec.name}: request {item.request.request_id} came out different when built "
                    "again; the item audio and transcripts must not change while the job runs"
                )
            yield item


def _judge(
    items: pl.DataFrame,
    cell: PairwiseCell,
    engine: RequestEngine,
    *,
    transcripts: Mapping[str, str] | None,
    asr_model: str | None,
    progress: bool,
) -> tuple[list[dict[str, Any]], PairwiseJobStats]:
    """Every row of an item table judged in both orders through `engine`; rows in order, and the counts."""
    if cell.hears_audio and items.filter(~pl.col("audio_ok")).height:
        summary = ItemSummary.of(items)
        raise ItemError(f"{summary.missing_message()}; exclude them (missing-audio policy 'exclude') or fix the audio")
    limit_s = response_limit_s(cell, engine.ready_backend) if cell.hears_audio else None
    rows = items.to_dicts()
    builder = _ItemRequests(rows, cell, limit_s, transcripts, engine)
    slots = builder.plan(progress)
    label = cache_partition(cell)

    def announce(run: EngineRun) -> None:
        logger.info(
            "pairwise judge %s %s: %d rows x 2 orders = %d requests (%d distinct): %d cached, %d to compute",
            cell.spec.name,
            label,
            len(rows),
            run.planned,
            run.distinct,
            run.cached,
            len(run.to_compute),
        )

    run = engine.serve(slots, builder.missing, announce=announce, progress=progress, desc=f"pairwise {label}")
    outputs: list[list[JudgeOutput]] = [[] for _ in rows]
    for slot in slots:
        outputs[slot.row].append(run.outputs[slot.key])
    described = engine.describe()
    predictions = [_row(row, cell, builder.actions[r], outputs[r], described, asr_model) for r, row in enumerate(rows)]
    stats = PairwiseJobStats(
        judge=cell.spec.name, cell=label, items=items["item_id"].n_unique(), **RequestCounts.of(run, engine)
    )
    return predictions, stats


def _engine(spec: JudgeSpec, backend: JudgeBackend | RequestEngine | None, cache_dir) -> RequestEngine:
    if isinstance(backend, RequestEngine):
        return backend
    if cache_dir is not None or backend is None:
        return RequestEngine.for_judge(spec, backend, cache_dir)
    return RequestEngine(backend, None, judge_identity(spec), request_batch_size(spec), ServedModelCheck.of(spec))


def judge_items(
    items: pl.DataFrame,
    cell: PairwiseCell,
    backend: JudgeBackend | RequestEngine,
    *,
    transcripts: Mapping[str, str] | None = None,
    asr_model: str | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Judge every row of an item table in both orders (through a request engine; a backend given here is used
    without a cache); one prediction row per (item, aspect), in order."""
    engine = _engine(cell.spec, backend, None)
    return _judge(items, cell, engine, transcripts=transcripts, asr_model=asr_model, progress=progress)[0]


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
    cache_dir: str | os.PathLike | None = None,
    stats_path: str | os.PathLike | None = None,
    seed: int = 0,
    progress: bool = True,
    verdict_rule: str = DEFAULT_VERDICT_RULE,
    audit_condition: str | None = None,
) -> pl.DataFrame:
    """Judge an item table with one pairwise cell in both orders; write and return the predictions table, and
    the job's request counts to `stats_path`. `audit_condition`: the items are that audit condition's (recorded in
    the `audit_condition` column, cached in their own file). With `cache_dir`, requests go through the judge's
    request cache `<cache_dir>/<judge>/`; the backend (`backend`, or the registry's) is built only if one is left
    to compute."""
    started = time.perf_counter()
    cell = pairwise_cell(spec, modality, transcript_source, prompt_path, length, sample_rate, verdict_rule)
    cell = dataclasses.replace(cell, audit_condition=audit_condition)
    transcripts, asr_model = read_transcripts(transcript_paths) if cell.transcript_source.is_asr else (None, None)
    items = read_items(items_path)
    engine = _engine(spec, backend, cache_dir)
    rows, stats = _judge(items, cell, engine, transcripts=transcripts, asr_model=asr_model, progress=progress)
    cell_hash = config_hash(
        spec,
        cell.prompt,
        seed,
        modality=cell.modality,
        transcript_source=cell.transcript_source,
        length=dataclasses.asdict(cell.length),
        sample_rate=cell.sample_rate,
        verdict_rule=cell.verdict_rule,
        **({"audit_condition": audit_condition} if audit_condition else {}),
    )
    generation = canonical_json(spec.generation_settings)
    frame = PAIRWISE_PREDICTIONS.frame(rows).with_columns(audit_condition=pl.lit(audit_condition, pl.String))
    frame = with_provenance(frame, config_hash=cell_hash, seed=seed, generation=generation)
    write_parquet(out_path, frame)
    stats.close(f"pairwise judge {spec.name} {stats.cell}", started, stats_path)
    return frame
