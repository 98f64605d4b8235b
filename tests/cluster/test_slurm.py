"""The workflow on a real single-node SLURM cluster, through snakemake-executor-plugin-slurm and
profiles/slurm: every job runs as a SLURM batch job, a dialogue's ingest and rewrites travel as one group
job, and a GPU judge's request reaches SLURM (the node's GPUs are stand-in devices: this machine has
none, and the judge computes on the CPU). Then three judge jobs are stopped in one more run, each retried by the
profile's `retries` with twice the runtime and completed from its request cache, with score tables equal to those of
the uninterrupted first run, byte for byte, timing columns aside:
- a job with a one-minute time limit stops at a commit before it (it reads its time left from SLURM) or is stopped by
  SLURM at it;
- an endpoint judge (the openai backend against `StandInServer`, tests/support/openai_standin.py: a stdlib server
  standing in for a paid API) and a transformers judge (a tiny random-weight Llama) receive SIGTERM mid-call
  (`scancel --signal=TERM`, what the profile's early warning `--signal=TERM@...` sends): the call in flight finishes
  and is committed, and the retry sends only the requests that were not answered (counted at the server, and in the
  request cache when the stopped attempt ended).

tests/cluster/start_slurm.sh starts munged, slurmctld and slurmd as root (installing the Debian
packages if needed); stop_slurm.sh stops them by their recorded PIDs. The test is skipped where
that cannot run (not root, no apt-get, no package mirror). Nothing here waits on the clock: SLURM's own
limit (minutes, checked by slurmctld every 30 s) stops the job, and the job's work is far longer than a minute.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest
import yaml

from lalm_judge.core.tables import EFFORT_COLUMNS
from lalm_judge.judging.cache import RequestCache
from tests.support.openai_standin import Reply, StandInServer, serving
from tests.support.workflow import ROOT, prepare_workdir, snakemake, write_config, write_corpus  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.workflow, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SLURM_PROFILE = ROOT / "profiles" / "slurm"
DIALOGUE = "demo_hiking"
CANNOT_RUN = 2  # start_slurm.sh's exit status for "not possible on this machine"
# A judge with more work than a one-minute limit allows, whatever the machine's speed: an endpoint judge whose answers
# each take `SLOW_ANSWER_S` at a stand-in server (`slow_stand_in`), one at a time. slurmctld checks limits every 30 s,
# so the stop lands 60-90 s after the job starts, later on a loaded machine, and the job's 13 samples (the clean
# original and 2 categories x 2 severities x 3 turns) x 4 prompts x (clean + injection) = 104 requests take 130 s of
# waiting after its start-up: the job is always stopped mid-work, by its own clock at a commit or by SLURM. The wait
# costs no CPU (a real model's answers, as in a judge of SmolLM2-135M, would spend minutes of the test machine's two
# cores, and on a fast machine could finish before the stop). The profile's three retries give it 1 + 2 + 4 + 8
# minutes, each attempt resuming from the request cache.
SLOW_JUDGE = "slow_endpoint_slurm"
SLOW_ANSWER_S = 1.25


def slow_judge_entry(server: StandInServer) -> dict:
    # One request at a time: each answer is in the request cache as soon as it arrives.
    prompts = ["basic", "cot", "fewshot", "rubric"]
    resources = {"mem_mb": 1000, "runtime": 60}  # uninterrupted, however loaded the machine
    return stand_in_judge_entry(server, concurrency=1, max_new_tokens=48, prompts=prompts, resources=resources)


# Judges stopped mid-call by SIGTERM: 13 samples x one prompt x (clean + injection) = 26 requests each, long enough (a
# second per answer at the endpoint, two at a time; 512 new tokens of a tiny random Llama on one CPU thread, one
# request per call: more than half a second each on a quiet machine) that the signal, sent once a few answers are
# committed, lands mid-work. The Llama's random weights write only blank lines, an answer the request cache does not
# keep: the calibrated prompt's P(safe) makes each of its answers one the cache keeps.
ENDPOINT_JUDGE = "endpoint_slurm"
TINY_JUDGE = "tiny_llama_slurm"
SIGNALLED = (ENDPOINT_JUDGE, TINY_JUDGE)
STOP_AFTER = 4  # committed answers before the SIGTERM
CONDITIONS = ["clean", "injection"]
RESOURCES = {"mem_mb": 1000, "runtime": 10}
TINY_JUDGE_ENTRY = {
    "backend": "transformers",
    "model": "models/tiny_llama",
    "modalities": ["text"],
    "batch_size": 1,  # a request's answer does not depend on what it is batched with: equal tables after a stop
    "generation": {"max_new_tokens": 512},
    "options": {"num_threads": 1, "device": "cpu"},
    "weak": "random weights: the transformers code path only",
    "schedule": {"prompts": ["calibrated"], "conditions": CONDITIONS, "resources": RESOURCES},
}


def stand_in_judge_entry(
    server: StandInServer, *, concurrency: int, max_new_tokens: int, prompts: list[str], resources: dict
) -> dict:
    """An endpoint judge (the openai backend) of `server`'s answers."""
    return {
        "backend": "openai",
        "model": "stand-in",
        "modalities": ["text"],
        "generation": {"max_new_tokens": max_new_tokens},
        "options": {"base_url": server.base_url, "api_key_env": None, "concurrency": concurrency, "max_retries": 0},
        "weak": "a stand-in server: the endpoint code path only",
        "schedule": {"prompts": prompts, "conditions": CONDITIONS, "resources": resources},
    }


def endpoint_judge_entry(server: StandInServer) -> dict:
    return stand_in_judge_entry(server, concurrency=2, max_new_tokens=32, prompts=["basic"], resources=RESOURCES)


def stand_in_answer(body: dict) -> tuple[str]:
    """The same answer for the same request, whichever attempt asks: a score from a hash of the messages."""
    digest = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()
    return (f"SAFETY_SCORE: {int(digest[:4], 16) % 11 / 10:.1f}",)


def answering_after(delay_s: float):
    server = StandInServer(stand_in_answer)
    server.script = lambda answer, nth: Reply(answer, delay_s=delay_s)
    with serving(server):
        yield server


@pytest.fixture(scope="module")
def stand_in():
    """The signalled endpoint judge's server (its answers are counted: one server per judge)."""
    yield from answering_after(1.0)


@pytest.fixture(scope="module")
def slow_stand_in():
    yield from answering_after(SLOW_ANSWER_S)


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
def slurm_run(slurm_cluster, stand_in, slow_stand_in, tmp_path_factory) -> SlurmRun:
    """The test workflow run once through SLURM, with the slow, endpoint and tiny judges besides the embedding
    judges."""
    from bench.models import build_tiny_llama

    tmp_path = tmp_path_factory.mktemp("slurm")
    workdir = tmp_path / "run"
    prepare_workdir(workdir, with_tiny_lalm=False)
    build_tiny_llama(workdir / TINY_JUDGE_ENTRY["model"])
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
    config["judges"][SLOW_JUDGE] = slow_judge_entry(slow_stand_in)
    config["judges"][ENDPOINT_JUDGE] = endpoint_judge_entry(stand_in)
    config["judges"][TINY_JUDGE] = TINY_JUDGE_ENTRY
    config["evaluation"]["judges"] += [SLOW_JUDGE, *SIGNALLED]
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
    # One per judge and shard (one shard): minilm (text-gt and audio), minilm_gpu, the slow, endpoint and tiny judges.
    n_judge_jobs = 1 + gpu_judge + 1 + len(SIGNALLED)
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


@dataclass
class Stopped:
    """A judge's first attempt in the interrupted run: its SLURM job, whether the watcher signalled it, and what was
    committed (the request cache's count) and answered (the stand-in's count) when it ended."""

    job_id: str
    signalled: bool = False
    committed: int | None = None
    answered: int | None = None


@dataclass
class InterruptedRun:
    attempts: dict[str, list[str]]  # judge -> its SLURM jobs in order
    states: dict[str, str]  # SLURM job -> final state
    stopped: dict[str, Stopped]
    uninterrupted: dict[Path, bytes]
    computed_before: dict[str, int]  # judge -> the distinct requests its uninterrupted job computed
    answered_before: int  # the stand-in's count before the run
    workdir: Path
    watcher_errors: list[str] = field(default_factory=list)


def judge_jobs(before: set[str]) -> dict[str, dict[str, str]]:
    return {job: info for job, info in finished_jobs().items() if job not in before}


def watch_and_signal(run: InterruptedRun, before: set[str], stand_in: StandInServer, done: threading.Event) -> None:
    """Send SIGTERM (`scancel --signal=TERM`: to the job's steps, as the profile's early warning does) to the first
    attempt of each signalled judge once it has committed `STOP_AFTER` answers, and note what was committed and
    answered when that attempt ended."""
    caches = {judge: RequestCache(run.workdir / "results" / "cache" / "judges" / judge) for judge in SIGNALLED}
    while not done.is_set():
        try:
            jobs = judge_jobs(before)
        except subprocess.SubprocessError as err:
            run.watcher_errors.append(str(err))
            time.sleep(0.5)
            continue
        for judge in SIGNALLED:
            mine = sorted((j for j, info in jobs.items() if info["comment"].startswith(f"rule_judge_{judge}")), key=int)
            if not mine:
                continue
            stopped = run.stopped.setdefault(judge, Stopped(mine[0]))
            state = jobs[stopped.job_id]["state"]
            if state == "RUNNING" and not stopped.signalled and caches[judge].count() >= STOP_AFTER:
                subprocess.run(["scancel", "--signal=TERM", stopped.job_id], check=True, timeout=30)
                stopped.signalled = True
            elif state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") and stopped.committed is None:
                stopped.committed = caches[judge].count()
                stopped.answered = stand_in.total - run.answered_before
        time.sleep(0.3)


@pytest.fixture(scope="module")
def interrupted_run(slurm_run, stand_in) -> InterruptedRun:
    """The slow, endpoint and tiny judges again, from empty request caches, in one run: the slow judge with a one-
    minute time limit, the other two signalled mid-call (`watch_and_signal`)."""
    workdir, configfile = slurm_run.workdir, slurm_run.configfile
    uninterrupted, computed_before = {}, {}
    for judge in (SLOW_JUDGE, *SIGNALLED):
        computed_before[judge] = last_counts(workdir, judge)["computed"]
        scores = workdir / "results" / "scores" / judge
        uninterrupted.update({table: comparable(table) for table in sorted(scores.rglob("*.parquet"))})
        for folder in {table.relative_to(scores).parts[0] for table in scores.rglob("*.parquet")}:  # shard<k>/
            shutil.rmtree(scores / folder)
        shutil.rmtree(workdir / "results" / "cache" / "judges" / judge)
    config = yaml.safe_load(configfile.read_text())
    schedule = config["judges"][SLOW_JUDGE]["schedule"]
    schedule["resources"]["runtime"] = 1  # minutes: SLURM's smallest limit
    schedule["allow_overrun"] = True  # its estimate is over a minute: resumed by retries, knowingly
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    before = set(finished_jobs())
    run = InterruptedRun({}, {}, {}, uninterrupted, computed_before, stand_in.total, workdir)
    done = threading.Event()
    watcher = threading.Thread(target=watch_and_signal, args=(run, before, stand_in, done), daemon=True)
    watcher.start()
    try:
        snakemake(workdir, configfile, *slurm_run.args, "scores", timeout_s=2700)
    finally:
        done.set()
        watcher.join(timeout=60)
    jobs = judge_jobs(before)
    for judge in (SLOW_JUDGE, *SIGNALLED):
        run.attempts[judge] = sorted(
            (j for j, info in jobs.items() if info["comment"].startswith(f"rule_judge_{judge}")), key=int
        )
    run.states = {job: info["state"] for job, info in jobs.items()}
    return run


def slurm_log(workdir: Path, job_id: str) -> str:
    """SLURM's output of a job (kept for failed jobs; empty for one whose log was removed)."""
    found = next((workdir / ".snakemake" / "slurm_logs").rglob(f"{job_id}.log"), None)
    return found.read_text() if found is not None else ""


def last_counts(workdir: Path, judge: str) -> dict:
    return json.loads(next((workdir / "logs" / "scores" / judge).glob("shard*.requests.json")).read_text())


def test_a_judge_job_that_reaches_its_time_limit_stops_and_is_retried_until_it_completes(interrupted_run):
    """The slow judge with `runtime: 1`: each attempt stops at a commit before its limit (it reads its time left
    from SLURM), or SLURM stops it at the limit (SIGTERM, then SIGKILL after KillWait); the profile's `retries`
    submit it again with twice the runtime, each attempt computes only what the cache does not hold, and it
    completes."""
    run = interrupted_run
    states = [run.states[job] for job in run.attempts[SLOW_JUDGE]]
    assert len(states) >= 2 and set(states[:-1]) <= {"TIMEOUT", "FAILED"} and states[-1] == "COMPLETED", states
    assert len(states) <= 4, "the profile retries a failed job 3 times"
    for job in run.attempts[SLOW_JUDGE][:-1]:
        # Stopped by itself at a commit, by the early warning's SIGTERM, or by SLURM at the limit.
        log = slurm_log(run.workdir, job)
        assert "stopped at a commit" in log or "stopped by SIGTERM" in log, log[-2000:]
    stats = last_counts(run.workdir, SLOW_JUDGE)
    # Every request of the last attempt was in the cache (computed by the attempts stopped) or computed now (the
    # clean original is also the injection cells' safe reference: one request, reused).
    assert (
        stats["requests"] == 104 and stats["cached"] + stats["computed"] + stats["reused"] == stats["distinct_requests"]
    )
    print(f"attempts {states}; the last found {stats['cached']} requests in the cache, computed {stats['computed']}")


@pytest.mark.parametrize("judge", SIGNALLED)
def test_a_judge_job_signalled_mid_call_keeps_what_it_answered_and_its_retry_sends_only_the_rest(
    interrupted_run, stand_in, judge
):
    run = interrupted_run
    stopped = run.stopped[judge]
    first, *retries = run.attempts[judge]
    log = slurm_log(run.workdir, first)
    # A squeue call of the watcher that timed out (slurmctld answers slowly on a loaded machine: run.watcher_errors)
    # is tried again; what the watcher saw is checked against the job logs and the request cache below.
    assert stopped.signalled and stopped.committed is not None, (stopped, run.watcher_errors, log[-3000:])
    assert first == stopped.job_id and run.states[first] == "FAILED", (run.states[first], log[-3000:])
    assert [run.states[j] for j in retries] == ["COMPLETED"]
    assert "after the call in flight finished" in log or "stopped by SIGTERM" in log, log[-2000:]
    stats = last_counts(run.workdir, judge)
    # What the stopped attempt committed is what the retry found; the retry computed only the rest of what the
    # uninterrupted job computed (its distinct requests; `cached` counts a request two passes share in each).
    assert STOP_AFTER <= stopped.committed < run.computed_before[judge]
    assert stats["computed"] == run.computed_before[judge] - stopped.committed
    assert stats["cached"] + stats["computed"] + stats["reused"] == stats["distinct_requests"]
    if judge == ENDPOINT_JUDGE:
        # Counted at the endpoint: every request the stopped attempt sent was answered and committed (the answers in
        # flight arrived within the grace), and over both attempts each request was sent once.
        assert stopped.answered == stopped.committed
        assert stand_in.total - run.answered_before == run.computed_before[judge]
    print(f"{judge}: the stopped attempt committed {stopped.committed}, the retry computed {stats['computed']}")


def test_the_stopped_judges_score_tables_equal_the_uninterrupted_runs(interrupted_run):
    uninterrupted = interrupted_run.uninterrupted
    assert len(uninterrupted) == 8 + 2 + 2  # slow: 4 prompts x 2 conditions; endpoint and tiny: 1 x 2
    assert {table: comparable(table) for table in uninterrupted} == uninterrupted
