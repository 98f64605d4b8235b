"""Fixtures shared across test modules: tiny random-weight models built from configs (about 1 MB each); the order in
which the suite's two processes take the modules."""

from pathlib import Path

import pytest

from bench.models import (
    build_tiny_audioflamingo3,
    build_tiny_llama,
    build_tiny_qwen2audio,
    build_tiny_qwen25omni_thinker,
)


def run_test_workflow(workdir):
    from tests.support.workflow import prepare_workdir, snakemake

    configfile = prepare_workdir(workdir)
    snakemake(workdir, configfile, "--cores", "2", timeout_s=1500)
    return {"workdir": str(workdir), "configfile": str(configfile)}


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, worker_id):
    """The test workflow (tests/config/test.yaml) run to its end once per test run: (working folder, config file).
    Shared by the processes of the run, so a module that changes it works on a copy."""
    from tests.support.shared import build_once

    run = build_once(tmp_path_factory, worker_id, "workflow", run_test_workflow)
    return Path(run["workdir"]), Path(run["configfile"])


@pytest.fixture(scope="session")
def qwen2audio_dir(tmp_path_factory):
    return build_tiny_qwen2audio(tmp_path_factory.mktemp("models") / "qwen2audio")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("models") / "llama")


@pytest.fixture(scope="session")
def audioflamingo3_dir(tmp_path_factory):
    return build_tiny_audioflamingo3(tmp_path_factory.mktemp("models") / "audioflamingo3")


@pytest.fixture(scope="session")
def qwen25omni_dir(tmp_path_factory):
    return build_tiny_qwen25omni_thinker(tmp_path_factory.mktemp("models") / "qwen25omni")


# The session fixtures that run a whole workflow (minutes each).
WORKFLOW_RUNS = ("finished_run", "finished_pairwise_run", "finished_test_run")


def pytest_collection_modifyitems(config, items):
    """The order in which pytest-xdist hands out the modules (the Makefile's `-n 2 --dist loadfile
    --no-loadscope-reorder`: each module runs whole on one process, so its module fixtures are built once and the
    two SLURM tests never use the one local cluster at the same time): the longest first, those that use a workflow
    run, then the SLURM module, then the other modules that run the workflow (marked `workflow`), so that the other
    process works through the short ones meanwhile instead of waiting for a long one at the end. (`--dist
    loadgroup` would keep the modules sharing a workflow run on one process, but pytest 9.2 drops the group that
    xdist 3.8 appends to each test's id, so it groups nothing.)"""
    with_a_run = {item.module.__name__ for item in items if any(name in item.fixturenames for name in WORKFLOW_RUNS)}

    def longest_first(item):
        if item.module.__name__ in with_a_run:
            return 0
        if item.get_closest_marker("cluster"):
            return 1
        return 2 if item.get_closest_marker("workflow") else 3

    items.sort(key=longest_first)  # stable: each module keeps its order
