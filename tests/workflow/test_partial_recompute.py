"""Partial recomputation: after a completed run, a config change schedules only the jobs it affects, and the
judge jobs it reruns compute only the requests it adds.

One small run (the test config with only the minilm judge: 2 dialogues and a 1-turn one) completes
once for the module. Each test dry-runs (`snakemake -n`) a changed config against its results and
compares the planned jobs with those computed from the changed config by lalm_judge.workflow.plan; the
rerun after an added prompt also runs, on a copy of the completed run, and reads the request counts each
judge job writes beside its log; the rerun after an added condition runs its condition ASR job and reads the
turns it transcribed. The rerun triggers are those of profiles/default ([mtime, params, input, software-env], a rule's
script a param by its content; see docs/cluster.md): a new checkout of the same code (every file newer than the run)
reruns nothing, and a changed ASR script reruns the ASR jobs and what depends on them, nothing else.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from lalm_judge.workflow.config import validate_config
from lalm_judge.workflow.plan import Plan, score_dir, shard_of
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
AGGREGATES = {
    "compute_metrics",
    "control_metrics",
    "guide",
    "figures",
    "control_figures",
    "modality_analysis",
    "modality_figures",
    "decision_flow",
    "report",
    "all",
}
PER_DIALOGUE_RULES = {
    "index_dialogue",
    "ingest_dialogue",
    "rewrite_turn",
    "synthesize_variants",
    "transcribe_dialogue",
    "describe_turns",
    "build_manifest",
}


def judge_rule(judge: str) -> str:
    return f"judge_{judge}"


def score_dirs(plan: Plan, judges: list[str], shards: list[int] | None = None) -> set[str]:
    """The score folders of the judges' jobs (one output per job, besides its index)."""
    return {score_dir(judge, k) for judge in judges for k in (plan.shards() if shards is None else shards)}


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
    """The outputs of the rule's jobs, a judge job's index of its score tables left out."""
    return {path for job in jobs if job.rule == rule for path in job.outputs if not path.endswith(".index.json")}


def run_until(workdir: Path, config: dict, rule: str, scratch: Path) -> Path:
    """Run `config` on a copy of the completed run up to the jobs of `rule`; the copy."""
    copied = scratch / "run"
    shutil.copytree(workdir, copied, symlinks=True)
    configfile = write_config(copied, config)
    snakemake(copied, configfile, "--workflow-profile", str(DEFAULT_PROFILE), "--cores", "2", "--until", rule)
    return copied


def run_judges(workdir: Path, config: dict, judge: str, scratch: Path) -> list[dict]:
    """Run `config` on a copy of the completed run up to the judge's jobs; the request counts of each job."""
    copied = run_until(workdir, config, judge_rule(judge), scratch)
    return [json.loads(p.read_text()) for p in sorted((copied / "logs" / "scores" / judge).glob("*.requests.json"))]


@pytest.fixture(scope="module")
def completed_run(tmp_path_factory) -> tuple[Path, dict]:
    workdir = tmp_path_factory.mktemp("partial_recompute")
    configfile = prepare_workdir(workdir, with_tiny_lalm=False)
    snakemake(workdir, configfile, "--workflow-profile", str(DEFAULT_PROFILE), "--cores", "2", timeout_s=900)
    return workdir, yaml.safe_load(configfile.read_text())


def test_the_default_profile_sets_the_documented_triggers():
    profile = yaml.safe_load((DEFAULT_PROFILE / "config.yaml").read_text())
    assert profile["rerun-triggers"] == ["mtime", "params", "input", "software-env"]


def checkout_files() -> list[str]:
    """The checkout's tracked files (what a clone holds)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def test_a_new_checkout_of_the_same_code_reruns_nothing(completed_run):
    """A clone or checkout of the same commit in the same place leaves every file of the code newer than the run's
    outputs, with the same content: Snakemake's `code` trigger (a script newer than its outputs) would rerun every
    job; the content digests of the scripts (rules/common.smk `get_code_digest`) rerun none."""
    workdir, config = completed_run
    later = os.stat(workdir / "results" / "report").st_mtime + 60
    touched = {name: os.stat(ROOT / name) for name in checkout_files()}
    try:
        for name in touched:
            os.utime(ROOT / name, (later, later))
        assert dry_run(workdir, config) == []
    finally:
        for name, stat in touched.items():
            os.utime(ROOT / name, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_changed_asr_script_reruns_the_asr_jobs_and_what_depends_on_them_only(completed_run, tmp_path):
    """The checkout with its ASR script changed (a copy: the run's own checkout stays as it is), against the run."""
    workdir, config = completed_run
    checkout = tmp_path / "checkout"
    for name in checkout_files():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, checkout / name)
    script = checkout / "workflow_scripts" / "transcribe_dialogue.py"
    script.write_text(script.read_text() + "# changed\n")
    configfile = workdir / "config.yaml"
    completed_config = configfile.read_text()
    write_config(workdir, config)
    try:
        profile = str(checkout / "profiles" / "default")
        command = ("-n", "--workflow-profile", profile, "-s", str(checkout / "Snakefile"))
        jobs = planned_jobs(snakemake(workdir, configfile, *command, timeout_s=300))
    finally:
        configfile.write_text(completed_config)

    plan = plan_of(workdir, config)
    asr = [job for job in jobs if job.rule == "transcribe_dialogue"]
    assert {path for job in asr for path in job.outputs} == {
        f"results/asr/{m}/{d}.parquet" for m in plan.asr_models() for d in plan.dialogue_ids
    }
    assert all("Params have changed" in job.reason for job in asr)
    upstream = {"index_dialogue", "ingest_dialogue", "rewrite_turn", "synthesize_variants", "synthesize_controls"}
    assert not {job.rule for job in jobs} & (upstream | {"describe_turns"}), "nothing the ASR does not feed"
    # Every other job reruns because what it reads is rewritten by a job that reruns.
    assert all("Input files updated by another job" in job.reason for job in jobs if job.rule != "transcribe_dialogue")
    assert {"build_manifest", judge_rule("minilm"), "compute_metrics", "report"} <= {job.rule for job in jobs}


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
    expected = score_dirs(plan, ["minilm_rubric"])
    assert len(plan.judge_cells("minilm_rubric")) == 3  # text x {gt, asr} + cascade audio, one prompt
    assert {job.rule for job in jobs} == {judge_rule("minilm_rubric")} | AGGREGATES
    assert sum(job.rule == judge_rule("minilm_rubric") for job in jobs) == len(plan.shards()), "one job per shard"
    assert outputs_of(jobs, judge_rule("minilm_rubric")) == expected


def with_rubric(config: dict, where: str) -> dict:
    changed = copy.deepcopy(config)
    if where == "judge_prompts":  # the judge's own list
        changed["judges"]["minilm"]["schedule"]["prompts"] = ["basic", "rubric"]
    else:  # the judge follows evaluation.prompts, which already lists rubric
        del changed["judges"]["minilm"]["schedule"]["prompts"]
        assert changed["evaluation"]["prompts"] == ["basic", "rubric"]
    return changed


@pytest.mark.parametrize("where", ["judge_prompts", "evaluation_prompts"])
def test_adding_a_prompt_reruns_the_judges_shard_jobs(completed_run, where):
    workdir, config = completed_run
    changed = with_rubric(config, where)

    jobs = dry_run(workdir, changed)

    # The judge's job of each shard has new cells (its params), so it runs again, writing all its cells
    # (docs/cluster.md).
    plan = plan_of(workdir, changed)
    assert {job.rule for job in jobs} == {judge_rule("minilm")} | AGGREGATES
    assert outputs_of(jobs, judge_rule("minilm")) == score_dirs(plan, ["minilm"])
    assert all("Params have changed" in job.reason for job in jobs if job.rule == judge_rule("minilm"))


def test_the_rerun_after_adding_a_prompt_computes_only_its_requests(completed_run, tmp_path):
    workdir, config = completed_run
    cold = [json.loads(p.read_text()) for p in sorted((workdir / "logs/scores/minilm").glob("*.requests.json"))]

    rerun = run_judges(workdir, with_rubric(config, "judge_prompts"), "minilm", tmp_path)

    assert len(rerun) == len(cold) == len(plan_of(workdir, config).shards())
    for before, after in zip(cold, rerun):
        # A job scores the manifests' samples, then each control condition's own samples; a request two passes
        # share (the clean original as the injection cells' safe reference) is computed once and `reused` later.
        assert before["cached"] == 0, "the cold job found nothing in the cache"
        # Everything the cold job needed comes from the cache; only the new prompt's requests are new.
        assert after["cached"] == before["distinct_requests"] == before["computed"] + before["reused"]
        assert after["computed"] + after["reused"] == after["distinct_requests"] - before["distinct_requests"] > 0
        assert after["computed"] > 0 and after["model_loads"] == 1
        for label, counts in after["cells"].items():
            if "/rubric/" in label:
                assert counts["cached"] == 0 and counts["computed"] + counts["reused"] == counts["requests"]
            else:
                assert (counts["cached"], counts["computed"], counts["reused"]) == (counts["requests"], 0, 0)


def with_condition(config: dict, condition: str) -> dict:
    changed = copy.deepcopy(config)
    changed["judges"]["minilm"]["schedule"]["conditions"].append(condition)
    return changed


def test_adding_a_condition_reruns_one_asr_job_per_dialogue_which_transcribes_only_its_turns(completed_run, tmp_path):
    workdir, config = completed_run
    changed = with_condition(config, "noise_20")
    plan = plan_of(workdir, changed)
    conditions = [c for m, c in plan.condition_transcripts() if m == "whisper_tiny_en"]
    assert "noise_20" in conditions and len(conditions) > 2
    cold = {
        d: json.loads((workdir / f"logs/asr/whisper_tiny_en/conditions/{d}.turns.json").read_text())
        for d in plan.control_dialogues()
    }

    jobs = dry_run(workdir, changed)

    assert outputs_of(jobs, "transcribe_conditions") == {
        f"results/asr/whisper_tiny_en/conditions/{d}.parquet" for d in plan.control_dialogues()
    }, "one ASR job per (ASR model, control dialogue), for all its conditions"
    assert {job.rule for job in jobs} == {"transcribe_conditions", "shard_index", judge_rule("minilm")} | AGGREGATES
    copied = run_until(workdir, changed, "transcribe_conditions", tmp_path)
    for dialogue, before in cold.items():
        assert all(c["cached"] == 0 and c["computed"] == c["turns"] > 0 for c in before.values()), "cold job"
        after = json.loads((copied / f"logs/asr/whisper_tiny_en/conditions/{dialogue}.turns.json").read_text())
        assert list(after) == conditions
        new = after.pop("noise_20")
        assert new["computed"] == new["turns"] > 0 and new["cached"] == 0, "only the new condition's turns"
        assert after == {c: {**counts, "computed": 0, "cached": counts["turns"]} for c, counts in before.items()}


def test_adding_a_control_dialogue_reruns_only_the_judge_job_of_its_shard(completed_run):
    """A judge job's control dialogues are those of its shard: the job of the other control dialogue's shard keeps
    its params and is not scheduled."""
    workdir, config = completed_run
    changed = copy.deepcopy(config)
    changed["controls"]["dialogues"] = [*config["controls"]["dialogues"], "demo_hiking"]
    plan = plan_of(workdir, changed)
    n_shards = plan.judge_shard_count("minilm")
    shard = shard_of("demo_hiking", n_shards)
    assert {shard_of(d, n_shards) for d in config["controls"]["dialogues"]} == {1 - shard}, "another shard's job"

    jobs = dry_run(workdir, changed)

    assert outputs_of(jobs, judge_rule("minilm")) == score_dirs(plan, ["minilm"], [shard])
    assert outputs_of(jobs, "transcribe_conditions") == {"results/asr/whisper_tiny_en/conditions/demo_hiking.parquet"}
    per_dialogue = {"synthesize_controls", "build_manifest", "transcribe_conditions"}
    shared = {"audio_accounting", "shard_index", judge_rule("minilm")}
    assert {job.rule for job in jobs} == per_dialogue | shared | AGGREGATES
    assert all("demo_hiking" in path for job in jobs if job.rule in per_dialogue for path in job.outputs)


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
        "index_dialogue": 1,
        "ingest_dialogue": 1,
        "rewrite_turn": n_turns,
        "synthesize_variants": n_turns,
        "transcribe_dialogue": len(plan.asr_models()),
        "describe_turns": 1,
        "build_manifest": 1,
        "shard_index": 1,
        judge_rule("minilm"): 1,
        "audio_accounting": 1,
        **dict.fromkeys(AGGREGATES, 1),
    }
    assert outputs_of(jobs, "shard_index") == {f"results/manifests/shards/of{plan.n_shards}/shard{shard}.json"}
    assert outputs_of(jobs, judge_rule("minilm")) == score_dirs(plan, ["minilm"], [shard])


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
    assert {job.rule for job in jobs} == {judge_rule("minilm_rubric")} | AGGREGATES
    assert outputs_of(jobs, judge_rule("minilm_rubric")) == score_dirs(plan, ["minilm_rubric"])
