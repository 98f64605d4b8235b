"""Audio LoRA adapters of a checkpoint (Phi-4-multimodal's `speech-lora`, Granite Speech's own folder), for the vllm
and transformers backends: where the adapter's folder is, and the engine settings vLLM needs to apply it.

vLLM applies a LoRA adapter only to the requests that name it (`LoRARequest`), with the engine started with LoRA on and
a `max_lora_rank` it accepts at or above the adapter's rank; transformers loads the adapter with peft.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
# The ranks vLLM 0.32 accepts for `max_lora_rank` (`config/lora.py` `MaxLoRARanks`).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
AUDIO_LORA_NAME = "audio"
AUDIO_LORA_ID = 1


def adapter_folder(model: str, revision: str | None, adapter: str) -> Path:
    """The folder `adapter` (`.`: the checkpoint's own) of a local checkpoint, or of a hub checkpoint's local snapshot
    (fetched if needed)."""
    folder = Path(model) / adapter
    if folder.is_dir():
        return folder
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, revision=revision)) / adapter


def adapter_rank(folder: str) -> int:
    """The rank `r` of the LoRA adapter in `folder` (its `adapter_config.json`); raise naming the folder without one."""
    config = Path(folder) / ADAPTER_CONFIG
    if not config.is_file():
        raise ValueError(f"{folder} has no {ADAPTER_CONFIG}: no LoRA adapter there (download the whole repository)")
    return int(json.loads(config.read_text(encoding="utf-8"))["r"])


def audio_lora_engine_settings(folder: str) -> dict[str, Any]:
    """The `vllm.LLM` settings that let prompts use the audio LoRA adapter in `folder` (Granite Speech's checkpoint
    folder, Phi-4-multimodal's `speech-lora`): LoRA on, one adapter per batch, and the smallest rank vLLM accepts
    that holds the adapter's."""
    rank = adapter_rank(folder)
    fitting = [allowed for allowed in VLLM_LORA_RANKS if allowed >= rank]
    if not fitting:
        raise ValueError(f"{folder}: LoRA rank {rank} is over vLLM's largest, {VLLM_LORA_RANKS[-1]}")
    return {"enable_lora": True, "max_loras": 1, "max_lora_rank": fitting[0]}
