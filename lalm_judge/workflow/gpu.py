"""GPU slots for judge jobs on one machine: which GPUs a job may use, chosen without a scheduler.

Snakemake's local executor counts GPUs (`--resources gpu=N`) but does not say which GPU a job
gets. `job_gpus(n)` claims `n` GPUs for the duration of a job by holding an exclusive `flock` on
one lock file per GPU and sets CUDA_VISIBLE_DEVICES to them. The kernel drops the locks when the
process ends, so a crashed job never leaves a GPU claimed. Under SLURM (SLURM_JOB_ID is set) the
scheduler already sets CUDA_VISIBLE_DEVICES and nothing is changed.

The GPUs of the machine, in order of precedence: LALM_JUDGE_GPUS (comma-separated device ids or
UUIDs, the same tokens CUDA_VISIBLE_DEVICES takes), CUDA_VISIBLE_DEVICES as the workflow was
started with (a restriction the user chose), or the indexes `nvidia-smi -L` lists.
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
from pathlib import Path
from typing import IO

GPUS_ENV = "LALM_JUDGE_GPUS"
LOCK_DIR_ENV = "LALM_JUDGE_GPU_LOCK_DIR"
DEFAULT_TIMEOUT_S = 3600.0


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
