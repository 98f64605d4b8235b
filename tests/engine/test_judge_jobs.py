"""Every vLLM judge of the shipped configs scores through a judge job of the workflow, on the real engine.

The safety track's judges of configs/paper.yaml (Qwen2-Audio, Audio Flamingo 3, Llama-3.1, Qwen2.5-Omni, MiniCPM-o)
and of configs/judges-2026.yaml (its vLLM judges: the 2026 families of docs/judges.md), and the pairwise track's of
configs/pairwise.yaml (Qwen2.5-Omni, Qwen2-Audio, SageLM with its sampling protocol) run as the workflow runs them:
`snakemake` of this environment (the CPU twin of the vLLM judge environment) plans the jobs from a config whose judge
entries are the shipped ones with only the model (a tiny random-weight model of the same architecture), the weights'
dtype, the answer budget and the job's resources (no GPU) replaced, and the CPU engine settings added;
`max_model_len: auto` stays as shipped, so the parse computes it. The corpus is two demo dialogues spoken by
espeak-ng, judged in every modality from the ground-truth transcript (no ASR model); the pairwise items are three demo
items. MERaLiON-2's job runs in its own environment (tests/engine/test_meralion.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from bench.engine_agreement import shipped_entry
from bench.models import cached_tiny_model
from lalm_judge.core.tables import EFFORT_COLUMNS
from tests.engine.jobs import (
    VOICES,
    check_scored,
    job_logs,
    run_safety_jobs,
    safety_config,
    score_tables,
    shipped_config_of,
    tiny_entry,
)
from tests.support.workflow import ROOT, snakemake, start_snakemake, write_config

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

# Judge entry -> the tiny model of its architecture (bench.models.TINY_MODELS).
SAFETY_JUDGES = {
    "qwen2_audio_7b": "qwen2_audio",
    "audio_flamingo_3": "audio_flamingo_3",
    "llama31_8b": "llama31",
    "qwen25_omni_7b": "qwen25_omni",
    "minicpm_o": "minicpm_o",
    # configs/judges-2026.yaml
    "qwen3_omni_30b": "qwen3_omni",
    "voxtral_mini_3b": "voxtral",
    "gemma3n_e4b": "gemma3n",
    "granite_speech_8b": "granite_speech",
    "phi4_multimodal": "phi4mm",  # its documented (commented) entry
}
PAIRWISE_JUDGES = {"qwen25_omni_7b": "qwen25_omni", "qwen2_audio_7b": "qwen2_audio", "sagelm": "qwen25_omni_thinker"}


def judge_models(judges: dict[str, str]) -> dict[str, Path]:
    return {judge: cached_tiny_model(tiny) for judge, tiny in judges.items()}


@pytest.fixture(scope="module")
def safety_run(tmp_path_factory):
    return run_safety_jobs(tmp_path_factory.mktemp("safety"), judge_models(SAFETY_JUDGES))


@pytest.mark.parametrize("judge", list(SAFETY_JUDGES))
def test_every_shipped_vllm_safety_judge_scores_every_cell_through_its_job(safety_run, judge):
    workdir, _, _ = safety_run
    check_scored(workdir, judge, cached_tiny_model(SAFETY_JUDGES[judge]))


def test_max_model_len_auto_is_computed_when_the_workflow_parses_and_the_engine_gets_it(safety_run):
    workdir, _, plan = safety_run
    for judge in SAFETY_JUDGES:
        assert shipped_entry(shipped_config_of(judge), judge)["options"]["max_model_len"] == "auto"
        planned = re.search(rf"vLLM context length \(options\.max_model_len\):.*\b{judge} (\d+)", plan)
        assert planned, plan[-3000:]
        log, _ = job_logs(workdir, judge)
        assert f"'max_model_len': {planned.group(1)}" in log


def test_a_rerun_of_a_judge_job_is_served_by_the_request_cache(safety_run, tmp_path_factory):
    workdir, configfile, _ = safety_run
    copy = tmp_path_factory.mktemp("rerun")
    shutil.copytree(workdir, copy, symlinks=True, dirs_exist_ok=True)
    snakemake(copy, copy / configfile.name, "scores", "--cores", "2", "--forcerun", "judge_llama31_8b")
    _, counts = job_logs(copy, "llama31_8b")
    assert (counts["computed"], counts["model_loads"]) == (0, 0) and counts["cached"] == counts["distinct_requests"]
    assert score_tables(copy, "llama31_8b").equals(score_tables(workdir, "llama31_8b"))


@pytest.fixture(scope="module")
def pairwise_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pairwise")
    shutil.copy(ROOT / "data" / "pairwise_demo" / "items.jsonl", workdir / "items.jsonl")
    config = yaml.safe_load((ROOT / "tests" / "config" / "pairwise.yaml").read_text())
    config.pop("asr")
    config["judges"] = {
        name: tiny_entry("configs/pairwise.yaml", name, model) for name, model in judge_models(PAIRWISE_JUDGES).items()
    }
    pairwise = config["pairwise"]
    pairwise["items"]["voices"] = {"joe": VOICES["LLM1"], "f3": VOICES["LLM2"]}
    pairwise.update(judges=list(PAIRWISE_JUDGES), modalities=["audio"], transcript_sources=["gt"], prompts=["sagelm"])
    pairwise.pop("conditions")
    configfile = write_config(workdir, config)
    # The judges' predictions (the metrics and the report run in the analysis environment, not this one).
    targets = [f"results/pairwise/predictions/{judge}/audio-none/sagelm.parquet" for judge in PAIRWISE_JUDGES]
    snakemake(workdir, configfile, *targets, "--cores", "2", timeout_s=1200)
    return workdir, config


@pytest.mark.parametrize("judge", list(PAIRWISE_JUDGES))
def test_every_pairwise_vllm_judge_hears_both_responses_in_both_orders(pairwise_run, judge):
    workdir, config = pairwise_run
    predictions = pl.read_parquet(workdir / "results/pairwise/predictions" / judge / "audio-none/sagelm.parquet")
    items = pl.read_parquet(workdir / "results/pairwise/items.parquet")
    assert (
        predictions.select("item_id", "aspect")
        .sort("item_id", "aspect")
        .equals(items.select("item_id", "aspect").sort("item_id", "aspect"))
    ), "every item and aspect judged"
    for column in ("prediction", "prediction_swapped"):
        assert predictions[column].str.len_chars().min() > 0, "both orders answered"
    # SageLM's protocol: every request once per seed, the first seed's answer the row's.
    seeds = shipped_entry("configs/pairwise.yaml", judge)["generation"]["seeds"]
    assert set(predictions["n_samples"]) == {len(seeds)}
    samples = json.loads(predictions["samples"][0])
    assert [sample["seed"] for sample in samples] == seeds
    assert samples[0]["answer"] == predictions["prediction"][0]
    assert samples[0]["answer_swapped"] == predictions["prediction_swapped"][0]


def cached_answers(cache: Path) -> int | None:
    """Answers stored in a judge's request cache (every dialogue's database), or None while the job writes."""
    total = 0
    for path in sorted(cache.glob("*.sqlite")):
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.5)) as database:
                total += database.execute("SELECT count(*) FROM outputs").fetchone()[0]
        except sqlite3.OperationalError:  # locked by the job, or not set up yet
            return None
    return total


def test_a_vllm_judge_job_killed_after_its_first_call_resumes_with_only_the_unanswered_requests(tmp_path_factory):
    """SIGKILL of the whole run (a node lost) once the Llama-3.1 job's first call is committed: the rerun computes
    only the requests the cache lacks, and the scores equal an uninterrupted run's."""
    from lalm_judge.judging.runner import FIRST_CALL

    workdir = tmp_path_factory.mktemp("killed")
    config = safety_config(workdir, {"llama31_8b": cached_tiny_model("llama31")})
    # More requests than the job's first call: 2 categories x 5 severities of 7 turns and the originals, 5 prompts.
    config["variants"].update(categories=["harassment", "hate"], severities=[1, 2, 3, 4, 5])
    config["evaluation"]["prompts"] = ["basic", "cot", "fewshot", "rubric", "calibrated"]
    configfile = write_config(workdir, config)
    snakemake(workdir, configfile, "manifests", "--cores", "2", timeout_s=600)
    uninterrupted = tmp_path_factory.mktemp("uninterrupted")
    shutil.copytree(workdir, uninterrupted, symlinks=True, dirs_exist_ok=True)

    cache = workdir / "results" / "cache" / "judges" / "llama31_8b"
    run = start_snakemake(workdir, configfile, "scores", "--cores", "1", output=workdir / "killed.out")
    try:
        deadline = time.monotonic() + 600
        while (cached_answers(cache) or 0) < FIRST_CALL:
            assert run.poll() is None, (workdir / "killed.out").read_text()[-3000:]
            assert time.monotonic() < deadline, "the first call was not committed within 10 minutes"
            time.sleep(0.2)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
    committed = cached_answers(cache)
    snakemake(workdir, configfile, "--unlock")
    snakemake(workdir, configfile, "scores", "--cores", "2", timeout_s=600)
    _, counts = job_logs(workdir, "llama31_8b")
    assert committed is not None and FIRST_CALL <= committed < counts["distinct_requests"]
    assert (counts["cached"], counts["computed"]) == (committed, counts["distinct_requests"] - committed)

    snakemake(uninterrupted, uninterrupted / configfile.name, "scores", "--cores", "2", timeout_s=600)
    # What a row cost (its latency) is the one thing two runs need not share.
    resumed, reference = (
        score_tables(run, "llama31_8b").drop(EFFORT_COLUMNS, strict=False) for run in (workdir, uninterrupted)
    )
    assert resumed.equals(reference)
