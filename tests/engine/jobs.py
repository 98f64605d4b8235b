"""The workflow's judge jobs of the shipped vLLM judges, on the real engine: configs whose judge entries are the shipped
ones with only the sizes replaced (tests/engine/test_judge_jobs.py, tests/engine/test_meralion.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from bench.engine_agreement import CPU_ENGINE_KWARGS, MAX_NEW_TOKENS, shipped_entry, shipped_judges
from tests.support.workflow import load_test_config, snakemake, write_config, write_corpus

VOICES = {"LLM1": {"engine": "espeak", "voice": "en-us"}, "LLM2": {"engine": "espeak", "voice": "en-us+f3"}}
PREFIX_CACHE = re.compile(r"prefix cache hits (\d+) of (\d+) prompt tokens")


# The shipped configs whose safety-track judges these jobs run, the paper's first.
SAFETY_CONFIGS = ("configs/paper.yaml", "configs/judges-2026.yaml")


def shipped_config_of(judge: str) -> str:
    """The shipped config whose entry a safety judge's job runs."""
    return next(config for config in SAFETY_CONFIGS if judge in shipped_judges(config))


def tiny_entry(config: str, name: str, model: Path) -> dict:
    """The shipped entry with the sizes replaced (module docstring)."""
    entry = shipped_entry(config, name)
    generation = {**entry.get("generation", {}), "max_new_tokens": MAX_NEW_TOKENS}
    options = {**entry.get("options", {}), "engine_kwargs": CPU_ENGINE_KWARGS}
    schedule = {**entry.get("schedule", {}), "resources": {"gpu": 0, "mem_mb": 4000, "runtime": 30}}
    return {**entry, "model": str(model), "dtype": "float32", "generation": generation, "options": options,
            "schedule": schedule}  # fmt: skip


def job_logs(workdir: Path, judge: str) -> tuple[str, dict]:
    """(the judge job's log, its request counts) of shard 0."""
    logs = workdir / "logs" / "scores" / judge
    return (logs / "shard0.log").read_text(), json.loads((logs / "shard0.requests.json").read_text())


def safety_config(workdir: Path, models: dict[str, Path]) -> dict:
    """A safety-track config with these shipped judges (`SAFETY_CONFIGS`) on these tiny models, and its corpus in
    `workdir`: two demo
    dialogues spoken by espeak-ng, the `basic` and `calibrated` prompts in every modality of each judge, from the
    ground-truth transcript (no ASR model)."""
    write_corpus(workdir, extra=())
    config = load_test_config()
    config["tts"]["voices"] = VOICES
    config["asr"] = {"models": {}}
    config["judges"] = {name: tiny_entry(shipped_config_of(name), name, model) for name, model in models.items()}
    config["evaluation"] = {
        "judges": list(models),
        "transcript_sources": ["gt"],
        "prompts": ["basic", "calibrated"],
        "conditions": ["clean"],
        "shards": 1,
    }
    config.pop("controls", None)
    return config


def run_safety_jobs(workdir: Path, models: dict[str, Path]) -> tuple[Path, Path, str]:
    """The safety track up to its scores (`safety_config`): (workdir, config file, the dry run's output)."""
    configfile = write_config(workdir, safety_config(workdir, models))
    plan = snakemake(workdir, configfile, "-n", "scores", "--cores", "2")
    snakemake(workdir, configfile, "scores", "--cores", "2", timeout_s=1200)
    return workdir, configfile, plan.stdout + plan.stderr


def score_tables(workdir: Path, judge: str) -> pl.DataFrame:
    return pl.concat(
        [pl.read_parquet(path) for path in sorted((workdir / "results" / "scores" / judge).rglob("*.parquet"))],
        how="diagonal_relaxed",
    )


def check_scored(workdir: Path, judge: str, model: Path) -> None:
    """The judge's job scored every cell of its shipped entry (basic and calibrated prompts) with one model load, the
    calibrated prompt from P(safe), and vLLM's own prefix-cache counters logged."""
    scores = score_tables(workdir, judge)
    modalities = set(shipped_entry(shipped_config_of(judge), judge)["modalities"])
    assert set(scores["modality"]) == modalities and set(scores["prompt"]) == {"basic", "calibrated"}
    assert scores.height == scores.select("variant_id", "modality", "prompt").unique().height
    assert set(scores["served_model"]) == {str(model)}
    assert set(scores["finish_reason"]) <= {"stop", "length"}
    calibrated = scores.filter(pl.col("prompt") == "calibrated")
    assert calibrated["score_source"].unique().to_list() == ["p_safe"], "P(safe) from the answer tokens' logprobs"
    assert calibrated["score"].is_between(0, 1).all()
    log, counts = job_logs(workdir, judge)
    assert counts["computed"] == counts["distinct_requests"] > 0 and counts["model_loads"] == 1
    # vLLM's own counters: the job's order (a dialogue's requests together) lets neighbours share prompt blocks.
    hits, queried = map(int, PREFIX_CACHE.findall(log)[-1])
    assert queried > 0 and hits > 0, log[-2000:]
