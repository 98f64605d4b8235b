"""A tiny random-weight Voxtral for the engine tests, in both layouts the released repositories carry.

mistralai/Voxtral-Mini-3B-2507 ships its weights twice: in the Hugging Face layout (`config.json`, `model*.safetensors`:
`VoxtralForConditionalGeneration`, what transformers loads) and in Mistral's (`params.json`, `consolidated.safetensors`:
what vLLM 0.32 loads with `config_format` and `load_format` `mistral`, `model_executor/models/voxtral.py` and
`transformers_utils/configs/mistral.py`), with one tokenizer for both, `tekken.json` (mistral_common's Tekken, read by
vLLM's `tokenizer_mode: mistral` and by transformers' `MistralCommonBackend`). This builder writes the same random
weights in both layouts:
- the Hugging Face model from its config (a Whisper-style encoder over 30 s windows of 128 mel bins with sinusoidal
  positions, a projector of four stacked encoder frames, a Llama decoder with heads of 64 dimensions and untied output
  embeddings, the end token's output row zero), saved by transformers;
- Mistral's names for the same tensors (`layers.<i>.attention.wq`, `mm_whisper_embeddings.whisper_encoder...`,
  `mm_whisper_embeddings.audio_language_projection.{0,2}`), the decoder's query and key rows in Mistral's rotary order
  (the inverse of the permutation vLLM's `MistralForCausalLM.maybe_remap_mistral` applies), and `params.json` with
  the released keys (`dim`, `n_layers`, `multimodal.whisper_model_args`);
- a Tekken file of byte tokens after the released special tokens (`[AUDIO]` at 24, `[BEGIN_AUDIO]` at 25, which
  transformers' `VoxtralProcessor` hard-codes) and the released audio settings: 16 kHz, 12.5 frames a second, 30 s
  chunks, 128 mel bins.
No mistral_common is needed here: the files are written as their formats are documented in its `tekken.py`.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

# The released Tekken special tokens up to [TRANSCRIBE] (mistral_common `SpecialTokens`, the ranks of Voxtral's
# tekken.json); the rest of the 100 special ranks are fillers (`<SPECIAL_<rank>>`, as mistral_common adds them).
VOXTRAL_SPECIAL_TOKENS = {
    0: "<unk>",
    1: "<s>",
    2: "</s>",
    3: "[INST]",
    4: "[/INST]",
    5: "[AVAILABLE_TOOLS]",
    6: "[/AVAILABLE_TOOLS]",
    7: "[TOOL_RESULTS]",
    8: "[/TOOL_RESULTS]",
    9: "[TOOL_CALLS]",
    10: "[IMG]",
    11: "<pad>",
    12: "[IMG_BREAK]",
    13: "[IMG_END]",
    14: "[PREFIX]",
    15: "[MIDDLE]",
    16: "[SUFFIX]",
    17: "[SYSTEM_PROMPT]",
    18: "[/SYSTEM_PROMPT]",
    19: "[TOOL_CONTENT]",
    24: "[AUDIO]",
    25: "[BEGIN_AUDIO]",
    34: "[TRANSCRIBE]",
}
N_SPECIAL = 100
EOS_ID, PAD_ID, AUDIO_ID = 2, 11, 24
# mistral_common's Tekken pre-tokenizer pattern (the released tekken.json's `config.pattern`).
TEKKEN_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
    r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The released audio settings (tekken.json `audio`).
VOXTRAL_AUDIO = {
    "sampling_rate": 16000,
    "frame_rate": 12.5,
    "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
    "chunk_length_s": 30.0,
}
DOWNSAMPLE_FACTOR = 4  # encoder frames per audio token (params.json `downsample_args`)
ROPE_THETA = 100_000_000.0  # the released decoder's
CONTEXT = 32768  # the released decoder's (model card: a 32k token context)
DECODER = {"dim": 256, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 64, "hidden_dim": 512}
# The encoder's feed-forward width is four times its width, as released (5120 = 4 x 1280): transformers'
# VoxtralEncoderConfig has one `intermediate_size` for both that width and the projector's input of four frames.
ENCODER = {"dim": 64, "n_layers": 2, "n_heads": 4, "head_dim": 16, "hidden_dim": DOWNSAMPLE_FACTOR * 64}


def tekken_json() -> dict[str, Any]:
    """A Tekken tokenizer file: the 256 byte tokens after `N_SPECIAL` special ranks, version v7 with audio."""
    vocab = [
        {"rank": byte, "token_bytes": base64.b64encode(bytes([byte])).decode(), "token_str": chr(byte)}
        for byte in range(256)
    ]
    special = [
        {"rank": rank, "token_str": VOXTRAL_SPECIAL_TOKENS.get(rank, f"<SPECIAL_{rank}>"), "is_control": True}
        for rank in range(N_SPECIAL)
    ]
    return {
        "config": {
            "pattern": TEKKEN_PATTERN,
            "num_vocab_tokens": len(vocab),
            "default_vocab_size": N_SPECIAL + len(vocab),
            "default_num_special_tokens": N_SPECIAL,
            "version": "v7",
        },
        "vocab": vocab,
        "special_tokens": special,
        "audio": VOXTRAL_AUDIO,
    }


def voxtral_config() -> Any:
    """The Hugging Face config of the tiny Voxtral."""
    from transformers import VoxtralConfig

    text = {
        "model_type": "llama",
        "vocab_size": N_SPECIAL + 256,
        "hidden_size": DECODER["dim"],
        "intermediate_size": DECODER["hidden_dim"],
        "num_hidden_layers": DECODER["n_layers"],
        "num_attention_heads": DECODER["n_heads"],
        "num_key_value_heads": DECODER["n_kv_heads"],
        "head_dim": DECODER["head_dim"],
        "max_position_embeddings": CONTEXT,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "bos_token_id": 1,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "tie_word_embeddings": False,
    }
    audio = {
        "hidden_size": ENCODER["dim"],
        # The feed-forward width, and the projector's input of `DOWNSAMPLE_FACTOR` encoder frames.
        "intermediate_size": ENCODER["hidden_dim"],
        "num_hidden_layers": ENCODER["n_layers"],
        "num_attention_heads": ENCODER["n_heads"],
        "num_mel_bins": 128,
        "max_source_positions": 1500,
    }
    return VoxtralConfig(audio_config=audio, text_config=text, audio_token_id=AUDIO_ID, tie_word_embeddings=False)


def params_json() -> dict[str, Any]:
    """Mistral's config of the same model (the released params.json's keys)."""
    return {
        **{key: DECODER[key] for key in ("dim", "n_layers", "head_dim", "hidden_dim", "n_heads", "n_kv_heads")},
        "rope_theta": ROPE_THETA,
        "norm_eps": 1e-5,
        "vocab_size": N_SPECIAL + 256,
        "max_position_embeddings": CONTEXT,
        "tied_embeddings": False,
        "multimodal": {
            "whisper_model_args": {
                "encoder_args": {
                    **{key: ENCODER[key] for key in ("dim", "n_layers", "head_dim", "hidden_dim", "n_heads")},
                    "vocab_size": 51866,
                    "max_source_positions": 1500,
                    "audio_encoding_args": {
                        "sampling_rate": VOXTRAL_AUDIO["sampling_rate"],
                        **VOXTRAL_AUDIO["audio_encoding_config"],
                    },
                },
                "downsample_args": {"downsample_factor": DOWNSAMPLE_FACTOR},
            }
        },
    }


def mistral_rotary_order(weight: Any, n_heads: int) -> Any:
    """A query or key projection from Hugging Face's rotary order to Mistral's (the inverse of vLLM's `permute`)."""
    rows, columns = weight.shape
    return weight.view(n_heads, 2, rows // n_heads // 2, columns).transpose(1, 2).reshape(rows, columns)


def mistral_name(name: str) -> str | None:
    """A tensor's name in Mistral's layout (None: not stored there: the encoder's sinusoidal positions)."""
    import re

    rules = [
        (r"language_model\.model\.embed_tokens\.(.*)", r"tok_embeddings.\1"),
        (r"language_model\.lm_head\.(.*)", r"output.\1"),
        (r"language_model\.model\.norm\.(.*)", r"norm.\1"),
        (r"language_model\.model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.(.*)", r"layers.\1.attention.w\2.\3"),
        (r"language_model\.model\.layers\.(\d+)\.mlp\.gate_proj\.(.*)", r"layers.\1.feed_forward.w1.\2"),
        (r"language_model\.model\.layers\.(\d+)\.mlp\.down_proj\.(.*)", r"layers.\1.feed_forward.w2.\2"),
        (r"language_model\.model\.layers\.(\d+)\.mlp\.up_proj\.(.*)", r"layers.\1.feed_forward.w3.\2"),
        (r"language_model\.model\.layers\.(\d+)\.input_layernorm\.(.*)", r"layers.\1.attention_norm.\2"),
        (r"language_model\.model\.layers\.(\d+)\.post_attention_layernorm\.(.*)", r"layers.\1.ffn_norm.\2"),
        (r"audio_tower\.embed_positions\..*", None),
        (r"audio_tower\.conv([12])\.(.*)", lambda m: f"{ENC}.conv_layers.{int(m[1]) - 1}.conv.{m[2]}"),
        (
            r"audio_tower\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(.*)",
            rf"{ENC}.transformer.layers.\1.attention.w\2.\3",
        ),
        (r"audio_tower\.layers\.(\d+)\.self_attn\.out_proj\.(.*)", rf"{ENC}.transformer.layers.\1.attention.wo.\2"),
        (r"audio_tower\.layers\.(\d+)\.self_attn_layer_norm\.(.*)", rf"{ENC}.transformer.layers.\1.attention_norm.\2"),
        (r"audio_tower\.layers\.(\d+)\.fc1\.(.*)", rf"{ENC}.transformer.layers.\1.feed_forward.w1.\2"),
        (r"audio_tower\.layers\.(\d+)\.fc2\.(.*)", rf"{ENC}.transformer.layers.\1.feed_forward.w2.\2"),
        (r"audio_tower\.layers\.(\d+)\.final_layer_norm\.(.*)", rf"{ENC}.transformer.layers.\1.ffn_norm.\2"),
        (r"audio_tower\.layer_norm\.(.*)", rf"{ENC}.transformer.norm.\1"),
        (r"multi_modal_projector\.linear_1\.(.*)", r"mm_whisper_embeddings.audio_language_projection.0.\1"),
        (r"multi_modal_projector\.linear_2\.(.*)", r"mm_whisper_embeddings.audio_language_projection.2.\1"),
    ]
    for pattern, replacement in rules:
        match = re.fullmatch(pattern, name)
        if match:
            return None if replacement is None else re.sub(pattern, replacement, name)
    raise ValueError(f"no Mistral name for {name}: the Hugging Face layout changed, extend mistral_name")


ENC = "mm_whisper_embeddings.whisper_encoder"


def consolidated(weights: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face layout's tensors under Mistral's names and rotary order."""
    renamed = {}
    for name, tensor in weights.items():
        target = mistral_name(name)
        if target is None:
            continue
        if target.startswith("layers.") and ".attention.wq." in target:
            tensor = mistral_rotary_order(tensor, DECODER["n_heads"])
        elif target.startswith("layers.") and ".attention.wk." in target:
            tensor = mistral_rotary_order(tensor, DECODER["n_kv_heads"])
        renamed[target] = tensor.contiguous()
    return renamed


def build_tiny_voxtral(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Voxtral in both layouts, its Tekken tokenizer and feature extractor to `out_dir`."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import VoxtralForConditionalGeneration, WhisperFeatureExtractor

    from bench.models import _seeded_model, check_released_layout

    out = Path(out_dir)
    model = _seeded_model(VoxtralForConditionalGeneration, voxtral_config(), seed)
    with torch.no_grad():
        # Whisper's sinusoidal positions, which vLLM computes rather than loads.
        from transformers.models.whisper.modeling_whisper import sinusoids

        encoder = next(module for name, module in model.named_modules() if name.endswith("audio_tower"))
        encoder.embed_positions.weight.copy_(sinusoids(*encoder.embed_positions.weight.shape))
        # An answer never starts with its end: the end and pad tokens' output rows are zero (bench.models._finish).
        model.get_output_embeddings().weight[[EOS_ID, PAD_ID]] = 0.0
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.pad_token_id = PAD_ID
    model.save_pretrained(out)
    check_released_layout(out)
    feature_extractor = WhisperFeatureExtractor(feature_size=128)
    feature_extractor.processor_class = "VoxtralProcessor"
    feature_extractor.save_pretrained(out)
    (out / "tekken.json").write_text(json.dumps(tekken_json(), indent=1) + "\n", encoding="utf-8")
    (out / "params.json").write_text(json.dumps(params_json(), indent=2) + "\n", encoding="utf-8")
    weights = {}
    for path in sorted(out.glob("model*.safetensors")):
        weights.update(load_file(path))
    save_file(consolidated(weights), out / "consolidated.safetensors")
    return out
