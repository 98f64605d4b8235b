"""The pairwise report from pairwise metric tables: its sections, the findings beside the length baseline with
their family stated, the audio-native against cascade comparison, the duration figure, and the weak-judge
warning."""

import json
import re

import polars as pl
import pytest

from lalm_judge.core.tables import PAIRWISE_PREDICTIONS
from lalm_judge.pairwise.metrics import PairwiseMetricSettings, read_pairwise_stage, run_pairwise_stage
from lalm_judge.report.pairwise import build_pairwise_report

LABELS = ["1", "2", "Tie", "1", "2", "1"]


def predictions(judge, modality, source, forward, swapped, rule="sagelm"):
    rows = []
    for index, (label, answer, answer_swapped) in enumerate(zip(LABELS, forward, swapped)):
        rows.append(
            {
                "item_id": f"item{index // 2}",
                "aspect": ["helpfulness", "truthfulness"][index % 2],
                "label": label,
                "judge": judge,
                "modality": modality,
                "transcript_source": source,
                "prompt": "sagelm",
                "prediction": answer,
                "prediction_swapped": answer_swapped,
                "verdict_status": "ok",
                "verdict_swapped_status": "ok",
                "verdict_combined_status": "ok",
                "verdict_rule": rule,
                "duration_s": 4.0 * (index // 2 + 1),
                # The first response is the longer one of items 0 and 1, the second of item 2.
                "response1_duration_s": 3.0 if index < 4 else 1.0,
                "response2_duration_s": 1.0 if index < 4 else 3.0,
                "long_audio_action": "truncated" if index == 0 else "none",
            }
        )
    return PAIRWISE_PREDICTIONS.frame(rows)


def write_stage(tmp_path, settings: PairwiseMetricSettings):
    native = predictions("omni", "audio", "none", LABELS, ["2", "1", "Tie", "2", "1", "2"])  # right, consistent
    cascade = predictions("cascade", "text", "asr:whisper", ["1"] * 6, ["1"] * 6, "lenient")  # always the first shown
    paths = []
    for name, frame in (("native", native), ("cascade", cascade)):
        paths.append(tmp_path / f"{name}.parquet")
        frame.write_parquet(paths[-1])
    run_pairwise_stage(paths, tmp_path / "metrics", settings)
    summary = tmp_path / "items_summary.json"
    summary.write_text(json.dumps({"format": "jsonl", "files": ["items.jsonl"], "n_items_judged": 3, "n_rows": 6}))
    return tmp_path


@pytest.fixture
def stage(tmp_path):
    """Three items: the minimum support is lowered to 1 so that the intervals are computed and shown."""
    return write_stage(tmp_path, PairwiseMetricSettings(n_boot=200, seed=1, duration_bins=(0.0, 6.0), min_items=1))


def test_stage_tables_compare_the_best_audio_native_and_cascade_cells(stage):
    tables = read_pairwise_stage(stage / "metrics")
    overall = tables.comparisons.filter((pl.col("group") == "all") & (pl.col("metric") == "agreement")).row(
        0, named=True
    )
    assert overall["cell_a"] == "omni/audio-none/sagelm" and overall["value_a"] == 1.0
    assert overall["cell_b"] == "cascade/text-asr:whisper/sagelm"
    # cascade always answers 1: agreement over labels 1, 2, Tie, 1, 2, 1 = (1 + 0 + 0.5 + 1 + 0 + 1) / 6
    assert overall["value_b"] == pytest.approx(3.5 / 6)
    assert overall["difference"] == pytest.approx(1 - 3.5 / 6)
    assert overall["ci_low"] <= overall["difference"] <= overall["ci_high"]
    swap = tables.metrics.filter(
        (pl.col("metric") == "swap_consistency") & (pl.col("group") == "all") & (pl.col("judge") == "cascade")
    )
    assert swap["value"].item() == 0.0  # answering "1" in both orders is never consistent
    statuses = tables.statuses.filter((pl.col("judge") == "omni") & (pl.col("order") == "long_audio"))
    assert dict(statuses.select("status", "n").iter_rows()) == {"none": 5, "truncated": 1}
    assert [cell["mode"] for cell in tables.documents] == ["audio_native", "cascade"]
    assert [cell["verdict_rule"] for cell in tables.documents] == ["sagelm", "lenient"]


def test_report_sections_figure_and_weak_judges(stage):
    config = {
        "seed": 0,
        "judges": {
            "omni": {"backend": "vllm", "model": "m"},
            "cascade": {"backend": "openai", "model": "c", "weak": "a stub"},
        },
        "pairwise": {
            "prompts": ["sagelm"],
            "verdict_rule": "sagelm",
            "long_audio": {"policy": "truncate", "max_response_s": 60},
        },
    }
    index = build_pairwise_report(
        metrics_dir=stage / "metrics",
        items_summary_path=stage / "items_summary.json",
        config=config,
        out_dir=stage / "r",
        prediction_paths=[stage / "native.parquet", stage / "cascade.parquet"],
    )
    page = index.read_text()
    # The findings, generated: the always-right cell is above chance (labels 1, 2, Tie, 1, 2, 1: half are 1) and
    # above 'the longer response wins' (1, 1, 1, 1, 2, 2: right on rows 0, 3 and 4).
    findings = read_pairwise_stage(stage / "metrics").findings
    claimed = findings.filter(pl.col("finding") & (pl.col("scope") == "overall"))
    assert claimed["judge"].to_list() == ["omni"] and claimed["chance"].item() == pytest.approx(0.5)
    assert (claimed["length_baseline"].item(), claimed["difference"].item()) == pytest.approx((0.5, 0.5))
    # Every (cell, group) with enough items is a hypothesis of one family: 2 cells x (all, semantic, 2 aspects).
    assert set(findings["family_size"]) == {8} and set(findings["correction"]) == {"benjamini-hochberg"}
    assert findings.filter(pl.col("judge") == "cascade")["finding"].sum() == 0
    assert "omni (audio, none, sagelm prompt, audio native) is right on 100% of all its verdicts" in page
    assert "and above &#x27;the longer response wins&#x27;, right on 50% of the same rows (difference +50%" in page
    # On its three helpfulness rows the baseline is right twice: 100 % against 67 % on three items is no finding.
    helpfulness = findings.filter((pl.col("judge") == "omni") & (pl.col("group") == "helpfulness")).row(0, named=True)
    assert (helpfulness["accuracy"], helpfulness["finding"]) == (1.0, False)
    assert helpfulness["length_baseline"] == pytest.approx(2 / 3) and helpfulness["difference_ci_low"] == 0.0
    family = "pairwise findings: 8 hypotheses tested, false-discovery rate controlled by Benjamini-Hochberg"
    assert f"{family}; 2 claimed" in page and '<details class="hypotheses">' in page
    # SageLM's semantic table in percent, and the answers of every item in both orders.
    assert "<h3>Semantic aspects</h3>" in page and "100.0 [100.0, 100.0]" in page
    assert "<summary>cascade · text-asr:whisper · sagelm: " in page and page.count("<details>") == 2
    for heading in (
        "Agreement and accuracy per judge cell and aspect",
        "Swap consistency",
        "Agreement against duration",
        "Audio-native against cascade",
        "Verdict statuses and length policy",
        "Findings",
        "In SageLM&#x27;s layout: semantic and acoustic aspects apart",
        "Answers per item",
    ):
        assert f"<h2>{heading}</h2>" in page
    assert "1 of 2 judges (cascade) are weak demo models" in page
    assert "omni · audio-none · sagelm" in page and "1.000 [1.000, 1.000]" in page
    # The rule each cell's numbers were read with stands beside them, and the run's rule in the settings.
    assert "<th>verdict rule</th>" in page
    assert "<td>cascade · text-asr:whisper · sagelm</td><td>cascade</td><td>lenient</td>" in page
    assert "<td>omni · audio-none · sagelm</td><td>audio_native</td><td>sagelm</td>" in page
    assert "sagelm (docs/metrics.md; per cell in the tables below)" in page
    assert (stage / "r" / "figures" / "agreement_by_duration.png").stat().st_size > 0
    assert (stage / "r" / "figures" / "agreement_by_duration.svg").exists()
    again = build_pairwise_report(
        metrics_dir=stage / "metrics",
        items_summary_path=stage / "items_summary.json",
        config=config,
        out_dir=stage / "r",
        prediction_paths=[stage / "native.parquet", stage / "cascade.parquet"],
    )
    assert again.read_text() == page  # depends only on its inputs


def test_values_on_fewer_items_than_the_minimum_have_no_interval_and_the_report_says_so(tmp_path):
    """The default minimum support (10 items) and three items: every value is not_estimable, without interval,
    the paired comparison too, and one banner says so."""
    root = write_stage(tmp_path, PairwiseMetricSettings(n_boot=50, seed=1, duration_bins=(0.0, 6.0)))
    tables = read_pairwise_stage(root / "metrics")
    assert set(tables.metrics.drop_nulls("value")["status"]) == {"not_estimable"}
    assert tables.metrics["ci_low"].is_null().all() and tables.metrics["ci_high"].is_null().all()
    assert set(tables.comparisons["status"]) == {"not_estimable"} and tables.comparisons["ci_low"].is_null().all()
    index = build_pairwise_report(
        metrics_dir=root / "metrics", items_summary_path=root / "items_summary.json", config={}, out_dir=root / "r"
    )
    page = index.read_text()
    banners = [w for w in re.findall(r'<div class="warning">(.*?)</div>', page) if "Minimum support" in w]
    assert len(banners) == 1 and "fewer than 10 items" in banners[0] and "1 to 3)" in banners[0]
    assert "1.000 (not estimable)" in page
