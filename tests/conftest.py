"""Fixtures shared across test modules: tiny random-weight models built from configs (about 1 MB each); how the
suite's tests are grouped onto its two processes."""

from collections import defaultdict

import pytest

from bench.models import (
    build_tiny_audioflamingo3,
    build_tiny_llama,
    build_tiny_qwen2audio,
    build_tiny_qwen25omni_thinker,
)


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


# The session fixtures that run a whole workflow (minutes each): the modules that use one run on the same process,
# so that it runs once per suite, not once per process.
WORKFLOW_RUNS = ("finished_run", "finished_pairwise_run", "finished_test_run")


def pytest_collection_modifyitems(config, items):
    """Group the tests for pytest-xdist's `--dist loadgroup` (the Makefile's `-n 2`): a module's tests stay together
    on one process, in their order, with their module fixtures built once; modules that share a workflow run share
    a group (joined transitively); the SLURM tests are one module, so they never use the one local cluster at the
    same time. The longest groups go first (those with a workflow run, then the SLURM module; the Makefile keeps
    this order with `--no-loadscope-reorder`), so that the other
    process works through the short ones meanwhile instead of waiting for them at the end."""
    runs_by_module = defaultdict(set)
    for item in items:
        runs_by_module[item.module.__name__].update(name for name in WORKFLOW_RUNS if name in item.fixturenames)
    group = {module: module for module in runs_by_module}

    def root(module):
        while group[module] != module:
            module = group[module]
        return module

    first_user = {}
    for module, runs in runs_by_module.items():
        for run in sorted(runs):
            if run in first_user:
                group[root(module)] = root(first_user[run])
            else:
                first_user[run] = module
    for item in items:
        item.add_marker(pytest.mark.xdist_group(root(item.module.__name__)))

    with_a_run = {root(module) for module, runs in runs_by_module.items() if runs}

    def longest_first(item):
        if root(item.module.__name__) in with_a_run:
            return 0
        return 1 if item.get_closest_marker("cluster") else 2

    items.sort(key=longest_first)  # stable: each module keeps its order
