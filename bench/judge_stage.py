"""The judge stage at cluster scale: model loads per judge, what reruns and resumes compute, and GPU-hours.

Three sections (`--section`, default all):
- `loads`: from the plan of the paper config on a synthetic corpus of `--dialogues` dialogues x 6 turns x 40
  variants (as `bench.dag_scale`): judge cells, jobs and model loads per judge, with one job per judge cell and
  shard (before) and one job per judge and shard (now), and the requests each judge's jobs send.
- `cpu`: a tiny random-weight Qwen2-Audio (`bench.models`) on synthetic tone manifests (`bench.manifests`),
  on the CPU, side by side in one run with one request cache: a cold run of the cells of two prompts, the rerun
  after a third prompt is added, an unchanged rerun, and a job killed (SIGKILL) half-way then resumed, each
  with requests computed and wall time.
- `gpu`: an estimate of the paper run's GPU-hours per judge, loading and scoring apart, from the `loads`
  plan and the stated assumptions (`--load-s-<backend>`, `--requests-per-s-<judge>`, those of docs/cluster.md);
  no GPU was measured.

Run: .venv/bin/python -m bench.judge_stage [--section loads|cpu|gpu] [--dialogues 100]
Last line: `loads_before=<max per judge> loads_after=<max per judge> resume_computed=<n> resume_remainder=<n>
batch=<n>` (the parts of the sections run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


from bench.dag_scale import synthetic_config, write_synthetic_corpus  # noqa: E402
from lalm_judge.judging.backends.base import JudgeSpec  # noqa: E402
from lalm_judge.judging.cache import RequestCache  # noqa: E402
from lalm_judge.judging.job import JobResult, score_judge_shard  # noqa: E402
from lalm_judge.judging.prompts import resolve_prompt_path  # noqa: E402
from lalm_judge.workflow import sizing  # noqa: E402
from lalm_judge.workflow.config import validate_config  # noqa: E402
from lalm_judge.workflow.plan import Plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TURNS, VARIANTS_PER_TURN = 6, 40

# Assumptions of the GPU-hours estimate (no GPU was measured); each can be set on the command line. They are
# those of docs/cluster.md ("GPU-hours per stage"), per judge there, so that both estimates agree.
# Load: engine start, weights from a local disk, CUDA graph capture (vLLM: 1-2 min for a 7-10B model). Scoring
# throughput of one 80 GB GPU: the rates the workflow sizes judge jobs with (lalm_judge.workflow.sizing).
LOAD_S = sizing.LOAD_S
REQUESTS_PER_S = {
    "qwen2_audio_7b": sizing.REQUESTS_PER_S[("Qwen2-Audio", "vllm")],
    "meralion2_10b": sizing.REQUESTS_PER_S[("MERaLiON-2", "vllm")],
    "minicpm_o": sizing.REQUESTS_PER_S[("MiniCPM-o", "vllm")],
    "llama31_8b": sizing.REQUESTS_PER_S[("Llama-3.1-Instruct", "vllm")],
    "audio_flamingo_3": sizing.REQUESTS_PER_S[("Audio Flamingo 3", "vllm")],
    "qwen25_omni_7b": sizing.REQUESTS_PER_S[("Qwen2.5-Omni", "vllm")],
}
# Before Audio Flamingo 3 and Qwen2.5-Omni moved to vLLM: both on the transformers backend, as the documented
# alternative of configs/paper.yaml runs them, with the same assumptions otherwise; the GPU-hours section shows both.
TRANSFORMERS_ALTERNATIVE = {
    "audio_flamingo_3": {"backend": "transformers", "batch_size": 8, "options": {}},
    "qwen25_omni_7b": {
        "backend": "transformers",
        "batch_size": 4,
        "options": {"model_class": "Qwen2_5OmniThinkerForConditionalGeneration"},
    },
}
# The rates that comparison assumed for them on the transformers backend (measured since, on an H200:
# `sizing.MEASURED_TRANSFORMERS`, docs/benchmarks.md "GPU judges").
REQUESTS_PER_S_BEFORE = {**REQUESTS_PER_S, "audio_flamingo_3": 2.0, "qwen25_omni_7b": 1.5}


# --- the judge job as the workflow runs it, for this benchmark and the tests ---------------------------------
def job_cells(
    modality_sources: Sequence[tuple[str, str]], prompts: Sequence[str], conditions: Sequence[str] = ("clean",)
) -> list[dict[str, str]]:
    return [
        {"modality": modality, "transcript_source": source, "prompt": prompt, "condition": condition}
        for modality, source in modality_sources
        for prompt in prompts
        for condition in conditions
    ]


def job_out_paths(root: Path, cells: Sequence[Mapping[str, str]]) -> list[Path]:
    return [
        root / "scores" / f"{c['modality']}-{c['transcript_source']}" / c["prompt"] / c["condition"] / "shard0.parquet"
        for c in cells
    ]


def run_job(manifests, spec: JudgeSpec, cells, root: Path, **kwargs: Any) -> JobResult:
    """One judge job of shard 0 with its score tables and request cache under `root`."""
    prompts = sorted({c["prompt"] for c in cells})
    return score_judge_shard(
        manifests,
        spec,
        cells,
        job_out_paths(root, cells),
        [resolve_prompt_path(p) for p in prompts],
        shard=0,
        cache_dir=root / "cache",
        stats_path=root / "stats.json",
        progress=False,
        **kwargs,
    )


_JOB_PROCESS = """
import json, sys
from pathlib import Path
from bench.judge_stage import run_job
from lalm_judge.core.signals import stop_on_sigterm
from lalm_judge.judging.backends.base import JudgeSpec
args = json.loads(sys.argv[1])
spec = JudgeSpec.from_config(args["spec"].pop("name"), args["spec"])
with stop_on_sigterm(f"judge {spec.name}"):
    run_job(args["manifests"], spec, args["cells"], Path(args["root"]))
"""

_PAIRWISE_JOB_PROCESS = """
import json, sys
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.core.signals import stop_on_sigterm
from lalm_judge.pairwise.judge import judge_cell
args = json.loads(sys.argv[1])
spec = JudgeSpec.from_config(args["spec"].pop("name"), args["spec"])
with stop_on_sigterm(f"pairwise judge {spec.name}"):
    judge_cell(spec=spec, progress=False, **args["cell"])
"""


def spec_arguments(spec: JudgeSpec) -> dict[str, Any]:
    """A spec as JSON, for `JudgeSpec.from_config` in another process."""
    return {**dataclasses.asdict(spec), "modalities": list(spec.modalities)}


def stop_when_cached(
    script: str,
    args: Mapping[str, Any],
    cache: RequestCache,
    stop_at: int,
    stop_signal: int,
    root: Path,
    timeout_s: float = 600,
) -> tuple[int, int]:
    """Run `script` (Python code reading its JSON arguments from argv[1]) in another process and send it
    `stop_signal` once `stop_at` requests are in `cache`; (how many were cached then, the job's exit status)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # The job's stderr goes to a file, not a pipe: a pipe nobody reads fills up and blocks the job, possibly while
    # it holds the cache's lock, which the polling below then waits for.
    stderr_path = root / "killed_job.stderr"
    root.mkdir(parents=True, exist_ok=True)
    with open(stderr_path, "wb") as stderr:
        job = subprocess.Popen([sys.executable, "-c", script, json.dumps(args)], cwd=ROOT, env=env, stderr=stderr)
    deadline = time.monotonic() + timeout_s
    while cache.count() < stop_at:
        if job.poll() is not None:
            raise RuntimeError(f"the job ended before it was killed: {stderr_path.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            job.kill()
            raise RuntimeError(f"fewer than {stop_at} requests cached after {timeout_s:.0f} s")
        time.sleep(0.02)
    job.send_signal(stop_signal)
    status = job.wait(timeout=timeout_s)
    return cache.count(), status


def kill_job_half_way(manifests, spec: JudgeSpec, cells, root: Path, kill_at: int, timeout_s: float = 600) -> int:
    """Run the judge job in another process and SIGKILL it once `kill_at` requests are cached; how many were."""
    return stop_job_half_way(manifests, spec, cells, root, kill_at, signal.SIGKILL, timeout_s)[0]


def stop_job_half_way(
    manifests, spec: JudgeSpec, cells, root: Path, stop_at: int, stop_signal: int, timeout_s: float = 600
) -> tuple[int, int]:
    """Run the judge job in another process, as the workflow's judge job runs it (SIGTERM stops it cleanly:
    `core.signals.stop_on_sigterm`), and send it `stop_signal` once `stop_at` requests are cached; (how many were
    cached, the job's exit status)."""
    args = {
        "manifests": [str(p) for p in manifests],
        "spec": spec_arguments(spec),
        "cells": list(cells),
        "root": str(root),
    }
    cache = RequestCache(root / "cache" / spec.name)
    return stop_when_cached(_JOB_PROCESS, args, cache, stop_at, stop_signal, root, timeout_s)


def kill_pairwise_job_half_way(spec: JudgeSpec, cell: Mapping[str, Any], root: Path, kill_at: int) -> int:
    """Run a pairwise judge job (`pairwise.judge.judge_cell` with the keyword arguments `cell`, which name its
    `cache_dir`) in another process, as the workflow runs it, and SIGKILL it once `kill_at` requests are cached;
    how many were."""
    cache = RequestCache(Path(cell["cache_dir"]) / spec.name)
    args = {"spec": spec_arguments(spec), "cell": dict(cell)}
    return stop_when_cached(_PAIRWISE_JOB_PROCESS, args, cache, kill_at, signal.SIGKILL, root)[0]


# --- sections ---------------------------------------------------------------------------------------------------
def paper_plan(n_dialogues: int, scratch: Path, judges: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """The plan of configs/paper.yaml on the synthetic corpus; `judges` replaces keys of judge entries."""
    write_synthetic_corpus(scratch / "corpus", n_dialogues, TURNS)
    config = synthetic_config(scratch / "corpus")
    for name, changes in (judges or {}).items():
        config["judges"][name].update(changes)
    return Plan(validate_config(config))


def judge_rows(plan: Plan) -> list[dict[str, Any]]:
    """Per judge of the plan: its backend, cells, model loads (one per cell and shard before one job per judge and
    shard; one per job now) and requests (the workflow's own cost model: each condition's samples, the judge's
    long-audio windows)."""
    rows = []
    for judge in plan.judges():
        cells = plan.judge_cells(judge)
        shards = len(plan.shards(judge))
        rows.append(
            {
                "judge": judge,
                "backend": plan.config["judges"][judge]["backend"],
                "cells": len(cells),
                "jobs_before": len(cells) * shards,
                "jobs_after": shards,
                "requests": plan.sizing[judge].requests,
            }
        )
    return rows


def loads_section(plan: Plan) -> list[dict[str, Any]]:
    samples = len(plan.dialogue_ids) * (1 + TURNS * VARIANTS_PER_TURN)
    rows = judge_rows(plan)
    print(f"\nModel loads per judge at paper scale ({len(plan.dialogue_ids)} dialogues, {samples:,} samples):")
    print(f"{'judge':<18} {'cells':>5} {'loads before':>13} {'loads after':>12} {'requests':>10}")
    for row in rows:
        print(
            f"{row['judge']:<18} {row['cells']:>5} {row['jobs_before']:>13} {row['jobs_after']:>12} "
            f"{row['requests']:>10,}"
        )
    print(
        f"{'all judges':<18} {sum(r['cells'] for r in rows):>5} {sum(r['jobs_before'] for r in rows):>13} "
        f"{sum(r['jobs_after'] for r in rows):>12} {sum(r['requests'] for r in rows):>10,}"
    )
    print(f"\nJob sizing of the paper config (lalm_judge.workflow.sizing; docs/cluster.md):\n{plan.sizing_table()}")
    return rows


def gpu_hours(row: Mapping[str, Any], load_s: Mapping[str, float], rate: float) -> tuple[float, float]:
    """(loading, scoring) GPU-hours of a judge: one model load per job, its requests at `rate` requests/s."""
    return row["jobs_after"] * load_s[row["backend"]] / 3600, row["requests"] / rate / 3600


def gpu_section(
    rows: list[dict[str, Any]],
    rows_before: list[dict[str, Any]],
    load_s: Mapping[str, float],
    rates: Mapping[str, float],
    rates_before: Mapping[str, float] = REQUESTS_PER_S_BEFORE,
) -> None:
    """GPU-hours per judge before (Audio Flamingo 3 and Qwen2.5-Omni on transformers, `TRANSFORMERS_ALTERNATIVE`,
    with their own shard counts) and now (every GPU judge on vLLM): loading and scoring."""
    print("\nGPU-hours of the paper run per judge (estimate; assumptions below):")
    header = ["backend before", "load before", "scoring before", "backend now", "load now", "scoring now", "total now"]
    print(f"{'judge':<20} " + " ".join(f"{h:>14}" for h in header))
    before_by_judge = {row["judge"]: row for row in rows_before}
    totals = [0.0] * 4
    for row in rows:
        before = before_by_judge[row["judge"]]
        if row["backend"] not in load_s:  # API judges use no GPU
            print(f"{row['judge']:<20} {'(API: no GPU)':>14}")
            continue
        hours = [*gpu_hours(before, load_s, rates_before[row["judge"]]), *gpu_hours(row, load_s, rates[row["judge"]])]
        totals = [t + h for t, h in zip(totals, hours)]
        cells = [before["backend"], *(f"{h:.1f}" for h in hours[:2]), row["backend"], *(f"{h:.1f}" for h in hours[2:])]
        print(f"{row['judge']:<20} " + " ".join(f"{c:>14}" for c in [*cells, f"{hours[2] + hours[3]:.1f}"]))
    summed = ["", f"{totals[0]:.1f}", f"{totals[1]:.1f}", "", f"{totals[2]:.1f}", f"{totals[3]:.1f}"]
    print(f"{'GPU judges':<20} " + " ".join(f"{c:>14}" for c in [*summed, f"{totals[2] + totals[3]:.1f}"]))
    print(f"GPU judges in all: before {totals[0] + totals[1]:.1f} h, now {totals[2] + totals[3]:.1f} h")
    print(
        "assumptions: load "
        + ", ".join(f"{b} {s:.0f} s" for b, s in load_s.items())
        + "; scoring now "
        + ", ".join(f"{j} {r:g}" for j, r in rates.items())
        + " requests/s; before "
        + ", ".join(f"{j} {r:g}" for j, r in rates_before.items() if r != rates[j])
        + " (transformers); requests and windows per audio request from lalm_judge.workflow.sizing (a turn of "
        f"{sizing.TURN_S:g} s); a rerun after an added prompt or a resume loads each shard's model once more"
    )


def cpu_section(threads: int, scratch: Path) -> dict[str, int]:
    import torch

    from bench.manifests import write_tone_manifests
    from bench.models import build_tiny_qwen2audio

    torch.set_num_threads(threads)
    manifests = write_tone_manifests(
        scratch / "manifests", n_dialogues=4, n_turns=3, variant_turns=3, variants_per_turn=3
    )
    spec = JudgeSpec(
        name="tiny_qwen2_audio",
        backend="transformers",
        model=str(build_tiny_qwen2audio(scratch / "model")),
        modalities=("audio", "audio_text"),
        generation={"max_new_tokens": 16},
        batch_size=8,
        options={"device": "cpu", "num_threads": threads},
    )
    grid = [("audio", "none"), ("audio_text", "gt")]
    two, three = job_cells(grid, ["basic", "rubric"]), job_cells(grid, ["basic", "rubric", "cot"])
    shared = scratch / "shared"
    runs: list[tuple[str, Any]] = []

    def timed(label: str, action) -> None:
        started = time.perf_counter()
        result = action()
        runs.append((label, result, time.perf_counter() - started))

    timed("cold run, 2 prompts", lambda: run_job(manifests, spec, two, shared).stats)
    timed("rerun, a 3rd prompt added", lambda: run_job(manifests, spec, three, shared).stats)
    timed("unchanged rerun", lambda: run_job(manifests, spec, three, shared).stats)
    killed_root = scratch / "killed"
    n_requests = runs[0][1].requests
    stored = kill_job_half_way(manifests, spec, two, killed_root, kill_at=n_requests // 2)
    timed(
        f"resume after SIGKILL ({stored} of {n_requests} cached)",
        lambda: run_job(manifests, spec, two, killed_root).stats,
    )

    print(
        f"\nOn the CPU ({threads} torch thread(s)): tiny Qwen2-Audio, {runs[0][1].samples} samples, "
        f"batch {spec.batch_size}"
    )
    print(f"{'run':<42} {'requests':>8} {'cached':>7} {'computed':>9} {'model loads':>11} {'wall s':>7}")
    for label, stats, wall in runs:
        print(
            f"{label:<42} {stats.requests:>8} {stats.cached:>7} {stats.computed:>9} {stats.model_loads:>11} "
            f"{wall:>7.1f}"
        )
    resume = runs[-1][1]
    return {"resume_computed": resume.computed, "resume_remainder": n_requests - stored, "batch": spec.batch_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", choices=["all", "loads", "cpu", "gpu"], default="all")
    parser.add_argument("--dialogues", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of the cpu section")
    for backend in LOAD_S:
        parser.add_argument(f"--load-s-{backend}", type=float, default=LOAD_S[backend])
    for judge in REQUESTS_PER_S:
        parser.add_argument(f"--requests-per-s-{judge.replace('_', '-')}", type=float, default=REQUESTS_PER_S[judge])
    args = parser.parse_args()
    summary: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        if args.section in ("all", "loads", "gpu"):
            rows = loads_section(paper_plan(args.dialogues, scratch / "plan"))
            summary["loads_before"] = max(r["jobs_before"] for r in rows)
            summary["loads_after"] = max(r["jobs_after"] for r in rows)
            if args.section in ("all", "gpu"):
                load_s = {b: getattr(args, f"load_s_{b}") for b in LOAD_S}
                rates = {j: getattr(args, f"requests_per_s_{j}") for j in REQUESTS_PER_S}
                before = judge_rows(paper_plan(args.dialogues, scratch / "plan-before", TRANSFORMERS_ALTERNATIVE))
                gpu_section(rows, before, load_s, rates)
        if args.section in ("all", "cpu"):
            summary.update(cpu_section(args.threads, scratch / "cpu"))
    print(" ".join(f"{key}={value}" for key, value in summary.items()))


if __name__ == "__main__":
    main()
