"""Judges with different shard counts (`evaluation.shards: auto`, lalm_judge.workflow.sizing): each count has its own
shard indexes, each index lists exactly the manifests of its shard under its count, and each judge's jobs read the
indexes of their own count. From a dry run of the test workflow on five demo dialogues."""

from __future__ import annotations

import json

import pytest

from lalm_judge.core.files import shard_of
from lalm_judge.workflow.config import load_config
from lalm_judge.workflow.plan import Plan
from tests.support.workflow import DEMO_CORPUS, load_test_config, planned_jobs, snakemake, write_config, write_corpus

pytestmark = [pytest.mark.workflow]

DIALOGUES = [json.loads(line)["id"] for line in DEMO_CORPUS.read_text().splitlines() if line.strip()][:5]


def test_judges_with_different_shard_counts_read_their_own_shard_indexes(tmp_path, monkeypatch):
    write_corpus(tmp_path, dialogue_ids=DIALOGUES, extra=())
    config = load_test_config()
    config["evaluation"].update(judges=["minilm", "smollm2"], shards="auto")
    # SmolLM2 at a stated 30 requests/h in 60-minute jobs needs several shards; the embedding judge needs one.
    config["judges"]["smollm2"]["schedule"].update(requests_per_hour=30, resources={"runtime": 60})
    configfile = write_config(tmp_path, config)
    monkeypatch.chdir(tmp_path)  # the corpus path in the config is relative to the working directory
    plan = Plan(load_config(configfile))
    counts = {judge: plan.judge_shard_count(judge) for judge in ("minilm", "smollm2")}
    assert counts["minilm"] == 1 < counts["smollm2"], plan.sizing_table()

    jobs = planned_jobs(snakemake(tmp_path, configfile, "-n", "--cores", "1", "scores"))

    indexes = {job.outputs[0]: job for job in jobs if job.rule == "shard_index"}
    expected = {f"results/manifests/shards/of{n}/shard{k}.json" for n in counts.values() for k in plan.shards_of(n)}
    assert set(indexes) == expected
    for path, job in indexes.items():
        n, k = (int(part) for part in path.removeprefix("results/manifests/shards/of").split(".")[0].split("/shard"))
        manifests = {p for p in job.inputs if p.startswith("results/manifests/") and "shards" not in p}
        assert manifests == {f"results/manifests/{d}.json" for d in DIALOGUES if shard_of(d, n) == k}, path
    for judge, n in counts.items():
        judge_jobs = [job for job in jobs if job.rule == f"judge_{judge}"]
        assert len(judge_jobs) == len(plan.shards(judge))
        for job in judge_jobs:
            (index,) = [p for p in job.inputs if "/shards/" in p]
            assert index.startswith(f"results/manifests/shards/of{n}/"), (judge, index)
            shard = index.split("/shard")[-1].removesuffix(".json")
            # The folder of its score tables, and their index, which the aggregates read instead of every table.
            folder = f"results/scores/{judge}/shard{shard}"
            assert set(job.outputs) == {folder, f"{folder}.index.json"}
