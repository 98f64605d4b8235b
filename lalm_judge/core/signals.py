"""A job that is told to stop (SIGTERM) or that is running out of time stops cleanly at a commit, keeping its work.

SLURM ends a job at its time limit (and on `scancel` or preemption) with SIGTERM to every process of the job,
then SIGKILL `KillWait` seconds later (30 s by default); the SLURM profile also asks for an early SIGTERM a few
minutes before the limit (`--signal`, rules/common.smk `get_judge_slurm_extra`), time enough to finish one backend
call. Python's default action for SIGTERM ends the process on the spot; under `stop_on_sigterm` the job instead:
- inside `finishing_call` (a judge job's backend call, `judging.runner`): lets the call finish and commit its
  answers, and stops at that commit (`StopAtCommit`); a second SIGTERM drops the call (`Terminated`);
- elsewhere (planning, loading the model, writing its tables): stops at once (`Terminated`);
- before each call (`check_stop`): stops at that commit when a SIGTERM came, or when the call would end past the
  job's time limit (SLURM's time left when the job started, `slurm_time_left`, less `DEADLINE_MARGIN_S`): a job
  that cannot finish in its limit stops cleanly instead of being killed.
Either way `finally` blocks and context managers run (an open request-cache transaction is rolled back, so each
stored answer is either complete or absent), the reason is logged, and the process exits with status 143
(128 + SIGTERM), which Snakemake reports as a failed job. The SLURM profile retries it (`retries`) with twice the
runtime, and a judge job's retry computes only the requests its request cache does not hold.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

logger = logging.getLogger(__name__)

EXIT_STATUS = 128 + signal.SIGTERM
# Seconds of work between two commits of a judge job at most (a vLLM call at the job's measured rate,
# `judging.runner.CallSizes`): what a SIGKILL may lose, and what the early warning must leave time for.
CALL_S = 180.0
# Kept free before the job's time limit (at most a quarter of its time): writing its tables and leaving after the
# last commit.
DEADLINE_MARGIN_S = 60.0
# How long answers already in flight when the job is told to stop may still arrive (an endpoint's requests): under
# SLURM's default KillWait of 30 s.
STOP_GRACE_S = 10.0
# SLURM's time-left format: [days-][hours:]minutes:seconds.
_TIME_LEFT = re.compile(r"^(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+)$")


SIGTERM_DURING_CALL = (
    "by SIGTERM (a SLURM time limit or its early warning, scancel or preemption) after the call in flight finished"
)


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that no `except Exception` swallows it."""


class StopAtCommit(BaseException):
    """The job stops at a commit: a SIGTERM came during a call, or the next call would end past its time limit."""


@dataclass
class _StopState:
    """The process's stop: why it was asked to stop (None: it was not), whether a call is finishing, and the
    monotonic time by which the job must have stopped (None: no limit known)."""

    reason: str | None = None
    in_call: int = 0
    deadline: float | None = None


_STATE = _StopState()


def _on_sigterm(signum: int, frame: object) -> None:
    if _STATE.in_call and _STATE.reason is None:
        _STATE.reason = SIGTERM_DURING_CALL
        logger.warning("SIGTERM: the call in flight finishes and is committed, then the job stops")
        return
    raise Terminated(signum)


def stop_reason() -> str | None:
    """Why the job was asked to stop (a SIGTERM during a call), or None."""
    return _STATE.reason


def seconds_left() -> float | None:
    """Seconds until the job must have stopped (its time limit less the margin), or None without a limit."""
    return None if _STATE.deadline is None else _STATE.deadline - time.monotonic()


def check_stop(next_call_s: float = 0.0) -> None:
    """Raise `StopAtCommit` when the job was asked to stop, or when a call of `next_call_s` seconds would end past
    its time limit; called at each commit, before the next call."""
    if _STATE.reason is not None:
        raise StopAtCommit(_STATE.reason)
    left = seconds_left()
    if left is not None and next_call_s > left:
        raise StopAtCommit(
            f"the next call (about {next_call_s:.0f} s of work at the measured rate) would end past the job's time "
            f"limit ({max(left, 0.0):.0f} s left before the margin kept for writing its tables)"
        )


@contextlib.contextmanager
def finishing_call() -> Iterator[None]:
    """A backend call that a SIGTERM lets finish: the signal is noted (`stop_reason`) and the job stops at the commit
    after the call (`check_stop`); a second SIGTERM stops the job at once."""
    _STATE.in_call += 1
    try:
        yield
    finally:
        _STATE.in_call -= 1


def parse_time_left(text: str) -> float | None:
    """Seconds of SLURM's `%L` (time left: `[days-][hours:]minutes:seconds`), None for UNLIMITED, NOT_SET, INVALID."""
    match = _TIME_LEFT.match(text.strip())
    if match is None:
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def slurm_time_left(environ: dict[str, str] | None = None) -> float | None:
    """Seconds until this SLURM job's time limit (`squeue -j $SLURM_JOB_ID -o %L`); None outside SLURM, for a job
    without a limit, or when squeue does not answer (logged: the job then relies on SLURM's signals)."""
    environ = os.environ if environ is None else environ
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    squeue = shutil.which("squeue")
    if squeue is None:
        logger.warning("SLURM job %s: no squeue on this node, so the job cannot see its time limit", job_id)
        return None
    try:
        listed = subprocess.run(
            [squeue, "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        logger.warning("SLURM job %s: squeue did not give its time left (%s)", job_id, err)
        return None
    return parse_time_left(listed.strip().splitlines()[0]) if listed.strip() else None


@contextlib.contextmanager
def stop_on_sigterm(what: str, time_left_s: float | None = None) -> Iterator[None]:
    """Run the block as a job that stops cleanly (module docstring); on a stop, log why `what` stopped and exit
    with status 143. `time_left_s`: seconds until the job's time limit (default: SLURM's, `slurm_time_left`)."""
    time_left_s = slurm_time_left() if time_left_s is None else time_left_s
    _STATE.reason, _STATE.in_call = None, 0
    # A short job (a test's minute) keeps a quarter of its time instead of the whole margin.
    margin_s = None if time_left_s is None else min(DEADLINE_MARGIN_S, time_left_s / 4)
    _STATE.deadline = None if time_left_s is None else time.monotonic() + time_left_s - margin_s
    if time_left_s is not None:
        logger.info("%s: %.0f s until the job's time limit; it stops at a commit before then", what, time_left_s)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    except (Terminated, StopAtCommit) as stop:
        if isinstance(stop, Terminated):
            how = "stopped by SIGTERM (a SLURM time limit, scancel or preemption): the work in flight is dropped"
        elif stop.args[0] == SIGTERM_DURING_CALL:
            how = f"stopped {SIGTERM_DURING_CALL}"
        else:
            how = f"stopped at a commit: {stop.args[0]}"
        message = f"{what} {how}; what was committed stays, and a rerun or retry continues from there"
        logger.warning(message)
        # Also on the process's own stderr, which SLURM keeps in the job's output when the job log is rewritten.
        print(message, file=sys.__stderr__, flush=True)
        raise SystemExit(EXIT_STATUS) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        _STATE.reason, _STATE.in_call, _STATE.deadline = None, 0, None
