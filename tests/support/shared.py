"""Things the suite builds once per test run, whichever of its processes asks first (pytest-xdist runs the modules on
several): the finished workflow runs that many modules inspect, the tiny models.

The first process to ask builds the thing in a folder beside the processes' own temporary folders (the run's shared
base temporary folder) while holding a lock; the others wait on the lock and then read what it left. A thing that
failed to build is built again by the next process that asks, so a failure is reported where it happens.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def run_folder(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A folder every process of this test run shares, whose subfolders are as deep as those `tmp_path_factory.mktemp`
    makes (a copy of a run made there has the same relative paths to the checkout, which Snakemake records)."""
    base = tmp_path_factory.getbasetemp()
    if worker_id == "master":  # one process: its own temporary folder
        return base
    shared = base.parent / "shared"
    shared.mkdir(exist_ok=True)
    return shared


def build_once(
    tmp_path_factory: pytest.TempPathFactory,
    worker_id: str,
    name: str,
    build: Callable[[Path], dict[str, Any]],
) -> dict[str, Any]:
    """`build(folder)` run once per test run in `<shared folder>/<name>`; its result (JSON: paths as strings) is what
    every process gets."""
    root = run_folder(tmp_path_factory, worker_id)
    folder, done = root / name, root / f"{name}.done.json"
    with FileLock(str(root / f"{name}.lock")):
        if done.is_file():
            return json.loads(done.read_text())
        if folder.exists():  # what a failed build left
            shutil.rmtree(folder)
        folder.mkdir()
        result = build(folder)
        done.write_text(json.dumps(result))
        return result
