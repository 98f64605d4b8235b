import json
from collections import Counter
from pathlib import Path

import yaml

from lalm_judge.workflow.config import validate_config
from lalm_judge.workflow.plan import Plan, gpu_requests, shard_of


def test_shards_are_stable_and_balanced():
    ids = [f"dialogue_{i}" for i in range(2000)]
    shards = [shard_of(d, 8) for d in ids]
    assert shards == [shard_of(d, 8) for d in ids]
    assert min(Counter(shards).values()) > 200  # roughly 250 each
    # adding a dialogue never moves the others
    assert [shard_of(d, 8) for d in ids[:100]] == shards[:100]


def test_plan_cells_and_turns(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    turn = {"speaker": "A", "text": "hi", "emotion": "happy"}
    lines = [{"id": "two", "turns": [turn, turn]}, {"id": "one", "turns": [turn]}]
    (corpus / "dialogues.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    config = validate_config(
        {
            "corpus": {"format": "jsonl", "path": str(corpus)},
            "variants": {"categories": ["hate"], "severities": [1, 2], "generator": {"name": "template"}},
            "tts": {"voices": {"A": {"engine": "piper"}}},
            "asr": {"models": {"tiny": {"model": "bundled:tiny.en"}}},
            "judges": {
                "lalm": {"backend": "transformers", "model": "m", "modalities": ["text", "audio", "audio_text"]},
                "text_only": {"backend": "openai", "model": "m", "schedule": {"prompts": ["rubric"]}},
            },
            "evaluation": {
                "judges": ["lalm", "text_only"],
                "transcript_sources": ["gt", "asr:tiny"],
                "prompts": ["basic", "cot"],
                "shards": 3,
            },
        }
    )
    plan = Plan(config)
    assert plan.dialogue_turn_pairs() == [("two", 0), ("two", 1)]  # the 1-turn dialogue gets no variants
    cells = plan.judge_cells()
    # lalm: text x 2 sources + audio x 1 + audio_text x 2 = 5 cells x 2 prompts; text_only: 2 sources x 1 prompt
    assert len(cells) == 12
    assert {c.transcript_source for c in cells if c.modality == "audio"} == {"none"}
    assert {c.prompt for c in cells if c.judge == "text_only"} == {"rubric"}
    # One job per judge and shard: its outputs are the judge's cells, its inputs the prompts they use.
    assert plan.judges() == ["lalm", "text_only"]
    assert [c for c in cells if c.judge == "lalm"] == plan.judge_cells("lalm")
    assert plan.judge_prompts("lalm") == ["basic", "cot"] and plan.judge_prompts("text_only") == ["rubric"]
    audio = next(c for c in plan.judge_cells("lalm") if c.modality == "audio")
    assert audio.score_path("{shard}") == "results/scores/lalm/audio-none/basic/clean/shard{shard}.parquet"
    assert audio.job_fields() == {
        "modality": "audio",
        "transcript_source": "none",
        "prompt": "basic",
        "condition": "clean",
    }


def test_gpu_requests_of_the_paper_stages():
    config = validate_config(yaml.safe_load((Path(__file__).resolve().parents[2] / "configs/paper.yaml").read_text()))
    requests = gpu_requests(config)
    assert (
        requests.pop("tts") == 1 and requests.pop("asr:whisper_large_v3") == 1 and requests.pop("asr:whisper_base") == 1
    )
    assert requests == {f"judge:{j}": 1 for j in config["evaluation"]["judges"] if j != "gemini_25_flash"}


def test_gpu_requests_of_the_preference_builder():
    root = Path(__file__).resolve().parents[2]
    paper = validate_config(yaml.safe_load((root / "configs/pairwise.yaml").read_text()))
    requests = gpu_requests(paper)
    # XTTS engines and styles speak on a GPU, Whisper large-v3 transcribes on one.
    assert requests["preference:tts"] == 1 and requests["preference:asr"] == 1
    demo = validate_config(yaml.safe_load((root / "configs/pairwise_demo.yaml").read_text()))
    assert not any(stage.startswith("preference:") for stage in gpu_requests(demo))  # Piper, espeak-ng, CPU Whisper
