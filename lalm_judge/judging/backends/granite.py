"""Granite Speech 3.3's prompts and audio LoRA (`capabilities.prompt_format: granite`), for the vllm and transformers
backends.

The released chat template (ibm-granite/granite-speech-3.3-8b and -2b) concatenates each message's `content` as a
string, so the audio goes in as the `<|audio|>` placeholder written into the user text, before it with nothing between
(the model card's usage and vLLM 0.32 `model_executor/models/granite_speech.py` `get_generation_prompt`:
f"{audio_tok}can you transcribe ..."), or at an `AUDIO_SLOT`; both processors expand it into the audio's tokens
(transformers `processing_granite_speech.py`, vLLM's `PromptReplacement`). The template has a system role: without a
system message it writes its own, dated with the day it is rendered.

The checkpoint's folder also holds a LoRA adapter (`adapter_config.json`, `adapter_model.safetensors`) that the model
applies to requests with audio only: transformers loads it with peft and its `generate` enables it when audio
features are given and disables it otherwise (`modeling_granite_speech.py`); vLLM applies a LoRA adapter only to the
requests that name it (`LoRARequest`), so the engine starts with LoRA on (`enable_lora`, `max_lora_rank` at least the
adapter's rank `r`) and every prompt with audio names the checkpoint's folder (`backends.lora`).
"""

from __future__ import annotations

from typing import Any

from lalm_judge.judging.backends.base import JudgeRequest
from lalm_judge.judging.backends.chat import numbered_audio_conversation
from lalm_judge.judging.backends.lora import ADAPTER_CONFIG

GRANITE_FORMAT = "granite"
GRANITE_AUDIO = "<|audio|>"


def granite_conversation(request: JudgeRequest) -> list[dict[str, Any]]:
    """The conversation of one request as the released template takes it: `<|audio|>` right before the text."""
    return numbered_audio_conversation(request, lambda _: GRANITE_AUDIO)


def transformers_audio_lora_problem(model: Any) -> str | None:
    """Why transformers cannot apply a loaded Granite Speech model's audio LoRA adapter, or None. Without peft
    transformers loads the model without its adapter (and answers audio requests wrong, with only a warning); and
    its `generate` switches the adapter on and off (`modeling_granite_speech.py`), which transformers refuses with a
    peft older than its `MIN_PEFT_VERSION` (`integrations/peft.py`: 0.20.0 in transformers 5.19, 0.22.0 in 5.24,
    `enable_adapters`/`disable_adapters`), an error at the first request instead of at load."""
    if not getattr(model.config, "has_lora_adapter", False):
        return None
    from transformers.integrations.peft import MIN_PEFT_VERSION
    from transformers.utils.peft_utils import check_peft_version

    try:
        check_peft_version(min_version=MIN_PEFT_VERSION)
    except ValueError as err:
        return f"its audio LoRA adapter needs peft >= {MIN_PEFT_VERSION} in this transformers ({err})"
    if not getattr(model, "_hf_peft_config_loaded", False):
        return f"its config says it has an audio LoRA adapter, but its folder has none ({ADAPTER_CONFIG})"
    return None
