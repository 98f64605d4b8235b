"""Judge jobs sized to their time limits: a cost model of each judge job, and the shard count of each judge.

A judge job scores every cell of its judge on the dialogues of one shard (`workflow.plan`). Its work is known
when the workflow is parsed: the requests of each (cell, dialogue) follow from the dialogue's turns, the variants
per turn, the condition's samples (`manifest.conditions.condition_samples`) and the long-audio windows of the
judge. With a throughput per judge (`schedule.requests_per_hour`, else the rate stated in docs/benchmarks.md for
the model on that backend, else the backend's) each job has an estimated duration: its requests over the rate,
plus one model load.

`evaluation.shards: auto` gives each judge the smallest shard count whose every job fits `PLANNED_SHARE` (75 %) of its
runtime (`schedule.resources.runtime`): the rest is headroom for a rate below the estimate, a slow node, and the
minutes before the limit in which the job stops at a commit (`core.signals`: the SLURM profile's early warning,
`early_warning_s`). An integer gives every judge that count, and a job that would not fit is an error naming the
judge, its estimate and its runtime, unless the judge has `schedule.allow_overrun: true` (it then finishes over
several attempts, resumed from the request cache; the SLURM profile retries it). A runtime over the longest SLURM
partition such a job fits (`profiles/slurm/partitions.yaml`) is an error too: SLURM would never start the job.

The estimate is an upper bound of the work in requests (a request two cells or two windows share is computed once
and counted in each) and a plain division by the rate for the time. The rates of the transformers backend are
measured (`MEASURED_TRANSFORMERS`, by batch size, with their conditions); those of vLLM and the endpoints are
assumptions until measured; `schedule.requests_per_hour` takes a measured one (a job logs its own measured rate and
writes it to its `.requests.json`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lalm_judge.core.endpoints import endpoint_defaults
from lalm_judge.core.files import read_yaml, shard_of
from lalm_judge.core.signals import CALL_S
from lalm_judge.core.vocabulary import BABBLE, CLEAN, INJECTION, MASKED, NOISE, SILENCE, TEXT, TTS_CONTROL, Condition
from lalm_judge.judging.backends.capabilities import family_of

AUTO = "auto"
PARTITIONS_FILE = Path(__file__).resolve().parents[2] / "profiles" / "slurm" / "partitions.yaml"

# Jobs are planned to at most this share of their runtime (module docstring).
PLANNED_SHARE = 0.75
# Assumed scoring throughput of vLLM on one 80 GB GPU at about 150 generated tokens per request (docs/benchmarks.md,
# "GPU-hours of the paper run per judge"; `bench/judge_stage.py` uses the same numbers): continuous batching of a
# 7-10 B model. Not measured (no vLLM on the GPU machine that measured the transformers backend). Audio Flamingo 3 and
# the Qwen2.5-Omni thinker are 7 B Qwen2.5 decoders behind Whisper-style encoders of 25 audio tokens per second, as
# Qwen2-Audio: they get its rate.
REQUESTS_PER_S = {
    ("Qwen2-Audio", "vllm"): 8.0,
    ("MERaLiON-2", "vllm"): 8.0,
    ("MiniCPM-o", "vllm"): 6.0,
    ("Llama-3.1-Instruct", "vllm"): 15.0,
    ("Audio Flamingo 3", "vllm"): 8.0,
    ("Qwen2.5-Omni", "vllm"): 8.0,
}
# Measured: the transformers backend on one H200 (2026-12-04; `python -m bench.gpu_judges --batch-sizes 1 8 32`, then
# `64 128`; docs/benchmarks.md, "GPU judges"), requests/s by batch size: full-size random-weight models in bfloat16,
# about 1,000 input tokens (30 s of audio) and exactly 64 generated tokens each (random weights never stop). Answers
# of the paper's prompts run longer (up to 512 tokens), so a real job is slower: its own measured rate
# (`schedule.requests_per_hour`) replaces these. A judge gets the rate of the largest measured batch up to its own.
MEASURED_TRANSFORMERS = {
    "Qwen2-Audio": {1: 0.50, 8: 2.34, 32: 7.89, 64: 10.67},
    "Audio Flamingo 3": {1: 0.52, 8: 2.95, 32: 8.32},
    "Qwen2.5-Omni": {1: 0.67, 8: 4.37, 32: 11.16, 64: 11.09, 128: 13.75},
}
# Models without a stated rate: a 7-10 B model on that backend; an endpoint answers one request per concurrency
# slot in about two seconds; the embedding baseline is a forward pass of a small encoder.
BACKEND_REQUESTS_PER_S = {"vllm": 8.0, "transformers": 1.5, "embedding": 50.0}
ENDPOINT_REQUESTS_PER_S_PER_SLOT = 0.5
# Engine start, weights from a local disk, CUDA graph capture (docs/benchmarks.md).
LOAD_S = {"vllm": 90.0, "transformers": 60.0}
# A DeepDialogue turn lasts about 5 s, with 0.4 s pauses between turns (docs/cluster.md, "GPU-hours per stage"):
# the length of a dialogue's audio at plan time, when no audio has been read.
TURN_S = 5.4
# Shard counts tried for `auto`, as a multiple of the dialogues: beyond, shards are nearly all single dialogues.
MAX_SHARDS_PER_DIALOGUE = 4


class SizingError(ValueError):
    """A judge whose jobs cannot fit their time limit; the message names the judge and the numbers."""


@dataclass(frozen=True)
class DialogueWork:
    """What the plan knows of a dialogue: its turns, the turns that get variants, and whether controls score it."""

    dialogue_id: str
    n_turns: int
    target_turns: int
    variants: int  # target turns x categories x severities
    controls: bool


@dataclass(frozen=True)
class JudgeSizing:
    judge: str
    shards: int
    requests: int  # of all the judge's jobs
    requests_per_job: int  # of its largest job
    hours_per_job: float  # estimate of its largest job, one model load included
    runtime_min: int
    requests_per_hour: float
    rate_source: str
    allow_overrun: bool

    @property
    def fits(self) -> bool:
        """Whether the largest job is planned to at most `PLANNED_SHARE` of its runtime."""
        return self.hours_per_job * 60 <= self.runtime_min * PLANNED_SHARE


def condition_samples(condition: str, work: DialogueWork) -> int:
    """The samples a cell of `condition` scores in one dialogue (`manifest.conditions.condition_samples`)."""
    kind = Condition(condition).kind
    if kind == CLEAN:
        return 1 + work.variants
    if not work.controls or not work.variants:
        return 0
    if kind in (MASKED, NOISE, BABBLE, SILENCE):
        return work.variants + work.target_turns
    if kind == TTS_CONTROL:
        return work.target_turns
    if kind == INJECTION:
        return work.variants + 1
    raise ValueError(f"no sample count for condition {condition!r}")


def audio_windows(entry: Mapping[str, Any], n_turns: int) -> int:
    """Requests per audio sample: the long-audio windows of a dialogue of `n_turns` turns (`long_audio: chunk`)."""
    limit = entry["max_audio_s"]
    if limit is None or entry["long_audio"] != "chunk":
        return 1
    return max(1, math.ceil(n_turns * TURN_S / limit))


def dialogue_requests(entry: Mapping[str, Any], cells: Sequence[Any], work: DialogueWork) -> int:
    """Requests of a judge's cells (`workflow.plan.JudgeCell`) in one dialogue."""
    windows = audio_windows(entry, work.n_turns)
    # Per (condition, modality kind), not per cell: a paper judge has ~250 cells over a dozen conditions, and the
    # plan sizes every judge on every dialogue at each parse.
    kinds = Counter((c.condition, c.modality == TEXT) for c in cells)
    return sum(n * condition_samples(cond, work) * (1 if text else windows) for (cond, text), n in kinds.items())


def judge_rate(entry: Mapping[str, Any]) -> tuple[float, str]:
    """Requests per hour of a judge, and where the number comes from."""
    stated = entry["schedule"].get("requests_per_hour")
    if stated is not None:
        return float(stated), "schedule.requests_per_hour"
    backend = entry["backend"]
    family = family_of(entry["model"])
    measured = MEASURED_TRANSFORMERS.get(family.name, {}) if family is not None and backend == "transformers" else {}
    batches = [batch for batch in measured if batch <= int(entry["batch_size"])]
    if batches:
        batch = max(batches)
        return measured[batch] * 3600, f"{family.name} on transformers at batch {batch}, measured on an H200"
    if family is not None and (family.name, backend) in REQUESTS_PER_S:
        return REQUESTS_PER_S[(family.name, backend)] * 3600, f"{family.name} on {backend}, assumed"
    if backend == "openai":
        slots = int(entry["options"].get("concurrency", endpoint_defaults()["concurrency"]))
        return slots * ENDPOINT_REQUESTS_PER_S_PER_SLOT * 3600, f"{slots} concurrent endpoint requests"
    return BACKEND_REQUESTS_PER_S[backend] * 3600, f"{backend} backend default"


def shard_loads(requests: Mapping[str, int], n_shards: int) -> list[int]:
    """Requests of each non-empty shard when the dialogues are split into `n_shards` (`core.files.shard_of`)."""
    loads: dict[int, int] = {}
    for dialogue_id, count in requests.items():
        shard = shard_of(dialogue_id, n_shards)
        loads[shard] = loads.get(shard, 0) + count
    return list(loads.values())


def longest_partition_runtime(gpus: int, partitions_file: Path = PARTITIONS_FILE) -> tuple[str, float] | None:
    """(name, max_runtime minutes) of the partition with the longest limit a job with `gpus` GPUs can go to, from
    the SLURM profile's partition file; None without that file or without limits."""
    if not partitions_file.is_file():
        return None
    partitions = (read_yaml(partitions_file) or {}).get("partitions", {})
    fitting = [
        (name, float(limits["max_runtime"]))
        for name, limits in partitions.items()
        if "max_runtime" in limits and gpus <= limits.get("max_gpu", 0 if gpus else math.inf)
    ]
    return max(fitting, key=lambda item: item[1]) if fitting else None


class _JudgeModel:
    """The cost model of one judge: requests per dialogue, and the estimate of a job of a given shard count."""

    def __init__(self, name: str, entry: Mapping[str, Any], cells: Sequence[Any], works: Sequence[DialogueWork]):
        self.name, self.entry = name, entry
        self.requests = {w.dialogue_id: dialogue_requests(entry, cells, w) for w in works}
        self.rate, self.rate_source = judge_rate(entry)
        self.load_h = LOAD_S.get(entry["backend"], 0.0) / 3600
        self.runtime = int(entry["schedule"]["resources"]["runtime"])

    def sized(self, n_shards: int) -> JudgeSizing:
        largest = max(shard_loads(self.requests, n_shards), default=0)
        return JudgeSizing(
            judge=self.name,
            shards=n_shards,
            requests=sum(self.requests.values()),
            requests_per_job=largest,
            hours_per_job=largest / self.rate + self.load_h,
            runtime_min=self.runtime,
            requests_per_hour=self.rate,
            rate_source=self.rate_source,
            allow_overrun=bool(self.entry["schedule"].get("allow_overrun", False)),
        )

    def smallest_fit(self) -> JudgeSizing:
        """The smallest shard count whose largest job fits the planned share of its runtime; else the count with the
        smallest largest job."""
        budget = (self.runtime * PLANNED_SHARE / 60 - self.load_h) * self.rate
        lowest = max(1, math.ceil(sum(self.requests.values()) / budget)) if budget > 0 else 1
        best = None
        for n_shards in range(lowest, max(lowest, MAX_SHARDS_PER_DIALOGUE * len(self.requests)) + 1):
            sized = self.sized(n_shards)
            if sized.fits:
                return sized
            if best is None or sized.requests_per_job < best.requests_per_job:
                best = sized
        return best if best is not None else self.sized(lowest)


def size_judges(
    config: Mapping[str, Any],
    cells_by_judge: Mapping[str, Sequence[Any]],
    works: Sequence[DialogueWork],
    partitions_file: Path = PARTITIONS_FILE,
) -> dict[str, JudgeSizing]:
    """The shard count and job estimate of every judge; raise SizingError for a job that cannot fit (module
    docstring)."""
    shards = config["evaluation"]["shards"]
    sizings, problems = {}, []
    for name, cells in cells_by_judge.items():
        entry = config["judges"][name]
        problems += _partition_problems(name, entry, partitions_file)
        model = _JudgeModel(name, entry, cells, works)
        sized = model.smallest_fit() if shards == AUTO else model.sized(int(shards))
        if not sized.fits and not sized.allow_overrun:
            problems.append(_overrun_message(sized, shards))
        sizings[name] = sized
    if problems:
        raise SizingError("judge jobs that cannot finish in their time limit:\n  " + "\n  ".join(problems))
    return sizings


def _partition_problems(name: str, entry: Mapping[str, Any], partitions_file: Path) -> list[str]:
    resources = entry["schedule"]["resources"]
    longest = longest_partition_runtime(int(resources["gpu"]), partitions_file)
    if longest is None or resources["runtime"] <= longest[1]:
        return []
    return [
        f"judges.{name}.schedule.resources.runtime is {resources['runtime']} min, over the longest partition a job "
        f"with {resources['gpu']} GPU(s) goes to ({longest[0]}: max_runtime {longest[1]:g} min in {partitions_file}); "
        "lower the runtime (evaluation.shards: auto then splits the judge's work finer) or raise the partition's limit"
    ]


def _overrun_message(sized: JudgeSizing, shards: Any) -> str:
    how = (
        "even with one dialogue per shard (evaluation.shards: auto)"
        if shards == AUTO
        else f"with evaluation.shards: {shards}"
    )
    return (
        f"judge {sized.judge}: its largest job holds {sized.requests_per_job:,} requests, about "
        f"{sized.hours_per_job:.1f} h at {sized.requests_per_hour:,.0f} requests/h ({sized.rate_source}) {how}, over "
        f"{PLANNED_SHARE:.0%} of its runtime of {sized.runtime_min} min (judges.{sized.judge}.schedule.resources."
        "runtime; the rest is headroom); raise the runtime, "
        f"use more shards (evaluation.shards: auto), or set judges.{sized.judge}.schedule.allow_overrun: true to "
        "finish it over several attempts resumed from the request cache"
    )


def sizing_table(sizings: Mapping[str, JudgeSizing]) -> str:
    """The parse-time table of the judge jobs: shards, requests and estimated hours per job, runtime."""
    columns = f"{'judge':<22} {'shards':>6} {'requests':>11} {'per job':>9} {'h per job':>9} {'runtime':>9}"
    header = f"{columns} {'planned':>7}  rate"
    lines = [
        f"judge jobs (estimate: requests / rate + one model load, planned to at most {PLANNED_SHARE:.0%} of the "
        "runtime; docs/cluster.md, 'Job sizing'):",
        header,
    ]
    for s in sizings.values():
        flag = "" if s.fits else "  OVER PLANNED SHARE (allow_overrun: resumed by retries)"
        planned = s.hours_per_job * 60 / s.runtime_min
        lines.append(
            f"{s.judge:<22} {s.shards:>6} {s.requests:>11,} {s.requests_per_job:>9,} {s.hours_per_job:>9.2f} "
            f"{s.runtime_min:>5} min {planned:>7.0%}  {s.requests_per_hour:,.0f}/h ({s.rate_source}){flag}"
        )
    return "\n".join(lines)


def early_warning_s(runtime_min: float) -> int:
    """Seconds before a judge job's time limit at which the SLURM profile asks for an early SIGTERM (`--signal`):
    enough for the call in flight to finish and commit (`core.signals.CALL_S` of work) and for the job to write
    its tables, at most a quarter of the runtime (SLURM sends the signal up to a minute early)."""
    return int(min(CALL_S + 120.0, runtime_min * 60 / 4))
