import json
from collections import Counter
from pathlib import Path

import pytest
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
    assert audio.score_path("{shard}") == "results/scores/lalm/shard{shard}/audio-none/basic/clean.parquet"
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
    assert requests == {f"judge:{j}": 1 for j in config["evaluation"]["judges"] if j != "gemini_25_flash_lite"}


def test_gpu_requests_of_the_preference_builder():
    root = Path(__file__).resolve().parents[2]
    paper = validate_config(yaml.safe_load((root / "configs/pairwise.yaml").read_text()))
    requests = gpu_requests(paper)
    # XTTS engines and styles speak on a GPU, Whisper large-v3 transcribes on one.
    assert requests["preference:tts"] == 1 and requests["preference:asr"] == 1
    demo = validate_config(yaml.safe_load((root / "configs/pairwise_demo.yaml").read_text()))
    assert not any(stage.startswith("preference:") for stage in gpu_requests(demo))  # Piper, espeak-ng, CPU Whisper


def test_conditions_get_the_cells_whose_input_they_change(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    turn = {"speaker": "A", "text": "hi", "emotion": "happy"}
    lines = [{"id": "two", "turns": [turn, turn]}, {"id": "other", "turns": [turn, turn]}]
    (corpus / "dialogues.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    config = validate_config(
        {
            "corpus": {"format": "jsonl", "path": str(corpus)},
            "variants": {"categories": ["hate"], "severities": [1, 2], "generator": {"name": "template"}},
            "tts": {"voices": {"A": {"engine": "piper"}}},
            "asr": {"models": {"tiny": {"model": "bundled:tiny.en"}}},
            "judges": {
                "lalm": {"backend": "transformers", "model": "m", "modalities": ["text", "audio", "audio_text"]},
                "cascade": {
                    "backend": "embedding",
                    "model": "m",
                    "modalities": ["text", "audio"],
                    "options": {"cascade_asr": "tiny"},
                    "schedule": {"conditions": ["clean", "noise_10", "babble_5"]},
                },
            },
            "evaluation": {
                "judges": ["lalm", "cascade"],
                "transcript_sources": ["gt", "asr:tiny"],
                "conditions": ["clean", "masked", "silence", "injection", "tts_control"],
                "shards": 1,  # babble needs another dialogue in the shard
            },
        }
    )
    plan = Plan(config)
    lalm = {(c.modality, c.transcript_source, c.condition) for c in plan.judge_cells() if c.judge == "lalm"}
    assert ("text", "gt", "masked") not in lalm and ("text", "asr:tiny", "masked") in lalm
    assert ("text", "gt", "injection") in lalm and ("text", "gt", "tts_control") not in lalm
    assert {(m, s) for m, s, c in lalm if c == "silence"} == {("audio", "none")}
    assert len([c for c in lalm if c[2] == "masked"]) == 4  # text-asr, audio, audio_text x 2 sources
    cascade = {c.condition for c in plan.judge_cells() if c.judge == "cascade"}
    assert cascade == {"clean", "noise_10", "babble_5"}  # the judge's own schedule
    assert set(plan.control_conditions()) == {"masked", "silence", "injection", "tts_control", "noise_10", "babble_5"}
    assert plan.synthesized_controls() == ["injection", "tts_control"]
    # The ASR the control cells read: ASR sources, and the cascade of an audio cell.
    assert set(plan.condition_transcripts()) == {
        ("tiny", c) for c in ("masked", "injection", "tts_control", "noise_10", "babble_5")
    }
    assert plan.needs_babble()


def test_babble_needs_another_dialogue_in_every_shard(tmp_path):
    import pytest

    from lalm_judge.workflow.config import ConfigError

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    turn = {"speaker": "A", "text": "hi", "emotion": "happy"}
    (corpus / "dialogues.jsonl").write_text(json.dumps({"id": "alone", "turns": [turn, turn]}))
    config = {
        "corpus": {"format": "jsonl", "path": str(corpus)},
        "variants": {"categories": ["hate"], "severities": [1], "generator": {"name": "template"}},
        "tts": {"voices": {"A": {"engine": "piper"}}},
        "asr": {"models": {"tiny": {"model": "bundled:tiny.en"}}},
        "judges": {"lalm": {"backend": "transformers", "model": "m", "modalities": ["audio"]}},
        "evaluation": {"judges": ["lalm"], "conditions": ["clean", "noise_5"], "shards": 1},
    }
    assert Plan(validate_config(config)).control_conditions() == ["noise_5"]
    config["evaluation"]["conditions"] = ["clean", "babble_5"]
    with pytest.raises(ConfigError, match="dialogue 'alone' is the only usable dialogue of shard 0"):
        Plan(validate_config(config))


def test_the_controls_can_be_limited_to_some_dialogues(tmp_path):
    import pytest

    from lalm_judge.workflow.config import ConfigError

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    turn = {"speaker": "A", "text": "hi", "emotion": "happy"}
    lines = [{"id": name, "turns": [turn, turn]} for name in ("a", "b", "c")]
    (corpus / "dialogues.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    config = {
        "corpus": {"format": "jsonl", "path": str(corpus)},
        "variants": {"categories": ["hate"], "severities": [1], "generator": {"name": "template"}},
        "tts": {"voices": {"A": {"engine": "piper"}}},
        "asr": {"models": {"tiny": {"model": "bundled:tiny.en"}}},
        "judges": {"lalm": {"backend": "transformers", "model": "m", "modalities": ["audio"]}},
        "evaluation": {"judges": ["lalm"], "conditions": ["clean", "masked"], "shards": 1},
        "controls": {"dialogues": ["c", "a"]},
    }
    plan = Plan(validate_config(config))
    assert plan.control_dialogues() == ["a", "c"] and plan.control_dialogues(shard=0) == ["a", "c"]
    config["controls"]["dialogues"] = ["a", "zzz"]
    with pytest.raises(ConfigError, match=r"controls.dialogues: \['zzz'\] are not dialogues of the corpus"):
        Plan(validate_config(config))


def emotion_reference_config(tmp_path, genders: dict, conditions=("clean",), engine: str = "xtts") -> dict:
    """A jsonl corpus of two dialogues (speakers A and B, one turn labelled 'worried') with RAVDESS references."""
    from tests.support.corpora import write_ravdess

    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    turns = [{"speaker": "A", "text": "hi", "emotion": "worried"}, {"speaker": "B", "text": "ho", "emotion": "happy"}]
    lines = [{"id": "first", "turns": turns}, {"id": "second", "turns": turns}]
    (corpus / "dialogues.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    voice = {"engine": engine} | ({"device": "cpu"} if engine == "xtts" else {})
    return validate_config(
        {
            "corpus": {"format": "jsonl", "path": str(corpus)},
            "variants": {"categories": ["hate"], "severities": [1], "generator": {"name": "template"}},
            "tts": {
                "voices": {"A": voice, "B": voice},
                "emotion_reference": {
                    "corpus": "ravdess",
                    "path": str(write_ravdess(tmp_path / "ravdess", actors=(1, 2))),
                    "speaker_genders": genders,
                },
            },
            "asr": {"models": {"tiny": {"model": "bundled:tiny.en"}}},
            "judges": {"text_only": {"backend": "openai", "model": "m"}},
            "evaluation": {
                "judges": ["text_only"],
                "transcript_sources": ["gt", "asr:tiny"],
                "conditions": list(conditions),
            },
        }
    )


def test_emotion_references_are_checked_before_the_first_job(tmp_path):
    from lalm_judge.workflow.config import ConfigError, check_config

    with pytest.raises(ConfigError, match=r"dialogue 'first', speaker 'B': no gender .*'first/B'"):
        Plan(emotion_reference_config(tmp_path, {"A": "male"}))
    assert Plan(emotion_reference_config(tmp_path, {"A": "male", "B": "female"})).spoken_turns() == [
        ("first", "A", None),
        ("first", "B", None),
        ("second", "A", None),
        ("second", "B", None),
    ]
    # The TTS control speaks the original turn with its corpus label: 'worried' needs a mapping.
    with pytest.raises(ConfigError, match=r"emotion 'worried' has no RAVDESS emotion"):
        Plan(emotion_reference_config(tmp_path, {"A": "male", "B": "female"}, conditions=("clean", "tts_control")))
    # Only a cloning engine takes its prosody from another speaker's clips.
    with pytest.raises(ConfigError, match=r"voices \['A', 'B'\] do not clone from reference audio"):
        check_config(emotion_reference_config(tmp_path, {"A": "male", "B": "female"}, engine="piper"))
