"""bench/gpu_train.py is for a CUDA machine (full-size random backbones); here it runs with the tiny dimensions
on CPU, so the script, and training the Qwen2.5-Omni thinker (whose processor the CPU environment cannot load
from a folder), stay tested."""

import json

import pytest

from bench import gpu_train

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("backbone", "frozen"),
    [("qwen2_audio_7b", ["audio_tower", "multi_modal_projector"]), ("qwen25_omni_7b", ["audio_tower", "visual"])],
)
def test_the_gpu_check_trains_a_tiny_backbone_on_cpu(backbone, frozen, tmp_path):
    out = tmp_path / "figures.json"
    argv = ["--tiny", "--backbone", backbone, "--steps", "2", "--seconds", "1", "--no-gradient-checkpointing"]
    assert gpu_train.main([*argv, "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["frozen_modules"] == frozen
    assert len(figures["losses"]) == 2 and figures["seconds_per_step"] > 0
    assert 0 < figures["trainable_parameters"] < figures["parameters"]
    assert figures["peak_allocated_gib"] is None  # CPU: no GPU memory to report


def test_lora_counts_the_adapters_it_trains_at_a_learning_rate_for_lora(tmp_path):
    out = tmp_path / "figures.json"
    argv = ["--tiny", "--finetuning", "lora", "--steps", "2", "--seconds", "1", "--no-gradient-checkpointing"]
    assert gpu_train.main([*argv, "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    # The adapters, counted once attached: a small share of the backbone, not zero.
    assert 0 < figures["trainable_parameters"] < figures["parameters"] / 10
    assert figures["learning_rate"] == gpu_train.LEARNING_RATES["lora"] == 10 * gpu_train.LEARNING_RATES["full"]
