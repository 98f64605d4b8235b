"""Tiny random-weight models of real judge architectures, built from configs for tests and benchmarks.

Each builder trains a small byte-level BPE tokenizer (deterministic, ~0.1 s), builds the model from a
config with seeded random weights, and saves model + processor/tokenizer to `out_dir` so the real
`from_pretrained` -> chat template -> processor -> `generate` path runs offline. Outputs are random text:
these models exercise code paths, they never judge anything.
"""

from __future__ import annotations

import os
from pathlib import Path

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
_LLAMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _build_tokenizer(bos: str, eos: str, vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token=None))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_TOKENIZER_CORPUS, trainer=trainer)
    # padding_side must be given to the constructor: setting it afterwards does not survive save/reload.
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token=bos, eos_token=eos, pad_token="<|pad|>", unk_token=None, padding_side="left"
    )


def _seeded_model(model_class, config, seed: int):
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_class(config).eval()


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
    from transformers import (
        Qwen2AudioConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    out = Path(out_dir)
    tokenizer = _build_tokenizer(bos="<|im_start|>", eos="<|im_end|>")
    processor = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tokenizer)
    config = Qwen2AudioConfig(
        audio_config={
            "model_type": "qwen2_audio_encoder",
            "d_model": audio_hidden_size,
            "encoder_layers": audio_layers,
            "encoder_attention_heads": 4,
            "encoder_ffn_dim": 2 * audio_hidden_size,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": len(tokenizer),
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": num_layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": True,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    )
    model = _seeded_model(Qwen2AudioForConditionalGeneration, config, seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_tiny_llama(out_dir: str | os.PathLike, *, hidden_size: int = 64, num_layers: int = 2, seed: int = 0) -> Path:
    """Save a random-weight Llama text model with a chat template to `out_dir`; return it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    tokenizer = _build_tokenizer(bos="<|begin_of_text|>", eos="<|im_end|>")
    tokenizer.chat_template = _LLAMA_CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = _seeded_model(LlamaForCausalLM, config, seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
