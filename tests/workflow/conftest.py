"""The finished test workflows, run once per session and shared by the modules that inspect them: the safety
track's (tests/config/test.yaml), which modules also rerun or judge as an exported benchmark, and the pairwise
track's (tests/config/pairwise.yaml)."""

import shutil

import pytest
import yaml

from lalm_judge.workflow.config import load_config
from tests.support.workflow import ROOT, prepare_workdir, snakemake, write_config

PAIRWISE_CONFIG = ROOT / "tests" / "config" / "pairwise.yaml"


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workflow")
    configfile = prepare_workdir(workdir)
    snakemake(workdir, configfile, "--cores", "2", timeout_s=1500)
    return workdir, configfile


@pytest.fixture(scope="session")
def finished_pairwise_run(tmp_path_factory):
    from bench.models import build_tiny_llama, build_tiny_qwen2audio

    workdir = tmp_path_factory.mktemp("pairwise")
    shutil.copy(ROOT / "data" / "pairwise_demo" / "items.jsonl", workdir / "items.jsonl")
    config = yaml.safe_load(PAIRWISE_CONFIG.read_text())
    build_tiny_qwen2audio(workdir / config["judges"]["tiny_qwen2_audio"]["model"])
    build_tiny_llama(workdir / config["judges"]["tiny_llama"]["model"])
    configfile = write_config(workdir, config)
    snakemake(workdir, configfile, "--cores", "2", timeout_s=900)
    return workdir, configfile, load_config(configfile)
