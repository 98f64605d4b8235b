"""GPU slot claims (lalm_judge.workflow.gpu) with stand-in GPU ids: this machine has no GPU, and the claims
only need device ids and lock files, so separate real processes compete for them exactly as judge
jobs do. And the GPU memory a judge needs, as the SLURM constraint of the cards that hold it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lalm_judge.workflow.gpu import (
    GPUS_ENV,
    LOCK_DIR_ENV,
    TRANSFORMERS_MEMORY,
    GpuUnavailable,
    check_gpu_budget,
    claim_gpus,
    gpu_constraint,
    gpu_features,
    job_gpus,
    judge_gpu_memory_gb,
    machine_gpus,
    parse_gpu_listing,
)

# A job: claim `count` GPUs the way workflow_scripts/judge_shard.py does, report what it saw and
# when it held them, keep them for `hold_s`.
JOB = """
import json, os, sys, time
from lalm_judge.workflow.gpu import job_gpus
count, hold_s = int(sys.argv[1]), float(sys.argv[2])
with job_gpus(count) as claimed:
    start = time.monotonic()
    seen = os.environ["CUDA_VISIBLE_DEVICES"]
    time.sleep(hold_s)
    end = time.monotonic()
print(json.dumps({"claimed": claimed, "cuda_visible_devices": seen, "start": start, "end": end}))
"""


def run_jobs(n_jobs: int, gpus: str, lock_dir: Path, *, count: int = 1, hold_s: float = 1.0) -> list[dict]:
    env = {"PATH": "/usr/bin:/bin", GPUS_ENV: gpus, LOCK_DIR_ENV: str(lock_dir)}
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", JOB, str(count), str(hold_s)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(n_jobs)
    ]
    outputs = [job.communicate(timeout=60)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0] * n_jobs
    return [json.loads(out) for out in outputs]


def test_concurrent_jobs_get_distinct_gpus(tmp_path):
    reports = run_jobs(4, "0,1,2,3", tmp_path / "locks", hold_s=1.5)
    claimed = [r["claimed"][0] for r in reports]
    assert sorted(claimed) == ["0", "1", "2", "3"]
    assert [r["cuda_visible_devices"] for r in reports] == claimed
    # They really ran at the same time (each held its GPU while the others held theirs).
    assert max(r["start"] for r in reports) < min(r["end"] for r in reports)


def test_more_jobs_than_gpus_wait_and_never_share(tmp_path):
    reports = run_jobs(3, "5,7", tmp_path / "locks", hold_s=0.6)
    assert {r["claimed"][0] for r in reports} <= {"5", "7"}
    by_gpu: dict[str, list[dict]] = {}
    for report in reports:
        by_gpu.setdefault(report["claimed"][0], []).append(report)
    for holders in by_gpu.values():
        holders.sort(key=lambda r: r["start"])
        for earlier, later in zip(holders, holders[1:], strict=False):
            assert later["start"] >= earlier["end"]
    assert sum(len(h) for h in by_gpu.values()) == 3 and max(len(h) for h in by_gpu.values()) == 2


def test_multi_gpu_jobs_get_disjoint_sets(tmp_path):
    reports = run_jobs(2, "0,1,2,3", tmp_path / "locks", count=2, hold_s=1.0)
    first, second = (set(r["claimed"]) for r in reports)
    assert len(first) == len(second) == 2 and not first & second
    assert {r["cuda_visible_devices"].count(",") for r in reports} == {1}


def test_a_crashed_job_frees_its_gpu(tmp_path):
    lock_dir = tmp_path / "locks"
    crash = (
        "import os\nfrom lalm_judge.workflow.gpu import claim_gpus\n"
        f"with claim_gpus(1, ['0'], lock_dir={str(lock_dir)!r}):\n    os._exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", crash]).returncode == 3
    with claim_gpus(1, ["0"], lock_dir=lock_dir, timeout_s=1) as claimed:
        assert claimed == ["0"]


def test_claim_times_out_naming_the_busy_gpus(tmp_path):
    with claim_gpus(1, ["0"], lock_dir=tmp_path):
        started = time.monotonic()
        busy = claim_gpus(1, ["0"], lock_dir=tmp_path, timeout_s=0.3, poll_s=0.05)
        with pytest.raises(GpuUnavailable, match=r"no 1 free GPU\(s\) among 0 within"), busy:
            pass
        assert 0.3 <= time.monotonic() - started < 5


def test_more_gpus_than_the_machine_has_fails_at_once(tmp_path):
    with (
        pytest.raises(GpuUnavailable, match=f"needs 2 GPU.*has 1.*{GPUS_ENV}"),
        claim_gpus(2, ["0"], lock_dir=tmp_path),
    ):
        pass
    no_gpus = {LOCK_DIR_ENV: str(tmp_path), GPUS_ENV: " , "}
    with pytest.raises(GpuUnavailable, match="none found"), job_gpus(1, environ=no_gpus):
        pass


def test_job_gpus_sets_and_restores_cuda_visible_devices(tmp_path):
    environ = {GPUS_ENV: "2,3", LOCK_DIR_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": "2,3"}
    with job_gpus(1, environ=environ) as claimed:
        assert claimed == ["2"] and environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_no_gpu_and_slurm_jobs_are_left_alone(tmp_path):
    environ = {GPUS_ENV: "0", LOCK_DIR_ENV: str(tmp_path)}
    with job_gpus(0, environ=environ) as claimed:
        assert claimed == [] and "CUDA_VISIBLE_DEVICES" not in environ
    slurm = {"SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "1", LOCK_DIR_ENV: str(tmp_path)}
    with job_gpus(1, environ=slurm) as claimed:
        assert claimed == ["1"] and slurm["CUDA_VISIBLE_DEVICES"] == "1"
    assert not list(tmp_path.iterdir())  # no lock taken under SLURM


def test_machine_gpus_precedence():
    assert machine_gpus({GPUS_ENV: "0, 2", "CUDA_VISIBLE_DEVICES": "1"}) == ["0", "2"]
    assert machine_gpus({"CUDA_VISIBLE_DEVICES": "GPU-8a1b,GPU-77f0"}) == ["GPU-8a1b", "GPU-77f0"]


def test_parse_gpu_listing():
    listing = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1d2c3b4a-0000-1111-2222-333344445555)\n"
        "  MIG 3g.40gb     Device  0: (UUID: MIG-9e8d7c6b-aaaa-bbbb-cccc-ddddeeeeffff)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5a6b7c8d-0000-1111-2222-333344445555)\n"
    )
    assert parse_gpu_listing(listing) == ["0", "1"]
    assert parse_gpu_listing("") == []


def test_a_gpu_budget_below_a_stages_request_is_refused():
    requests = {"judge:qwen": 2, "tts": 1}
    check_gpu_budget(requests, None)  # no budget (SLURM, or no --resources gpu): nothing is lowered
    check_gpu_budget(requests, 2)
    with pytest.raises(GpuUnavailable, match=r"jobs of judge:qwen \(2\) need more GPUs than --resources gpu=1 grants"):
        check_gpu_budget(requests, 1)
    with pytest.raises(GpuUnavailable, match=r"judge:qwen \(2\), tts \(1\) .*at least 2"):
        check_gpu_budget(requests, 0)


def judge(backend="vllm", model="Qwen/Qwen2-Audio-7B-Instruct", batch_size=8, **resources):
    return {
        "backend": backend,
        "model": model,
        "batch_size": batch_size,
        "schedule": {"resources": {"gpu": 1, **resources}},
    }


def test_a_judge_needs_the_gpu_memory_of_its_family_on_its_backend_or_what_it_declares():
    assert judge_gpu_memory_gb(judge()) == 40
    assert judge_gpu_memory_gb(judge(model="meta-llama/Llama-3.1-8B-Instruct")) == 24
    # The transformers backend: the measured peak of its batch, within 90 % of the card.
    assert judge_gpu_memory_gb(judge("transformers", batch_size=32)) == pytest.approx(41.85 / 0.9, abs=0.1)
    assert judge_gpu_memory_gb(judge("transformers", batch_size=20)) == pytest.approx(
        (22.22 + 41.85) / 2 / 0.9, abs=0.1
    )
    assert judge_gpu_memory_gb(judge(gpu_memory_gb=141)) == 141
    assert judge_gpu_memory_gb(judge(gpu=0)) is None and judge_gpu_memory_gb(judge(model="org/unknown")) is None


def test_the_largest_batch_that_fits_a_card_follows_the_measured_peaks():
    # Qwen2-Audio at batch 32 peaked at 41.9 GiB on the H200: not on a 40 GB card, well on an 80 GB one; nothing
    # beyond the largest batch that ran (64: it ran out of memory at 128).
    qwen2_audio = TRANSFORMERS_MEMORY["Qwen2-Audio"]
    assert qwen2_audio.largest_batch(40) < 32 <= qwen2_audio.largest_batch(80) and qwen2_audio.largest_batch(141) == 64
    assert qwen2_audio.largest_batch(16) == 0
    assert (
        8
        <= TRANSFORMERS_MEMORY["Audio Flamingo 3"].largest_batch(24)
        < 32
        == TRANSFORMERS_MEMORY["Audio Flamingo 3"].largest_batch(40)
    )
    assert TRANSFORMERS_MEMORY["Qwen2.5-Omni"].largest_batch(80) == 128


def test_the_constraint_names_the_cards_that_hold_what_a_judge_needs(tmp_path):
    partitions = tmp_path / "partitions.yaml"
    partitions.write_text("partitions: {gpu: {max_gpu: 4}}\ngpu_memory_gb: {a10: 24, a100: 40, l40s: 48, h100: 80}\n")
    features = gpu_features(partitions)
    assert gpu_constraint("j", 40, features) == "a100|l40s|h100"
    assert gpu_constraint("j", 24, features) == "a10|a100|l40s|h100"
    assert gpu_constraint("j", None, features) is None and gpu_constraint("j", 40, {}) is None
    with pytest.raises(GpuUnavailable, match=r"judge j needs a card with 100 GB.*h100 80 GB"):
        gpu_constraint("j", 100, features)
