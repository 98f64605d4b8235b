"""The pairwise track's finished test workflow (tests/config/pairwise.yaml), run once per test run and shared by the
modules that inspect it. The safety track's (`finished_run`) is in tests/conftest.py: the annotation tests read it
too."""

import shutil
from pathlib import Path

import pytest
import yaml

from lalm_judge.workflow.config import load_config
from tests.support.shared import build_once
from tests.support.workflow import ROOT, snakemake, write_config

PAIRWISE_CONFIG = ROOT / "tests" / "config" / "pairwise.yaml"


def run_pairwise(workdir):
    from bench.models import build_tiny_llama, build_tiny_qwen2audio

    shutil.copy(ROOT / "data" / "pairwise_demo" / "items.jsonl", workdir / "items.jsonl")
    config = yaml.safe_load(PAIRWISE_CONFIG.read_text())
    build_tiny_qwen2audio(workdir / config["judges"]["tiny_qwen2_audio"]["model"])
    build_tiny_llama(workdir / config["judges"]["tiny_llama"]["model"])
    configfile = write_config(workdir, config)
    snakemake(workdir, configfile, "--cores", "2", timeout_s=900)
    return {"workdir": str(workdir), "configfile": str(configfile)}


@pytest.fixture(scope="session")
def finished_pairwise_run(tmp_path_factory, worker_id):
    run = build_once(tmp_path_factory, worker_id, "pairwise", run_pairwise)
    workdir, configfile = Path(run["workdir"]), Path(run["configfile"])
    return workdir, configfile, load_config(configfile)
