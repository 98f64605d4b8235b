import polars as pl
import pytest

from lalm_judge.core.tables import PREFERENCE_CLIPS, PREFERENCE_COMPLETIONS, PREFERENCE_TRANSCRIPTS
from lalm_judge.preference.render import ClipFilter, filter_clips, render_shard, speakable_text, transcribe_shard


@pytest.mark.parametrize(
    ("response", "spoken"),
    [
        ("# Steps\n1. **Trim** the stems\n2. Add _fresh_ water", "Steps. Trim the stems. Add fresh water."),
        ("See [the guide](https://x.org) or https://y.org now.", "See the guide or now."),
        ("Use `len()` here.\n\n---\nDone", "Use len() here. Done."),
        ("   \n", ""),
    ],
)
def test_markdown_is_made_speakable(response, spoken):
    assert speakable_text(response) == spoken


def test_clips_are_dropped_for_shortness_before_wer():
    clip_filter = ClipFilter(max_wer=0.2, min_duration_s=0.2)
    assert clip_filter.reason(wer=0.9, duration_s=0.1) == "short"
    assert clip_filter.reason(wer=0.3, duration_s=2.0) == "wer"
    assert clip_filter.reason(wer=0.2, duration_s=0.2) is None  # both limits are inclusive


def test_filter_counts_per_engine():
    rows = [
        {"item_id": "a", "completion": 0, "engine": "e1", "clip": "x", "duration_s": 1.0, "wer": 0.0},
        {"item_id": "a", "completion": 1, "engine": "e1", "clip": "y", "duration_s": 0.1, "wer": 0.0},
        {"item_id": "a", "completion": 0, "engine": "e2", "clip": "z", "duration_s": 1.0, "wer": 0.5},
    ]
    kept, counts = filter_clips(PREFERENCE_TRANSCRIPTS.frame(rows), ClipFilter(0.2, 0.2))
    assert kept["clip"].to_list() == ["x"]
    assert counts == {
        "e1": {"clips": 2, "kept": 1, "dropped_wer": 0, "dropped_short": 1},
        "e2": {"clips": 1, "kept": 0, "dropped_wer": 1, "dropped_short": 0},
    }


@pytest.mark.slow
def test_a_shard_is_spoken_and_transcribed(tmp_path):
    """Real espeak-ng and Whisper tiny.en on two completions of one shard (the other shard's row is left out)."""
    rows = [
        {"item_id": "i", "shard": 0, "completion": c, "text": text, "instruction": "q", "response": text}
        for c, text in enumerate(["Keep the basil in a glass of water.", "Put it in the fridge."])
    ]
    rows.append({"item_id": "j", "shard": 1, "completion": 0, "text": "Other shard.", "instruction": "q"})
    PREFERENCE_COMPLETIONS.frame(rows).write_parquet(tmp_path / "c.parquet")
    clips = render_shard(
        tmp_path / "c.parquet",
        0,
        "espeak_f3",
        {"engine": "espeak", "voice": "en-us+f3"},
        tmp_path,
        tmp_path / "clips.parquet",
        progress=False,
    )
    assert clips["clip"].to_list() == ["audio/espeak_f3/shard0/i-c0.wav", "audio/espeak_f3/shard0/i-c1.wav"]
    assert (tmp_path / clips["clip"][0]).is_file() and clips["duration_s"].min() > 0.5
    assert PREFERENCE_CLIPS.read(tmp_path / "clips.parquet").height == 2
    options = {"model": "bundled:tiny.en", "device": "cpu", "compute_type": "int8", "cpu_threads": 1}
    transcripts = transcribe_shard(
        tmp_path / "clips.parquet", tmp_path, options, tmp_path / "t.parquet", progress=False
    )
    assert transcripts.filter(pl.col("wer") <= 0.35).height == 2
    assert transcripts["asr_model"].to_list() == ["bundled:tiny.en"] * 2
