"""Fixtures shared across test modules: tiny random-weight models built from configs (about 1 MB each); the order in
which the suite's processes take the modules."""

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


# The session fixtures that need a finished workflow run, by the run they need: each run is built once per test run,
# by whichever process asks first (tests/support/shared.py); the other waits for it if it asks meanwhile.
SHARED_RUNS = {"finished_run": "workflow", "finished_test_run": "workflow", "finished_pairwise_run": "pairwise"}


def shared_definition(item, fixture: str) -> bool:
    """Whether the fixture an item gets under that name is a conftest's (a module may define its own run under the
    same name)."""
    definitions = item._fixtureinfo.name2fixturedefs.get(fixture) or ()
    return bool(definitions) and not definitions[-1].baseid.endswith(".py")


def pytest_collection_modifyitems(config, items):
    """The order in which pytest-xdist hands out the modules (the Makefile's `-n $(MAIN_TEST_PROCESSES) --dist
    loadfile --no-loadscope-reorder`: each module runs whole on one process, so its module fixtures are built once and
    the two SLURM tests never use the one local cluster at the same time; the first modules go one to each process):
    1. one module for each shared workflow run, so that two processes build different runs side by side;
    2. the SLURM module, then the other modules that run the workflow themselves (marked `workflow`) and the other
       slow ones, meanwhile;
    3. the other modules that read a shared run, which is finished by then;
    4. the short modules, which even out the processes' ends.
    (`--dist loadgroup` would keep the modules sharing a workflow run on one process, but pytest 9.2 drops the group
    that xdist 3.8 appends to each test's id, so it groups nothing.)"""
    runs_of: dict[str, set[str]] = {}
    markers: dict[str, set[str]] = {}
    for item in items:
        module = item.module.__name__
        runs_of.setdefault(module, set()).update(
            run for name, run in SHARED_RUNS.items() if name in item.fixturenames and shared_definition(item, name)
        )
        markers.setdefault(module, set()).update(mark.name for mark in item.iter_markers())
    builders: dict[str, str] = {}
    for module, runs in runs_of.items():
        for run in sorted(runs):
            builders.setdefault(run, module)
    first = list(builders.values())

    def position(module: str) -> tuple[int, int]:
        if module in first:
            return (0, first.index(module))
        if runs_of[module]:
            return (2, 0)
        for rank, marker in enumerate(("cluster", "workflow", "slow")):
            if marker in markers[module]:
                return (1, rank)
        return (3, 0)

    items.sort(key=lambda item: position(item.module.__name__))  # stable: each module keeps its order
