"""The test suite's count of its end-to-end workflow runs (`bench.test_durations --runs`, docs/benchmarks.md "The
test suite"), on the shared finished run of tests/config/test.yaml: its run is counted with every job it finished,
and a dry run of the same workflow is not."""

from __future__ import annotations

import shutil
import subprocess

from bench.test_durations import workflow_runs
from tests.support.workflow import scheduled_jobs, snakemake


def test_a_finished_run_counts_with_its_jobs_and_a_dry_run_does_not(finished_run, tmp_path):
    workdir, configfile = finished_run
    copied = tmp_path / "run"
    shutil.copytree(workdir, copied, symlinks=True)
    logs = sorted((copied / ".snakemake" / "log").glob("*.snakemake.log"))
    runs, jobs = workflow_runs([copied])
    assert runs == len(logs) >= 1
    # The finished run's own job stats, as it printed them when it started.
    planned = sum(sum(scheduled_jobs(subprocess.CompletedProcess([], 0, log.read_text(), "")).values()) for log in logs)
    assert jobs == planned > 0

    snakemake(copied, copied / configfile.name, "-n", "--forceall")
    assert workflow_runs([copied]) == (runs, jobs), "a dry run is not a run"
