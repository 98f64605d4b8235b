"""The request engine: keyed requests in, outputs out, for every track that asks a judge model (the safety judge
job, `judging.job`; the pairwise judge job, `pairwise.judge`).

A job plans its requests and keys them (`RequestEngine.key`: `cache.request_key` of the judge's identity, the
job's context and the request's inputs), then hands the plan to `RequestEngine.serve`:
1. lookup: the planned keys found in the judge's request cache (`cache.RequestCache`) are served from it;
2. deferred load: the backend, and its model, is built only if a request is left to compute;
3. compute: the other requests, each distinct key once, are claimed in the cache (another job sharing the cache
   then leaves them alone, and the engine leaves those another job is computing: it reads their answers once they
   are stored, and takes over a claim whose holder died), built again by the job in the order it asks for
   (`order`: groups of planned requests, a backend call never spans two) and sent to the backend (`CallSizes`):
   - an endpoint (`openai`): one request per call, `options.concurrency` calls in flight, each answer committed to
     the cache as it arrives;
   - vLLM: calls of about `CALL_S` seconds of work at the job's own measured rate (the first call `FIRST_CALL`
     requests), large enough to keep its continuous batching full, each call's answers committed when it returns;
   - transformers and the embedding baseline: one padded batch (`batch_size`) per call, committed when it returns.
   Finished outputs of a failed call are committed too (`PartialGenerationError`). So a job killed at any point
   loses at most the call in flight, and its rerun computes only the remainder;
4. counts: which keys were cached, computed, awaited (computed by another job while this one waited), or reused
   from an earlier pass of the same engine (`EngineRun`), for the job's log, with the measured rate.

Stopping (`core.signals`): before each call the engine stops at its last commit when the job was told to stop
(SIGTERM) or when the call, at the measured rate, would end past the job's time limit; a SIGTERM during a call lets
the call finish and commit first (an endpoint's answers in flight get `STOP_GRACE_S`). It logs the measured rate as
it goes, and once whether the job will finish before its limit.

Every output, cached or computed, is checked against the configured model (`ServedModelCheck`): an endpoint
that answers with another model than the configured one fails the job naming both, unless the judge lists that
model under `accept_served_models`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from tqdm import tqdm

from lalm_judge.core import signals
from lalm_judge.core.files import package_versions, write_json
from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import JudgeBackend, JudgeOutput, JudgeRequest, JudgeSpec, PartialGenerationError
from lalm_judge.judging.backends.capabilities import request_batch_size
from lalm_judge.judging.cache import (
    CLAIM_RENEW_S,
    CLAIM_TTL_S,
    RequestCache,
    claim_holder,
    judge_identity,
    request_key,
    waveform_digest,
)

logger = logging.getLogger(__name__)

# An OpenAI model alias is answered by its dated snapshot ("gpt-4o" by "gpt-4o-2024-08-06").
_DATED_SNAPSHOT = re.compile(r"^-\d{4}-\d{2}-\d{2}$")
# Backends whose requests are independent calls to a server: each answer is committed as it arrives.
ENDPOINT_BACKENDS = ("openai",)
# Seconds of work per vLLM call at the job's measured rate: a few minutes keep vLLM's continuous batching full, and
# bound what a killed job loses; the SLURM early warning (rules/common.smk `get_judge_slurm_extra`) leaves time for
# one such call to finish.
CALL_S = signals.CALL_S
# Requests of a vLLM job's first call, before it has measured its rate (at the 8 requests/s of docs/benchmarks.md,
# about half a minute).
FIRST_CALL = 256
# The measured rate is logged at most this often.
LOG_EVERY_S = 60.0
# How often a job waiting for requests another job is computing looks for their answers.
POLL_S = 5.0


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


@dataclass(frozen=True)
class CallSizes:
    """How a judge's requests go to its backend (module docstring). A call holds `first` requests until the job has
    measured its rate; with `call_s`, then as many as the measured rate computes in `call_s` seconds, in steps of
    `step` (a padded batch), from one step to `most`. `concurrency` > 0: one request per call, that many at once,
    claimed `most` at a time (an endpoint)."""

    first: int
    most: int
    step: int = 1
    call_s: float | None = None
    concurrency: int = 0

    @classmethod
    def fixed(cls, requests: int) -> CallSizes:
        return cls(first=max(1, requests), most=max(1, requests), step=max(1, requests))

    @classmethod
    def of(cls, spec: JudgeSpec) -> CallSizes:
        per_call = request_batch_size(spec)
        if spec.backend == "vllm":
            return cls(first=min(FIRST_CALL, per_call), most=per_call, call_s=CALL_S)
        if spec.backend in ENDPOINT_BACKENDS:
            # request_batch_size is 4 per concurrency slot (at least batch_size): claimed together.
            from lalm_judge.core.endpoints import endpoint_defaults

            slots = int(spec.options.get("concurrency", endpoint_defaults()["concurrency"]))
            return cls(first=per_call, most=per_call, concurrency=max(1, slots))
        return cls.fixed(per_call)

    def size(self, rate: float | None) -> int:
        """Requests of the next call (of the next claim, for an endpoint) at `rate` requests/s (None: not yet
        measured)."""
        if self.call_s is None or rate is None:
            return self.first
        steps = int(rate * self.call_s) // self.step
        return max(self.step, min(self.most, steps * self.step))


@dataclass
class EngineRun:
    """What `RequestEngine.serve` did with a plan: every key's output, and where each distinct key came from."""

    planned: int  # planned requests
    distinct: int  # distinct keys among them
    outputs: dict[str, JudgeOutput]
    to_compute: list[Any]  # the first planned request of each key not in the cache, in plan order
    reused: set[str] = field(default_factory=set)  # in the cache because this engine computed them before
    computed: set[str] = field(default_factory=set)
    # Not in the cache at the lookup, then computed and stored by another job sharing the cache.
    awaited: set[str] = field(default_factory=set)

    @property
    def cached(self) -> int:
        """Distinct keys served from the cache that were stored there before this engine ran."""
        return self.distinct - len(self.to_compute) - len(self.reused)

    def source(self, key: str) -> str:
        """'computed', 'awaited', 'reused' or 'cached'."""
        if key in self.computed:
            return "computed"
        return "awaited" if key in self.awaited else "reused" if key in self.reused else "cached"


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
    # Distinct requests another job sharing the cache computed while this one waited for them.
    awaited: int = 0
    # The job's measured rate: requests computed per second of computing (0 when it computed none).
    requests_per_s: float = 0.0
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
            "awaited": len(run.awaited),
            **engine.effort(),
        }

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def close(self, what: str, started: float, stats_path: str | Path | None) -> None:
        """The job is done: its wall time, the closing line of its log (`what` names the job), and the counts
        written to `stats_path` (the workflow puts them beside the job's log)."""
        self.wall_s = round(time.perf_counter() - started, 3)
        logger.info(
            "%s: %d distinct requests computed (%.2f requests/s), %d served from the cache, %d reused from an earlier "
            "pass, %d computed by another job; model built %d time(s) in %.1f s, computing %.1f s, job %.1f s",
            what,
            self.computed,
            self.requests_per_s,
            self.cached,
            self.reused,
            self.awaited,
            self.model_loads,
            self.load_s,
            self.compute_s,
            self.wall_s,
        )
        if stats_path is not None:
            write_json(stats_path, self.to_json())


class _Claims:
    """An engine's claims on the requests it is about to compute (`RequestCache.claim`), renewed by a background
    thread every `renew_s` while the engine computes, released when it is done (those it did not compute)."""

    def __init__(self, cache: RequestCache, ttl_s: float, renew_s: float):
        self.cache, self.ttl_s, self.renew_s = cache, ttl_s, renew_s
        self.holder = claim_holder()
        self.partitions: set[str] = set()  # where this holder may have claims
        self._lock = threading.Lock()  # a partition is claimed in and renewed one at a time
        self._done = threading.Event()
        self._renewing = threading.Thread(target=self._renew, name="request-claims", daemon=True)
        self._renewing.start()

    def claim(self, slots: Sequence[Planned]) -> tuple[list[Any], list[Any], list[Any]]:
        """(granted, stored meanwhile, held by another job) of the slots, each in the slots' order."""
        by_partition: dict[str, list[str]] = {}
        for slot in slots:
            by_partition.setdefault(slot.partition, []).append(slot.key)
        granted: set[str] = set()
        stored: set[str] = set()
        for partition, keys in by_partition.items():
            with self._lock:
                claimed = self.cache.claim(partition, keys, self.holder, self.ttl_s)
                self.partitions.add(partition)
            granted.update(claimed.granted)
            stored.update(claimed.stored)
        split: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        for slot in slots:
            split[0 if slot.key in granted else 1 if slot.key in stored else 2].append(slot)
        return split

    def _renew(self) -> None:
        """Every `renew_s`, renew the claims in each partition; one where none is left (all answered) is dropped."""
        while not self._done.wait(self.renew_s):
            for partition in list(self.partitions):
                with self._lock:
                    if not self.cache.renew(partition, self.holder):
                        self.partitions.discard(partition)

    def close(self) -> None:
        self._done.set()
        self._renewing.join()
        for partition in self.partitions:
            self.cache.release(partition, self.holder)


class _EndpointCalls:
    """`concurrency` worker threads, each sending one request per backend call (an endpoint's calls are independent
    HTTP requests); answers come back on `results` as they arrive. Daemon threads: a job that stops does not wait
    for the answers still in flight (module docstring)."""

    def __init__(self, backend: JudgeBackend, concurrency: int):
        self.backend = backend
        self.tasks: queue.Queue[KeyedRequest | None] = queue.Queue()
        self.results: queue.Queue[tuple[KeyedRequest, JudgeOutput | None, BaseException | None]] = queue.Queue()
        self.workers = [threading.Thread(target=self._work, daemon=True) for _ in range(concurrency)]
        for worker in self.workers:
            worker.start()

    def _work(self) -> None:
        while (item := self.tasks.get()) is not None:
            try:
                (output,) = self.backend.generate([item.request])
                self.results.put((item, output, None))
            except BaseException as err:  # noqa: BLE001 - handed to the job's thread, which raises it
                self.results.put((item, None, err))

    def close(self) -> None:
        """Let the workers end once their request in flight, if any, returns."""
        for _ in self.workers:
            self.tasks.put(None)


class RequestEngine:
    """A `JudgeBackend` behind a `RequestCache` (None: no cache, every request is computed).

    `backend` is a backend or a function that builds one; it is called at the first request to compute.
    `identity` is the judge's part of every key (`cache.judge_identity`); `served` checks every output's model.
    `calls`: how requests go to the backend (`CallSizes`; a number: that many per call). `name` names the judge in
    the log. `claim_ttl_s`, `claim_renew_s`: the claims' expiry and heartbeat (`cache.CLAIM_TTL_S`).
    Counters: `n_cached`, `n_computed` (requests), `n_loads` (backends built here: 0 or 1), `load_s` (building
    it), `compute_s` (time computing: inside `generate`, or with answers in flight for an endpoint)."""

    def __init__(
        self,
        backend: JudgeBackend | Callable[[], JudgeBackend],
        cache: RequestCache | None,
        identity: Mapping[str, Any],
        requests_per_call: int | CallSizes,
        served: ServedModelCheck | None = None,
        *,
        name: str = "judge",
        claim_ttl_s: float = CLAIM_TTL_S,
        claim_renew_s: float = CLAIM_RENEW_S,
    ):
        self._backend: JudgeBackend | None = backend if hasattr(backend, "generate") else None  # type: ignore[assignment]
        self._build = None if self._backend is not None else backend
        self.cache = cache
        self.identity = dict(identity)
        self.calls = (
            requests_per_call if isinstance(requests_per_call, CallSizes) else CallSizes.fixed(int(requests_per_call))
        )
        self.served = served
        self.name = name
        self.claim_ttl_s, self.claim_renew_s = claim_ttl_s, claim_renew_s
        self.n_cached = self.n_computed = self.n_loads = 0
        self.load_s = self.compute_s = 0.0
        # Keys this instance computed: a later pass of the same job that finds them in the cache reuses them.
        self.computed_keys: set[str] = set()
        self._cached_description: dict[str, str] | None = None
        self._provenance: dict[str, Any] | None = None
        # Requests the current pass has to compute, and those computed before it, for the progress line.
        self._to_compute = self._computed_before = 0
        self._logged_at: float | None = None
        self._warned_limit = False

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
        return cls(
            build, cache, judge_identity(spec), CallSizes.of(spec), ServedModelCheck.of(spec), name=f"judge {spec.name}"
        )

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

    @property
    def rate(self) -> float | None:
        """Requests computed per second of computing, as measured by this engine so far (None before)."""
        return self.n_computed / self.compute_s if self.n_computed and self.compute_s > 0 else None

    def effort(self) -> dict[str, Any]:
        """Model loads, load and compute seconds and the measured rate, for a job's counts (`RequestCounts`)."""
        return {
            "model_loads": self.n_loads,
            "load_s": round(self.load_s, 3),
            "compute_s": round(self.compute_s, 3),
            "requests_per_s": round(self.rate or 0.0, 3),
        }

    # --- the flow of a job ------------------------------------------------------------------------------------
    def serve(
        self,
        planned: Sequence[Planned],
        build: Callable[[Iterable[Any]], Iterable[KeyedRequest]],
        *,
        order: Callable[[list[Any]], list[list[Any]]] = lambda slots: [slots],
        announce: Callable[[EngineRun], None] | None = None,
        progress: bool = False,
        desc: str = "computing",
    ) -> EngineRun:
        """Serve a job's plan (module docstring): the cached keys from the cache; the others, first planned
        request of each key, grouped and ordered by `order`, claimed, built again by `build(slots)` (in their
        order) and computed; those another job is computing, from the cache once it has stored them.
        `announce(run)` is called between the lookup and the compute (for the job's log)."""
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
        if not run.to_compute:
            return run
        self._to_compute, self._computed_before = len(run.to_compute), self.n_computed
        with tqdm(total=len(run.to_compute), disable=not progress, desc=desc) as bar, self._claims() as claims:
            waiting: list[list[Any]] = []
            for group in order(run.to_compute):
                held: list[Any] = []
                for item, output in self.compute(build(self._granted(group, claims, run, held))):
                    outputs[item.key] = output
                    run.computed.add(item.key)
                    bar.update()
                if held:
                    waiting.append(held)
            for held in waiting:
                self._await(held, build, claims, run, bar)
        return run

    @contextmanager
    def _claims(self) -> Iterator[_Claims | None]:
        if self.cache is None:
            yield None
            return
        claims = _Claims(self.cache, self.claim_ttl_s, self.claim_renew_s)
        try:
            yield claims
        finally:
            claims.close()

    def _granted(self, slots: Sequence[Any], claims: _Claims | None, run: EngineRun, held: list[Any]) -> Iterator[Any]:
        """The slots this engine computes, claimed a call (an endpoint: `CallSizes.most` requests) ahead; those
        another job stored meanwhile go to `run` (awaited), those it holds to `held`."""
        if claims is None:
            yield from slots
            return
        start = 0
        while start < len(slots):
            size = self.calls.most if self.calls.concurrency else self.calls.size(self.rate)
            window, start = slots[start : start + size], start + size
            granted, stored, taken = claims.claim(window)
            held += taken
            # An entry stored in a form this code does not serve (`cache.is_servable`) is computed again.
            yield from self._collect(stored, run) + granted

    def _collect(self, slots: Sequence[Any], run: EngineRun) -> list[Any]:
        """Read the answers another job stored for `slots` into `run`; the slots whose answer is not servable."""
        by_partition: dict[str, set[str]] = {}
        for slot in slots:
            by_partition.setdefault(slot.partition, set()).add(slot.key)
        found = self.lookup(by_partition) if slots else {}
        run.outputs.update(found)
        run.awaited.update(found)
        return [slot for slot in slots if slot.key not in found]

    def _await(
        self,
        slots: list[Any],
        build: Callable[[Iterable[Any]], Iterable[KeyedRequest]],
        claims: _Claims | None,
        run: EngineRun,
        bar: tqdm,
    ) -> None:
        """Wait for the requests another job claimed: read their answers once stored, compute those whose claim
        expired (its holder died)."""
        logger.info("%s: waiting for %d requests another job sharing the cache is computing", self.name, len(slots))
        pending = slots
        while pending:
            signals.check_stop()
            before = len(run.awaited)
            pending = self._collect(pending, run)
            bar.update(len(run.awaited) - before)
            assert claims is not None  # only a cache's claims are held by others
            granted, stored, pending = claims.claim(pending)
            for item, output in self.compute(build(self._collect(stored, run) + granted)):
                run.outputs[item.key] = output
                run.computed.add(item.key)
                bar.update()
            if pending:
                time.sleep(POLL_S)

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
        """Send the requests in order (`CallSizes`); store each call's outputs, or each answer of an endpoint,
        before checking their served model and yielding them. `requests` may be a generator: only one call's
        requests are held at a time. Stops at a commit when the job must stop (`core.signals.check_stop`)."""
        if self.calls.concurrency:
            yield from self._compute_each(requests)
            return
        iterator = iter(requests)
        while (first := next(iterator, None)) is not None:
            size = self.calls.size(self.rate)
            signals.check_stop(size / self.rate if self.rate else 0.0)
            chunk = [first, *itertools.islice(iterator, size - 1)]
            backend = self.backend()
            started = time.perf_counter()
            try:
                with signals.finishing_call():
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
            yield from self._commit(list(zip(chunk, outputs)))

    def _compute_each(self, requests: Iterable[KeyedRequest]) -> Iterator[tuple[KeyedRequest, JudgeOutput]]:
        """An endpoint's requests, `CallSizes.concurrency` in flight, each answer committed as it arrives. On a stop
        no request is sent any more and the answers in flight get `STOP_GRACE_S` to arrive; on a failed request (or
        an answer from another model) none is sent any more, the others in flight are committed as they arrive, then
        the first failure is raised."""
        iterator = iter(requests)
        first = next(iterator, None)
        if first is None:
            return
        iterator = itertools.chain([first], iterator)
        calls = _EndpointCalls(self.backend(), self.calls.concurrency)
        in_flight, failure, stop, drained_by = 0, None, None, None
        started = time.perf_counter()
        try:
            with signals.finishing_call():
                while True:
                    while in_flight < self.calls.concurrency and failure is None and stop is None:
                        stop = self._stop_sending()
                        item = next(iterator, None) if stop is None else None
                        if item is None:
                            break
                        calls.tasks.put(item)
                        in_flight += 1
                    if not in_flight:
                        break
                    if stop is not None and drained_by is None:
                        drained_by = time.monotonic() + signals.STOP_GRACE_S
                    wait_s = 1.0 if drained_by is None else drained_by - time.monotonic()
                    if wait_s <= 0:
                        break
                    try:
                        item, output, error = calls.results.get(timeout=wait_s)
                    except queue.Empty:
                        stop = stop or self._stop_sending()
                        continue
                    in_flight -= 1
                    if error is not None:
                        failure = failure or error
                        continue
                    now = time.perf_counter()
                    self.compute_s, started = self.compute_s + now - started, now
                    try:
                        committed = self._commit([(item, output)])  # type: ignore[list-item]
                    except ServedModelMismatch as err:  # stored; the answers in flight are stored too
                        failure = failure or err
                        continue
                    yield from committed
        finally:
            self.compute_s += time.perf_counter() - started
            calls.close()
        if failure is not None:
            raise failure
        if stop is not None:
            raise signals.StopAtCommit(stop)

    def _stop_sending(self) -> str | None:
        """Why an endpoint job sends no more requests: it was told to stop, or its time limit is closer than one
        more round of answers at the measured rate; None to go on."""
        if signals.stop_reason() is not None:
            return signals.stop_reason()
        left = signals.seconds_left()
        round_s = self.calls.concurrency / self.rate if self.rate else 0.0
        if left is not None and left < round_s:
            return f"the job's time limit is closer ({max(left, 0.0):.0f} s) than one more round of answers"
        return None

    def _commit(self, pairs: list[tuple[KeyedRequest, JudgeOutput]]) -> list[tuple[KeyedRequest, JudgeOutput]]:
        """Store computed outputs (marked `extra['cached'] = False`), check their served model, count them."""
        pairs = [(item, dataclasses.replace(out, extra={**out.extra, "cached": False})) for item, out in pairs]
        self._store(pairs)
        if self.served is not None:
            self.served.check(output for _, output in pairs)
        self.n_computed += len(pairs)
        self.computed_keys.update(item.key for item, _ in pairs)
        self._log_rate()
        return pairs

    def _log_rate(self) -> None:
        """The measured rate, at most every `LOG_EVERY_S`; once, whether the job will finish before its limit."""
        now = time.monotonic()
        rate = self.rate
        if rate is None or (self._logged_at is not None and now - self._logged_at < LOG_EVERY_S):
            return
        self._logged_at = now
        done = self.n_computed - self._computed_before
        left_s = max(self._to_compute - done, 0) / rate
        limit_s = signals.seconds_left()
        logger.info(
            "%s: %d of %d requests computed, %.2f requests/s (%.0f/h) measured over %.0f s of computing; about "
            "%.1f min left at that rate%s",
            self.name,
            done,
            self._to_compute,
            rate,
            rate * 3600,
            self.compute_s,
            left_s / 60,
            "" if limit_s is None else f", {limit_s / 60:.1f} min to the job's time limit",
        )
        if limit_s is not None and left_s > limit_s and not self._warned_limit:
            self._warned_limit = True
            logger.warning(
                "%s: at the measured rate the job needs about %.1f min more, past its time limit: it stops at a "
                "commit before the limit and its retry continues from the request cache (raise the runtime or give "
                "schedule.requests_per_hour this rate so that the shards fit: docs/cluster.md, 'Job sizing')",
                self.name,
                left_s / 60,
            )

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
