"""The request engine: keyed requests in, outputs out, for every track that asks a judge model (the safety judge
job, `judging.job`; the pairwise judge job, `pairwise.judge`).

A job plans its requests and keys them (`RequestEngine.key`: `cache.request_key` of the judge's identity, the
job's context and the request's inputs), then hands the plan to `RequestEngine.serve`:
1. lookup: the planned keys found in the judge's request cache (`cache.RequestCache`) are served from it;
2. deferred load: the backend, and its model, is built only if a request is left to compute;
3. compute: the other requests, each distinct key once, are built again by the job in the order it asks for
   (`order`: groups of planned requests, a backend call never spans two) and sent `requests_per_call` at a time;
   each call's outputs are committed to the cache when it returns (finished outputs of a failed call too,
   `PartialGenerationError`), so a job killed at any point loses at most the call in flight and its rerun
   computes only the remainder;
4. counts: which keys were cached, computed, or reused from an earlier pass of the same engine
   (`EngineRun`), for the job's log.

Every output, cached or computed, is checked against the configured model (`ServedModelCheck`): an endpoint
that answers with another model than the configured one fails the job naming both, unless the judge lists that
model under `accept_served_models`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from tqdm import tqdm

from lalm_judge.core.files import package_versions, write_json
from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import JudgeBackend, JudgeOutput, JudgeRequest, JudgeSpec, PartialGenerationError
from lalm_judge.judging.backends.capabilities import request_batch_size
from lalm_judge.judging.cache import RequestCache, judge_identity, request_key, waveform_digest

logger = logging.getLogger(__name__)

# An OpenAI model alias is answered by its dated snapshot ("gpt-4o" by "gpt-4o-2024-08-06").
_DATED_SNAPSHOT = re.compile(r"^-\d{4}-\d{2}-\d{2}$")


class KeyedRequest(NamedTuple):
    key: str
    partition: str
    request: JudgeRequest


class Planned(Protocol):
    """One planned request of a job: its cache key and partition (a job's slots carry more: where it belongs)."""

    @property
    def key(self) -> str: ...

    @property
    def partition(self) -> str: ...


class ServedModelMismatch(RuntimeError):
    """An endpoint answered with another model than the configured one."""


@dataclass(frozen=True)
class ServedModelCheck:
    """The models a judge's answers may come from: the configured `model`, what names that same model (a dated
    snapshot of an OpenAI alias, `transformers serve`'s `<model>@<revision>`), and `accept_served_models`."""

    judge: str
    model: str
    revision: str
    accepted: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec: JudgeSpec) -> ServedModelCheck:
        return cls(spec.name, spec.model, spec.revision, tuple(spec.accept_served_models))

    def allows(self, served: str | None) -> bool:
        if served is None or served == self.model or served in self.accepted:
            return True
        return served == f"{self.model}@{self.revision}" or bool(
            served.startswith(self.model) and _DATED_SNAPSHOT.match(served[len(self.model) :])
        )

    def check(self, outputs: Iterable[JudgeOutput]) -> None:
        for output in outputs:
            served = output.extra.get("served_model")
            if not self.allows(served):
                raise ServedModelMismatch(
                    f"judge {self.judge}: the endpoint answered with model {served!r}, but the judge is configured "
                    f"with model {self.model!r}; if {served!r} is the model you mean to judge with, add it to "
                    f"judges.{self.judge}.accept_served_models (its answers are cached and will be used), else fix "
                    "the endpoint or the model name"
                )


@dataclass
class EngineRun:
    """What `RequestEngine.serve` did with a plan: every key's output, and where each distinct key came from."""

    planned: int  # planned requests
    distinct: int  # distinct keys among them
    outputs: dict[str, JudgeOutput]
    to_compute: list[Any]  # the first planned request of each key not in the cache, in plan order
    reused: set[str] = field(default_factory=set)  # in the cache because this engine computed them before
    computed: set[str] = field(default_factory=set)

    @property
    def cached(self) -> int:
        """Distinct keys served from the cache that were stored there before this engine ran."""
        return self.distinct - len(self.to_compute) - len(self.reused)

    def source(self, key: str) -> str:
        """'computed', 'reused' or 'cached'."""
        return "computed" if key in self.computed else "reused" if key in self.reused else "cached"


@dataclass(kw_only=True)
class RequestCounts:
    """What a job's request engine computed and what it took from the request cache (the job's log)."""

    requests: int  # planned requests
    distinct_requests: int  # distinct keys among them
    cached: int  # distinct requests served from the cache, stored there before this job
    computed: int  # distinct requests computed
    # Distinct requests of a pass served from what an earlier pass of this job computed (the safety job scores the
    # manifests' samples, then each control condition's own samples).
    reused: int
    model_loads: int
    load_s: float
    compute_s: float
    wall_s: float = 0.0

    @classmethod
    def of(cls, run: EngineRun, engine: RequestEngine) -> dict[str, Any]:
        """The counts of one run of `engine`, as keyword arguments of this class or a subclass."""
        return {
            "requests": run.planned,
            "distinct_requests": run.distinct,
            "cached": run.cached,
            "computed": len(run.computed),
            "reused": len(run.reused),
            "model_loads": engine.n_loads,
            "load_s": round(engine.load_s, 3),
            "compute_s": round(engine.compute_s, 3),
        }

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def close(self, what: str, started: float, stats_path: str | Path | None) -> None:
        """The job is done: its wall time, the closing line of its log (`what` names the job), and the counts
        written to `stats_path` (the workflow puts them beside the job's log)."""
        self.wall_s = round(time.perf_counter() - started, 3)
        logger.info(
            "%s: %d distinct requests computed, %d served from the cache, %d reused from an earlier pass; model built "
            "%d time(s) in %.1f s, computing %.1f s, job %.1f s",
            what,
            self.computed,
            self.cached,
            self.reused,
            self.model_loads,
            self.load_s,
            self.compute_s,
            self.wall_s,
        )
        if stats_path is not None:
            write_json(stats_path, self.to_json())


def _batched(items: Iterable[KeyedRequest], size: int) -> Iterator[list[KeyedRequest]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class RequestEngine:
    """A `JudgeBackend` behind a `RequestCache` (None: no cache, every request is computed).

    `backend` is a backend or a function that builds one; it is called at the first request to compute.
    `identity` is the judge's part of every key (`cache.judge_identity`); `served` checks every output's model.
    Counters: `n_cached`, `n_computed` (requests), `n_loads` (backends built here: 0 or 1), `load_s` (building
    it), `compute_s` (time inside its `generate`)."""

    def __init__(
        self,
        backend: JudgeBackend | Callable[[], JudgeBackend],
        cache: RequestCache | None,
        identity: Mapping[str, Any],
        requests_per_call: int,
        served: ServedModelCheck | None = None,
    ):
        self._backend: JudgeBackend | None = backend if hasattr(backend, "generate") else None  # type: ignore[assignment]
        self._build = None if self._backend is not None else backend
        self.cache = cache
        self.identity = dict(identity)
        self.requests_per_call = max(1, int(requests_per_call))
        self.served = served
        self.n_cached = self.n_computed = self.n_loads = 0
        self.load_s = self.compute_s = 0.0
        # Keys this instance computed: a later pass of the same job that finds them in the cache reuses them.
        self.computed_keys: set[str] = set()
        self._cached_description: dict[str, str] | None = None
        self._provenance: dict[str, Any] | None = None

    @classmethod
    def for_judge(
        cls,
        spec: JudgeSpec,
        backend: JudgeBackend | Callable[[], JudgeBackend] | None = None,
        cache_dir: str | Path | None = None,
    ) -> RequestEngine:
        """The judge's backend (built from the registry unless given) behind its request cache
        `<cache_dir>/<judge>/` (None: no cache), with the served-model check of its spec."""
        cache = RequestCache(Path(cache_dir) / spec.name) if cache_dir is not None else None
        build = backend if backend is not None else (lambda: BACKENDS.get(spec.backend)(spec))
        return cls(build, cache, judge_identity(spec), request_batch_size(spec), ServedModelCheck.of(spec))

    @property
    def ready_backend(self) -> JudgeBackend | None:
        """The backend if it is built (a backend handed in is), else None: nothing is loaded for asking."""
        return self._backend

    def backend(self) -> JudgeBackend:
        if self._backend is None:
            started = time.perf_counter()
            self._backend = self._build()  # type: ignore[misc]
            self.load_s = time.perf_counter() - started
            self.n_loads += 1
            logger.info("built the %s backend in %.1f s", type(self._backend).__name__, self.load_s)
        return self._backend

    def describe(self) -> dict[str, str]:
        """The backend's description once it exists; before, that stored with the cached outputs served."""
        if self._backend is not None:
            return self._backend.describe()
        return dict(self._cached_description or {})

    def key(self, request: Any, context: Mapping[str, Any], digests: Callable[[np.ndarray], str] = waveform_digest):
        return request_key(self.identity, context, request, digests)

    # --- the flow of a job ------------------------------------------------------------------------------------
    def serve(
        self,
        planned: Sequence[Planned],
        build: Callable[[Sequence[Any]], Iterable[KeyedRequest]],
        *,
        order: Callable[[list[Any]], list[list[Any]]] = lambda slots: [slots],
        announce: Callable[[EngineRun], None] | None = None,
        progress: bool = False,
        desc: str = "computing",
    ) -> EngineRun:
        """Serve a job's plan (module docstring): the cached keys from the cache; the others, first planned
        request of each key, grouped and ordered by `order`, built again by `build(group)` (in the group's order)
        and computed. `announce(run)` is called between the lookup and the compute (for the job's log)."""
        by_partition: dict[str, set[str]] = {}
        for slot in planned:
            by_partition.setdefault(slot.partition, set()).add(slot.key)
        outputs = self.lookup(by_partition)
        first_of_key: dict[str, Any] = {}
        for slot in planned:
            if slot.key not in outputs:
                first_of_key.setdefault(slot.key, slot)
        run = EngineRun(len(planned), len({slot.key for slot in planned}), outputs, list(first_of_key.values()))
        run.reused = {key for key in outputs if key in self.computed_keys}
        if announce is not None:
            announce(run)
        run.computed = set(first_of_key)
        with tqdm(total=len(run.to_compute), disable=not progress, desc=desc) as bar:
            for group in order(run.to_compute) if run.to_compute else []:
                for item, output in self.compute(build(group)):
                    outputs[item.key] = output
                    bar.update()
        return run

    def lookup(self, keys_by_partition: Mapping[str, Collection[str]]) -> dict[str, JudgeOutput]:
        """Cached outputs of these keys (marked `extra['cached'] = True`), each checked for its served model."""
        found: dict[str, JudgeOutput] = {}
        if self.cache is None:
            return found
        for partition, keys in keys_by_partition.items():
            for key, entry in self.cache.lookup(partition, keys).items():
                found[key] = dataclasses.replace(entry.output, extra={**entry.output.extra, "cached": True})
                if self._cached_description is None:
                    self._cached_description = {
                        k: entry.provenance[k] for k in ("model", "model_revision") if k in entry.provenance
                    }
        if self.served is not None:
            self.served.check(found.values())
        self.n_cached += len(found)
        return found

    def compute(self, requests: Iterable[KeyedRequest]) -> Iterator[tuple[KeyedRequest, JudgeOutput]]:
        """Send the requests in order, `requests_per_call` per backend call; store each call's outputs before
        checking their served model and yielding them. `requests` may be a generator: only one call's requests
        are held at a time."""
        for chunk in _batched(requests, self.requests_per_call):
            backend = self.backend()
            started = time.perf_counter()
            try:
                outputs = backend.generate([item.request for item in chunk])
            except PartialGenerationError as err:
                self._store([(item, out) for item, out in zip(chunk, err.finished) if out is not None])
                raise
            finally:
                self.compute_s += time.perf_counter() - started
            if len(outputs) != len(chunk):
                raise RuntimeError(
                    f"backend {type(backend).__name__} returned {len(outputs)} outputs for {len(chunk)} requests"
                )
            pairs = [
                (item, dataclasses.replace(out, extra={**out.extra, "cached": False}))
                for item, out in zip(chunk, outputs)
            ]
            self._store(pairs)
            if self.served is not None:
                self.served.check(output for _, output in pairs)
            self.n_computed += len(pairs)
            self.computed_keys.update(item.key for item, _ in pairs)
            yield from pairs

    def _store(self, pairs: Sequence[tuple[KeyedRequest, JudgeOutput]]) -> None:
        if self.cache is None or not pairs:
            return
        if self._provenance is None:
            self._provenance = {**self.describe(), "package_versions": package_versions()}
        by_partition: dict[str, list[tuple[str, JudgeOutput]]] = {}
        for item, output in pairs:
            by_partition.setdefault(item.partition, []).append((item.key, output))
        for partition, outputs in by_partition.items():
            self.cache.store(partition, outputs, self._provenance)

    def generate(
        self, requests: Sequence[JudgeRequest], context: Mapping[str, Any] | None = None, partition: str = "requests"
    ) -> list[JudgeOutput]:
        """`JudgeBackend.generate` through the cache: outputs in request order, equal requests computed once."""
        keyed = [KeyedRequest(self.key(r, context or {}), partition, r) for r in requests]
        run = self.serve(keyed, lambda group: group)
        return [run.outputs[k.key] for k in keyed]
