"""A tiny random-weight MERaLiON-2 that vllm-plugin-meralion2 serves, for engine tests on CPU.

vllm-plugin-meralion2 (0.3.0) ships MERaLiON-2's configuration and processor classes itself
(`vllm_plugin_meralion2.transformers_utils`): the plugin's model checks that vLLM's configuration is its
`MERaLiON2Config` and builds its own `MERaLiON2Processor` from the folder. The folder therefore carries a
configuration module that is the plugin's class (`configuration_meralion2.py`, named by `auto_map` as the released
repository names its own; nothing else is stood in), a Gemma-style tokenizer with the speech token `<SpeechHere>`
and the Gemma-2 chat template (MERaLiON-2 publishes its own only in its hub repository), the Whisper feature
extractor (128 mel bins) and the processor settings.

The weights are random (seeded) in the layout the plugin loads (`vllm0101.py` `MERaLiON2ForConditionalGeneration`):
the Whisper encoder under `speech_encoder.`, its layer norm `ln_speech.`, the speech adapter
`speech_audio_adapter.` (15 encoder frames to one token: 100 tokens per 30 s window) and the Gemma-2 decoder under
`text_decoder.model.` (its output embeddings tied to the input ones, as Gemma-2 has them). The decoder has 4 heads
of 64 (vLLM's CPU attention needs head size 64) and logit softcaps the random weights reach (`SOFTCAPS`; Gemma-2
has 50 and 30), so that an attention without them answers differently. Outputs are random text: the model
exercises the plugin's code path, it judges nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.models import build_tokenizer, chat_template

SPEECH_TOKEN = "<SpeechHere>"
HIDDEN = 256
SPEECH = {
    "d_model": 64,
    "encoder_layers": 1,
    "encoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "num_mel_bins": 128,
    "max_source_positions": 1500,  # 30 s windows: the plugin's 1,500 frames per window
    "scale_embedding": False,
    "activation_function": "gelu",
}
SPEECH_MLP_SCALE_FACTOR = 15
SOFTCAPS = {"attn_logit_softcapping": 0.1, "final_logit_softcapping": 0.5}

CONFIGURATION = '''"""MERaLiON-2's configuration: the class vllm-plugin-meralion2 ships (its model checks for it)."""

from vllm_plugin_meralion2.transformers_utils.configuration_meralion2 import MERaLiON2Config

__all__ = ["MERaLiON2Config"]
'''


def _config(tokenizer: Any) -> dict[str, Any]:
    text = {
        "model_type": "gemma2",
        "vocab_size": len(tokenizer),
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "query_pre_attn_scalar": 64,
        "hidden_act": "gelu_pytorch_tanh",  # vLLM's Gemma-2 reads it; Gemma-2's released configs carry it
        **SOFTCAPS,
        "sliding_window": 4096,
        "max_position_embeddings": 8192,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.convert_tokens_to_ids("<end_of_turn>"),
        "pad_token_id": tokenizer.pad_token_id,
    }
    return {
        "architectures": ["MERaLiON2ForConditionalGeneration"],
        "model_type": "meralion2",
        "auto_map": {"AutoConfig": "configuration_meralion2.MERaLiON2Config"},
        "speech_config": SPEECH,
        "text_config": text,
        "speech_mlp_scale_factor": SPEECH_MLP_SCALE_FACTOR,
        "speech_token_index": tokenizer.convert_tokens_to_ids(SPEECH_TOKEN),
        "torch_dtype": "float32",
    }


def reference_decoder(model_dir: str | os.PathLike, *, without: tuple[str, ...] = ()) -> Any:
    """transformers' Gemma-2 (eager attention) with the checkpoint's `text_decoder.model.` weights: what the text
    decoder computes, without vLLM; `without` names softcaps (keys of `SOFTCAPS`) to leave out."""
    import torch
    from safetensors.torch import load_file
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2ForCausalLM

    folder = Path(model_dir)
    text = json.loads((folder / "config.json").read_text(encoding="utf-8"))["text_config"]
    text = {**text, **dict.fromkeys(without)}
    model = Gemma2ForCausalLM(Gemma2Config(**text, attn_implementation="eager"))
    weights = load_file(str(folder / "model.safetensors"))
    prefix = "text_decoder."
    decoder = {key.removeprefix(prefix): value for key, value in weights.items() if key.startswith(prefix)}
    missing, unexpected = model.load_state_dict(decoder, strict=False)
    if missing != ["lm_head.weight"] or unexpected:  # the output embeddings are the input ones
        raise ValueError(f"{folder}: the decoder's weights do not fit Gemma-2 ({missing=}, {unexpected=})")
    return model.to(torch.float32).eval()


def _weights(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Seeded random weights in the layout the plugin loads."""
    import torch
    from transformers import Gemma2Config, WhisperConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Model
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    weights: dict[str, Any] = {}
    width, adapter = SPEECH["d_model"], 5 * SPEECH["d_model"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        parts = {
            "speech_encoder": WhisperEncoder(WhisperConfig(**SPEECH)),
            "text_decoder.model": Gemma2Model(Gemma2Config(**config["text_config"])),
        }
        for prefix, module in parts.items():
            weights.update({f"{prefix}.{key}": value for key, value in module.state_dict().items()})
        shapes = {
            "ln_speech.weight": (width,),
            "ln_speech.bias": (width,),
            "speech_audio_adapter.mlp_adapter.0.weight": (adapter, width * SPEECH_MLP_SCALE_FACTOR),
            "speech_audio_adapter.mlp_adapter.0.bias": (adapter,),
            "speech_audio_adapter.gate_proj.weight": (adapter, adapter),
            "speech_audio_adapter.gate_proj.bias": (adapter,),
            "speech_audio_adapter.pool_proj.weight": (adapter, adapter),
            "speech_audio_adapter.pool_proj.bias": (adapter,),
            "speech_audio_adapter.out_proj.weight": (HIDDEN, adapter),
            "speech_audio_adapter.out_proj.bias": (HIDDEN,),
        }
        weights.update({key: torch.randn(shape) * 0.02 for key, shape in shapes.items()})
    return {key: value.contiguous() for key, value in weights.items()}


def build_tiny_meralion(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Write the tiny MERaLiON-2 (config, tokenizer with the Gemma-2 chat template, feature extractor and
    processor settings, seeded weights) to `out_dir`; return it."""
    from safetensors.torch import save_file
    from transformers import WhisperFeatureExtractor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(
        "<bos>", "<eos>", extra_tokens=["<start_of_turn>", "<end_of_turn>", SPEECH_TOKEN], add_bos=True
    )
    tokenizer.chat_template = chat_template("google-gemma-2-2b-it")
    tokenizer.save_pretrained(out)
    WhisperFeatureExtractor(feature_size=SPEECH["num_mel_bins"]).save_pretrained(out)
    config = _config(tokenizer)
    processor = {
        "processor_class": "MERaLiON2Processor",
        "fixed_speech_embeds_length": 1500 // SPEECH_MLP_SCALE_FACTOR,
        "speech_token_index": config["speech_token_index"],
        "time_duration_limit": 300,
        "whisper_chunk_size": 30,
        "do_normalize": True,
    }
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2), encoding="utf-8")
    (out / "configuration_meralion2.py").write_text(CONFIGURATION, encoding="utf-8")
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    save_file(_weights(config, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
