"""The prompt length of every training record in tokens (what `cutoff_len` compares), computed once per record and
shared: the pass reads both responses' audio and runs the processor (its audio features decide the audio tokens),
about half a second a record on one core, which at SpeechFeedback's size is hours.

- Cached by record: `<output_dir>/.prepare/prompt_lengths-<processor digest>.json` maps each record's digest (its
  user text and its audio files' paths, sizes and modification times) to its length, for one processor, system
  prompt and audio limit (`processor_digest`). A stage, a rerun or the other method reads what an earlier one
  computed; a changed record or clip is measured again.
- In parallel: the records not in the cache are measured by a pool of processes (`training.preparation_workers`,
  default the CPUs this process may use), each holding a copy of the collator; fewer than `POOL_FROM` records are
  measured in the process itself (a pool's start costs seconds).
- On one rank: under a launcher (WORLD_SIZE > 1) rank 0 measures and writes the cache; the other ranks wait for it to
  hold their records and read it (or for rank 0's failure, which they report), so N GPUs do not measure N times.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from lalm_judge.core.files import read_json, stable_hash, write_json
from lalm_judge.training.records import TrainingRecord
from lalm_judge.training.settings import TrainingError

CACHE_DIR = ".prepare"
# Fewer records than this are measured without a pool.
POOL_FROM = 64
# Records per task of a pool worker.
CHUNK = 16
POLL_S = 1.0

_collator: Any = None  # a pool worker's copy of the collator (`_start_worker`)


def rank_and_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """This process's rank and the number of processes, as a launcher sets them (0 and 1 without one)."""
    environ = os.environ if environ is None else environ
    return int(environ.get("RANK") or 0), int(environ.get("WORLD_SIZE") or 1)


def available_cpus() -> int:
    """The CPUs this process may run on (a SLURM job's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def record_digest(record: TrainingRecord) -> str:
    """What a record's prompt length depends on besides the processor: its user text and its audio files."""
    audios = []
    for path in record.audios:
        stat = os.stat(path)
        audios.append([path, stat.st_size, stat.st_mtime_ns])
    return stable_hash([record.user, audios], length=24)


def processor_digest(collator: Any) -> str:
    """The processor and prompt settings a length is measured with: the processor's class, its feature extractor's
    settings, the tokenizer's vocabulary size and chat template, the system prompt and the audio limit."""
    processor = collator.processor
    extractor = getattr(processor, "feature_extractor", None)
    return stable_hash(
        {
            "processor": type(processor).__name__,
            "feature_extractor": extractor.to_dict() if extractor is not None else None,
            "vocabulary": len(collator.tokenizer),
            "chat_template": getattr(processor, "chat_template", None),
            "system_prompt": collator.system_prompt,
            "max_response_s": collator.max_response_s,
        }
    )


def _start_worker(collator: Any) -> None:
    global _collator
    import torch

    torch.set_num_threads(1)  # each worker is one of the pool's processes, on one CPU
    # The tokenizer's own threads are off in a forked worker (it would warn of a fork after their use).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _collator = collator


def _measure(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    return [_collator.prompt_length(row) for row in rows]


def measure(records: Sequence[TrainingRecord], collator: Any, workers: int, pool_from: int = POOL_FROM) -> list[int]:
    """The prompt length of each record, by `workers` processes (or this one, for few records)."""
    rows = [record.as_row() for record in records]
    if workers <= 1 or len(rows) < pool_from:
        return [collator.prompt_length(row) for row in rows]
    chunks = [rows[start : start + CHUNK] for start in range(0, len(rows), CHUNK)]
    # Forked workers (as torch's DataLoader workers are) start at once with the loaded processor; they use the CPU
    # only, never CUDA. Where there is no fork, spawned ones get the collator pickled.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(collator,)) as pool:
        return [length for chunk in pool.map(_measure, chunks) for length in chunk]


class LengthCache:
    """The cache file of one processor digest under `folder` (module docstring)."""

    def __init__(self, folder: str | os.PathLike, digest: str):
        self.path = Path(folder) / f"prompt_lengths-{digest}.json"
        self.failure = self.path.with_suffix(".failed")

    def read(self) -> dict[str, int]:
        return read_json(self.path) if self.path.is_file() else {}

    def write(self, lengths: Mapping[str, int]) -> None:
        write_json(self.path, dict(sorted(lengths.items())))


def prompt_lengths(
    records: Sequence[TrainingRecord],
    collator: Any,
    cache_dir: str | os.PathLike,
    *,
    workers: int | None = None,
    pool_from: int = POOL_FROM,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[int], int]:
    """The prompt length of every record and how many this process measured (module docstring)."""
    cache = LengthCache(cache_dir, processor_digest(collator))
    keys = [record_digest(record) for record in records]
    rank, world = rank_and_world(environ)
    if rank != 0 and world > 1:
        return _wait_for(cache, keys), 0
    try:
        known = cache.read()
        missing = {key: record for key, record in zip(keys, records, strict=True) if key not in known}
        measured = measure(list(missing.values()), collator, workers or available_cpus(), pool_from)
        if measured:
            known.update(zip(missing, measured, strict=True))
            cache.write(known)
        cache.failure.unlink(missing_ok=True)
    except Exception as error:
        if world > 1:  # the other ranks are waiting for the cache: tell them
            write_json(cache.failure, {"error": f"{type(error).__name__}: {error}"})
        raise
    return [known[key] for key in keys], len(measured)


def _wait_for(cache: LengthCache, keys: Sequence[str]) -> list[int]:
    """Rank > 0: the lengths of `keys` once rank 0 has written them (a failure it records is raised here)."""
    started = time.time()
    while True:
        if cache.failure.is_file() and cache.failure.stat().st_mtime >= started - POLL_S:
            raise TrainingError(f"rank 0 failed to measure the prompt lengths: {read_json(cache.failure)['error']}")
        known = cache.read() if cache.path.is_file() else {}
        if all(key in known for key in keys):
            return [known[key] for key in keys]
        time.sleep(POLL_S)
