"""GRPO with SageLM's rule-based reward: the reward by hand, and a tiny run on CPU (a random-weight Qwen2-Audio
built at test time, TRL's real GRPOTrainer) that samples completions with both responses' audio, scores them and
updates the language model; the checkpoint is a pairwise judge like the SFT one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from lalm_judge.cli import main as cli
from lalm_judge.training.grpo import accuracy_reward, format_reward, judge_reward
from lalm_judge.training.sft import REPORT_FILE
from lalm_judge.workflow.config import load_training_section
from tests.training.conftest import training_section
from tests.training.test_sft import assert_judged, judge

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("completion", "label", "accuracy", "answer_format"),
    [
        ("1\nResponse 1 answers the question.", "1", 1.0, 1.0),
        ("2\nResponse 2 is better.", "1", 0.0, 1.0),
        ("Tie", "Tie", 1.0, 0.0),  # right, but no rationale
        ("Tie\n", "2", 0.0, 0.0),  # wrong, and an empty rationale
        ("", "2", 0.0, 0.0),
    ],
)
def test_sagelm_s_reward_by_hand(completion, label, accuracy, answer_format):
    assert accuracy_reward(completion, label) == accuracy
    assert format_reward(completion) == answer_format
    weights = {"accuracy": 1.0, "format": 0.5}
    assert judge_reward([completion], [label], weights) == [accuracy + 0.5 * answer_format]


@pytest.mark.slow
def test_grpo_trains_a_pairwise_judge_on_audio(tmp_path, qwen2audio_dir, training_data, capsys):
    section = training_section(qwen2audio_dir, training_data, tmp_path / "out", max_steps=2, val_size=1, eval_steps=1)
    section["stages"] = section["stages"][:1]
    section["grpo"] = {"num_generations": 2, "max_completion_length": 8, "temperature": 1.0}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"training": section}))
    assert cli(["pairwise", "train", "--config", str(path), "--method", "grpo"]) == 0
    out = capsys.readouterr().out
    assert "semantic (grpo)" in out and "mean reward" in out
    report = json.loads((tmp_path / "out" / "grpo" / REPORT_FILE).read_text())
    (stage,) = report["stages"]
    assert report["settings"]["method"] == "grpo" and stage["steps"] == 2
    assert all("reward" in entry for entry in stage["losses"])
    assert [entry["step"] for entry in stage["evaluations"]] == [1, 2] and stage["n_validation"] == 1
    # The language model changed (the rewards of a random model differ within a group often enough), the encoder not.
    before, after = (
        load_file(str(qwen2audio_dir / "model.safetensors")),
        load_file(str(tmp_path / "out" / "grpo" / "semantic" / "model.safetensors")),
    )
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert all(name.startswith("language_model.") for name in changed)
    assert_judged(judge(tmp_path / "out" / "grpo" / "semantic", training_data), 2)


@pytest.mark.slow
def test_the_model_gets_both_responses_audio_when_sampling_and_when_scored(
    tmp_path, qwen2audio_dir, training_data, monkeypatch
):
    """TRL's GRPOTrainer passes image inputs only; every model call here carries the audio features of its rows."""
    from lalm_judge.training import sft

    calls = []
    load = sft.load_backbone

    def spied(*args, **kwargs):
        backbone = load(*args, **kwargs)

        def record(_module, _args, call_kwargs):
            ids, features = call_kwargs["input_ids"], call_kwargs.get("input_features")
            if ids.shape[1] > 1:  # a whole prompt (later decoding steps read the cache)
                kind = "loss" if "labels" in call_kwargs else "sample"
                calls.append((kind, features is not None and len(features) == 2 * ids.shape[0]))

        backbone.model.register_forward_pre_hook(record, with_kwargs=True)
        return backbone

    monkeypatch.setattr(sft, "load_backbone", spied)
    section = training_section(qwen2audio_dir, training_data, tmp_path / "out", max_steps=1)
    section["stages"] = section["stages"][:1]
    section["grpo"] = {"num_generations": 2, "max_completion_length": 4}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"training": section}))
    assert cli(["pairwise", "train", "--config", str(path), "--method", "grpo"]) == 0
    kinds = {kind for kind, _ in calls}
    assert kinds == {"sample", "loss"} and all(with_audio for _, with_audio in calls)


def shipped_section(model, data, output_dir) -> dict:
    """configs/pairwise.yaml's `training` section as shipped (method, batch 2 x 2, num_generations, stages and their
    mix, cutoff_len, val_size, gradient checkpointing, bf16), with a tiny model and data and only what a CPU test
    cannot keep changed: the backbone and the records, the output folder, the device, no DeepSpeed (a GPU package),
    and one logged step per stage."""
    section = load_training_section(ROOT / "configs" / "pairwise.yaml")
    section.update(backbone=str(model), output_dir=str(output_dir), device="cpu", num_threads=1)
    for name, dataset in section["datasets"].items():
        dataset.update(records=[str(data[name])], audio_root=str(data["audio_root"]))
    section["hyperparameters"].update(deepspeed=None, max_steps=1, logging_steps=1)
    section["grpo"]["max_completion_length"] = 4
    return section


@pytest.mark.slow
def test_grpo_starts_with_the_shipped_configs_settings(tmp_path, qwen2audio_dir, training_data, capsys):
    """`lalm-judge pairwise train --method grpo` with configs/pairwise.yaml's settings (its batch of 2 x 2 per GPU
    and its num_generations) trains both stages; num_generations 8, TRL's default, is refused before any model is
    loaded, naming the numbers to change."""
    section = shipped_section(qwen2audio_dir, training_data, tmp_path / "out")
    shipped = yaml.safe_load((ROOT / "configs" / "pairwise.yaml").read_text())["training"]
    assert (
        section["hyperparameters"]["per_device_batch_size"] * section["hyperparameters"]["gradient_accumulation_steps"]
        == 4
    )
    assert section["grpo"]["num_generations"] == shipped["grpo"]["num_generations"]
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"training": section}))
    assert cli(["pairwise", "train", "--config", str(path), "--method", "grpo"]) == 0
    report = json.loads((tmp_path / "out" / "grpo" / REPORT_FILE).read_text())
    assert [stage["steps"] for stage in report["stages"]] == [1, 1]
    assert "acoustic (grpo)" in capsys.readouterr().out

    section["grpo"]["num_generations"] = 8
    path.write_text(yaml.safe_dump({"training": section}))
    assert cli(["pairwise", "train", "--config", str(path), "--method", "grpo"]) == 2
    assert "set training.grpo.num_generations to 2 or 4 (a divisor of 4)" in capsys.readouterr().err
