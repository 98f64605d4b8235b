"""A tiny random-weight Gemma 3n (google/gemma-3n-E2B-it, E4B-it) for the engine tests.

Shaped like the released instruction-tuned checkpoints where that decides whether a path works (transformers
`models/gemma3n/configuration_gemma3n.py`, `processing_gemma3n.py`, and the conversion that wrote the released files,
huggingface/transformers `src/transformers/models/gemma3n/convert_gemma3n_weights.py`):
- the full model's config (`Gemma3nForConditionalGeneration`: text, audio and vision configs, 188 audio soft tokens per
  item) and its weights under `model.language_model.`, `model.audio_tower.`, `model.vision_tower.timm_model.`,
  `model.embed_audio.` and `model.embed_vision.`, the output embeddings tied to the input ones (the conversion writes
  `lm_head.weight` as `embed_tokens.weight`);
- the token id layout both engines read: a text vocabulary (the per-layer embeddings' `vocab_size_per_layer_input`),
  then 128 image ids from `<end_of_image>` and `<image_soft_token>` and 128 audio ids from `<end_of_audio>` and
  `<audio_soft_token>` (the released ids 262144, 262145, 262272 and 262273 after a 262,144-token text vocabulary);
  the embedders' `vocab_offset`s mark the two ranges, and the text table's rows for them are copies of the pad row,
  as the conversion writes them. `<start_of_image>` and `<start_of_audio>` are text tokens (255999 and 256000);
- newline runs as single tokens ("\\n" to "\\n\\n\\n\\n"), as Gemma's SentencePiece vocabulary has them: vLLM's
  processor (`model_executor/models/gemma3n_mm.py`, `_apply_token_matches`) looks them up to merge the newlines
  around the audio sequence as the tokenizer would;
- the tokenizer adds `<bos>` when asked for special tokens (the conversion's `add_bos_token=True`) and the chat
  template writes it; generation ends at `<eos>` or `<end_of_turn>` (the conversion's `generation_config`);
- the released processor: `Gemma3nProcessor` with `Gemma3nAudioFeatureExtractor` (16 kHz, 128 mel bins, audio cut
  at 480,000 samples), a Siglip image processor of 768 x 768 pixels, `audio_seq_length` 188, and the chat template
  the conversion saves with the instruction-tuned checkpoints (`_CHAT_TEMPLATE`, `--include_chat_template`);
- the text decoder's Gemma 3n parts at small sizes: AltUp with 4 inputs, LAuReL, per-layer embeddings, sliding and
  full attention layers (every fifth full), the last layers sharing the KV cache of earlier ones
  (`num_kv_shared_layers`, as E2B's 10 of 30), activation sparsity in the first layers, final logit softcapping, heads
  of 64 dimensions (vLLM's CPU attention); a two-layer conformer audio encoder; and the released vision tower, timm's
  MobileNetV5 encoder (`mobilenetv5_300m_enc`), with its channels scaled down (`model_args.channel_multiplier`).
Building it needs timm (transformers' `TimmWrapperModel`), which imports torchvision: the vLLM twin has both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.models import _save, _seeded_model, build_tokenizer

# The chat template the conversion saves with the instruction-tuned checkpoints (huggingface/transformers
# `src/transformers/models/gemma3n/convert_gemma3n_weights.py`, `_CHAT_TEMPLATE`): a system message becomes a prefix
# of the first user turn, audio items write `<audio_soft_token>`, the assistant's role is `model`.
GEMMA3N_CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'audio' -%}
                {{ '<audio_soft_token>' }}
            {%- elif item['type'] == 'image' -%}
                {{ '<image_soft_token>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""
# The multimodal tokens by the attribute names Gemma3nProcessor reads (the conversion's `extra_special_tokens`).
GEMMA3N_TOKENS = {
    "image_token": "<image_soft_token>",
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "audio_token": "<audio_soft_token>",
    "boa_token": "<start_of_audio>",
    "eoa_token": "<end_of_audio>",
}
# Ids each embedder owns after the text vocabulary (Gemma3nVisionConfig / Gemma3nAudioConfig `vocab_size`).
MULTIMODAL_VOCAB = 128
NEWLINE_RUNS = ("\n", "\n\n", "\n\n\n", "\n\n\n\n")
AUDIO_TOKENS_PER_ITEM = 188  # Gemma3nProcessor `audio_seq_length`, Gemma3nConfig `audio_soft_tokens_per_image`
# The released vision tower's timm architecture, its channels scaled down for a tiny model.
VISION_ARCHITECTURE = "mobilenetv5_300m_enc"
VISION_CHANNEL_MULTIPLIER = 0.05
MOBILENET_FEATURES = 2048  # MobileNetV5Encoder's fused output channels (timm `mobilenetv5.py`, `num_features`)


def gemma3n_tokenizer() -> Any:
    """A tokenizer with Gemma 3n's token id layout (module docstring)."""
    from tokenizers import AddedToken

    def filler(kind: str, count: int) -> list[str]:
        # Unused ids of an embedder's range, so that its next marker lands at the range's start.
        return [f"<unused_{kind}_{index}>" for index in range(count)]

    appended = [
        *(AddedToken(run, special=False, normalized=False) for run in NEWLINE_RUNS),
        GEMMA3N_TOKENS["eoi_token"],
        GEMMA3N_TOKENS["image_token"],
        *filler("image", MULTIMODAL_VOCAB - 2),
        GEMMA3N_TOKENS["eoa_token"],
        GEMMA3N_TOKENS["audio_token"],
        *filler("audio", MULTIMODAL_VOCAB - 2),
    ]
    return build_tokenizer(
        "<bos>",
        "<eos>",
        extra_tokens=[
            "<eos>",
            "<start_of_turn>",
            "<end_of_turn>",
            GEMMA3N_TOKENS["boi_token"],
            GEMMA3N_TOKENS["boa_token"],
        ],
        named_tokens=GEMMA3N_TOKENS,
        add_bos=True,
        appended_tokens=appended,
    )


def gemma3n_processor(tokenizer: Any) -> Any:
    """The released processor classes and settings (the conversion's `Gemma3nProcessor`)."""
    from transformers import Gemma3nAudioFeatureExtractor, Gemma3nProcessor, SiglipImageProcessor

    image_processor = SiglipImageProcessor(
        image_mean=(0.5,) * 3,
        image_std=(0.5,) * 3,
        size={"height": 768, "width": 768},
        resample=2,  # PILImageResampling.BILINEAR
        do_normalize=False,
    )
    return Gemma3nProcessor(
        feature_extractor=Gemma3nAudioFeatureExtractor(),
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=GEMMA3N_CHAT_TEMPLATE,
        audio_seq_length=AUDIO_TOKENS_PER_ITEM,
        image_seq_length=256,
    )


def gemma3n_parts() -> tuple[Any, Any]:
    """(config, processor) of the tiny Gemma 3n."""
    from transformers import Gemma3nConfig

    tokenizer = gemma3n_tokenizer()
    processor = gemma3n_processor(tokenizer)
    ids = tokenizer.convert_tokens_to_ids
    image_offset = ids(GEMMA3N_TOKENS["eoi_token"])
    audio_offset = ids(GEMMA3N_TOKENS["eoa_token"])
    assert audio_offset == image_offset + MULTIMODAL_VOCAB and len(tokenizer) == audio_offset + MULTIMODAL_VOCAB
    layers = 10
    text = {
        "vocab_size": len(tokenizer),
        "vocab_size_per_layer_input": image_offset,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_size_per_layer_input": 64,
        "laurel_rank": 16,
        # E2B: the last 10 of 30 layers share the KV cache, the first 10 keep the top 5 % of their MLP activations.
        "num_kv_shared_layers": 5,
        "activation_sparsity_pattern": [0.95] * 2 + [0.0] * (layers - 2),
        "max_position_embeddings": 32768,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id,
    }
    audio = {
        "hidden_size": 64,
        "conf_num_attention_heads": 4,
        "conf_num_hidden_layers": 2,
        "vocab_size": MULTIMODAL_VOCAB,
        "vocab_offset": audio_offset,
    }
    vision = {
        "architecture": VISION_ARCHITECTURE,
        "model_args": {"channel_multiplier": VISION_CHANNEL_MULTIPLIER},
        "hidden_size": MOBILENET_FEATURES,
        "vocab_size": MULTIMODAL_VOCAB,
        "vocab_offset": image_offset,
    }
    config = Gemma3nConfig(
        text_config=text,
        audio_config=audio,
        vision_config=vision,
        audio_soft_tokens_per_image=AUDIO_TOKENS_PER_ITEM,
        boi_token_id=ids(GEMMA3N_TOKENS["boi_token"]),
        eoi_token_id=image_offset,
        image_token_id=ids(GEMMA3N_TOKENS["image_token"]),
        boa_token_id=ids(GEMMA3N_TOKENS["boa_token"]),
        eoa_token_id=audio_offset,
        audio_token_id=ids(GEMMA3N_TOKENS["audio_token"]),
        tie_word_embeddings=True,
    )
    return config, processor


def build_tiny_gemma3n(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Save a random-weight Gemma 3n and its processor to `out_dir`; return it."""
    import torch
    from transformers import Gemma3nForConditionalGeneration

    config, processor = gemma3n_parts()
    model = _seeded_model(Gemma3nForConditionalGeneration, config, seed)
    tokenizer = processor.tokenizer
    embeddings = model.get_input_embeddings().weight
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        # The pad row is a trained row in the release; transformers' initialisation zeroes it (`padding_idx`), and a
        # row of zeros has no magnitude for vLLM's AltUp to divide by (below). The multimodal ids' text rows are
        # copies of the pad row, as the conversion writes them.
        torch.manual_seed(seed)
        pad = tokenizer.pad_token_id
        embeddings[pad] = torch.randn_like(embeddings[pad]) * config.text_config.initializer_range
        embeddings[config.text_config.vocab_size_per_layer_input :] = embeddings[pad]
    # Generation ends at `<eos>` or `<end_of_turn>`. Their output rows are the input rows (tied), so they keep their
    # random weights (`models._finish` would zero them): an input row of zeros has no magnitude, and vLLM's AltUp
    # divides by it (`gemma3n.py` `altup_embed`: its floor `EPS` is `torch.finfo().min`), which gives NaN.
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return _save(out_dir, model, processor)
