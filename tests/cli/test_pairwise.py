"""`lalm-judge pairwise import|export|metrics`, run as users run it (the installed console script)."""

import json

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from tests.cli.test_cli import ROOT, lalm_judge

FIXTURES = ROOT / "tests" / "fixtures" / "sagelm"


@pytest.mark.slow
def test_import_reports_missing_audio_and_export_round_trips(tmp_path):
    semantic = json.loads((FIXTURES / "test_semantic.json").read_text())
    audio_root = tmp_path / "data"
    for path in {a for record in semantic[:4] for a in record["audios"]}:  # the second pair's audio is missing
        (audio_root / path).parent.mkdir(parents=True, exist_ok=True)
        sf.write(audio_root / path, np.zeros(4000, dtype=np.float32), 16000)
    result = lalm_judge(
        "pairwise", "import", "--format", "sagelm", str(FIXTURES / "test_semantic.json"),
        "--audio-root", str(audio_root), "--out", str(tmp_path / "items"), "--missing-audio", "keep",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warning = "warning: 1 of 2 items (4 rows) have missing or unreadable audio; first ids: ultrachat_2002_1_"
    assert warning in result.stderr and result.stderr.count("have missing or unreadable audio") == 1
    summary = json.loads((tmp_path / "items" / "items_summary.json").read_text())
    assert summary["n_missing_audio_items"] == 1 and summary["n_items_judged"] == 2
    items = pl.read_parquet(tmp_path / "items" / "items.parquet")
    assert items.height == 8 and items["audio_ok"].sum() == 4

    result = lalm_judge(
        "pairwise", "export", "--format", "sagelm", str(tmp_path / "items" / "items.parquet"),
        "--out", str(tmp_path / "export"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "export" / "test_semantic.json").read_text()) == semantic

    result = lalm_judge(
        "pairwise", "import", "--format", "sagelm", str(FIXTURES / "test_semantic.json"),
        "--audio-root", str(audio_root), "--out", str(tmp_path / "refused"),
    )  # fmt: skip
    # The default is the workflow's: refuse, naming the flag that changes it.
    assert result.returncode == 2 and "have missing or unreadable audio" in result.stderr
    assert "--missing-audio exclude" in result.stderr and not (tmp_path / "refused").exists()
    result = lalm_judge(
        "pairwise", "import", "--format", "sagelm", str(FIXTURES / "test_semantic.json"),
        "--audio-root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "none"), "--missing-audio", "exclude",
    )  # fmt: skip
    assert result.returncode == 2 and "excluding them leaves no item to judge" in result.stderr


def test_metrics_of_a_predictions_file(tmp_path):
    rows = [
        {"item_id": "p1", "aspect": "helpfulness", "label": "1", "prediction": "1\nbetter", "duration_s": 12.0},
        {"item_id": "p1", "aspect": "honesty", "label": "Tie", "prediction": "2", "duration_s": 12.0},
        {"item_id": "p2", "aspect": "helpfulness", "label": "2", "prediction": "I cannot compare", "duration_s": 70},
    ]
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "metrics.json"
    result = lalm_judge(
        "pairwise", "metrics", str(predictions), "--out", str(out), "--bootstrap", "200", "--duration-bins", "0,60"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["overall"]["accuracy"]["value"] == 1 / 3
    assert document["overall"]["agreement"]["value"] == 0.5
    assert document["overall"]["n_unparseable"] == 1
    assert [entry["bin"] for entry in document["by_duration"]] == ["0-60", ">=60"]
    assert set(document["aspects"]) == {"helpfulness", "honesty"}
    bad = lalm_judge("pairwise", "metrics", str(tmp_path / "absent.jsonl"), "--out", str(out))
    assert bad.returncode == 2 and "does not exist" in bad.stderr
