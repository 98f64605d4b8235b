"""The model being trained: loading an audio-LLM backbone, keeping its encoders fixed, adapters for LoRA.

Backbones: Qwen2-Audio (`Qwen2AudioForConditionalGeneration`; `AutoModelForImageTextToText` does not map its
config) and Qwen2.5-Omni, of which only the thinker (the audio-in, text-out model) is trained and saved, as
LLaMA-Factory does for SageLM: a full Omni checkpoint is loaded and its talker dropped. A saved checkpoint
holds the model and its processor, so the `transformers` judge backend loads it like any judge.

What trains: with `freeze_encoders` only the language model (embeddings, decoder layers, head); the audio
encoder, the vision encoder where there is one, and their projectors keep their weights (LLaMA-Factory's
defaults `freeze_vision_tower` and `freeze_multi_modal_projector`, which the study kept). LoRA adapters go on
the language model's linear layers only: the audio encoder has layers of the same names (`q_proj`, ...),
which plain target names would also hit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import transformers

from lalm_judge.training.settings import LoraSettings, TrainingError

OMNI = "qwen2_5_omni"
# model_type -> (class that is trained and saved, module names outside the language model)
BACKBONES = {
    "qwen2_audio": ("Qwen2AudioForConditionalGeneration", ("audio_tower", "multi_modal_projector")),
    "qwen2_5_omni_thinker": ("Qwen2_5OmniThinkerForConditionalGeneration", ("audio_tower", "visual")),
    OMNI: ("Qwen2_5OmniThinkerForConditionalGeneration", ("audio_tower", "visual")),
}
OMNI_FULL_CLASS = "Qwen2_5OmniForConditionalGeneration"


@dataclass
class Backbone:
    model: Any
    processor: Any
    model_type: str
    encoder_modules: tuple[str, ...]


def _model_type(source: str, revision: str) -> str:
    config = transformers.AutoConfig.from_pretrained(source, **_revision(source, revision))
    model_type = getattr(config, "model_type", "")
    if model_type not in BACKBONES:
        raise TrainingError(
            f"training.backbone {source}: model type {model_type!r} is not a supported backbone; "
            f"supported: {', '.join(sorted(BACKBONES))} (Qwen2-Audio, Qwen2.5-Omni)"
        )
    return model_type


def _revision(source: str, revision: str) -> dict[str, str]:
    return {} if Path(source).is_dir() else {"revision": revision}


def load_backbone(source: str, revision: str, dtype: Any, device: str) -> Backbone:
    """The trainable model and its processor from a hub id or folder (a backbone or a stage's checkpoint)."""
    model_type = _model_type(source, revision)
    class_name, encoders = BACKBONES[model_type]
    kwargs = {"dtype": dtype, **_revision(source, revision)}
    if model_type == OMNI:
        full = getattr(transformers, OMNI_FULL_CLASS).from_pretrained(source, **kwargs)
        model = full.thinker
        del full
    else:
        model = getattr(transformers, class_name).from_pretrained(source, **kwargs)
    processor = transformers.AutoProcessor.from_pretrained(source, **_revision(source, revision))
    return Backbone(model=model.to(device), processor=processor, model_type=model_type, encoder_modules=encoders)


def _in_encoder(name: str, encoders: tuple[str, ...]) -> bool:
    return any(re.search(rf"(^|\.){re.escape(module)}\.", name) for module in encoders)


def freeze_encoders(backbone: Backbone) -> list[str]:
    """Keep every weight outside the language model fixed; return the frozen top-level modules found."""
    frozen = set()
    for name, parameter in backbone.model.named_parameters():
        if _in_encoder(name, backbone.encoder_modules):
            parameter.requires_grad_(False)
            frozen.add(next(m for m in backbone.encoder_modules if re.search(rf"(^|\.){re.escape(m)}\.", name)))
    return sorted(frozen)


def lora_target_pattern(target_modules: tuple[str, ...], encoders: tuple[str, ...]) -> str:
    """A regex (peft matches it against full module names) for the named linear layers outside the encoders."""
    excluded = "|".join(re.escape(module) for module in encoders)
    names = "|".join(re.escape(module) for module in target_modules)
    return rf"^(?!(?:.*\.)?(?:{excluded})\.).*\.(?:{names})$"


def lora_config(settings: LoraSettings, backbone: Backbone) -> Any:
    import peft

    return peft.LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=lora_target_pattern(settings.target_modules, backbone.encoder_modules),
        task_type="CAUSAL_LM",
    )


def trainable_summary(model: Any) -> dict[str, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable_parameters": int(trainable), "parameters": int(sum(p.numel() for p in model.parameters()))}
