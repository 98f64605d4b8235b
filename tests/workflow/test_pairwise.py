"""The pairwise track's plan: its judge cells, the ASR models its cascade needs, the files its item stage reads; and
the documented command of the SageLM-scale config, planned (`snakemake -n`) with the study's test records present
and no preference data, with the cascade judge as published when asked for."""

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from lalm_judge.workflow.config import load_config
from lalm_judge.workflow.pairwise import PairwisePlan
from tests.support.workflow import planned_jobs

ROOT = Path(__file__).resolve().parents[2]


def test_cells_of_the_demo_config():
    plan = PairwisePlan(load_config(ROOT / "configs" / "pairwise_demo.yaml"))
    assert [cell.path for cell in plan.cells()] == [
        "tiny_qwen2_audio/audio-none/sagelm",
        "tiny_qwen2_audio/audio-none/explained",
        *(
            f"{judge}/text-{source}/{prompt}"
            for judge in ("smollm2_pmi", "relevance")
            for source in ("gt", "asr:whisper_tiny_en")
            for prompt in ("sagelm", "explained")
        ),
    ]
    assert plan.speaks_items()  # the demo speaks its own items
    assert plan.asr_models() == ["whisper_tiny_en"]
    assert plan.item_sources() == ["data/pairwise_demo/items.jsonl"]


def test_paper_scale_cells_audio_native_and_cascade():
    plan = PairwisePlan(load_config(ROOT / "configs" / "pairwise.yaml"))
    cells = {(c.judge, c.modality, c.transcript_source) for c in plan.cells()}
    assert {("sagelm", "audio", "none"), ("qwen2_audio_7b", "audio", "none"), ("gpt_audio", "audio", "none")} <= cells
    assert ("gpt6_luna", "text", "asr:whisper_large_v3") in cells
    assert len(plan.cells()) == 5 * 2  # five judges, one cell each, two prompts
    assert plan.item_sources() == ["data/sagelm/test_semantic.json", "data/sagelm/test_acoustic.json"]
    assert not plan.speaks_items()  # SageLM's records bring their audio: no audio folder is made


def documented_dry_run(workdir: Path, *configs: str) -> subprocess.CompletedProcess:
    """`snakemake pairwise --configfile <configs> -n` as configs/pairwise.yaml documents it, in `workdir`."""
    (workdir / "data" / "sagelm").mkdir(parents=True)
    for name in ("test_semantic.json", "test_acoustic.json"):  # the records are read by the item job, not planned
        (workdir / "data" / "sagelm" / name).write_text("[]")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "sk-placeholder", "PYTHONPATH": str(ROOT)}
    env["COQUI_TOS_AGREED"] = "1"  # the preference section's XTTS voices are checked at parse
    command = [sys.executable, "-m", "snakemake", "pairwise", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(workdir)]
    command += ["--configfile", *(str(ROOT / "configs" / c) for c in configs)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=True)


@pytest.mark.slow
def test_the_documented_command_plans_the_track_without_the_preference_data(tmp_path):
    jobs = planned_jobs(documented_dry_run(tmp_path / "run", "pairwise.yaml"))
    assert not (tmp_path / "run" / "data" / "ultrafeedback").exists()
    assert Counter(job.rule for job in jobs)["pairwise_judge"] == 10 and not any("preference" in j.rule for j in jobs)
    judged = {job.outputs[0].split("/")[3] for job in jobs if job.rule == "pairwise_judge"}
    assert "gpt6_luna" in judged and "gpt4o" not in judged

    published = planned_jobs(documented_dry_run(tmp_path / "published", "pairwise.yaml", "pairwise_as_published.yaml"))
    judged = {job.outputs[0].split("/")[3] for job in published if job.rule == "pairwise_judge"}
    assert "gpt4o" in judged and "gpt6_luna" not in judged
