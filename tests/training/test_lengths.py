"""The training preparation at scale: prompt lengths measured once per record (cached by the record's digest), by a
pool of processes, on one rank and shared with the others; the verdict accuracy split across ranks. The tiny
random-weight Qwen2-Audio's processor (real Whisper features and chat template) measures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from lalm_judge.training.collator import PairwiseSFTCollator
from lalm_judge.training.lengths import LengthCache, processor_digest, prompt_lengths
from lalm_judge.training.records import read_dataset
from lalm_judge.training.settings import DatasetSource, TrainingError
from lalm_judge.training.validation import verdict_accuracy
from tests.training.conftest import write_records

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def processor(qwen2audio_dir):
    return transformers.AutoProcessor.from_pretrained(qwen2audio_dir)


def collator_of(processor, system: str = "You are a helpful assistant.") -> PairwiseSFTCollator:
    return PairwiseSFTCollator(processor, system, 60.0)


def records_of(training_data, name: str = "semantic"):
    return read_dataset(DatasetSource(name, (str(training_data[name]),), str(training_data["audio_root"])))


def test_lengths_are_measured_once_per_record_and_again_when_it_changes(processor, training_data, tmp_path):
    collator = collator_of(processor)
    records = records_of(training_data)
    direct = [collator.prompt_length(record.as_row()) for record in records]
    lengths, measured = prompt_lengths(records, collator, tmp_path / "cache", workers=1)
    assert lengths == direct and measured == len(records)
    assert prompt_lengths(records, collator, tmp_path / "cache", workers=1) == (direct, 0), "all from the cache"
    # A stage mixing these with other records measures only the new ones.
    acoustic = records_of(training_data, "acoustic")
    assert prompt_lengths([*acoustic, *records], collator, tmp_path / "cache", workers=1)[1] == len(acoustic)
    # A clip spoken again (another file under the same name) is measured again, and only its record.
    clip = Path(records[1].audios[0])
    clip.write_bytes(Path(records[2].audios[0]).read_bytes())
    os.utime(clip, ns=(1, 1))
    lengths, measured = prompt_lengths(records, collator, tmp_path / "cache", workers=1)
    assert measured == 1 and lengths[1] == collator.prompt_length(records[1].as_row())
    # Another system prompt is another prompt: its own cache file.
    other = collator_of(processor, "You judge speech.")
    assert processor_digest(other) != processor_digest(collator)
    assert prompt_lengths(records, other, tmp_path / "cache", workers=1)[1] == len(records)
    assert len(list((tmp_path / "cache").glob("prompt_lengths-*.json"))) == 2


def test_a_pool_of_processes_measures_what_one_process_measures(processor, tmp_path):
    records_file = write_records(tmp_path, "many", ("helpfulness",), 6, seconds=0.5)
    records = read_dataset(DatasetSource("many", (str(records_file),), str(tmp_path / "audio")))
    collator = collator_of(processor)
    alone, _ = prompt_lengths(records, collator, tmp_path / "one", workers=1)
    pooled, measured = prompt_lengths(records, collator, tmp_path / "pool", workers=2, pool_from=0)
    assert pooled == alone and measured == len(records)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_rank_zero_measures_the_others_read_and_validation_is_split_across_ranks(
    qwen2audio_dir, processor, training_data, tmp_path
):
    """Two processes under a gloo process group, as a launcher starts them: rank 0 measures every length, rank 1
    none (it reads rank 0's cache); each evaluates half the validation records, and both get the accuracy one
    process gets over all of them."""
    cache = tmp_path / "cache"
    args = [str(qwen2audio_dir), str(training_data["semantic"]), str(training_data["audio_root"]), str(cache)]
    port = free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.ranks", *args],
            cwd=ROOT,
            env={
                **os.environ,
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (1, 0)  # rank 1 starts first and waits
    ]
    results = {}
    for process in ranks:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
        result = json.loads(out.splitlines()[-1])
        results[result["rank"]] = result
    records = records_of(training_data)
    collator = collator_of(processor)
    expected = [collator.prompt_length(record.as_row()) for record in records]
    assert results[0]["lengths"] == results[1]["lengths"] == expected
    assert (results[0]["measured"], results[1]["measured"]) == (len(records), 0)
    model = transformers.Qwen2AudioForConditionalGeneration.from_pretrained(qwen2audio_dir)
    alone = verdict_accuracy(model, collator, records, batch_size=2)
    assert results[0]["accuracy"] == results[1]["accuracy"] == alone


def test_the_other_ranks_report_rank_zeros_failure(processor, training_data, tmp_path):
    collator = collator_of(processor)
    cache = LengthCache(tmp_path, processor_digest(collator))
    cache.failure.write_text(json.dumps({"error": "OSError: disk full"}))
    with pytest.raises(TrainingError, match="rank 0 failed to measure the prompt lengths: OSError: disk full"):
        prompt_lengths(records_of(training_data), collator, tmp_path, environ={"RANK": "1", "WORLD_SIZE": "2"})


def test_the_preparation_benchmark_runs_at_a_reduced_size(qwen2audio_dir, tmp_path, capsys):
    """bench/training_preparation.py (the figures of docs/training.md) on two records: a cold pass measures both, the
    warm pass none, and the extrapolation is the CPU seconds per record scaled to SpeechFeedback's size."""
    from bench.training_preparation import SPEECHFEEDBACK_RECORDS, main

    out = tmp_path / "preparation.json"
    argv = ["--model", str(qwen2audio_dir), "--records", "2", "--seconds", "1", "--workers", "1", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["one_process"]["measured"] == 2 and result["warm_cache"]["measured"] == 0
    assert result["pool"] is None and result["cpu_s_per_record"] > 0
    hours = result["speechfeedback_hours"]["1"]
    assert hours == pytest.approx(SPEECHFEEDBACK_RECORDS * result["cpu_s_per_record"] / 3600)
    assert "SpeechFeedback (324,774 records)" in capsys.readouterr().out
