"""The pairwise judge stage on real code paths: a tiny random-weight Qwen2-Audio hears both responses
(two audio items per request), a tiny random-weight Llama reads their transcripts (the cascade). Their
answers are random; the tests check the requests, both orders, the mapping back, the combination and the
length policy, which do not depend on what the models say."""

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import torch

from bench.judge_stage import kill_pairwise_job_half_way
from lalm_judge.core.tables import PAIRWISE_ITEMS, PAIRWISE_PREDICTIONS, PAIRWISE_TRANSCRIPTS
from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeOutput, JudgeSpec
from lalm_judge.judging.backends.hf import TransformersBackend
from lalm_judge.judging.cache import RequestCache
from lalm_judge.pairwise.items import ItemError
from lalm_judge.pairwise.judge import (
    ItemAudio,
    LengthPolicy,
    build_requests,
    judge_cell,
    judge_items,
    pairwise_cell,
    response_limit_s,
)
from lalm_judge.pairwise.parsing import combine_verdicts, parse_swapped_verdict, parse_verdict

torch.set_num_threads(1)


def write_tone(path, seconds, frequency):
    t = np.arange(int(16000 * seconds)) / 16000
    sf.write(path, (0.1 * np.sin(2 * np.pi * frequency * t)).astype(np.float32), 16000)


@pytest.fixture
def items(tmp_path):
    """Two items (three rows): 'short' with 1 s and 2 s responses, 'long' with 3 s and 1 s responses."""
    write_tone(tmp_path / "s1.wav", 1.0, 220)
    write_tone(tmp_path / "s2.wav", 2.0, 330)
    write_tone(tmp_path / "l1.wav", 3.0, 440)
    rows = []
    for item, first, second, durations, aspects in [
        ("short", "s1.wav", "s2.wav", (1.0, 2.0), [("helpfulness", "1"), ("honesty", "Tie")]),
        ("long", "l1.wav", "s1.wav", (3.0, 1.0), [("gender", "2")]),
    ]:
        for aspect, label in aspects:
            rows.append(
                {
                    "item_id": item,
                    "aspect": aspect,
                    "aspect_text": {"gender": "gender instruction following"}.get(aspect, aspect),
                    "query": f"Question of {item}?",
                    "response1_audio": first,
                    "response2_audio": second,
                    "audio_root": str(tmp_path),
                    "response1_duration_s": durations[0],
                    "response2_duration_s": durations[1],
                    "audio_ok": True,
                    "label": label,
                    "response1_text": f"first answer of {item}",
                    "response2_text": f"second answer of {item}",
                    "source_format": "jsonl",
                    "source_extra": "{}",
                }
            )
    frame = PAIRWISE_ITEMS.frame(rows)
    frame.write_parquet(tmp_path / "items.parquet")
    return frame


@pytest.fixture(scope="module")
def audio_judge(qwen2audio_dir):
    spec = JudgeSpec(
        name="tiny_qwen2_audio",
        backend="transformers",
        model=str(qwen2audio_dir),
        modalities=("audio",),
        generation={"max_new_tokens": 4},
        batch_size=4,
        options={"device": "cpu"},
    )
    return spec, TransformersBackend(spec)


@pytest.fixture(scope="module")
def text_judge(llama_dir):
    spec = JudgeSpec(
        name="tiny_llama",
        backend="transformers",
        model=str(llama_dir),
        modalities=("text",),
        generation={"max_new_tokens": 4},
        options={"device": "cpu"},
    )
    return spec, TransformersBackend(spec)


def test_both_orders_swap_the_audio_and_the_transcripts(items, audio_judge, text_judge):
    row = items.row(0, named=True)
    first, second = np.zeros(5), np.ones(7)
    cell = pairwise_cell(audio_judge[0], "audio", "none", "sagelm")
    forward, swapped = build_requests(row, cell, ItemAudio((first, second), "none", 30.0), None)
    assert (forward.request_id, swapped.request_id) == ("short/helpfulness/ab", "short/helpfulness/ba")
    assert [len(a) for a, _ in forward.audios] == [5, 7] and [len(a) for a, _ in swapped.audios] == [7, 5]
    assert forward.user == swapped.user and forward.user.count(AUDIO_SLOT) == 2
    assert "**helpfulness**" in forward.user and "### Instruction:\nQuestion of short?" in forward.user
    cascade = pairwise_cell(text_judge[0], "text", "gt", "explained")
    texts = ("first answer of short", "second answer of short")
    forward, swapped = build_requests(row, cascade, ItemAudio(None, "none", None), texts)
    assert not forward.audio_items and AUDIO_SLOT not in forward.user
    assert forward.user.index("first answer") < forward.user.index("second answer")
    assert swapped.user.index("second answer") < swapped.user.index("first answer")


def test_audio_native_judging_in_both_orders(items, audio_judge, tmp_path):
    spec, backend = audio_judge
    out = tmp_path / "predictions.parquet"
    frame = judge_cell(
        tmp_path / "items.parquet", spec, "audio", "none", "sagelm", out, backend=backend, progress=False
    )
    assert PAIRWISE_PREDICTIONS.conform(pl.read_parquet(out), "predictions").collect().height == 3
    assert frame["config_hash"].n_unique() == 1 and frame["seed"].to_list() == [0, 0, 0]
    assert response_limit_s(pairwise_cell(spec, "audio", "none", "sagelm"), backend) == 30.0  # Qwen2-Audio's window
    for row in frame.iter_rows(named=True):
        # Each order is read with the cell's rule and its own finish reason (a random-weight model runs to the
        # token limit: its answers are read as cut).
        forward = parse_verdict(row["prediction"], row["verdict_rule"], row["finish_reason"])
        back = parse_swapped_verdict(row["prediction_swapped"], row["verdict_rule"], row["finish_reason_swapped"])
        assert (row["verdict"], row["verdict_status"]) == (forward.label, str(forward.status))
        assert (row["verdict_swapped"], row["verdict_swapped_status"]) == (back.label, str(back.status))
        combined, status = combine_verdicts(forward, back)
        assert (row["verdict_combined"], row["verdict_combined_status"]) == (combined, str(status))
        assert row["long_audio_action"] == "none" and row["audio_limit_s"] == 30.0
        assert row["n_output_tokens"] is not None and row["latency_s"] > 0
    assert frame["duration_s"].to_list() == [3.0, 3.0, 4.0]
    assert frame["model"].to_list() == [spec.model] * 3 and frame["asr_model"].null_count() == 3


def test_length_policy_truncates_or_skips_per_response_and_records_it(items, audio_judge):
    spec, backend = audio_judge
    seen = []

    class Recording:
        """Passes the requests to the real backend and keeps them, to look at the audio each one carried."""

        max_audio_s = backend.max_audio_s

        def generate(self, requests):
            seen.extend(requests)
            return backend.generate(requests)

        def describe(self):
            return backend.describe()

    truncate = pairwise_cell(spec, "audio", "none", "sagelm", LengthPolicy("truncate", 1.5))
    rows = judge_items(items, truncate, Recording())
    assert [r["long_audio_action"] for r in rows] == ["truncated", "truncated", "truncated"]
    assert {r["audio_limit_s"] for r in rows} == {1.5}
    assert all(len(a) <= 24000 for request in seen for a, _ in request.audios)
    assert [r["duration_s"] for r in rows] == [3.0, 3.0, 4.0]  # the full durations stay on record
    seen.clear()
    skip = pairwise_cell(spec, "audio", "none", "sagelm", LengthPolicy("skip", 2.5))
    rows = judge_items(items, skip, Recording())
    assert [r["long_audio_action"] for r in rows] == ["none", "none", "skipped"]
    skipped = rows[2]
    assert skipped["prediction"] is None and skipped["verdict_status"] == "skipped_long_audio"
    assert skipped["verdict_combined_status"] == "skipped_long_audio"
    assert {r.request_id.split("/")[0] for r in seen} == {"short"}  # nothing was sent for the skipped item


def test_cascade_reads_transcripts_and_records_the_asr_model(items, text_judge, tmp_path):
    spec, backend = text_judge
    transcripts = PAIRWISE_TRANSCRIPTS.frame(
        [
            {"audio": str(tmp_path / name), "asr_model": "bundled:tiny.en", "text": f"heard {name}"}
            for name in ("s1.wav", "s2.wav", "l1.wav")
        ]
    )
    transcripts.write_parquet(tmp_path / "asr.parquet")
    frame = judge_cell(
        tmp_path / "items.parquet", spec, "text", "asr:whisper_tiny_en", "sagelm", tmp_path / "p.parquet",
        transcript_paths=[tmp_path / "asr.parquet"], backend=backend, progress=False,
    )  # fmt: skip
    assert frame["asr_model"].to_list() == ["bundled:tiny.en"] * 3
    assert frame["transcript_source"].to_list() == ["asr:whisper_tiny_en"] * 3
    assert frame["long_audio_action"].to_list() == ["none"] * 3 and frame["audio_limit_s"].null_count() == 3
    assert frame["prediction_swapped"].null_count() == 0


def test_cells_and_items_are_checked(items, audio_judge, text_judge):
    spec, backend = audio_judge
    with pytest.raises(ValueError, match="does not support modality 'text'"):
        pairwise_cell(spec, "text", "gt", "sagelm")
    with pytest.raises(ValueError, match="backend .embedding. judges pairs from their texts only"):
        pairwise_cell(JudgeSpec("e", "embedding", "m", modalities=("audio",)), "audio", "none", "sagelm")
    with pytest.raises(ValueError, match="has no transcript source"):
        pairwise_cell(spec, "audio", "gt", "sagelm")
    missing = items.with_columns(audio_ok=pl.Series([True, True, False]))
    with pytest.raises(ItemError, match="1 of 2 items .* first ids: long"):
        judge_items(missing, pairwise_cell(spec, "audio", "none", "sagelm"), backend)
    imported = items.with_columns(response1_text=pl.lit(None, pl.String))
    with pytest.raises(ItemError, match="has no response texts"):
        judge_items(imported, pairwise_cell(text_judge[0], "text", "gt", "sagelm"), text_judge[1])


class ScriptedAnswers:
    """Test double of the JudgeBackend interface (the stage's reading of outputs is under test, not a model):
    answers each request from a script keyed by its order ('ab' or 'ba'), finish reason included."""

    def __init__(self, script):
        self.script = script

    def generate(self, requests):
        answers = [self.script[request.request_id.rsplit("/", 1)[1]] for request in requests]
        return [JudgeOutput(text, latency_s=0.0, finish_reason=reason) for text, reason in answers]

    def describe(self):
        return {"model": "scripted", "model_revision": "r0"}


@pytest.mark.parametrize(
    ("rule", "script", "expected"),
    [
        # A verdict line complete before the cut is kept; the swapped answer was cut inside its first line.
        ("sagelm", {"ab": ("1\nResponse 1 is", "length"), "ba": ("2", "length")}, ("1", "ok", None, "truncated")),
        # SageLM's rule reads no decorated label; the lenient one does. A filtered answer is no verdict.
        ("sagelm", {"ab": ("**1**", "stop"), "ba": ("2\nok", "content_filter")}, (None, "malformed", None, "filtered")),
        ("lenient", {"ab": ("**1**", "stop"), "ba": ("Verdict: 2", "stop")}, ("1", "ok", "1", "ok")),
    ],
)
def test_each_order_is_read_with_the_cells_rule_and_its_own_finish_reason(items, tmp_path, rule, script, expected):
    spec = JudgeSpec(name="scripted", backend="openai", model="scripted", modalities=("text",))
    frame = judge_cell(
        tmp_path / "items.parquet",
        spec,
        "text",
        "gt",
        "sagelm",
        tmp_path / "p.parquet",
        backend=ScriptedAnswers(script),
        progress=False,
        verdict_rule=rule,
    )
    row = frame.row(0, named=True)
    assert (row["verdict"], row["verdict_status"], row["verdict_swapped"], row["verdict_swapped_status"]) == expected
    assert frame["verdict_rule"].to_list() == [rule] * 3
    assert PAIRWISE_PREDICTIONS.read(tmp_path / "p.parquet")["verdict_rule"].to_list() == [rule] * 3


@pytest.fixture
def many_items(tmp_path):
    """Eight items of one aspect each (16 requests in both orders), every response its own tone."""
    rows = []
    for i in range(8):
        for k, frequency in ((1, 200 + 20 * i), (2, 500 + 20 * i)):
            write_tone(tmp_path / f"i{i}_{k}.wav", 0.5 + 0.1 * k, frequency)
        rows.append(
            {
                "item_id": f"item{i}",
                "aspect": "helpfulness",
                "aspect_text": "helpfulness",
                "query": f"Question {i}?",
                "response1_audio": f"i{i}_1.wav",
                "response2_audio": f"i{i}_2.wav",
                "audio_root": str(tmp_path),
                "response1_duration_s": 0.6,
                "response2_duration_s": 0.7,
                "audio_ok": True,
                "label": "1",
                "source_format": "jsonl",
                "source_extra": "{}",
            }
        )
    PAIRWISE_ITEMS.frame(rows).write_parquet(tmp_path / "many.parquet")
    return tmp_path / "many.parquet"


@pytest.mark.slow
def test_a_pairwise_job_killed_half_way_resumes_with_only_the_missing_requests(many_items, audio_judge, tmp_path):
    spec = dataclasses.replace(audio_judge[0], generation={"max_new_tokens": 16}, batch_size=2)
    cell = {
        "items_path": str(many_items),
        "modality": "audio",
        "transcript_source": "none",
        "prompt_path": "sagelm",
        "out_path": str(tmp_path / "predictions.parquet"),
        "cache_dir": str(tmp_path / "cache"),
        "stats_path": str(tmp_path / "requests.json"),
    }
    n_requests = 16
    stored = kill_pairwise_job_half_way(spec, cell, tmp_path / "killed", kill_at=n_requests // 2)
    assert 0 < stored < n_requests and not (tmp_path / "predictions.parquet").exists()

    frame = judge_cell(spec=spec, progress=False, **cell)
    stats = json.loads((tmp_path / "requests.json").read_text())
    assert (stats["requests"], stats["cached"], stats["computed"]) == (n_requests, stored, n_requests - stored)
    assert stats["model_loads"] == 1 and RequestCache(tmp_path / "cache" / spec.name).count() == n_requests
    assert frame.height == 8 and frame["prediction"].null_count() == frame["prediction_swapped"].null_count() == 0
    assert set(frame["served_model"]) == {spec.model} and frame["finish_reason"].null_count() == 0

    again = judge_cell(spec=spec, progress=False, **{**cell, "out_path": str(tmp_path / "again.parquet")})
    stats = json.loads((tmp_path / "requests.json").read_text())
    assert (stats["cached"], stats["computed"], stats["model_loads"]) == (n_requests, 0, 0)
    assert again.drop("package_versions").equals(frame.drop("package_versions"))
