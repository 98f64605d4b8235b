"""The context length of a vLLM judge's engine, `options.max_model_len`: a number, or `auto`, computed here when
the workflow is parsed.

vLLM reserves KV cache for `max_model_len` tokens per sequence and, unless told, takes the model's whole context
(131,072 tokens for Llama-3.1: its engine then does not start on a 24 GB card). `auto` is the longest request of
the run plus the answer budget, as an upper bound that needs no tokenizer:
- text: the UTF-8 bytes of the longest rendered prompt (a byte-level BPE or byte-fallback tokenizer never makes
  more tokens than bytes): every prompt and modality of the judge's cells, rendered with the longest transcript of
  the corpus, counted twice (an ASR transcript may be longer than the text spoken), plus one rewritten turn
  (`REWRITTEN_TURN_BYTES`, or five bytes per token of the llm generator's `max_tokens`) and the injected sentence;
- audio: the tokens of the judge's longest audio window (`max_audio_s`) in its encoder (`AUDIO_TOKENS`), for each
  audio item of a request;
- the chat template's markup (`TEMPLATE_TOKENS`) and `generation.max_new_tokens`,
rounded up to a multiple of `ROUND_TO`, and refused when over the model's own context (`CONTEXT_TOKENS`). The vLLM
backend checks every request against the engine's length after generation, so the bound never cuts an answer
silently (`judging.backends.vllm_backend`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lalm_judge.core.dialogue import Dialogue, SourceDialogue
from lalm_judge.core.vocabulary import TEXT
from lalm_judge.data.corpus import read_jsonl_corpus
from lalm_judge.data.deepdialogue import read_conversation
from lalm_judge.judging.backends.capabilities import family_of
from lalm_judge.judging.prompts import load_prompt

AUTO = "auto"
ROUND_TO = 256
TEMPLATE_TOKENS = 64
REWRITTEN_TURN_BYTES = 2000
BYTES_PER_GENERATOR_TOKEN = 5
DEFAULT_MAX_NEW_TOKENS = 256  # the vllm backend's (`vllm_backend.DEFAULT_MAX_NEW_TOKENS`)
# Audio tokens per second of audio, by encoder (vLLM's processors): Whisper-style encoders at 50 frames/s pooled
# by 2 give 25 (Qwen2-Audio `qwen2_audio.py`, Qwen2.5-Omni `qwen2_5_omni_thinker.py`, MiniCPM-o `minicpmo.py`
# with audio_pool_step 2; 4.5 pools by 5, 10 per second), plus begin/end markers per item or per 1 s chunk.
# MERaLiON-2: 100 tokens per started 30 s chunk (vllm-plugin-meralion2 `vllm0101.py`,
# `fixed_speech_embeds_length`). Other models: Whisper's unpooled 50 frames per second.
# Qwen3-Omni: 13 tokens per 100 mel frames (`qwen3_omni_moe_thinker.py` `_get_feat_extract_output_lengths`); Granite
# Speech 3.3: 10 (`granite_speech.py`: 50 encoder frames a second, a 15-frame window pooled by 5); Phi-4-multimodal:
# 12.5 (`phi4mm.py`: 100 mel frames a second, `compression_rate` 8, rounded up per item).
AUDIO_TOKENS_PER_S = {
    "Qwen2-Audio": 25,
    "Qwen2.5-Omni": 25,
    "MiniCPM-o": 27,
    "Audio Flamingo 3": 25,
    "Qwen3-Omni": 13,
    "Granite Speech 3.3": 10,
    "Phi-4-multimodal": 12.5,
}
# Gemma 3n: every audio item is 188 tokens, whatever its length (`audio_seq_length`; vLLM `gemma3n_mm.py`).
AUDIO_TOKENS_PER_ITEM = {"Gemma 3n": 188}
# Audio counted per started chunk (tokens per chunk, chunk seconds, tokens per item besides): MERaLiON-2's 100 per
# 30 s; Voxtral's 375 per 30 s and its `[BEGIN_AUDIO]` (mistral_common pads the audio to whole 30 s chunks, 12.5
# tokens a second: tekken.json `audio`, vLLM `voxtral.py`).
AUDIO_TOKENS_PER_CHUNK = {"MERaLiON-2": (100, 30, 0), "Voxtral": (375, 30, 1)}
UNKNOWN_AUDIO_TOKENS_PER_S = 50
AUDIO_MARKER_TOKENS = 8
# The models' own context (max_position_embeddings of the released configs).
CONTEXT_TOKENS = {
    "Qwen2-Audio": 8192,
    "Qwen2.5-Omni": 32768,
    "Audio Flamingo 3": 32768,
    "MiniCPM-o": 40960,
    "MERaLiON-2": 8192,
    "Llama-3.1-Instruct": 131072,
    # The thinker's context as Qwen serves Qwen3-Omni-30B-A3B (Qwen Cloud's model table: 65,536 tokens).
    "Qwen3-Omni": 65536,
    "Gemma 3n": 32768,
    "Voxtral": 32768,  # the model card: a 32k token context
    # transformers `configuration_phi4_multimodal.py` `max_position_embeddings` (long-rope beyond 4,096).
    "Phi-4-multimodal": 131072,
}


class ContextLengthError(ValueError):
    """A context length that cannot be computed or exceeds the model's; the message names the judge."""


def dialogue_turn_texts(corpus: Mapping[str, Any], dialogues: Sequence[SourceDialogue]) -> dict[str, list[str]]:
    """Dialogue id -> its turn texts, read from the corpus as the plan lists it (no audio is read)."""
    fmt = corpus["format"]
    if fmt == "jsonl":
        records = {r["id"]: r for r in read_jsonl_corpus(corpus["path"])}
        return {d.dialogue_id: [t["text"] for t in records[d.dialogue_id]["turns"]] for d in dialogues}
    if fmt in ("deepdialogue", "deepdialogue_hub"):
        return {d.dialogue_id: [t["text"] for t in read_conversation(d.source_path)["conversation"]] for d in dialogues}
    return {d.dialogue_id: [t.text for t in Dialogue.load(d.source_path).turns] for d in dialogues}


def audio_tokens(model: str, seconds: float) -> int:
    """Tokens of one audio item of `seconds` in the model's encoder (an upper bound; module docstring)."""
    family = family_of(model)
    if family is not None and family.name in AUDIO_TOKENS_PER_CHUNK:
        per_chunk, chunk_s, markers = AUDIO_TOKENS_PER_CHUNK[family.name]
        return per_chunk * max(1, math.ceil(seconds / chunk_s)) + markers
    if family is not None and family.name in AUDIO_TOKENS_PER_ITEM:
        return AUDIO_TOKENS_PER_ITEM[family.name] + AUDIO_MARKER_TOKENS
    rate = AUDIO_TOKENS_PER_S.get(family.name, UNKNOWN_AUDIO_TOKENS_PER_S) if family else UNKNOWN_AUDIO_TOKENS_PER_S
    return math.ceil(rate * seconds) + AUDIO_MARKER_TOKENS


def rewritten_turn_bytes(variants: Mapping[str, Any]) -> int:
    generator = variants.get("generator", {})
    return max(REWRITTEN_TURN_BYTES, BYTES_PER_GENERATOR_TOKEN * int(generator.get("max_tokens", 0)))


def prompt_bytes(prompt_names: Iterable[str], modalities: Iterable[str], turns: Sequence[str], extra: int) -> int:
    """UTF-8 bytes of the longest rendering of these prompts and modalities around a transcript of `turns`, its
    speaker labels counted for the longest label, plus `extra` bytes of changed turns."""
    transcript = [("LLM1" * 8, text) for text in turns]
    longest = 0
    for name in prompt_names:
        prompt = load_prompt(name)
        for modality in modalities:
            system, user = prompt.render(modality, [] if modality == "audio" else transcript)
            longest = max(longest, len(system.encode()) + len(user.encode()))
    return longest + extra


def auto_max_model_len(
    name: str,
    entry: Mapping[str, Any],
    cells: Sequence[Any],
    longest_turns: Sequence[str],
    changed_turn_bytes: int,
) -> int:
    """The `auto` context length of one judge (module docstring): `cells` are its `workflow.plan.JudgeCell`s,
    `longest_turns` the turn texts of the corpus's longest dialogue."""
    prompts = list(dict.fromkeys(c.prompt for c in cells))
    modalities = list(dict.fromkeys(c.modality for c in cells))
    # An ASR transcript may be longer than the text spoken: the transcript counts twice.
    text = prompt_bytes(prompts, modalities, [*longest_turns, *longest_turns], changed_turn_bytes)
    audio = 0
    if any(m != TEXT for m in modalities):
        if entry["max_audio_s"] is None:
            raise ContextLengthError(
                f"judges.{name}.options.max_model_len: auto needs the judge's longest audio, but max_audio_s is null; "
                "set max_audio_s (with long_audio: chunk for longer dialogues) or give max_model_len as a number"
            )
        items = int(entry["options"].get("audio_per_prompt", 1))
        audio = items * audio_tokens(entry["model"], float(entry["max_audio_s"]))
    answer = int(entry["generation"].get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
    needed = text + audio + TEMPLATE_TOKENS + answer
    length = ROUND_TO * math.ceil(needed / ROUND_TO)
    family = family_of(entry["model"])
    context = CONTEXT_TOKENS.get(family.name) if family else None
    if context is not None and length > context:
        if needed > context:
            raise ContextLengthError(
                f"judges.{name}.options.max_model_len: auto: the longest request may need {needed:,} tokens (prompt "
                f"{text:,} bytes, audio {audio:,}, answer {answer:,}), over {family.name}'s context of {context:,}; "
                "lower max_audio_s or generation.max_new_tokens, or give a number you have checked"
            )
        length = context
    return length


def longest_dialogue(texts: Mapping[str, Sequence[str]]) -> list[str]:
    """The turn texts of the dialogue with the most UTF-8 bytes."""
    return list(max(texts.values(), key=lambda turns: sum(len(t.encode()) for t in turns), default=[]))


def needs_auto(entries: Iterable[Mapping[str, Any]]) -> bool:
    return any(e["backend"] == "vllm" and e["options"].get("max_model_len") == AUTO for e in entries)


def injection_bytes(controls: Mapping[str, Any]) -> int:
    return len(str(controls.get("injection", {}).get("text", "")).encode())


def max_model_len_problems(
    config: Mapping[str, Any], safety_judges: Sequence[str], pairwise_judges: Sequence[str]
) -> list[str]:
    """Every vLLM judge of a run states its context length: a number, or `auto` (safety-track judges only: the
    pairwise track's requests, two responses of up to a minute each, are not bounded by this plan)."""
    problems = []
    for name in dict.fromkeys([*safety_judges, *pairwise_judges]):
        entry = config["judges"][name]
        if entry["backend"] != "vllm":
            continue
        value = entry["options"].get("max_model_len")
        where = f"judges.{name}.options.max_model_len"
        if value is None:
            problems.append(
                f"{where} is unset: vLLM would reserve the model's whole context (131,072 tokens for Llama-3.1, which "
                "does not fit a 24 GB card); give a number of tokens, or auto (the run's longest request plus the "
                "answer budget)"
            )
        elif value == AUTO and name in pairwise_judges:
            problems.append(
                f"{where}: auto is computed for the safety track's requests; give this pairwise judge a number"
            )
        elif value != AUTO and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"{where} is {value!r}: give a positive number of tokens or auto")
    return problems
