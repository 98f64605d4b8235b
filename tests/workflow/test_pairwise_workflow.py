"""The pairwise track end to end on its test config (tests/config/pairwise.yaml), in a scratch directory:
project items spoken with Piper and espeak-ng, Whisper tiny.en transcripts, a random-weight Qwen2-Audio
hearing both responses and a random-weight Llama reading transcripts (the cascade), every item in both
orders, metrics and the report. The models' verdicts are random; the test checks the track, not them."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
import yaml

from lalm_judge.core.tables import PAIRWISE_METRICS, PAIRWISE_PREDICTIONS
from lalm_judge.core.vocabulary import VERDICT_STATUSES
from lalm_judge.pairwise.metrics import PairwiseMetricSettings, compute_pairwise_metrics
from lalm_judge.workflow.config import load_config
from lalm_judge.workflow.pairwise import PairwisePlan, audit_predictions_path
from tests.support.workflow import ROOT, planned_jobs, snakemake, write_config

pytestmark = [pytest.mark.workflow, pytest.mark.slow]
CONFIG = ROOT / "tests" / "config" / "pairwise.yaml"


@pytest.fixture(scope="module")
def finished_run(finished_pairwise_run):
    return finished_pairwise_run


def test_every_cell_judged_every_item_in_both_orders(finished_run):
    workdir, _, config = finished_run
    items = pl.read_parquet(workdir / "results/pairwise/items.parquet")
    assert items["item_id"].n_unique() == 3 and items.height == 6
    cells = PairwisePlan(config).cells()
    assert {c.transcript_source for c in cells} == {"none", "gt", "asr:whisper_tiny_en"}
    for cell in cells:
        predictions = PAIRWISE_PREDICTIONS.read(workdir / f"results/pairwise/predictions/{cell.path}.parquet")
        assert predictions.select("item_id", "aspect").equals(items.select("item_id", "aspect"))
        assert predictions["prediction"].null_count() == 0 and predictions["prediction_swapped"].null_count() == 0
        for column in ("verdict_status", "verdict_swapped_status", "verdict_combined_status"):
            assert set(predictions[column]) <= set(VERDICT_STATUSES)
        assert set(predictions["verdict_rule"]) == {"sagelm"}  # the schema's default, recorded per row
        assert predictions["served_model"].null_count() == 0 and predictions["finish_reason"].null_count() == 0
        # Every request went through the judge's request engine, each distinct one computed once.
        counts = json.loads((workdir / f"logs/pairwise/predictions/{cell.path}.requests.json").read_text())
        assert (counts["requests"], counts["cached"], counts["model_loads"]) == (12, 0, 1)
        assert counts["computed"] == counts["distinct_requests"]
        if cell.modality == "audio":
            # 2.5 s per response (the test config's cut): longer responses are cut, and the rows say so.
            assert set(predictions["long_audio_action"]) <= {"none", "truncated"}
            assert "truncated" in set(predictions["long_audio_action"])
            assert predictions["audio_limit_s"].to_list() == [2.5] * 6
        else:
            assert set(predictions["long_audio_action"]) == {"none"}
            expected = "bundled:tiny.en" if cell.transcript_source.is_asr else None
            assert predictions["asr_model"].to_list() == [expected] * 6


def test_metrics_per_cell_follow_the_documented_layout(finished_run):
    workdir, _, config = finished_run
    document = json.loads((workdir / "results/pairwise/metrics/metrics.json").read_text())
    assert len(document["cells"]) == len(PairwisePlan(config).cells())
    settings = PairwiseMetricSettings(
        n_boot=config["pairwise"]["metrics"]["bootstrap"],
        seed=config["seed"],
        duration_bins=tuple(config["pairwise"]["metrics"]["duration_bins"]),
    )
    for cell in document["cells"]:
        assert {"aspects", "overall", "by_duration"} <= set(cell)
        assert {"swap_consistency", "agreement_combined", "parse_failure_rate"} <= set(cell["overall"])
        assert [entry["bin"] for entry in cell["by_duration"]][:3] == ["0-3", "3-5", ">=5"]
        # The stage and `lalm-judge pairwise metrics` on the cell's own predictions agree.
        path = f"{cell['judge']}/{cell['modality']}-{cell['transcript_source']}/{cell['prompt']}"
        alone = compute_pairwise_metrics(
            pl.read_parquet(workdir / f"results/pairwise/predictions/{path}.parquet"), settings
        )
        assert alone["overall"] == cell["overall"]
    table = PAIRWISE_METRICS.read(workdir / "results/pairwise/metrics/metrics.parquet")
    assert set(table["mode"]) == {"audio_native", "cascade", "text_oracle"}


def test_report_has_the_pairwise_sections(finished_run):
    workdir, _, _ = finished_run
    page = (workdir / "results/pairwise/report/index.html").read_text()
    for heading in (
        "Agreement and accuracy per judge cell and aspect",
        "Swap consistency",
        "Audio-native against cascade",
    ):
        assert f"<h2>{heading}</h2>" in page
    assert "2 of 2 judges" in page and "weak demo models" in page
    assert "<th>verdict rule</th>" in page and "<td>sagelm</td>" in page
    assert (workdir / "results/pairwise/report/figures/agreement_by_duration.png").exists()


def test_the_identical_audit_is_judged_by_every_cell_and_reported(finished_run):
    workdir, _, config = finished_run
    plan = PairwisePlan(config)
    assert len(plan.audit_cells()) == len(plan.cells())  # identical changes the words too: every cell gets it
    for condition, cell in plan.audit_cells():
        predictions = PAIRWISE_PREDICTIONS.read(workdir / audit_predictions_path(condition, cell.path))
        assert predictions.height == 12 and set(predictions["audit_condition"]) == {"identical"}
        counts = json.loads(
            (workdir / f"logs/pairwise/audit/identical/predictions/{cell.path}.requests.json").read_text()
        )
        assert (counts["requests"], counts["cached"]) == (24, 0)  # 6 rows x 2 changed responses x 2 orders
    audit = pl.read_parquet(workdir / "results/pairwise/metrics/audit.parquet")
    assert set(audit["condition"]) == {"identical"} and set(audit["measure"]) == {"tie_share"}
    assert audit.height == len(plan.cells()) and audit["flagged"].null_count() == 0
    page = (workdir / "results/pairwise/report/index.html").read_text()
    assert "<h2>Surface-cue audit</h2>" in page


def test_adding_an_audit_condition_computes_only_its_requests(finished_run, tmp_path_factory):
    """On a copy of the run: adding pad_1 plans its item, ASR and judge jobs (the audio cells and the cascade; not
    the ground-truth text cells, whose texts it leaves as they were) and the aggregates, and nothing clean; its
    judge jobs compute only their own requests."""
    # A folder as deep as the run's, so that the prompt files' paths relative to it stay the same.
    workdir = tmp_path_factory.mktemp("added")
    shutil.copytree(finished_run[0], workdir, symlinks=True, dirs_exist_ok=True)
    config = yaml.safe_load(CONFIG.read_text())
    config["pairwise"]["conditions"] = ["identical", "pad_1"]
    configfile = write_config(workdir, config)
    jobs = planned_jobs(snakemake(workdir, configfile, "-n", "--cores", "1"))
    plan = PairwisePlan(load_config(configfile))
    added = [cell for condition, cell in plan.audit_cells() if condition == "pad_1"]
    assert {cell.transcript_source for cell in added} == {"none", "asr:whisper_tiny_en"}
    expected = {audit_predictions_path("pad_1", cell.path) for cell in added}
    judged = {output for job in jobs if job.rule == "pairwise_audit_judge" for output in job.outputs}
    assert judged == expected, [(j.rule, j.outputs, j.reason) for j in jobs]
    assert {job.rule for job in jobs} == {
        "pairwise_audit_items",
        "pairwise_audit_transcribe",
        "pairwise_audit_judge",
        "pairwise_metrics",
        "pairwise_report",
        "all",
    }
    snakemake(workdir, configfile, "--cores", "2", timeout_s=900)
    for cell in added:
        counts = json.loads((workdir / f"logs/pairwise/audit/pad_1/predictions/{cell.path}.requests.json").read_text())
        assert (counts["requests"], counts["cached"], counts["computed"]) == (24, 0, counts["distinct_requests"])
    audit = pl.read_parquet(workdir / "results/pairwise/metrics/audit.parquet")
    assert set(audit["condition"]) == {"identical", "pad_1"}


def test_an_unchanged_rerun_schedules_nothing(finished_run):
    workdir, configfile, _ = finished_run
    result = snakemake(workdir, configfile, "-n", "--cores", "2")
    assert "Nothing to be done" in result.stdout + result.stderr
