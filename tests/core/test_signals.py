"""SIGTERM (what SLURM sends at a job's time limit) stops a block cleanly: its cleanup runs, the reason is logged,
the exit status is 143; a call in flight finishes first (a judge job stopped so keeps what it committed:
tests/judging/test_job.py; one stopped at a commit before its time limit: tests/judging/test_cache.py). A real
process and a real signal; the wait is on an event (a file), with a timeout only as a safety net."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from lalm_judge.core.signals import EXIT_STATUS, parse_time_left, slurm_time_left

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


_CALL = """
import sys, time
from pathlib import Path
from lalm_judge.core.signals import check_stop, finishing_call, stop_on_sigterm
ready, finished = Path(sys.argv[1]), Path(sys.argv[2])
with stop_on_sigterm("the test job"):
    with finishing_call():
        ready.write_text("ready")
        time.sleep(1.0)
        finished.write_text("the call finished")
    check_stop()
    finished.write_text("went on after the stop")
"""


def test_sigterm_during_a_call_lets_it_finish_then_stops_at_the_commit(tmp_path):
    ready, finished = tmp_path / "ready", tmp_path / "finished"
    job = subprocess.Popen([sys.executable, "-c", _CALL, str(ready), str(finished)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + WAIT_S
    while not ready.exists():
        assert job.poll() is None and time.monotonic() < deadline, "the call did not start"
        time.sleep(0.02)
    job.send_signal(signal.SIGTERM)
    _, stderr = job.communicate(timeout=WAIT_S)
    assert job.returncode == EXIT_STATUS
    assert finished.read_text() == "the call finished"
    assert "the test job stopped by SIGTERM" in stderr and "after the call in flight finished" in stderr


@pytest.mark.parametrize(
    ("listed", "seconds"),
    [("59:30", 3570.0), ("1:00:00", 3600.0), ("2-03:04:05", 183845.0), ("UNLIMITED", None), ("NOT_SET", None)],
)
def test_slurms_time_left_is_read_in_seconds(listed, seconds):
    assert parse_time_left(listed) == seconds


def test_outside_slurm_a_job_has_no_time_limit():
    assert slurm_time_left({"PATH": "/usr/bin"}) is None
