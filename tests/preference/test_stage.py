"""The pair stage and the export on small hand-made tables (short tone clips instead of speech)."""

import json

import numpy as np
import polars as pl
import soundfile as sf

from lalm_judge.core.tables import (
    PAIRWISE_ITEMS,
    PREFERENCE_ACOUSTIC,
    PREFERENCE_COMPLETIONS,
    PREFERENCE_RATINGS,
    PREFERENCE_TRANSCRIPTS,
)
from lalm_judge.pairwise.sagelm import parse_instruction
from lalm_judge.preference.stage import export_preference, pair_shard

SETTINGS = {
    "filters": {"max_wer": 0.2, "min_duration_s": 0.2},
    "pairs": {"pairs_per_item": 1, "tie_margin": 1, "aspects": ["helpfulness", "honesty"]},
    "rationales": {"generator": "template", "cache_dir": "unused", "llm": {}},
}


def write_inputs(tmp_path):
    completions, ratings, transcripts = [], [], []
    for c in range(3):
        completions.append({"item_id": "it", "shard": 0, "instruction": "Q?", "completion": c, "text": f"answer {c}"})
        ratings += [
            {"item_id": "it", "completion": c, "aspect": "helpfulness", "rating": 5 - c, "rationale": f"help {c}"},
            {"item_id": "it", "completion": c, "aspect": "honesty", "rating": None, "rationale": ""},
        ]
        for engine, wer in (("good", 0.0), ("bad", 0.5 if c == 1 else 0.0)):
            clip = f"audio/{engine}/shard0/it-c{c}.wav"
            (tmp_path / clip).parent.mkdir(parents=True, exist_ok=True)
            sf.write(tmp_path / clip, 0.1 * np.sin(np.arange(8000) / 5.0).astype(np.float32), 16000)
            transcripts.append(
                {"item_id": "it", "completion": c, "engine": engine, "clip": clip, "duration_s": 0.5, "wer": wer}
            )
    PREFERENCE_COMPLETIONS.frame(completions).write_parquet(tmp_path / "c.parquet")
    PREFERENCE_RATINGS.frame(ratings).write_parquet(tmp_path / "r.parquet")
    PREFERENCE_TRANSCRIPTS.frame(transcripts).write_parquet(tmp_path / "t.parquet")
    (tmp_path / "selection.json").write_text(json.dumps({"items_read": 1}))


def test_pairs_use_kept_clips_and_label_rated_aspects(tmp_path):
    write_inputs(tmp_path)
    pairs = pair_shard(
        tmp_path / "c.parquet",
        tmp_path / "r.parquet",
        [tmp_path / "t.parquet"],
        0,
        SETTINGS,
        tmp_path / "pairs.parquet",
        cache_dir=tmp_path / "cache",
    )
    assert pairs["aspect"].to_list() == ["helpfulness"]  # honesty is unrated
    row = pairs.row(0, named=True)
    if 1 in (row["completion1"], row["completion2"]):
        assert row["engine"] == "good"  # completion 1's "bad" clip failed the WER filter
    better = 1 if 5 - row["completion1"] > 5 - row["completion2"] else 2
    assert row["label"] == str(better) and row["rationale_status"] == "ok"
    assert row["rationale"].startswith(f"Response {better} is better than")


def test_the_export_writes_items_records_a_dataset_and_the_report(tmp_path):
    write_inputs(tmp_path)
    pair_shard(
        tmp_path / "c.parquet",
        tmp_path / "r.parquet",
        [tmp_path / "t.parquet"],
        0,
        SETTINGS,
        tmp_path / "pairs.parquet",
        cache_dir=tmp_path / "cache",
    )
    acoustic = {
        "item_id": "ac_gender_tts0_p0",
        "aspect": "gender",
        "style_category": "gender",
        "task_format": "explicit_tts",
        "requested": "female",
        "style1": "male",
        "style2": "female",
        "query": "Read it in a woman's voice: hi",
        "response_text": "hi",
        "response1_audio": "audio/good/shard0/it-c0.wav",
        "response2_audio": "audio/good/shard0/it-c1.wav",
        "label": "2",
        "rationale": "Response 2 follows it better.",
    }
    PREFERENCE_ACOUSTIC.frame([acoustic]).write_parquet(tmp_path / "a.parquet")
    report = export_preference(
        [tmp_path / "pairs.parquet"],
        [tmp_path / "a.parquet"],
        tmp_path / "selection.json",
        [tmp_path / "t.parquet"],
        SETTINGS["filters"],
        tmp_path,
        items_path=tmp_path / "export/items.parquet",
        sagelm_dir=tmp_path / "export/sagelm",
        hf_dir=tmp_path / "export/hf",
        report_path=tmp_path / "report.json",
    )
    items = PAIRWISE_ITEMS.read(tmp_path / "export/items.parquet")
    assert items["aspect"].to_list() == ["helpfulness", "gender"] and items["audio_ok"].all()
    records = json.loads((tmp_path / "export/sagelm/acoustic.json").read_text())
    parsed = parse_instruction(records[0]["instruction"])
    aspect, query = parsed.aspect_text, parsed.query
    assert (aspect, query) == ("gender instruction following", acoustic["query"])
    assert records[0]["output"] == "2\nResponse 2 follows it better." and records[0]["audios"][0].startswith("audio/")
    assert report["clips"] == {
        "bad": {"clips": 3, "kept": 2, "dropped_wer": 1, "dropped_short": 0},
        "good": {"clips": 3, "kept": 3, "dropped_wer": 0, "dropped_short": 0},
    }
    assert report["export"]["records"] == {"semantic": 1, "acoustic": 1}
    assert report["export"]["hf"]["splits"]["acoustic"]["rows"] == 1
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert pl.read_parquet(tmp_path / "export/hf/data/semantic-00000-of-00001.parquet").height == 1
