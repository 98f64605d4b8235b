"""What trains: the language model only (the audio encoder and its projector stay fixed; LoRA skips them)."""

import peft
import pytest
import torch

from lalm_judge.training.backbone import freeze_encoders, load_backbone, lora_config, lora_target_pattern
from lalm_judge.training.settings import LoraSettings, TrainingError

torch.set_num_threads(1)


@pytest.fixture
def backbone(qwen2audio_dir):
    return load_backbone(str(qwen2audio_dir), "main", torch.float32, "cpu")


def test_freezing_keeps_the_audio_encoder_and_projector_fixed(backbone):
    assert freeze_encoders(backbone) == ["audio_tower", "multi_modal_projector"]
    trainable = {name for name, p in backbone.model.named_parameters() if p.requires_grad}
    assert trainable and all(".language_model." in name or name.startswith("lm_head") for name in trainable)
    assert not any(p.requires_grad for n, p in backbone.model.named_parameters() if "audio_tower" in n)


def test_lora_adapters_go_on_the_language_model_only(backbone):
    settings = LoraSettings(r=2, alpha=4, dropout=0.0, target_modules=("q_proj", "v_proj"))
    model = peft.get_peft_model(backbone.model, lora_config(settings, backbone))
    adapted = {name.rsplit(".lora_A", 1)[0] for name, _ in model.named_parameters() if ".lora_A" in name}
    # The encoder has q_proj/v_proj layers too; none of them is adapted.
    assert adapted and not any("audio_tower" in name for name in adapted)
    assert len(adapted) == 2 * 2  # two decoder layers x (q_proj, v_proj)


def test_the_lora_pattern_excludes_every_encoder_module():
    pattern = lora_target_pattern(("q_proj",), ("audio_tower", "visual"))
    import re

    assert re.fullmatch(pattern, "model.language_model.layers.0.self_attn.q_proj")
    assert not re.fullmatch(pattern, "model.audio_tower.layers.0.self_attn.q_proj")
    assert not re.fullmatch(pattern, "visual.blocks.0.attn.q_proj")
    assert not re.fullmatch(pattern, "model.language_model.layers.0.self_attn.k_proj")


def test_a_model_that_is_no_audio_llm_is_refused(llama_dir):
    with pytest.raises(TrainingError, match="model type 'llama' is not a supported backbone"):
        load_backbone(str(llama_dir), "main", torch.float32, "cpu")
