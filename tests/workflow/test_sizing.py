"""The cost model of judge jobs and the shard count of each judge (`lalm_judge.workflow.sizing`), and the context
length of vLLM judges (`lalm_judge.workflow.context_length`), against hand-computed numbers."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from lalm_judge.core.files import shard_of
from lalm_judge.judging.prompts import load_prompt
from lalm_judge.workflow import context_length, sizing
from lalm_judge.workflow.config import ConfigError, validate_config
from lalm_judge.workflow.plan import JudgeCell, Plan
from lalm_judge.workflow.sizing import DialogueWork, SizingError, size_judges

ROOT = Path(__file__).resolve().parents[2]
PAPER = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
# A 6-turn dialogue, every turn rewritten into 8 categories x 5 severities, controls scored.
WORK = DialogueWork("d", n_turns=6, target_turns=6, variants=240, controls=True)


def cell(modality: str, condition: str = "clean", prompt: str = "basic") -> JudgeCell:
    source = "none" if modality == "audio" else "gt"
    return JudgeCell("j", modality, source, prompt, condition)


def entry(**changes) -> dict:
    base = {
        "backend": "vllm",
        "model": "Qwen/Qwen2-Audio-7B-Instruct",
        "max_audio_s": 30,
        "long_audio": "chunk",
        "options": {},
        "generation": {"max_new_tokens": 512},
        "schedule": {"resources": {"runtime": 60, "gpu": 1}},
    }
    return {**base, **changes}


def test_the_samples_of_each_condition_follow_condition_samples():
    expected = {"clean": 241, "masked": 246, "noise_10": 246, "silence": 246, "tts_control": 6, "injection": 241}
    assert {c: sizing.condition_samples(c, WORK) for c in expected} == expected
    assert sizing.condition_samples("masked", DialogueWork("d", 6, 6, 240, controls=False)) == 0


def test_audio_requests_count_their_long_audio_windows():
    # 6 turns x 5.4 s = 32.4 s: two 30 s windows; a text request is one.
    assert sizing.audio_windows(entry(), 6) == 2 and sizing.audio_windows(entry(), 5) == 1
    assert sizing.audio_windows(entry(long_audio="truncate"), 6) == 1
    cells = [cell("text"), cell("audio"), cell("audio_text", "injection")]
    assert sizing.dialogue_requests(entry(), cells, WORK) == 241 + 2 * 241 + 2 * 241


def test_rates_come_from_the_schedule_the_benchmarks_or_the_backend():
    assert sizing.judge_rate(entry()) == (8.0 * 3600, "Qwen2-Audio on vllm, assumed")
    # The transformers backend's measured rates: the largest measured batch up to the judge's own.
    omni = entry(backend="transformers", model="Qwen/Qwen2.5-Omni-7B", batch_size=48)
    assert sizing.judge_rate(omni) == (11.16 * 3600, "Qwen2.5-Omni on transformers at batch 32, measured on an H200")
    af3 = entry(backend="transformers", model="nvidia/audio-flamingo-3-hf", batch_size=8)
    assert sizing.judge_rate(af3)[0] == 2.95 * 3600
    stated = entry(schedule={"requests_per_hour": 1234, "resources": {"runtime": 60, "gpu": 1}})
    assert sizing.judge_rate(stated) == (1234.0, "schedule.requests_per_hour")
    endpoint = entry(backend="openai", model="gemini-2.5-flash-lite", options={"concurrency": 16})
    assert sizing.judge_rate(endpoint)[0] == 16 * 0.5 * 3600
    assert sizing.judge_rate(entry(model="org/unknown"))[0] == 8.0 * 3600


def sized(config: dict, works: list[DialogueWork], cells: list[JudgeCell]) -> sizing.JudgeSizing:
    return size_judges(config, {"j": cells}, works, partitions_file=Path("/nonexistent"))["j"]


def test_auto_gives_the_smallest_shard_count_whose_largest_job_fits():
    works = [DialogueWork(f"dialogue_{i}", 6, 6, 240, controls=False) for i in range(12)]
    cells = [cell("text", prompt=p) for p in ("basic", "cot", "fewshot", "rubric", "calibrated")]
    config = {"evaluation": {"shards": "auto"}, "judges": {"j": entry()}}
    result = sized(config, works, cells)
    per_dialogue = 5 * 241
    budget = (0.75 * 60 / 60 - 90 / 3600) * 8 * 3600  # requests 75 % of an hour holds after the model load
    loads = {n: max(sizing.shard_loads({w.dialogue_id: per_dialogue for w in works}, n)) for n in range(1, 49)}
    assert result.fits and result.requests_per_job == loads[result.shards] <= budget
    assert all(loads[n] > budget for n in range(1, result.shards)), "no smaller count fits"
    assert result.hours_per_job == pytest.approx(loads[result.shards] / (8 * 3600) + 90 / 3600)


def test_a_fixed_shard_count_that_cannot_fit_is_refused_naming_the_judge_and_the_numbers():
    works = [DialogueWork("d", 6, 6, 240, controls=False)]
    cells = [cell("text", prompt=p) for p in ("basic", "cot")] * 100  # 200 cells x 241 samples
    config = {"evaluation": {"shards": 1}, "judges": {"j": entry()}}
    with pytest.raises(SizingError, match=r"judge j: its largest job holds 48,200 requests, about 1\.7 h") as raised:
        sized(config, works, cells)
    assert "over 75% of its runtime of 60 min (judges.j.schedule.resources.runtime" in str(raised.value)
    overrun = copy.deepcopy(config)
    overrun["judges"]["j"]["schedule"]["allow_overrun"] = True
    accepted = sized(overrun, works, cells)
    assert not accepted.fits and "OVER PLANNED SHARE" in sizing.sizing_table({"j": accepted})


def test_a_job_planned_within_its_runtime_but_over_75_percent_of_it_does_not_fit():
    works = [DialogueWork("d", 6, 6, 240, controls=False)]
    cells = [cell("text", prompt=p) for p in ("basic", "cot")] * 40  # 80 cells x 241 samples: 0.69 h at 8/s
    result = sized(
        {
            "evaluation": {"shards": 1},
            "judges": {"j": entry(schedule={"resources": {"runtime": 50, "gpu": 1}, "allow_overrun": True})},
        },
        works,
        cells,
    )
    assert 0.75 * 50 < result.hours_per_job * 60 <= 50 and not result.fits


def test_the_early_warning_leaves_one_call_and_at_most_a_quarter_of_the_runtime():
    assert sizing.early_warning_s(24 * 60) == 300 and sizing.early_warning_s(8) == 120


def test_a_runtime_over_the_longest_partition_is_refused(tmp_path):
    partitions = tmp_path / "partitions.yaml"
    partitions.write_text(
        yaml.safe_dump(
            {"partitions": {"cpu": {"max_gpu": 0, "max_runtime": 1440}, "gpu": {"max_gpu": 4, "max_runtime": 2880}}}
        )
    )
    assert sizing.longest_partition_runtime(1, partitions) == ("gpu", 2880.0)
    assert sizing.longest_partition_runtime(0, partitions) == ("gpu", 2880.0)  # a CPU job may go to either
    config = {
        "evaluation": {"shards": "auto"},
        "judges": {"j": entry(schedule={"resources": {"runtime": 3000, "gpu": 1}})},
    }
    with pytest.raises(
        SizingError, match=r"runtime is 3000 min, over the longest partition .* \(gpu: max_runtime 2880"
    ):
        size_judges(config, {"j": [cell("text")]}, [WORK], partitions)


def test_judges_with_babble_cells_need_one_shard_count(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    turn = {"speaker": "A", "text": "hello there", "emotion": "happy"}
    lines = [json.dumps({"id": f"d{i}", "turns": [turn, turn]}) for i in range(8)]
    (corpus / "dialogues.jsonl").write_text("\n".join(lines) + "\n")
    judge = {"backend": "embedding", "model": "bundled:all-MiniLM-L6-v2", "modalities": ["audio"]}
    config = {
        "corpus": {"format": "jsonl", "path": str(corpus)},
        "variants": {"categories": ["hate"], "severities": [1], "generator": {"name": "template"}},
        "tts": {"voices": {"A": {"engine": "piper"}}},
        "asr": {"models": {"tiny": {"model": "bundled:tiny.en"}}},
        "judges": {
            "fast": {**judge, "options": {"cascade_asr": "tiny"}},
            "slow": {**judge, "options": {"cascade_asr": "tiny"}, "schedule": {"requests_per_hour": 20}},
        },
        "evaluation": {"judges": ["fast", "slow"], "conditions": ["clean", "babble_10"], "shards": "auto"},
    }
    with pytest.raises(ConfigError, match=r"babble .* needs the same shard count, but they get \[1, \d+\]"):
        Plan(validate_config(config))
    config["evaluation"]["shards"] = 2
    config["judges"]["slow"]["schedule"]["allow_overrun"] = True
    plan = Plan(validate_config(config))
    assert plan.babble_shard_count() == 2 and plan.shard_of_dialogue("d0") == shard_of("d0", 2)


def test_auto_context_length_bounds_the_longest_request():
    turns = ["A fairly long turn of the dialogue, said by one of the speakers."] * 6
    cells = [cell("audio_text", prompt="fewshot"), cell("audio", prompt="basic")]
    length = context_length.auto_max_model_len("j", entry(), cells, turns, changed_turn_bytes=2000)
    prompt = load_prompt("fewshot")
    system, user = prompt.render("audio_text", [("LLM1" * 8, t) for t in [*turns, *turns]])
    text = len(system.encode()) + len(user.encode()) + 2000
    needed = text + (25 * 30 + 8) + 64 + 512  # 30 s of Qwen2-Audio audio, the template, the answer
    assert length == 256 * math.ceil(needed / 256) and length <= 8192


def test_auto_context_length_is_refused_over_the_models_context_and_without_an_audio_bound():
    turns = ["word " * 4000]
    with pytest.raises(context_length.ContextLengthError, match=r"over Qwen2-Audio's context of 8,192"):
        context_length.auto_max_model_len("j", entry(), [cell("text")], turns, 0)
    with pytest.raises(context_length.ContextLengthError, match=r"needs the judge's longest audio"):
        context_length.auto_max_model_len("j", entry(max_audio_s=None), [cell("audio")], ["hi"], 0)
    # MERaLiON-2: 100 audio tokens per started 30 s chunk.
    assert context_length.audio_tokens("MERaLiON/MERaLiON-2-10B", 31) == 200


def test_every_vllm_judge_states_its_context_length():
    config = validate_config(PAPER)
    assert not context_length.max_model_len_problems(config, config["evaluation"]["judges"], [])
    unset = copy.deepcopy(PAPER)
    del unset["judges"]["llama31_8b"]["options"]["max_model_len"]
    with pytest.raises(ConfigError, match=r"judges\.llama31_8b\.options\.max_model_len is unset: .*131,072 tokens"):
        validate_config(unset)
    problems = context_length.max_model_len_problems(config, [], ["llama31_8b"])
    assert problems == [
        "judges.llama31_8b.options.max_model_len: auto is computed for the safety track's requests; "
        "give this pairwise judge a number"
    ]
