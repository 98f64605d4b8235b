"""The judge job: one model load per (judge, shard). Every cell of the judge is scored for the shard's samples and
written to its own score table, so the metrics and partial recomputation keep the cell as their unit.

`score_judge_shard` works in three steps, the middle one the request engine's (`judging.runner`):
1. plan: every request of every cell, for every sample of the shard's manifests, is built and keyed
   (`cache.request_key`). A sample's audio is assembled once and each condition applied to it once
   (`conditions.CONDITION_TRANSFORMS`); each cell cuts its long-audio windows from that, and a window's samples
   are hashed once for all cells that send it. Keys found in the judge's request cache are served from it.
2. compute: the other requests, each distinct request once, are claimed in the cache (another job sharing it does
   not compute them too), built again in the order below and sent to the backend (`runner.RequestEngine`,
   `runner.CallSizes`): one padded forward batch of `spec.batch_size` per call (transformers, embedding), calls of a
   few minutes of work at the job's measured rate that vLLM schedules by continuous batching, one request per call
   with `options.concurrency` in flight (openai). Each call's outputs, and each endpoint answer, are in the cache
   when they return, so a stopped or killed job loses at most the call in flight (a SIGTERM lets it finish first,
   `core.signals`). The backend, and its model, is built only if something is left to compute.
3. write: one row per sample in each cell (`cell.score_row`), one parquet per cell, and the job's request
   counts (`JobStats`; the workflow writes them beside the job's log). Cached and computed outputs give the same
   rows, byte for byte.

Order of the requests to compute:
- transformers: cell by cell, longest first (audio samples, then prompt characters). A batch is padded to its
  longest request, so neighbours of similar length waste the least, and the most memory-hungry batch runs
  first, where running out of memory costs least.
- every other backend: dialogue by dialogue, each cell's requests together, the original before its variants
  in turn order. Consecutive requests then share the longest token prefixes (the prompt up to the dialogue, and
  in the text modality the transcript up to the replaced turn), which vLLM's automatic prefix caching computes
  once while they stay in its cache, and each dialogue's audio is assembled once per call.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import polars as pl
from tqdm import tqdm

from lalm_judge.core.files import write_parquet
from lalm_judge.core.vocabulary import TEXT
from lalm_judge.judging.backends.base import JudgeBackend, JudgeSpec
from lalm_judge.judging.backends.capabilities import request_batch_size
from lalm_judge.judging.cache import judge_identity, waveform_digest
from lalm_judge.judging.cell import (
    AudioLoader,
    CellSettings,
    SampleWork,
    cell_requests,
    cell_settings,
    dialogue_audio,
    score_row,
    scores_frame,
)
from lalm_judge.judging.conditions import CONDITION_TRANSFORMS, ConditionTransform, DialogueAudio
from lalm_judge.judging.controls import ShardConditions
from lalm_judge.judging.prompts import resolve_prompt_path
from lalm_judge.judging.runner import EngineRun, KeyedRequest, RequestCounts, RequestEngine, ServedModelCheck
from lalm_judge.judging.windows import AudioPlan
from lalm_judge.manifest.samples import Manifest, Sample

logger = logging.getLogger(__name__)

# Backends that pad a batch to its longest request: cell by cell, longest first (module docstring).
PADDED_BATCH_BACKENDS = ("transformers",)
# Samples whose conditioned audio, and (cell, sample) pairs whose requests, are kept between uses.
KEEP_SAMPLES = 64
KEEP_CELL_SAMPLES = 16

Value = TypeVar("Value")


class _Lru(Generic[Value]):
    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[Any, Value] = OrderedDict()

    def get(self, key: Any, make: Callable[[], Value]) -> Value:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = self._items[key] = make()
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return value


def request_context(cell: CellSettings) -> dict[str, str]:
    """A cell's part of its requests' cache keys; its inputs (texts, transcript, audio) are hashed with them."""
    return {
        "prompt_version": cell.prompt.version,
        "prompt_content": cell.prompt.content_hash,
        "modality": cell.modality,
    }


def cell_label(cell: CellSettings) -> str:
    """`<modality>-<source>/<prompt>/<condition>`, as in the score table's path."""
    return f"{cell.modality}-{cell.transcript_source}/{cell.prompt.name}/{cell.condition}"


@dataclass(frozen=True)
class _Slot:
    """One request of the plan: its cell, sample and window, its key and cache partition (the sample's dialogue),
    and what a padded batch grows with."""

    cell: int
    sample: int
    window: int
    key: str
    partition: str
    size: tuple[int, int]  # (audio samples, prompt characters)


@dataclass
class CellCounts:
    requests: int = 0  # windows of this cell's samples (a sample without windows, skipped, has none)
    cached: int = 0  # served from the cache, stored there before this job
    computed: int = 0  # computed by this job (a request equal to one of another cell counts in both)
    reused: int = 0  # computed by this job for an earlier pass (a request two conditions' sample sets share)
    awaited: int = 0  # computed by another job sharing the cache while this one waited


@dataclass
class JobStats(RequestCounts):
    """What a judge job computed and what it took from the request cache, in all and per cell."""

    judge: str
    shard: int
    samples: int
    cells: dict[str, CellCounts] = field(default_factory=dict)


@dataclass(frozen=True)
class JobResult:
    tables: list[pl.DataFrame]  # one score table per cell, in the order of the job's cells
    stats: JobStats


class _Requests:
    """Builds and keys the requests of (cell, sample) pairs, from the sample's audio under the cell's condition."""

    _RAW = "assembled"

    def __init__(
        self,
        samples: Sequence[Sample],
        cells: Sequence[CellSettings],
        engine: RequestEngine,
        load_audio: AudioLoader,
        transforms: Mapping[str, ConditionTransform],
    ):
        self.samples, self.cells, self.engine = samples, cells, engine
        self.load_audio, self.transforms = load_audio, transforms
        self.contexts = [request_context(cell) for cell in cells]
        # sample index -> {(condition, with audio): the sample and audio requests are built from; _RAW: as assembled}
        self._prepared: _Lru[dict[Any, tuple[Sample, DialogueAudio | None]]] = _Lru(KEEP_SAMPLES)
        self._built: _Lru[tuple[AudioPlan, list[KeyedRequest]]] = _Lru(KEEP_CELL_SAMPLES)
        # (sample, condition, window start, end) -> digest of those audio samples
        self._digests: dict[tuple[int, str, int, int], str] = {}

    def _sample_under(self, s: int, condition: str, with_audio: bool) -> tuple[Sample, DialogueAudio | None]:
        """Sample `s` under `condition`, with its audio or without (text cells); the audio is assembled once."""
        prepared = self._prepared.get(s, dict)
        if (condition, with_audio) not in prepared:
            sample, rate = self.samples[s], self.cells[0].audio_sample_rate
            audio = None
            if with_audio:
                if self._RAW not in prepared:
                    prepared[self._RAW] = (sample, self.load_audio(sample, rate))
                audio = prepared[self._RAW][1]
            prepared[(condition, with_audio)] = self.transforms[condition](sample, audio, rate)
        return prepared[(condition, with_audio)]

    def build(self, c: int, s: int) -> tuple[AudioPlan, list[KeyedRequest]]:
        return self._built.get((c, s), lambda: self._build(c, s))

    def _build(self, c: int, s: int) -> tuple[AudioPlan, list[KeyedRequest]]:
        cell = self.cells[c]
        sample, audio = self._sample_under(s, cell.condition, cell.modality != TEXT)
        plan, requests = cell_requests(sample, cell, audio)
        partition = self.samples[s].dialogue_id
        keyed = []
        for window, request in zip(plan.windows, requests):
            memo = (s, cell.condition, window.start, window.end)

            def digest(waveform: np.ndarray, memo: tuple[int, str, int, int] = memo) -> str:
                if memo not in self._digests:
                    self._digests[memo] = waveform_digest(waveform)
                return self._digests[memo]

            keyed.append(KeyedRequest(self.engine.key(request, self.contexts[c], digest), partition, request))
        return plan, keyed

    def forget(self) -> None:
        """Drop the kept audio, requests and digests: what the compute pass sends is built and hashed anew, so
        that its keys are checked against the plan's."""
        self._prepared = _Lru(KEEP_SAMPLES)
        self._built = _Lru(KEEP_CELL_SAMPLES)
        self._digests.clear()

    def missing(self, slots: Sequence[_Slot]) -> Iterator[KeyedRequest]:
        """The requests of `slots`, built again in this order; a key that differs from the plan's is an error."""
        for slot in slots:
            item = self.build(slot.cell, slot.sample)[1][slot.window]
            if item.key != slot.key:
                raise RuntimeError(
                    f"judge {self.cells[slot.cell].spec.name}: request {item.request.request_id} of cell "
                    f"{cell_label(self.cells[slot.cell])} came out different when built again; request building "
                    "(audio assembly, condition transforms) must be deterministic"
                )
            yield item


def _compute_order(slots: list[_Slot], spec: JudgeSpec, samples: Sequence[Sample]) -> list[list[_Slot]]:
    """Groups of requests to compute, in order (module docstring); a backend call never spans two groups."""
    if spec.backend in PADDED_BATCH_BACKENDS:
        cells = sorted({slot.cell for slot in slots})
        return [
            sorted((x for x in slots if x.cell == c), key=lambda x: (-x.size[0], -x.size[1], x.sample)) for c in cells
        ]
    first_sample: dict[str, int] = {}
    for index, sample in enumerate(samples):
        first_sample.setdefault(sample.dialogue_id, index)

    def position(slot: _Slot) -> tuple[int, int, int, int, int]:
        sample = samples[slot.sample]
        turn = -1 if sample.turn_index is None else sample.turn_index
        return first_sample[sample.dialogue_id], slot.cell, turn, slot.sample, slot.window

    return [sorted(slots, key=position)]


def _plan(builder: _Requests, n_samples: int, progress: bool, name: str) -> tuple[list[_Slot], list[list[AudioPlan]]]:
    """Every request of every (cell, sample), keyed, and each cell's long-audio plans in sample order."""
    plans: list[list[AudioPlan]] = [[] for _ in builder.cells]
    slots: list[_Slot] = []
    for s in tqdm(range(n_samples), disable=not progress, desc=f"{name}: planning requests"):
        for c in range(len(builder.cells)):
            plan, keyed = builder.build(c, s)
            plans[c].append(plan)
            for w, item in enumerate(keyed):
                audio_samples = 0 if item.request.audio is None else len(item.request.audio[0])
                size = (audio_samples, len(item.request.system) + len(item.request.user))
                slots.append(_Slot(c, s, w, item.key, item.partition, size))
    builder.forget()
    return slots, plans


def _cell_counts(slots: Sequence[_Slot], cells: Sequence[CellSettings], run: EngineRun) -> dict[str, CellCounts]:
    counts = {cell_label(cell): CellCounts() for cell in cells}
    for slot in slots:
        count = counts[cell_label(cells[slot.cell])]
        count.requests += 1
        setattr(count, run.source(slot.key), getattr(count, run.source(slot.key)) + 1)
    return counts


def _score(
    samples: Sequence[Sample],
    cells: Sequence[CellSettings],
    engine: RequestEngine,
    *,
    shard: int,
    load_audio: AudioLoader,
    transforms: Mapping[str, ConditionTransform],
    progress: bool,
) -> tuple[list[list[dict[str, Any]]], JobStats]:
    """Rows of every cell (in sample order) and the job's counts."""
    spec = cells[0].spec
    builder = _Requests(samples, cells, engine, load_audio, transforms)
    slots, plans = _plan(builder, len(samples), progress, spec.name)

    def announce(run: EngineRun) -> None:
        logger.info(
            "judge %s shard %d: %d samples x %d cells = %d requests (%d distinct): %d cached, %d computed by an "
            "earlier pass, %d to compute",
            spec.name,
            shard,
            len(samples),
            len(cells),
            run.planned,
            run.distinct,
            run.cached,
            len(run.reused),
            len(run.to_compute),
        )

    run = engine.serve(
        slots,
        builder.missing,
        order=lambda to_compute: _compute_order(to_compute, spec, samples),
        announce=announce,
        progress=progress,
        desc=f"{spec.name}: computing",
    )
    keys: list[list[list[str]]] = [[[] for _ in samples] for _ in cells]
    for slot in slots:
        keys[slot.cell][slot.sample].append(slot.key)
    described = engine.describe()
    rows = [
        [
            score_row(SampleWork(sample, plans[c][s], [run.outputs[k] for k in keys[c][s]]), cell, described, shard)
            for s, sample in enumerate(samples)
        ]
        for c, cell in enumerate(cells)
    ]
    stats = JobStats(
        judge=spec.name,
        shard=shard,
        samples=len(samples),
        cells=_cell_counts(slots, cells, run),
        **RequestCounts.of(run, engine),
    )
    return rows, stats


def with_backend_limits(
    cells: Sequence[CellSettings], backend: JudgeBackend | Callable[[], JudgeBackend] | None
) -> list[CellSettings]:
    """The cells with a ready backend's own audio limit where it is lower than the judge's max_audio_s (a
    processor's window, read when the model loaded), so that long audio is windowed to what the model reads.
    A backend still to be built is not loaded for this: its cells plan with the judge's max_audio_s, which the
    config check holds to the known families' limits, and a longer window fails in the backend, naming it."""
    limit = getattr(backend, "max_audio_s", None) if backend is not None and hasattr(backend, "generate") else None
    if limit is None:
        return list(cells)
    return [
        cell
        if cell.max_audio_s is not None and cell.max_audio_s <= limit
        else dataclasses.replace(cell, max_audio_s=limit)
        for cell in cells
    ]


def _score_conditions(
    manifests: Sequence[Manifest],
    cells: Sequence[CellSettings],
    engine: RequestEngine,
    shard: int,
    conditions: Mapping[str, ConditionTransform],
    controls: ShardConditions | None,
    progress: bool,
) -> tuple[list[list[dict[str, Any]]], JobStats]:
    """Rows of every cell (in the order of `cells`) and the job's counts: the cells of the per-sample conditions
    (`conditions`, e.g. clean) on the manifests' samples, then each control condition's cells on its own samples
    with its audio (`ShardConditions`), all through one request engine, so the model is built at most once."""
    groups: dict[str, list[int]] = {}
    for index, cell in enumerate(cells):
        key = cell.condition if cell.condition not in conditions else ""
        groups.setdefault(key, []).append(index)
    rows: list[list[dict[str, Any]]] = [[] for _ in cells]
    parts: list[JobStats] = []
    for condition, members in groups.items():
        if condition == "":
            samples = [sample for manifest in manifests for sample in manifest.samples()]
            load_audio, transforms = dialogue_audio, conditions
        else:
            assert controls is not None  # cell_settings admits a control condition only with controls
            items = controls.samples(condition)
            samples = [item.sample for item in items]
            load_audio, transforms = controls.audio_loader(condition, items), {condition: conditions["clean"]}
        group_rows, stats = _score(
            samples,
            [cells[i] for i in members],
            engine,
            shard=shard,
            load_audio=load_audio,
            transforms=transforms,
            progress=progress,
        )
        for index, cell_rows in zip(members, group_rows):
            rows[index] = cell_rows
        parts.append(stats)
    return rows, _merged(parts, engine)


def _merged(parts: Sequence[JobStats], engine: RequestEngine) -> JobStats:
    """The counts of a job scored in several passes (one per sample set) over one backend."""
    first = parts[0]
    return JobStats(
        judge=first.judge,
        shard=first.shard,
        samples=sum(p.samples for p in parts),
        requests=sum(p.requests for p in parts),
        distinct_requests=sum(p.distinct_requests for p in parts),
        cached=sum(p.cached for p in parts),
        computed=sum(p.computed for p in parts),
        reused=sum(p.reused for p in parts),
        awaited=sum(p.awaited for p in parts),
        **engine.effort(),
        cells={label: counts for p in parts for label, counts in p.cells.items()},
    )


def score_judge_shard(
    manifest_paths: Sequence[str | Path],
    spec: JudgeSpec,
    cells: Sequence[Mapping[str, str]],
    out_paths: Sequence[str | Path],
    prompt_files: Sequence[str | Path],
    shard: int,
    *,
    cache_dir: str | Path | None,
    stats_path: str | Path | None = None,
    backend: JudgeBackend | Callable[[], JudgeBackend] | None = None,
    audio_sample_rate: int = 16000,
    seed: int = 0,
    progress: bool = True,
    conditions: Mapping[str, ConditionTransform] = CONDITION_TRANSFORMS,
    controls: ShardConditions | None = None,
) -> JobResult:
    """Score every cell of one judge on the samples of a shard's manifests; write each cell's table to its
    `out_paths` entry and the counts to `stats_path`. A cell is a mapping with the keys modality,
    transcript_source, prompt (a name, found among the stems of `prompt_files`) and condition; a control
    condition (`lalm_judge.judging.controls`) needs `controls`, the shard's control inputs."""
    started = time.perf_counter()
    if len(cells) != len(out_paths):
        raise ValueError(f"judge {spec.name}: {len(cells)} cells but {len(out_paths)} output paths")
    prompts = {Path(path).stem: path for path in prompt_files}
    settings = []
    for cell in cells:
        if cell["prompt"] not in prompts:
            raise ValueError(f"judge {spec.name}: no prompt file for prompt {cell['prompt']!r} among {prompt_files}")
        settings.append(
            cell_settings(
                spec,
                cell["modality"],
                cell["transcript_source"],
                prompts[cell["prompt"]],
                cell["condition"],
                audio_sample_rate,
                conditions=[*conditions, *(controls.conditions() if controls is not None else ())],
            )
        )
    engine = RequestEngine.for_judge(spec, backend, cache_dir)
    rows, stats = _score_conditions(
        [Manifest.load(path) for path in manifest_paths],
        with_backend_limits(settings, backend),
        engine,
        shard,
        conditions,
        controls,
        progress,
    )
    tables = [scores_frame(cell_rows, cell, seed) for cell, cell_rows in zip(settings, rows)]
    for table, out_path in zip(tables, out_paths):
        write_parquet(out_path, table)
    stats.close(f"judge {spec.name} shard {shard}", started, stats_path)
    return JobResult(tables, stats)


def score_cell(
    manifest_paths: Sequence[str | Path],
    spec: JudgeSpec,
    modality: str,
    transcript_source: str,
    prompt: str | Path,
    condition: str,
    out_path: str | Path,
    shard: int,
    backend: JudgeBackend | None = None,
    audio_sample_rate: int = 16000,
    progress: bool = True,
    seed: int = 0,
    cache_dir: str | Path | None = None,
) -> pl.DataFrame:
    """One cell of a judge as a job of its own (without a request cache unless `cache_dir`); its score table.
    `prompt` is a prompt name or a prompt file."""
    prompt_file = resolve_prompt_path(prompt)
    cell = {"modality": modality, "transcript_source": transcript_source, "prompt": prompt_file.stem}
    result = score_judge_shard(
        manifest_paths,
        spec,
        [{**cell, "condition": condition}],
        [out_path],
        [prompt_file],
        shard,
        cache_dir=cache_dir,
        backend=backend,
        audio_sample_rate=audio_sample_rate,
        seed=seed,
        progress=progress,
    )
    return result.tables[0]


def score_samples(
    samples: Sequence[Sample],
    cell: CellSettings,
    backend: JudgeBackend,
    shard: int = 0,
    progress: bool = False,
    load_audio: AudioLoader = dialogue_audio,
) -> list[dict[str, Any]]:
    """Score samples with one cell and a ready backend, without a cache (ad-hoc scoring); rows in input order."""
    spec = cell.spec
    engine = RequestEngine(backend, None, judge_identity(spec), request_batch_size(spec), ServedModelCheck.of(spec))
    rows, _ = _score(
        samples,
        with_backend_limits([cell], backend),
        engine,
        shard=shard,
        load_audio=load_audio,
        transforms=CONDITION_TRANSFORMS,
        progress=progress,
    )
    return rows[0]
