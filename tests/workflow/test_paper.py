"""The paper configuration as a GPU-cluster user runs it, planned on CPU: `snakemake -n --configfile configs/paper.yaml`
from a checkout (the demo's config.yaml beside it) on a synthetic corpus in the DeepDialogue-xtts hub layout.

The plan must hold only the paper's voices, ASR models and judges (not the demo's, which a merged config.yaml
would add), ask for GPUs in every GPU stage (judges, XTTS, Whisper on CUDA) and have the expected jobs per stage.
A config with every mapping reordered plans the same jobs and, once the outputs are recorded (`--touch`),
recomputes nothing (Snakemake compares params by their repr, so every config-derived param is canonical).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from bench.dag_scale import materialize_outputs
from lalm_judge.workflow.config import validate_config
from lalm_judge.workflow.plan import Plan, shard_of
from tests.support.corpora import write_ravdess
from tests.support.workflow import (
    HUB_DIALOGUES,
    ROOT,
    planned_jobs,
    reformatted,
    scheduled_jobs,
    snakemake,
    write_hub_corpus,
)

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

PAPER = ROOT / "configs" / "paper.yaml"
PAPER_CONFIG = yaml.safe_load(PAPER.read_text())
GPU_JUDGES = {"qwen2_audio_7b", "audio_flamingo_3", "meralion2_10b", "llama31_8b", "qwen25_omni_7b", "minicpm_o"}
JUDGES = GPU_JUDGES | {"gemini_25_flash_lite"}
# Cells per judge and prompt under 'clean': 3 modalities x (3 transcript sources for text and audio_text, none for
# audio) = 7, Llama text only = 3. The study's controls get the cells whose input they change: 'injection' all of
# them; 'masked', the four noise levels and 'tts_control' all but text with the ground truth (6, Llama 2);
# 'silence' the audio modality (1, Llama none). Each x 5 prompts.
CLEAN_CELLS = {judge: 7 for judge in JUDGES} | {"llama31_8b": 3}
AUDIO_CHANGING = ("masked", "noise_20", "noise_10", "noise_5", "noise_0", "tts_control")
CELLS = {judge: 5 * (2 * n + len(AUDIO_CHANGING) * (n - 1) + (n > 3)) for judge, n in CLEAN_CELLS.items()}
# The conditions whose cells read an ASR transcript of the changed turn: each needs that ASR per dialogue.
ASR_READ_CONDITIONS = (*AUDIO_CHANGING, "injection")
DIALOGUE_IDS = [
    f"{configuration.removeprefix('dialogues_')}_{name}".lower().replace("-", "_")
    for configuration, name, _ in HUB_DIALOGUES
]
N_TURNS = sum(n for _, _, n in HUB_DIALOGUES)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A working directory laid out like the checkout: the demo config.yaml and the paper corpus folder."""
    workdir = tmp_path_factory.mktemp("paper")
    shutil.copy(ROOT / "config.yaml", workdir / "config.yaml")
    write_hub_corpus(workdir / PAPER_CONFIG["corpus"]["path"])
    write_ravdess(workdir / PAPER_CONFIG["tts"]["emotion_reference"]["path"])
    return workdir


@pytest.fixture
def licence_accepted(monkeypatch):
    monkeypatch.setenv("COQUI_TOS_AGREED", "1")


def paper_dry_run(workdir: Path, configfile: Path = PAPER, *args: str, check: bool = True):
    return snakemake(workdir, configfile, "-n", "--cores", "2", *args, check=check)


@pytest.fixture(scope="module")
def plan(checkout):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COQUI_TOS_AGREED", "1")
        result = paper_dry_run(checkout)
    return result, planned_jobs(result)


@pytest.fixture(scope="module")
def paper_plan(checkout) -> Plan:
    """The plan the workflow computes for configs/paper.yaml on the synthetic corpus."""
    config = validate_config(PAPER_CONFIG)
    config["corpus"]["path"] = str(checkout / PAPER_CONFIG["corpus"]["path"])
    references = config["tts"]["emotion_reference"]
    references["path"] = str(checkout / references["path"])
    return Plan(config)


@pytest.fixture(scope="module")
def judge_shards(paper_plan) -> dict[str, tuple[int, set[int]]]:
    """Each judge's shard count (its job estimate's, `evaluation.shards: auto`) and its non-empty shards."""
    sizing = paper_plan.sizing
    counts = {judge: sizing[judge].shards for judge in JUDGES}
    return {judge: (n, {shard_of(d, n) for d in DIALOGUE_IDS}) for judge, n in counts.items()}


def test_the_dry_run_prints_each_judges_shards_and_job_estimate_within_75_percent_of_its_runtime(plan):
    result, _ = plan
    output = result.stdout + result.stderr
    table = output[output.index("judge jobs (estimate") :].splitlines()
    rows = {line.split()[0]: line.split() for line in table[2 : 2 + len(JUDGES)]}
    assert set(rows) == JUDGES
    for judge, row in rows.items():
        runtime_min = PAPER_CONFIG["judges"][judge]["schedule"]["resources"]["runtime"]
        # Hours per job within 75 % of the runtime: the planned share, the rest headroom.
        assert row[5] == str(runtime_min) and float(row[4]) * 60 <= 0.75 * runtime_min, row
        assert int(row[7].rstrip("%")) <= 75, row
    assert "OVER PLANNED SHARE" not in output
    assert "vLLM context length (options.max_model_len): qwen2_audio_7b " in output


def test_a_judge_whose_jobs_cannot_fit_is_refused_naming_it(checkout, tmp_path, licence_accepted):
    config = yaml.safe_load(PAPER.read_text())
    config["evaluation"]["shards"] = 1
    config["judges"]["qwen25_omni_7b"]["schedule"]["resources"]["runtime"] = 60
    configfile = tmp_path / "paper.yaml"
    configfile.write_text(yaml.safe_dump(config))
    result = paper_dry_run(checkout, configfile, check=False)
    assert result.returncode != 0
    assert re.search(
        r"judge qwen25_omni_7b: its largest job holds [\d,]+ requests, about [\d.]+ h at 28,800 requests/h .* over 75% "
        r"of its runtime of 60 min",
        result.stdout + result.stderr,
    )


def test_the_paper_plan_has_the_expected_jobs_per_stage(plan, judge_shards):
    result, _ = plan
    assert sum(CLEAN_CELLS.values()) * 5 == 225 and sum(CELLS.values()) == 1620
    jobs = {judge: len(shards) for judge, (_, shards) in judge_shards.items()}
    indexes = {(n, k) for n, shards in judge_shards.values() for k in shards}
    assert scheduled_jobs(result) == {
        "index_dialogue": len(DIALOGUE_IDS),
        "ingest_dialogue": len(DIALOGUE_IDS),
        "rewrite_turn": N_TURNS,
        "synthesize_variants": N_TURNS,
        "describe_turns": len(DIALOGUE_IDS),
        "transcribe_dialogue": 2 * len(DIALOGUE_IDS),
        "build_manifest": len(DIALOGUE_IDS),
        # The controls: TTS controls per dialogue, ASR of the changed turns once per (ASR model, dialogue) for
        # every condition a cell reads it under.
        "synthesize_controls": len(DIALOGUE_IDS),
        "transcribe_conditions": 2 * len(DIALOGUE_IDS),
        "audio_accounting": 1,
        # One index per non-empty shard of each shard count the judges get.
        "shard_index": len(indexes),
        # One job per (judge, shard): each judge's model loads once per shard, for all its cells.
        **{f"judge_{judge}": jobs[judge] for judge in JUDGES},
        "compute_metrics": 1,
        "control_metrics": 1,
        "figures": 1,
        "control_figures": 1,
        "guide": 1,
        "modality_analysis": 1,
        "modality_figures": 1,
        "decision_flow": 1,
        "report": 1,
        "all": 1,
    }


def test_the_parse_imports_neither_polars_nor_faster_whisper(checkout, licence_accepted, monkeypatch):
    """Every job parses the workflow again: the parse (config checks, the plan) reads the corpus index and
    faster-whisper's model names without importing the table library or the ASR engine (about 0.4 s together;
    docs/benchmarks.md)."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # each import on stderr: 'import time: self | cumulative | name'
    result = snakemake(checkout, PAPER, "--list-rules")
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
    }
    assert {"lalm_judge.workflow.plan", "lalm_judge.workflow.pins", "lalm_judge.data.benchmark"} <= imported
    assert "judge_qwen2_audio_7b" in result.stdout
    assert not {"polars", "faster_whisper", "ctranslate2"} & imported


def test_the_plan_holds_only_the_paper_asr_models_and_judges(plan, paper_plan):
    _, jobs = plan
    asr = {Path(job.outputs[0]).parent.name for job in jobs if job.rule == "transcribe_dialogue"}
    assert asr == {"whisper_large_v3", "whisper_base"}, "no demo Whisper tiny.en"
    judge_jobs = [job for job in jobs if job.rule.startswith("judge_")]
    assert {job.rule.removeprefix("judge_") for job in judge_jobs} == JUDGES
    for job in judge_jobs:  # the folder of a score table per cell of the job's judge, and their index
        judge = job.rule.removeprefix("judge_")
        folder = next(output for output in job.outputs if not output.endswith(".index.json"))
        assert set(job.outputs) == {folder, f"{folder}.index.json"} and Path(folder).parts[:3] == (
            "results",
            "scores",
            judge,
        )
        assert len(paper_plan.judge_cells(judge)) == CELLS[judge]


def test_every_gpu_stage_requests_a_gpu(plan):
    _, jobs = plan
    for job in jobs:
        if job.rule in ("synthesize_variants", "transcribe_dialogue", "synthesize_controls", "transcribe_conditions"):
            assert job.resource("gpu") == "1", job
        elif job.rule.startswith("judge_"):
            judge = job.rule.removeprefix("judge_")
            assert job.resource("gpu") == ("1" if judge in GPU_JUDGES else "0"), job
        else:
            assert job.resource("gpu") in (None, "0"), job


def test_without_the_xtts_licence_nothing_is_planned(checkout, monkeypatch):
    monkeypatch.delenv("COQUI_TOS_AGREED", raising=False)
    result = paper_dry_run(checkout, check=False)
    assert result.returncode != 0
    assert "export COQUI_TOS_AGREED=1" in result.stdout + result.stderr


def test_a_gpu_budget_below_a_jobs_request_is_refused(checkout, licence_accepted):
    result = paper_dry_run(checkout, PAPER, "--resources", "gpu=0", check=False)
    assert result.returncode != 0
    assert "need more GPUs than --resources gpu=0 grants" in result.stdout + result.stderr


def recorded_params(workdir: Path, output: str) -> list[str]:
    """The params Snakemake recorded for an output (.snakemake/metadata: one JSON per base64 path)."""
    name = base64.urlsafe_b64encode(output.encode()).decode()
    return json.loads((workdir / ".snakemake" / "metadata" / name).read_text())["params"]


@pytest.fixture(scope="module")
def reordered_paper(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("reordered") / "paper.yaml"
    path.write_text(reformatted(PAPER_CONFIG))
    assert yaml.safe_load(path.read_text()) == PAPER_CONFIG
    return path


def test_a_reordered_paper_config_plans_the_same_jobs(checkout, plan, reordered_paper, licence_accepted):
    _, jobs = plan
    again = planned_jobs(paper_dry_run(checkout, reordered_paper))
    assert {(job.rule, job.outputs, job.resources) for job in again} == {(j.rule, j.outputs, j.resources) for j in jobs}


@pytest.fixture(scope="module")
def finished_paper_run(tmp_path_factory) -> Path:
    """A paper run recorded as finished on one two-turn dialogue: every planned job's outputs present and Snakemake's
    metadata written by `--touch` (params, code, software env), as after a real run. One dialogue keeps it short
    (`--touch` pauses 0.1 s per job)."""
    workdir = tmp_path_factory.mktemp("finished_paper")
    shutil.copy(ROOT / "config.yaml", workdir / "config.yaml")
    write_hub_corpus(workdir / PAPER_CONFIG["corpus"]["path"], [("dialogues_x", "pets_1_2", 2)])
    write_ravdess(workdir / PAPER_CONFIG["tts"]["emotion_reference"]["path"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COQUI_TOS_AGREED", "1")
        planned = paper_dry_run(workdir)
        materialize_outputs(workdir, planned.stdout + planned.stderr)
        snakemake(workdir, PAPER, "--touch", "--forceall", "--cores", "1")
    tts_table = next(job.outputs[0] for job in planned_jobs(planned) if job.rule == "synthesize_variants")
    voice = {"device": "cuda", "engine": "xtts", "language": "en"}
    assert repr({"default_a": voice, "default_b": voice}) in recorded_params(workdir, tts_table), "no demo voice"
    return workdir


def test_a_reordered_paper_config_recomputes_nothing_after_a_run(finished_paper_run, reordered_paper, licence_accepted):
    assert "Nothing to be done" in paper_dry_run(finished_paper_run).stdout
    assert "Nothing to be done" in paper_dry_run(finished_paper_run, reordered_paper).stdout


# The aggregates every change of the judges reruns (tests/workflow/test_partial_recompute.py).
AGGREGATES = {
    "compute_metrics",
    "control_metrics",
    "figures",
    "control_figures",
    "guide",
    "modality_analysis",
    "modality_figures",
    "decision_flow",
    "report",
    "all",
}
JUDGES_2026 = yaml.safe_load((ROOT / "configs" / "judges-2026.yaml").read_text())


def test_adding_a_2026_judge_to_the_finished_paper_run_plans_only_its_jobs_and_the_aggregates(
    finished_paper_run, tmp_path, licence_accepted
):
    """Qwen3-Omni's entry of configs/judges-2026.yaml copied into the paper config, as that file's header says: the dry
    run plans its judge jobs and the aggregates, nothing of the shared stages and no other judge's job."""
    config = yaml.safe_load(PAPER.read_text())
    config["judges"]["qwen3_omni_30b"] = JUDGES_2026["judges"]["qwen3_omni_30b"]
    config["evaluation"]["judges"].append("qwen3_omni_30b")
    configfile = tmp_path / "paper_with_qwen3_omni.yaml"
    configfile.write_text(yaml.safe_dump(config))
    jobs = planned_jobs(paper_dry_run(finished_paper_run, configfile))
    judge_jobs = [job for job in jobs if job.rule == "judge_qwen3_omni_30b"]
    assert judge_jobs and all(job.resource("gpu") == "2" for job in judge_jobs)
    assert {job.rule for job in jobs} - {"shard_index"} == {"judge_qwen3_omni_30b"} | AGGREGATES


def test_the_2026_judges_config_reads_the_papers_data_as_the_paper_does(finished_paper_run, licence_accepted):
    """configs/judges-2026.yaml's shared stages are the paper's key for key, so that in the finished paper run's folder
    it plans only the jobs of its judges the paper has not run (its Gemini entry is the paper's) and the aggregates."""
    for key in ("seed", "corpus", "audio", "variants", "tts", "asr", "metrics"):
        assert JUDGES_2026[key] == PAPER_CONFIG[key], key
    evaluation = {k: v for k, v in JUDGES_2026["evaluation"].items() if k != "judges"}
    assert evaluation == {k: v for k, v in PAPER_CONFIG["evaluation"].items() if k != "judges"}
    assert set(JUDGES_2026["evaluation"]["judges"]) == set(JUDGES_2026["judges"])
    jobs = planned_jobs(paper_dry_run(finished_paper_run, ROOT / "configs" / "judges-2026.yaml"))
    new_judges = {
        "judge_qwen3_omni_30b",
        "judge_voxtral_mini_3b",
        "judge_gemma3n_e4b",
        "judge_granite_speech_8b",
        "judge_gpt_audio_15",
    }
    assert {job.rule for job in jobs} - {"shard_index"} == new_judges | AGGREGATES
