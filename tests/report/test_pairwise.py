"""The pairwise report from pairwise metric tables: its sections, the audio-native against cascade comparison,
the duration figure, and the weak-judge warning."""

import json

import polars as pl
import pytest

from lalm_judge.core.tables import PAIRWISE_PREDICTIONS
from lalm_judge.pairwise.metrics import PairwiseMetricSettings, read_pairwise_stage, run_pairwise_stage
from lalm_judge.report.pairwise import build_pairwise_report

LABELS = ["1", "2", "Tie", "1", "2", "1"]


def predictions(judge, modality, source, forward, swapped):
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
                "duration_s": 4.0 * (index // 2 + 1),
                "long_audio_action": "truncated" if index == 0 else "none",
            }
        )
    return PAIRWISE_PREDICTIONS.frame(rows)


@pytest.fixture
def stage(tmp_path):
    native = predictions("omni", "audio", "none", LABELS, ["2", "1", "Tie", "2", "1", "2"])  # right, consistent
    cascade = predictions("cascade", "text", "asr:whisper", ["1"] * 6, ["1"] * 6)  # always the first shown
    paths = []
    for name, frame in (("native", native), ("cascade", cascade)):
        paths.append(tmp_path / f"{name}.parquet")
        frame.write_parquet(paths[-1])
    settings = PairwiseMetricSettings(n_boot=200, seed=1, duration_bins=(0.0, 6.0))
    run_pairwise_stage(paths, tmp_path / "metrics", settings)
    summary = tmp_path / "items_summary.json"
    summary.write_text(json.dumps({"format": "jsonl", "files": ["items.jsonl"], "n_items_judged": 3, "n_rows": 6}))
    return tmp_path


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


def test_report_sections_figure_and_weak_judges(stage):
    config = {
        "seed": 0,
        "judges": {
            "omni": {"backend": "vllm", "model": "m"},
            "cascade": {"backend": "openai", "model": "c", "weak": "a stub"},
        },
        "pairwise": {"prompts": ["sagelm"], "long_audio": {"policy": "truncate", "max_response_s": 60}},
    }
    index = build_pairwise_report(
        metrics_dir=stage / "metrics",
        items_summary_path=stage / "items_summary.json",
        config=config,
        out_dir=stage / "r",
        prediction_paths=[stage / "native.parquet", stage / "cascade.parquet"],
    )
    page = index.read_text()
    # The findings, generated: the always-right cell is above chance (labels 1, 2, Tie, 1, 2, 1: half are 1).
    findings = read_pairwise_stage(stage / "metrics").findings
    assert findings.filter(pl.col("scope") == "overall")["judge"].to_list() == ["omni"]
    assert findings.filter(pl.col("scope") == "overall")["chance"].item() == pytest.approx(0.5)
    assert "omni (audio, none, sagelm prompt, audio native) is right on 100% of all its verdicts" in page
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
