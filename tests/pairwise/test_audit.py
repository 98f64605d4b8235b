"""The audit item tables (lalm_judge.pairwise.audit): every clean row twice, response 1 changed and response 2
changed, the unchanged response the clean clip itself, the changed one measured as asked (gain, padding), spoken
again for `repeat` and `voice` by Piper and espeak-ng, and the config checks that refuse what cannot be built."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import soundfile as sf
import yaml

from lalm_judge.audio.surface import rms_db
from lalm_judge.audio.waveform import read_audio
from lalm_judge.pairwise.audit import Respeaker, build_audit_items, other_voice, respoken_voice_error
from lalm_judge.pairwise.items import ItemError, response_paths, synthesize_items
from lalm_judge.workflow.config import ConfigError, validate_config
from tests.support.workflow import ROOT

DEMO_ITEMS = ROOT / "data" / "pairwise_demo" / "items.jsonl"
VOICES = {
    "joe": {"engine": "piper", "voice": "joe"},
    "f3": {"engine": "espeak", "voice": "en-us+f3"},
    "m3": {"engine": "espeak", "voice": "en-us+m3"},
}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clean")
    items = synthesize_items(DEMO_ITEMS, VOICES, folder / "audio", 16000, max_items=1, progress=False)
    return items, folder


def extra(row) -> dict:
    return json.loads(row["source_extra"])


@pytest.mark.parametrize("condition", ["gain_6", "gain_-3", "gain_20", "pad_1"])
def test_each_row_is_changed_once_per_response_and_measured(clean, tmp_path, condition):
    items, _ = clean
    audit = build_audit_items(items, condition, tmp_path, 16000, progress=False)
    assert audit.height == 2 * items.height
    assert audit["item_id"].unique().sort().to_list() == ["pw_boiling__changed1", "pw_boiling__changed2"]
    for row in audit.iter_rows(named=True):
        side = extra(row)["changed_response"]
        clips = response_paths(row)
        clean_clips = response_paths(items.row(0, named=True))
        changed, _ = read_audio(clips[side - 1])
        original, _ = read_audio(clean_clips[side - 1])
        other, _ = read_audio(clips[2 - side])
        lowered = extra(row)["both_lowered_db"]
        # The unchanged response is the clean clip itself, unless a louder clip had to lower both below full scale.
        assert (clips[2 - side] == clean_clips[2 - side]) == (lowered == 0.0)
        if condition.startswith("gain"):
            gain = float(condition.split("_")[1])
            assert rms_db(changed) - rms_db(other) == pytest.approx(gain, abs=1e-3)
            assert extra(row)["level_difference_db"] == pytest.approx(gain, abs=1e-3)
            assert abs(changed).max() <= 0.99 + 1e-6  # no 16-bit encoding clips the written clip
        else:
            assert len(changed) - len(original) == 16000 and extra(row)["added_s"] == 1.0
        assert sf.info(clips[side - 1]).subtype == "FLOAT"
        assert row[f"response{side}_text"] == items.row(0, named=True)[f"response{side}_text"]


def test_identical_pairs_are_one_clip_twice_and_write_nothing(clean, tmp_path):
    items, _ = clean
    audit = build_audit_items(items, "identical", tmp_path / "identical", 16000, progress=False)
    for row in audit.iter_rows(named=True):
        first, second = response_paths(row)
        assert first == second and row["response1_text"] == row["response2_text"]
    assert not (tmp_path / "identical").exists()


def test_repeat_and_voice_speak_the_response_again(clean, tmp_path):
    items, _ = clean
    respeaker = Respeaker.of(DEMO_ITEMS, VOICES)
    repeat = build_audit_items(items, "repeat", tmp_path / "repeat", 16000, respeaker, progress=False)
    row = repeat.filter(pl.col("item_id") == "pw_boiling__changed2").row(0, named=True)
    assert (
        row["response2_text"]
        == "Water boils at about eighty degrees Celsius. Water boils at about eighty degrees Celsius."
    )
    assert row["response2_duration_s"] > 1.6 * items.row(0, named=True)["response2_duration_s"]
    # Both responses in espeak-ng voices, so that each has another voice of its engine (f3 <-> m3).
    spoken = tmp_path / "espeak.jsonl"
    record = json.loads(DEMO_ITEMS.read_text().splitlines()[0])
    record["responses"][0]["voice"] = "m3"
    spoken.write_text(json.dumps(record) + "\n")
    espeak_items = synthesize_items(spoken, VOICES, tmp_path / "clean", 16000, progress=False)
    voice = build_audit_items(espeak_items, "voice", tmp_path / "voice", 16000, Respeaker.of(spoken, VOICES))
    for side in (1, 2):
        changed = voice.filter(pl.col("item_id") == f"pw_boiling__changed{side}").row(0, named=True)
        assert changed[f"response{side}_text"] == espeak_items.row(0, named=True)[f"response{side}_text"]
        before = Path(response_paths(espeak_items.row(0, named=True))[side - 1]).read_bytes()
        assert Path(response_paths(changed)[side - 1]).read_bytes() != before


def test_what_cannot_be_built_is_refused_naming_the_fix(clean, tmp_path):
    items, _ = clean
    with pytest.raises(ItemError, match="items spoken here"):
        build_audit_items(items, "repeat", tmp_path, 16000, None)
    assert other_voice("f3", VOICES) == "m3"
    assert "has no other voice of its engine" in respoken_voice_error("voice", {"joe"}, VOICES)
    assert respoken_voice_error("voice", {"f3", "m3"}, VOICES) == ""


@pytest.mark.parametrize(
    ("config_path", "conditions", "message"),
    [
        ("configs/pairwise_demo.yaml", ["voice"], "voice 'happy' \\(piper\\) has no other voice of its engine"),
        ("configs/pairwise.yaml", ["repeat"], "only the project's items"),
        ("configs/pairwise_demo.yaml", ["pad_1", "pad_1"], "'pad_1' is listed twice"),
        ("configs/pairwise_demo.yaml", ["gain_06"], "does not match"),
    ],
)
def test_the_config_check_refuses_audit_conditions_the_run_could_not_build(config_path, conditions, message):
    config = yaml.safe_load((ROOT / config_path).read_text())
    config["pairwise"]["conditions"] = conditions
    with pytest.raises(ConfigError, match=message):
        validate_config(config)
