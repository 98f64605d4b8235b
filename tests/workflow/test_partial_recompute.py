"""Partial recomputation: after a completed run, a config change schedules only the jobs it affects.

One small run (the test config with only the minilm judge: 2 dialogues and a 1-turn one) completes
once for the module. Each test dry-runs (`snakemake -n`) a changed config against its results and
compares the planned jobs with those computed from the changed config by lalm_judge.workflow.plan. The rerun
triggers are those of profiles/default ([mtime, params, input, software-env, code]; see
docs/cluster.md).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from lalm_judge.workflow.config import validate_config
from lalm_judge.workflow.plan import JudgeCell, Plan, shard_of
from tests.support.workflow import (
    DEMO_CORPUS,
    ROOT,
    TEST_DIALOGUES,
    PlannedJob,
    planned_jobs,
    prepare_workdir,
    reformatted,
    snakemake,
    write_config,
    write_corpus,
)

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

DEFAULT_PROFILE = ROOT / "profiles" / "default"
AGGREGATES = {"compute_metrics", "control_metrics", "figures", "control_figures", "report", "all"}
PER_DIALOGUE_RULES = {
    "ingest_dialogue",
    "rewrite_turn",
    "synthesize_variants",
    "transcribe_dialogue",
    "describe_turns",
    "build_manifest",
}


def score_path(cell: JudgeCell, shard: int) -> str:
    return (
        f"results/scores/{cell.judge}/{cell.modality}-{cell.transcript_source}/{cell.prompt}/{cell.condition}"
        f"/shard{shard}.parquet"
    )


def plan_of(workdir: Path, config: dict) -> Plan:
    """The plan the workflow computes for `config` in `workdir` (the corpus path is workdir-relative)."""
    config = validate_config(config)
    config["corpus"]["path"] = str(workdir / config["corpus"]["path"])
    return Plan(config)


def dry_run(workdir: Path, config: dict) -> list[PlannedJob]:
    """The jobs `snakemake -n` plans for `config` against the completed run in `workdir`.

    The config replaces config.yaml for the call (the Snakefile's `configfile:` would otherwise be
    merged under it, and a key deleted in `config` would survive).
    """
    configfile = workdir / "config.yaml"
    completed_config = configfile.read_text()
    write_config(workdir, config)
    try:
        result = snakemake(workdir, configfile, "-n", "--workflow-profile", str(DEFAULT_PROFILE), timeout_s=300)
    finally:
        configfile.write_text(completed_config)
    return planned_jobs(result)


def outputs_of(jobs: list[PlannedJob], rule: str) -> set[str]:
    return {job.outputs[0] for job in jobs if job.rule == rule}


@pytest.fixture(scope="module")
def completed_run(tmp_path_factory) -> tuple[Path, dict]:
    workdir = tmp_path_factory.mktemp("partial_recompute")
    configfile = prepare_workdir(workdir, with_tiny_lalm=False)
    snakemake(workdir, configfile, "--workflow-profile", str(DEFAULT_PROFILE), "--cores", "2", timeout_s=900)
    return workdir, yaml.safe_load(configfile.read_text())


def test_the_default_profile_sets_the_documented_triggers():
    profile = yaml.safe_load((DEFAULT_PROFILE / "config.yaml").read_text())
    assert profile["rerun-triggers"] == ["mtime", "params", "input", "software-env", "code"]


def test_an_unchanged_rerun_schedules_nothing(completed_run):
    workdir, config = completed_run
    assert dry_run(workdir, config) == []


def test_adding_a_judge_schedules_its_jobs_and_the_aggregates(completed_run):
    workdir, config = completed_run
    changed = copy.deepcopy(config)
    changed["judges"]["minilm_rubric"] = {**changed["judges"]["minilm"], "schedule": {"prompts": ["rubric"]}}
    changed["evaluation"]["judges"].append("minilm_rubric")

    jobs = dry_run(workdir, changed)

    plan = plan_of(workdir, changed)
    expected = {score_path(c, k) for c in plan.judge_cells() if c.judge == "minilm_rubric" for k in plan.shards()}
    assert len(expected) == 3 * len(plan.shards())  # text x {gt, asr} + cascade audio, one prompt
    assert {job.rule for job in jobs} == {"judge_shard"} | AGGREGATES
    assert outputs_of(jobs, "judge_shard") == expected


@pytest.mark.parametrize("where", ["judge_prompts", "evaluation_prompts"])
def test_adding_a_prompt_schedules_only_that_prompts_cells(completed_run, where):
    workdir, config = completed_run
    changed = copy.deepcopy(config)
    if where == "judge_prompts":  # the judge's own list
        changed["judges"]["minilm"]["schedule"]["prompts"] = ["basic", "rubric"]
    else:  # the judge follows evaluation.prompts, which already lists rubric
        del changed["judges"]["minilm"]["schedule"]["prompts"]
        assert changed["evaluation"]["prompts"] == ["basic", "rubric"]

    jobs = dry_run(workdir, changed)

    plan = plan_of(workdir, changed)
    expected = {score_path(c, k) for c in plan.judge_cells() if c.prompt == "rubric" for k in plan.shards()}
    assert expected and all("/rubric/" in path for path in expected)
    assert {job.rule for job in jobs} == {"judge_shard"} | AGGREGATES
    assert outputs_of(jobs, "judge_shard") == expected


def test_adding_a_dialogue_schedules_its_stages_and_its_shard(completed_run):
    workdir, config = completed_run
    records = [json.loads(line) for line in DEMO_CORPUS.read_text().splitlines() if line.strip()]
    new = next(r["id"] for r in records if r["id"] not in TEST_DIALOGUES)
    corpus_file = workdir / config["corpus"]["path"] / "dialogues.jsonl"
    original_corpus = corpus_file.read_text()
    try:
        write_corpus(workdir, dialogue_ids=(*TEST_DIALOGUES, new))
        jobs = dry_run(workdir, config)
        plan = plan_of(workdir, config)
    finally:
        corpus_file.write_text(original_corpus)

    shard = shard_of(new, plan.n_shards)
    for job in jobs:
        if job.rule in PER_DIALOGUE_RULES:
            assert all(new in path for path in job.outputs), job
    planned = {rule: sum(job.rule == rule for job in jobs) for rule in {job.rule for job in jobs}}
    n_turns = len(plan.turns(new))
    assert n_turns >= 2
    assert planned == {
        "ingest_dialogue": 1,
        "rewrite_turn": n_turns,
        "synthesize_variants": n_turns,
        "transcribe_dialogue": len(plan.asr_models()),
        "describe_turns": 1,
        "build_manifest": 1,
        "shard_index": 1,
        "judge_shard": len(plan.judge_cells()),
        "audio_accounting": 1,
        **dict.fromkeys(AGGREGATES, 1),
    }
    assert outputs_of(jobs, "shard_index") == {f"results/manifests/shards/shard{shard}.json"}
    assert outputs_of(jobs, "judge_shard") == {score_path(c, shard) for c in plan.judge_cells()}


def test_changing_a_metric_setting_reruns_only_the_aggregates(completed_run):
    workdir, config = completed_run
    changed = copy.deepcopy(config)
    changed["metrics"]["bootstrap"] = config["metrics"]["bootstrap"] + 1

    jobs = dry_run(workdir, changed)

    assert {job.rule for job in jobs} == AGGREGATES
    assert "Params have changed" in next(job.reason for job in jobs if job.rule == "compute_metrics")


def test_tuning_a_judges_resources_reruns_nothing(completed_run):
    workdir, config = completed_run
    changed = copy.deepcopy(config)
    changed["judges"]["minilm"]["schedule"]["resources"] = {"mem_mb": 16000, "runtime": 240, "threads": 2}

    assert dry_run(workdir, changed) == []


def dry_run_text(workdir: Path, text: str) -> list[PlannedJob]:
    """Like `dry_run`, with the config file's text given as written (formatting and comments included)."""
    configfile = workdir / "config.yaml"
    completed_config = configfile.read_text()
    configfile.write_text(text)
    try:
        result = snakemake(workdir, configfile, "-n", "--workflow-profile", str(DEFAULT_PROFILE), timeout_s=300)
    finally:
        configfile.write_text(completed_config)
    return planned_jobs(result)


def test_a_reordered_and_reformatted_config_schedules_nothing(completed_run):
    workdir, config = completed_run
    assert yaml.safe_load(reformatted(config)) == config
    assert dry_run_text(workdir, reformatted(config)) == []
    # Sorted keys, as yaml.safe_dump writes by default.
    assert dry_run_text(workdir, yaml.safe_dump(config)) == []


def test_adding_a_judge_to_a_reordered_config_schedules_only_its_jobs(completed_run):
    workdir, config = completed_run
    changed = copy.deepcopy(config)
    changed["judges"]["minilm_rubric"] = {**changed["judges"]["minilm"], "schedule": {"prompts": ["rubric"]}}
    changed["evaluation"]["judges"].append("minilm_rubric")

    jobs = dry_run_text(workdir, reformatted(changed))

    plan = plan_of(workdir, changed)
    expected = {score_path(c, k) for c in plan.judge_cells() if c.judge == "minilm_rubric" for k in plan.shards()}
    assert {job.rule for job in jobs} == {"judge_shard"} | AGGREGATES
    assert outputs_of(jobs, "judge_shard") == expected
