"""SIGTERM (what SLURM sends at a job's time limit) stops a block cleanly: its cleanup runs, the reason is logged,
the exit status is 143 (a judge job stopped so keeps what it committed: tests/judging/test_job.py). A real process
and a real signal; the wait is on an event (a file), with a timeout only as a safety net."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from lalm_judge.core.signals import EXIT_STATUS

WAIT_S = 120

_BLOCK = """
import sys, time
from pathlib import Path
from lalm_judge.core.signals import stop_on_sigterm
ready, cleaned = Path(sys.argv[1]), Path(sys.argv[2])
with stop_on_sigterm("the test block"):
    try:
        ready.write_text("ready")
        while True:
            time.sleep(0.05)
    finally:
        cleaned.write_text("cleaned up")
"""


def test_sigterm_runs_the_cleanup_and_exits_143(tmp_path):
    ready, cleaned = tmp_path / "ready", tmp_path / "cleaned"
    block = subprocess.Popen(
        [sys.executable, "-c", _BLOCK, str(ready), str(cleaned)], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + WAIT_S
    while not ready.exists():
        assert block.poll() is None and time.monotonic() < deadline, "the block did not start"
        time.sleep(0.02)
    block.send_signal(signal.SIGTERM)
    _, stderr = block.communicate(timeout=WAIT_S)
    assert block.returncode == EXIT_STATUS == 143
    assert cleaned.read_text() == "cleaned up"
    assert "the test block stopped by SIGTERM" in stderr
