"""The workflow on a real single-node SLURM cluster, through snakemake-executor-plugin-slurm and
profiles/slurm: every job runs as a SLURM batch job, a dialogue's ingest and rewrites travel as one group
job, and a GPU judge's request reaches SLURM (the node's GPUs are stand-in devices: this machine has
none, and the judge computes on the CPU). Then a judge job with a one-minute time limit is stopped by SLURM
(SIGTERM at its limit), retried by the profile's `retries` with more time, and completes from its request cache;
its score tables equal those of the uninterrupted first run, byte for byte, timing columns aside.

tests/cluster/start_slurm.sh starts munged, slurmctld and slurmd as root (installing the Debian
packages if needed); stop_slurm.sh stops them by their recorded PIDs. The test is skipped where
that cannot run (not root, no apt-get, no package mirror). Nothing here waits on the clock: SLURM's own
limit (minutes, checked by slurmctld every 30 s) stops the job, and the job's work is far longer than a minute.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
import yaml

from lalm_judge.core.tables import EFFORT_COLUMNS
from tests.support.workflow import ROOT, prepare_workdir, snakemake, write_config, write_corpus  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.workflow, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SLURM_PROFILE = ROOT / "profiles" / "slurm"
DIALOGUE = "demo_hiking"
CANNOT_RUN = 2  # start_slurm.sh's exit status for "not possible on this machine"
# A real LLM judge (SmolLM2-135M on one CPU thread) with enough work that SLURM always stops its job mid-work at a
# one-minute limit: slurmctld checks limits every 30 s, so the stop lands 60-90 s after the job starts, later on a
# loaded machine. 13 samples (the clean original and 2 categories x 2 severities x 3 turns) x 4 prompts x
# (clean + injection) = 104 requests, of which the chain-of-thought and few-shot ones write up to 48 tokens: about
# 2.4 times the 56 requests of up to 24 tokens that, in a quiet moment of a loaded run, finished 83 s after the job
# started, before the stop. Slower machines need more attempts: the profile's three retries give it 1 + 2 + 4 + 8
# minutes, each attempt resuming from the cache.
SLOW_JUDGE = "smollm2_slurm"
SLOW_JUDGE_ENTRY = {
    "backend": "transformers",
    "model": "bundled:smollm2-135m-instruct",
    "modalities": ["text"],
    "batch_size": 1,  # one request per backend call: each is in the request cache as soon as it is computed
    "generation": {"max_new_tokens": 48},
    "options": {"num_threads": 1},
    "weak": "SmolLM2-135M: a real LLM code path, not a useful judge",
    "schedule": {
        "prompts": ["basic", "cot", "fewshot", "rubric"],
        "conditions": ["clean", "injection"],
        "resources": {"mem_mb": 2000, "runtime": 60},  # uninterrupted, however loaded the machine
    },
}


def run_script(name: str, base: Path, timeout_s: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "LALM_SLURM_BASE": str(base)}
    command = ["timeout", "-k", "10", str(timeout_s), "bash", str(HERE / name)]
    return subprocess.run(command, capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def slurm_cluster():
    if os.geteuid() != 0:
        pytest.skip("the SLURM cluster test runs slurmd as root and installs Debian packages: run it as root")
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        pytest.skip("SLURM is not installed and there is no apt-get to install it")
    # Not under pytest's tmp folder: that is private to root, and munged runs as the munge user.
    base = Path(tempfile.mkdtemp(prefix="lalm-judge-slurm-"))
    base.chmod(0o755)
    started = run_script("start_slurm.sh", base, timeout_s=300)
    try:
        if started.returncode == CANNOT_RUN:
            pytest.skip(f"cannot start a local SLURM cluster here: {started.stdout.strip().splitlines()[-1]}")
        assert started.returncode == 0, f"start_slurm.sh failed:\n{started.stdout}\n{started.stderr}"
        yield base
    finally:
        stopped = run_script("stop_slurm.sh", base, timeout_s=60)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        shutil.rmtree(base, ignore_errors=True)


def slurm_job_id(log: Path) -> str | None:
    first = log.read_text().splitlines()[:1]
    match = re.fullmatch(r"SLURM_JOB_ID=(\d+)", first[0]) if first else None
    return match.group(1) if match else None


def finished_jobs() -> dict[str, dict[str, str]]:
    """SLURM job id -> state, comment (the plugin writes the rule there) and GPU request."""
    listing = subprocess.run(
        ["squeue", "-h", "-t", "all", "-O", "JobID:20,State:20,tres-per-job:30,Comment:300"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    jobs = {}
    for line in listing.splitlines():
        job_id, state, gpus, comment = line[:20].strip(), line[20:40].strip(), line[40:70].strip(), line[70:].strip()
        jobs[job_id] = {"state": state, "gpus": gpus, "comment": comment}
    return jobs


@dataclass(frozen=True)
class SlurmRun:
    workdir: Path
    configfile: Path
    args: tuple[str, ...]
    output: str


def slurm_arguments(partitions: Path) -> tuple[str, ...]:
    return (
        "--workflow-profile",
        str(SLURM_PROFILE),
        "--executor",
        "slurm",
        "--jobs",
        "4",
        "--cores",  # the node's CPUs: one job, a group job included, may not ask for more
        "2",
        # The local cluster's names instead of the profile's placeholders; no accounting database.
        "--slurm-partition-config",
        str(partitions),
        "--default-resources",
        "mem_mb=1000",
        "runtime=10",
        "--slurm-no-account",
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--latency-wait",
        "5",
    )


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory) -> SlurmRun:
    """The test workflow run once through SLURM, with the slow judge besides the embedding judges."""
    tmp_path = tmp_path_factory.mktemp("slurm")
    workdir = tmp_path / "run"
    prepare_workdir(workdir, with_tiny_lalm=False)
    write_corpus(workdir, dialogue_ids=(DIALOGUE,), extra=())
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["evaluation"]["transcript_sources"] = ["gt"]
    config["variants"]["categories"] = ["harassment", "violence"]  # the slow judge's work (above)
    config["controls"]["dialogues"] = [DIALOGUE]  # the test config's controls, on the one dialogue
    config["metrics"].update(bootstrap=50, folds=2)
    gpu_judge = (slurm_cluster / "etc" / "gpu_count").read_text().strip() != "0"
    if gpu_judge:  # the same embedding model, registered as a judge that asks for one GPU
        config["judges"]["minilm_gpu"] = {
            **config["judges"]["minilm"],
            "modalities": ["text"],
            "schedule": {
                **config["judges"]["minilm"]["schedule"],
                "resources": {"gpu": 1, "cpus_per_gpu": 1, "mem_mb": 1000, "runtime": 10},
            },
        }
        config["evaluation"]["judges"].append("minilm_gpu")
    config["judges"][SLOW_JUDGE] = SLOW_JUDGE_ENTRY
    config["evaluation"]["judges"].append(SLOW_JUDGE)
    configfile = write_config(workdir, config)
    # The local cluster's one partition in the profile's partition file format: jobs find it by their resources.
    gpu_count = int((slurm_cluster / "etc" / "gpu_count").read_text().strip())
    partitions = tmp_path / "partitions.yaml"
    partitions.write_text(yaml.safe_dump({"partitions": {"debug": {"max_gpu": gpu_count}}}))
    args = slurm_arguments(partitions)
    # ~30 SLURM jobs of ~20-30 s each on a 2-core machine, the slow judge's about two minutes among them.
    result = snakemake(workdir, configfile, *args, timeout_s=2700)
    return SlurmRun(workdir, configfile, args, result.stdout + result.stderr)


def test_workflow_runs_as_slurm_jobs(slurm_cluster, slurm_run):
    workdir = slurm_run.workdir
    gpu_judge = (slurm_cluster / "etc" / "gpu_count").read_text().strip() != "0"
    assert "Finished jobid" in slurm_run.output

    logs = sorted((workdir / "logs").rglob("*.log"))
    ids = {log.relative_to(workdir / "logs").as_posix(): slurm_job_id(log) for log in logs}
    assert logs and all(ids.values()), f"job logs without SLURM_JOB_ID: {[k for k, v in ids.items() if not v]}"
    # The dialogue's ingest and rewrites shared one batch job; every other job had its own (TTS and ASR stay out
    # of groups: they may run on the GPU partition).
    prep_logs = [k for k in ids if DIALOGUE in k and k.split("/")[0] in ("corpus", "variants")]
    assert {k.split("/")[0] for k in prep_logs} == {"corpus", "variants"}
    grouped_ids = {ids[k] for k in prep_logs}
    assert len(grouped_ids) == 1
    others = Counter(v for k, v in ids.items() if k not in prep_logs)
    assert grouped_ids.isdisjoint(others) and set(others.values()) == {1}
    n_turns = len([k for k in ids if re.fullmatch(rf"tts/{DIALOGUE}/t\d+\.log", k)])
    assert n_turns == len([k for k in prep_logs if k.startswith("variants/")]) >= 2
    # One per judge and shard (one shard): minilm (text-gt and audio), minilm_gpu, the slow judge.
    n_judge_jobs = 1 + gpu_judge + 1
    per_dialogue = n_turns + 1 + 1 + 1  # TTS per turn, ASR, manifest, turn energy and pitch
    # The controls of minilm (and the slow judge's injection): their TTS controls, and one Whisper job on the changed
    # turns minilm's audio cascade reads under masked, noise_10, tts_control, silence and injection (the text cells
    # read the ground truth here).
    per_dialogue += 1 + 1
    assert len([k for k in ids if k.startswith("asr/whisper_tiny_en/conditions/")]) == 1
    aggregates = ["shard_index", "audio_accounting", "compute_metrics", "control_metrics", "figures"]
    aggregates += ["guide", "modality_analysis", "modality_figures", "decision_flow", "control_figures", "report"]
    assert len(others) == per_dialogue + n_judge_jobs + len(aggregates)

    slurm = finished_jobs()
    for job_id in {*grouped_ids, *others}:
        assert slurm[job_id]["state"] == "COMPLETED", slurm[job_id]
    assert slurm[grouped_ids.pop()]["comment"].startswith("rule_dialogue_prep")  # the plugin names the group
    if gpu_judge:
        gpu_job = ids["scores/minilm_gpu/shard" + _only_shard(workdir) + ".log"]
        assert "gpu:1" in slurm[gpu_job]["gpus"], slurm[gpu_job]
        cpu_job = ids["scores/minilm/shard" + _only_shard(workdir) + ".log"]
        assert "gpu" not in slurm[cpu_job]["gpus"], slurm[cpu_job]


def _only_shard(workdir: Path) -> str:
    (index,) = (workdir / "results" / "manifests" / "shards").glob("of*/shard*.json")
    return index.stem.removeprefix("shard")


def comparable(table: Path) -> bytes:
    """A score table's bytes without its timing columns (`EFFORT_COLUMNS`: how long each request took)."""
    buffer = io.BytesIO()
    pl.read_parquet(table).drop(EFFORT_COLUMNS, strict=False).write_parquet(buffer)
    return buffer.getvalue()


def test_a_judge_job_stopped_at_its_time_limit_is_retried_and_completes(slurm_run):
    """The slow judge again, from an empty request cache, with `runtime: 1`: SLURM stops its job at one minute
    (SIGTERM, then SIGKILL after KillWait), the profile's `retries` submit it again with the runtime doubled, each
    attempt computes only what the cache does not hold, and the last one completes."""
    workdir, configfile = slurm_run.workdir, slurm_run.configfile
    scores = workdir / "results" / "scores" / SLOW_JUDGE
    uninterrupted = {table: comparable(table) for table in sorted(scores.rglob("*.parquet"))}
    assert len(uninterrupted) == 8  # 4 prompts x (clean + injection), text with the ground truth
    for folder in {table.relative_to(scores).parts[0] for table in uninterrupted}:  # each job's output, shard<k>/
        shutil.rmtree(scores / folder)
    shutil.rmtree(workdir / "results" / "cache" / "judges" / SLOW_JUDGE)
    config = yaml.safe_load(configfile.read_text())
    schedule = config["judges"][SLOW_JUDGE]["schedule"]
    schedule["resources"]["runtime"] = 1  # minutes: SLURM's smallest limit
    schedule["allow_overrun"] = True  # its estimate is over a minute: resumed by retries, knowingly
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    before = set(finished_jobs())

    snakemake(workdir, configfile, *slurm_run.args, "scores", timeout_s=2700)

    slurm = finished_jobs()
    attempts = sorted(
        (job for job in set(slurm) - before if slurm[job]["comment"].startswith(f"rule_judge_{SLOW_JUDGE}")), key=int
    )
    states = [slurm[job]["state"] for job in attempts]
    assert len(states) >= 2 and set(states[:-1]) == {"TIMEOUT"} and states[-1] == "COMPLETED", states
    assert len(states) <= 4, "the profile retries a failed job 3 times"
    stopped = next((workdir / ".snakemake" / "slurm_logs").rglob(f"{attempts[0]}.log")).read_text()
    assert "DUE TO TIME LIMIT" in stopped, stopped[-2000:]
    assert "stopped by SIGTERM" in stopped, "the judge job turned SLURM's SIGTERM into a clean stop"
    stats = json.loads(next((workdir / "logs" / "scores" / SLOW_JUDGE).glob("shard*.requests.json")).read_text())
    # Every request of the last attempt was in the cache (computed by the attempts SLURM stopped) or computed now
    # (the clean original is also the injection cells' safe reference: one request, reused).
    assert (
        stats["requests"] == 104 and stats["cached"] + stats["computed"] + stats["reused"] == stats["distinct_requests"]
    )
    print(f"attempts {states}; the last found {stats['cached']} requests in the cache, computed {stats['computed']}")
    assert {table: comparable(table) for table in uninterrupted} == uninterrupted
