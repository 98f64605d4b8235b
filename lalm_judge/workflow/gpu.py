"""GPU slots for judge jobs on one machine: which GPUs a job may use, chosen without a scheduler.

Snakemake's local executor counts GPUs (`--resources gpu=N`) but does not say which GPU a job
gets. `job_gpus(n)` claims `n` GPUs for the duration of a job by holding an exclusive `flock` on
one lock file per GPU and sets CUDA_VISIBLE_DEVICES to them. The kernel drops the locks when the
process ends, so a crashed job never leaves a GPU claimed. Under SLURM (SLURM_JOB_ID is set) the
scheduler already sets CUDA_VISIBLE_DEVICES and nothing is changed.

The GPUs of the machine, in order of precedence: LALM_JUDGE_GPUS (comma-separated device ids or
UUIDs, the same tokens CUDA_VISIBLE_DEVICES takes), CUDA_VISIBLE_DEVICES as the workflow was
started with (a restriction the user chose), or the indexes `nvidia-smi -L` lists.

On a cluster, a judge's jobs go to cards with the memory they need: `judge_gpu_memory_gb` (the judge's
`schedule.resources.gpu_memory_gb`, else what its model family needs on its backend: `VLLM_GPU_MEMORY_GB`, or for the
transformers backend the measured memory of its batch, `TRANSFORMERS_MEMORY`), and `gpu_constraint` turns it into a
SLURM constraint on the node features of the cards that hold it (the `gpu_memory_gb` table of
profiles/slurm/partitions.yaml, feature -> GB per card).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lalm_judge.core.files import read_yaml
from lalm_judge.judging.backends.capabilities import family_of

GPUS_ENV = "LALM_JUDGE_GPUS"
LOCK_DIR_ENV = "LALM_JUDGE_GPU_LOCK_DIR"
DEFAULT_TIMEOUT_S = 3600.0
# A vLLM judge's card (docs/cluster.md, "GPU memory per judge"): bfloat16 weights of 15-18 GiB, and vLLM takes
# `gpu_memory_utilization` (90 %) of the card for them and the KV cache of its context length; a 7-10 B audio model
# needs a 40 GB card, Llama-3.1-8B (text, 128 KiB of KV cache per token) a 24 GB one.
VLLM_GPU_MEMORY_GB = {
    "Qwen2-Audio": 40,
    "Audio Flamingo 3": 40,
    "Qwen2.5-Omni": 40,
    "MiniCPM-o": 40,
    "MERaLiON-2": 40,
    "Llama-3.1-Instruct": 24,
}
# Of a card's memory, what a job may plan to use (the rest: the CUDA context, fragmentation, longer requests).
USABLE_SHARE = 0.9


@dataclass(frozen=True)
class BatchMemory:
    """Peak GPU memory (GiB) of the transformers backend by batch size, measured (`points`: (batch, peak) pairs in
    increasing order); between two measured batches the line through them, beyond the largest its last segment's."""

    points: tuple[tuple[int, float], ...]

    def peak_gib(self, batch_size: int) -> float:
        pairs = list(zip(self.points, self.points[1:]))
        (b0, m0), (b1, m1) = next(((a, b) for a, b in pairs if batch_size <= b[0]), pairs[-1])
        return m0 + (m1 - m0) * (batch_size - b0) / (b1 - b0)

    def largest_batch(self, card_gb: float) -> int:
        """The largest batch, up to the largest measured one, whose peak fits `USABLE_SHARE` of a card (0: none)."""
        largest = self.points[-1][0]
        return next((b for b in range(largest, 0, -1) if self.peak_gib(b) <= card_gb * USABLE_SHARE), 0)


# Measured on one H200 (2026-12-04, `python -m bench.gpu_judges --batch-sizes 1 8 32`, then `64 128`; docs/benchmarks.md
# "GPU judges"): full-size random-weight models in bfloat16, about 1,000 input tokens (30 s windows of the demo's audio)
# and 64 generated tokens per request. Qwen2-Audio ran out of memory at batch 128 (over 139 GiB). Longer answers (the
# paper's 512 new tokens) hold more KV cache: the 10 % of the card left over covers some of it,
# `schedule.resources.gpu_memory_gb` the rest.
TRANSFORMERS_MEMORY = {
    "Qwen2-Audio": BatchMemory(((1, 16.49), (8, 22.22), (32, 41.85), (64, 68.03))),
    "Audio Flamingo 3": BatchMemory(((1, 15.70), (8, 17.05), (32, 21.77))),
    "Qwen2.5-Omni": BatchMemory(((1, 17.10), (8, 19.57), (32, 28.09), (64, 39.45), (128, 62.18))),
}


class GpuUnavailable(RuntimeError):
    """A job asked for more GPUs than the machine has, or none became free in time."""


def check_gpu_budget(requests: Mapping[str, int], granted: object | None) -> None:
    """Refuse a run whose GPU stages ask for more GPUs than a global `--resources gpu=N` grants.

    `requests` maps a stage ('judge:<name>', 'tts', 'asr:<model>') to the GPUs one of its jobs asks for;
    `granted` is Snakemake's global `gpu` resource (its value, or an object with `.value`), None when none is
    set. Snakemake lowers every job's `gpu` to that amount, so such a job would start with fewer GPUs than it
    needs (with none, on whatever device CUDA picks).
    """
    granted = getattr(granted, "value", granted)
    if granted is None:
        return
    granted = int(granted)
    short = {stage: gpus for stage, gpus in requests.items() if gpus > granted}
    if short:
        listed = ", ".join(f"{stage} ({gpus})" for stage, gpus in sorted(short.items()))
        raise GpuUnavailable(
            f"jobs of {listed} need more GPUs than --resources gpu={granted} grants; on a GPU machine pass "
            f"--resources gpu=<its number of GPUs> (at least {max(short.values())}); on SLURM set no gpu resource"
        )


def _split_ids(value: str) -> list[str]:
    return [token.strip() for token in value.split(",") if token.strip()]


def parse_gpu_listing(listing: str) -> list[str]:
    """GPU indexes from `nvidia-smi -L` output ('GPU 0: NVIDIA H100 ... (UUID: GPU-...)' lines)."""
    return re.findall(r"^GPU (\d+):", listing, flags=re.MULTILINE)


def nvidia_smi_gpus() -> list[str]:
    """Indexes of the GPUs `nvidia-smi -L` lists; none when the tool is absent or fails."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return []
    try:
        listing = subprocess.run([executable, "-L"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_gpu_listing(listing.stdout)


def machine_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """Device ids this machine's judge jobs share (see the module docstring for the precedence)."""
    environ = os.environ if environ is None else environ
    for variable in (GPUS_ENV, "CUDA_VISIBLE_DEVICES"):
        if environ.get(variable, "").strip():
            return _split_ids(environ[variable])
    return nvidia_smi_gpus()


def default_lock_dir(environ: Mapping[str, str] | None = None) -> Path:
    """One folder per machine and user, so separate workflow runs share the GPUs without overlap."""
    environ = os.environ if environ is None else environ
    if environ.get(LOCK_DIR_ENV):
        return Path(environ[LOCK_DIR_ENV])
    return Path(tempfile.gettempdir()) / f"lalm_judge_gpu_slots_{os.getuid()}"


def _lock_path(lock_dir: Path, gpu: str) -> Path:
    return lock_dir / f"gpu_{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock"


def _try_lock(path: Path) -> IO[str] | None:
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the claim's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


@contextlib.contextmanager
def claim_gpus(
    count: int,
    gpus: Sequence[str],
    *,
    lock_dir: str | Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float = 0.2,
) -> Iterator[list[str]]:
    """Hold `count` of `gpus` exclusively until the block ends; yields the claimed device ids.

    Waits (polling every `poll_s`) while other processes hold them; raises GpuUnavailable when
    `count` exceeds `gpus` or nothing frees up within `timeout_s`.
    """
    if count < 1:
        raise ValueError(f"claim_gpus needs count >= 1, got {count}")
    if count > len(gpus):
        raise GpuUnavailable(
            f"a job needs {count} GPU(s) but this machine has {len(gpus)} ({', '.join(gpus) or 'none found'}); "
            f"set {GPUS_ENV} to the device ids to use, or lower the judge's resources.gpu"
        )
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        held: list[tuple[str, IO[str]]] = []
        for gpu in gpus:
            handle = _try_lock(_lock_path(lock_dir, gpu))
            if handle is not None:
                held.append((gpu, handle))
                if len(held) == count:
                    break
        if len(held) == count:
            break
        # Partial claims are given back at once, so two jobs never wait on each other's halves.
        for _, handle in held:
            handle.close()
        if time.monotonic() >= deadline:
            raise GpuUnavailable(
                f"no {count} free GPU(s) among {', '.join(gpus)} within {timeout_s:.0f} s "
                f"(locks in {lock_dir}); is --resources gpu larger than the GPUs in {GPUS_ENV}?"
            )
        time.sleep(poll_s)
    try:
        yield [gpu for gpu, _ in held]
    finally:
        for _, handle in held:
            handle.close()


@contextlib.contextmanager
def job_gpus(count: int, *, environ: MutableMapping[str, str] | None = None) -> Iterator[list[str]]:
    """CUDA_VISIBLE_DEVICES for a job that declared `count` GPUs; yields the device ids it sees.

    `count` 0: nothing changes, yields []. Under SLURM: the scheduler's assignment is kept.
    Otherwise the GPUs are claimed (claim_gpus) and CUDA_VISIBLE_DEVICES is set for the block.
    """
    environ = os.environ if environ is None else environ
    if count <= 0:
        yield []
        return
    if environ.get("SLURM_JOB_ID"):
        yield _split_ids(environ.get("CUDA_VISIBLE_DEVICES", ""))
        return
    with claim_gpus(count, machine_gpus(environ), lock_dir=default_lock_dir(environ)) as claimed:
        previous = environ.get("CUDA_VISIBLE_DEVICES")
        environ["CUDA_VISIBLE_DEVICES"] = ",".join(claimed)
        try:
            yield claimed
        finally:
            if previous is None:
                environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                environ["CUDA_VISIBLE_DEVICES"] = previous


def judge_gpu_memory_gb(entry: Mapping[str, Any]) -> float | None:
    """GPU memory (GB per card) one job of a judge needs: its `schedule.resources.gpu_memory_gb`, else what its model
    family needs on its backend (module docstring); None for a judge without GPUs or without a known need."""
    resources = entry["schedule"]["resources"]
    if not resources.get("gpu"):
        return None
    if resources.get("gpu_memory_gb"):
        return float(resources["gpu_memory_gb"])
    family = family_of(entry["model"])
    if family is None:
        return None
    if entry["backend"] == "vllm":
        return VLLM_GPU_MEMORY_GB.get(family.name)
    memory = TRANSFORMERS_MEMORY.get(family.name) if entry["backend"] == "transformers" else None
    return None if memory is None else round(memory.peak_gib(int(entry["batch_size"])) / USABLE_SHARE, 1)


def gpu_features(partitions_file: Path) -> dict[str, float]:
    """Node feature -> memory (GB) of each GPU model of the cluster: the `gpu_memory_gb` table of the SLURM profile's
    partition file (empty without the file or the table)."""
    if not partitions_file.is_file():
        return {}
    table = (read_yaml(partitions_file) or {}).get("gpu_memory_gb") or {}
    return {str(feature): float(gb) for feature, gb in table.items()}


def gpu_constraint(judge: str, need_gb: float | None, features: Mapping[str, float]) -> str | None:
    """The SLURM constraint (`--constraint`, node features joined by `|`) of the cards with at least `need_gb`;
    None when nothing is needed or the cluster lists no GPU models. A need no listed card meets is an error naming
    the judge."""
    if need_gb is None or not features:
        return None
    fitting = [feature for feature, gb in features.items() if gb >= need_gb]
    if not fitting:
        listed = ", ".join(f"{feature} {gb:g} GB" for feature, gb in features.items())
        raise GpuUnavailable(
            f"judge {judge} needs a card with {need_gb:g} GB, and no GPU model of profiles/slurm/partitions.yaml "
            f"(gpu_memory_gb: {listed}) has that much; add the cards that do, lower the judge's batch_size, or set "
            f"judges.{judge}.schedule.resources.gpu_memory_gb"
        )
    return "|".join(sorted(fitting, key=lambda feature: (features[feature], feature)))
