"""A job that is told to stop (SIGTERM) stops cleanly, keeping what it has committed.

SLURM ends a job at its time limit (and on `scancel` or preemption) with SIGTERM to every process of the job,
then SIGKILL `KillWait` seconds later. Python's default action for SIGTERM ends the process on the spot; under
`stop_on_sigterm` the signal becomes an exception in the main thread instead: the work in flight (a judge job's
backend call) is abandoned, `finally` blocks and context managers run (an open request-cache transaction is rolled
back, so each stored call is either complete or absent), the reason is logged, and the process exits with status
143 (128 + SIGTERM), which Snakemake reports as a failed job. The SLURM profile retries it (`retries`), and a
judge job's retry computes only the requests its request cache does not hold.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Iterator

logger = logging.getLogger(__name__)

EXIT_STATUS = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that no `except Exception` swallows it."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def stop_on_sigterm(what: str) -> Iterator[None]:
    """Run the block with SIGTERM raising `Terminated`; on it, log why `what` stopped and exit with status 143."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except Terminated:
        message = (
            f"{what} stopped by SIGTERM (a SLURM time limit, scancel or preemption): the work in flight is dropped, "
            "what was committed stays, and a rerun or retry continues from there"
        )
        logger.warning(message)
        # Also on the process's own stderr, which SLURM keeps in the job's output when the job log is rewritten.
        print(message, file=sys.__stderr__, flush=True)
        raise SystemExit(EXIT_STATUS) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
