"""The project's pairwise items: reading the JSONL, speaking the responses with Piper and espeak-ng, and the
item stage with its missing-audio policy."""

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import yaml

from lalm_judge.core.tables import PAIRWISE_ITEMS
from lalm_judge.pairwise.build import build_items, first_items
from lalm_judge.pairwise.items import ItemError, read_jsonl_items, response_paths, synthesize_items

ROOT = Path(__file__).resolve().parents[2]
DEMO_ITEMS = ROOT / "data" / "pairwise_demo" / "items.jsonl"
VOICES = {"joe": {"engine": "piper", "voice": "joe"}, "f3": {"engine": "espeak", "voice": "en-us+f3"}}


def test_demo_items_are_valid_and_use_the_demo_voices():
    items = read_jsonl_items(DEMO_ITEMS)
    assert len(items) == 40
    demo_voices = yaml.safe_load((ROOT / "configs" / "pairwise_demo.yaml").read_text())["pairwise"]["items"]["voices"]
    assert {r.voice for item in items for r in item.responses} == set(demo_voices)
    aspects = {aspect for item in items for aspect in item.aspects}
    assert {"gender", "truthfulness", "honesty", "helpfulness", "instruction_following"} <= aspects
    assert {"emotion", "implicit_emotion", "gender_emotion"} <= aspects
    assert {item.task_format for item in items} == {None, "explicit_tts", "explicit_dialogue", "implicit"}
    assert {label for item in items for _, label, _ in item.aspects.values()} == {"1", "2", "Tie"}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"id": "Bad Id"}, "must match"),
        ({"id": "x", "query": "q?", "responses": [{"text": "a", "voice": "joe"}]}, "exactly two 'responses'"),
        (
            {"id": "x", "query": "q?", "responses": [{"text": "a", "voice": "joe"}, {"text": "", "voice": "joe"}]},
            "response 2 of 'x' needs a 'text'",
        ),
        (
            {
                "id": "x",
                "query": "q?",
                "responses": [{"text": "a", "voice": "joe"}, {"text": "b", "voice": "joe"}],
                "aspects": {"politeness": {"label": "1"}},
            },
            "give its 'aspect_text'",
        ),
        (
            {
                "id": "x",
                "query": "q?",
                "responses": [{"text": "a", "voice": "joe"}, {"text": "b", "voice": "joe"}],
                "aspects": {"honesty": {"label": "3"}},
            },
            "is not 1, 2 or Tie",
        ),
    ],
)
def test_bad_items_are_rejected_naming_the_line(tmp_path, record, message):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ItemError, match=message) as error:
        read_jsonl_items(tmp_path)
    assert f"{path}:1" in str(error.value)


@pytest.mark.slow
def test_items_are_spoken_with_piper_and_espeak(tmp_path):
    items = synthesize_items(DEMO_ITEMS, VOICES, tmp_path / "audio", 16000, max_items=2, progress=False)
    assert PAIRWISE_ITEMS.conform(items, "items").collect().height == items.height == 4
    assert items["audio_ok"].all() and items["item_id"].unique(maintain_order=True).to_list() == [
        "pw_boiling",
        "pw_woman_voice",
    ]
    woman = items.filter(pl.col("item_id") == "pw_woman_voice").row(0, named=True)
    assert woman["response1_audio"] == "pw_woman_voice/response1.wav"
    assert all(Path(p).is_file() for p in response_paths(woman))
    assert 0.5 < woman["response1_duration_s"] < 5 and 0.5 < woman["response2_duration_s"] < 5
    assert woman["response2_text"] == "The library closes at six." and woman["source_format"] == "jsonl"
    again = synthesize_items(DEMO_ITEMS, VOICES, tmp_path / "again", 16000, max_items=2, progress=False)
    first_clip = (tmp_path / "audio" / woman["response1_audio"]).read_bytes()
    assert (tmp_path / "again" / woman["response1_audio"]).read_bytes() == first_clip  # deterministic voices
    assert again.drop("audio_root").equals(items.drop("audio_root"))


def test_unknown_voices_are_rejected(tmp_path):
    with pytest.raises(ItemError, match=r"voices \['f3', 'f3_happy', 'happy', 'm3', 'sad'\] that pairwise.items"):
        synthesize_items(DEMO_ITEMS, {"joe": VOICES["joe"]}, tmp_path, 16000, progress=False)


def test_item_stage_from_sagelm_records_excludes_missing_audio_on_record(tmp_path):
    fixtures = ROOT / "tests" / "fixtures" / "sagelm"
    semantic = json.loads((fixtures / "test_semantic.json").read_text())
    root = tmp_path / "data"
    for relative in semantic[0]["audios"]:  # the first pair's audio only
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        sf.write(root / relative, np.zeros(4000, dtype=np.float32), 16000)
    settings = {
        "format": "sagelm",
        "files": [str(fixtures / "test_semantic.json")],
        "audio_root": str(root),
        "missing_audio": "exclude",
        "max_items": None,
    }
    out, summary = tmp_path / "items.parquet", tmp_path / "summary.json"
    kept = build_items(settings, out, summary, None, progress=False)
    assert kept.height == 4 and kept["audio_ok"].all()
    written = json.loads(summary.read_text())
    assert written["n_missing_audio_items"] == 1 and written["n_items_judged"] == 1
    assert written["format"] == "sagelm" and len(written["first_missing_items"]) == 1
    assert pl.read_parquet(out)["config_hash"].n_unique() == 1
    with pytest.raises(ItemError, match=r"have missing or unreadable audio.*pairwise\.items\.missing_audio"):
        build_items({**settings, "missing_audio": "fail"}, out, summary, None, progress=False)
    # Excluding every item is an error, not an empty run.
    nowhere = {**settings, "audio_root": str(tmp_path / "nowhere")}
    with pytest.raises(ItemError, match="excluding them leaves no item to judge"):
        build_items(nowhere, out, summary, None, progress=False)


def test_first_items_keeps_whole_items_in_order():
    frame = pl.DataFrame({"item_id": ["b", "b", "a", "c"], "aspect": ["x", "y", "x", "x"]})
    assert first_items(frame, 2)["item_id"].to_list() == ["b", "b", "a"]
    assert first_items(frame, None).height == 4
