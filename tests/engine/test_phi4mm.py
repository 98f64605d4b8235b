"""Phi-4-multimodal-instruct as configs/judges-2026.yaml documents it (`phi4_multimodal`, a commented entry: vLLM 0.32's
Phi4MMForCausalLM on the repository's hub-code layout, the speech LoRA adapter on every request with audio), on the
real vLLM engine and on transformers (`Phi4MultimodalForCausalLM` on the same weights in transformers' layout).

The checkpoint is tiny and built at test time (bench/phi4mm_tiny.py): random weights in the released hub layout, with
stand-ins of the hub configuration and processor classes, the released chat template and a speech adapter in
`speech-lora/`; the same weights, tokenizer and adapter in transformers' layout in `transformers/`. The two engines
must give the same answers with the adapter on the audio requests and off on the text requests, submitted together
(vLLM's CPU LoRA kernels would apply the adapter to the text requests of a mixed batch: `VLLMBackend._submit`)."""

from __future__ import annotations

import math

import pytest

from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeRequest
from lalm_judge.judging.backends.chat import p_safe_from_logprobs
from lalm_judge.judging.backends.vllm_backend import phi4mm_conversation
from tests.engine.support import P_SAFE_TOLERANCE, QUESTION, SYSTEM, AudioEngineContract, audio_request

# 16 kHz audio, 400-sample windows every 160 samples (100 frames a second), 8 frames to an audio token, rounded up
# (vLLM 0.32 `phi4mm.py` `get_audio_num_frames`, `_compute_audio_embed_size`; transformers
# `feature_extraction_phi4_multimodal.py` `_compute_audio_embed_size`).
SAMPLE_RATE, WINDOW, HOP, COMPRESSION_RATE = 16000, 400, 160, 8


def audio_tokens(seconds: float) -> int:
    frames = (int(seconds * SAMPLE_RATE) - WINDOW) // HOP + 1
    return math.ceil(frames / COMPRESSION_RATE)


class TestPhi4MM(AudioEngineContract):
    judge = "phi4_multimodal"
    placeholder = "<|audio_1|>"

    def test_the_prompt_is_the_released_template_with_numbered_placeholders(self, engine):
        """`<|system|>...<|end|><|user|><|audio_1|>...<|end|><|assistant|>` (the released chat template, a system role);
        two audio items at their slots get `<|audio_1|>` and `<|audio_2|>`."""
        assert engine.render(audio_request("a", 1.0)) == (
            f"<|system|>{SYSTEM}<|end|><|user|><|audio_1|>{QUESTION}<|end|><|assistant|>"
        )
        assert engine.render(JudgeRequest("t", SYSTEM, QUESTION)) == (
            f"<|system|>{SYSTEM}<|end|><|user|>{QUESTION}<|end|><|assistant|>"
        )
        pair = JudgeRequest(
            "pair",
            SYSTEM,
            f"Response 1: {AUDIO_SLOT} Response 2: {AUDIO_SLOT} Which?",
            audios=(audio_request("x", 1.0).audio, audio_request("y", 1.0).audio),
        )
        assert phi4mm_conversation(pair)[1]["content"] == "Response 1: <|audio_1|> Response 2: <|audio_2|> Which?"
        with pytest.raises(ValueError, match="over options.audio_per_prompt=1"):
            engine.build_prompt(pair)

    def test_audio_tokens_come_at_12_5_a_second(self, engine):
        """vLLM replaces `<|audio_1|>` (one token) with one audio token per 8 mel frames of 10 ms."""
        requests = [audio_request("one", 1.0), audio_request("three", 3.0), audio_request("ten", 10.0)]
        outputs = engine.generate(requests)
        for request, output, seconds in zip(requests, outputs, (1.0, 3.0, 10.0)):
            prompt = engine.build_prompt(request)["prompt_token_ids"]
            assert output.n_input_tokens == len(prompt) - 1 + audio_tokens(seconds), request.request_id
        assert audio_tokens(10.0) - audio_tokens(2.0) == 100  # 12.5 a second

    def test_the_speech_lora_applies_to_audio_requests_only(self, model, engine):
        """The engine runs with LoRA on at the adapter's rank; an audio request carries the speech adapter, a text
        request none; the adapter changes what the model answers to audio."""
        lora_config = engine.llm.llm_engine.vllm_config.lora_config
        assert lora_config is not None and lora_config.max_lora_rank == 16
        audio, text = audio_request("audio", 2.0, answer_tokens=("Yes", "No")), JudgeRequest("t", SYSTEM, QUESTION)
        with_adapter, without = (engine.lora_request(request) for request in (audio, text))
        assert without is None and with_adapter.lora_path == str(model / "speech-lora")
        prompt = engine.build_prompt(audio)
        params = engine._sampling_params(engine.request_score_ids(audio))
        (adapted,) = engine.llm.generate([prompt], params, use_tqdm=False, lora_request=with_adapter)
        (base,) = engine.llm.generate([prompt], params, use_tqdm=False)
        safe, unsafe = engine.request_score_ids(audio)
        first = [
            {
                token: entry.logprob
                for token, entry in result.outputs[0].logprobs[0].items()
                if token in {*safe, *unsafe}
            }
            for result in (adapted, base)
        ]
        assert first[0].keys() == first[1].keys() == {*safe, *unsafe}
        adapted_p, base_p = (p_safe_from_logprobs(logprobs, safe, unsafe).p_safe for logprobs in first)
        # Far beyond what the engines may differ by: the agreement with transformers holds only with its adapter on.
        assert abs(adapted_p - base_p) > 10 * P_SAFE_TOLERANCE
        (output,) = engine.generate([audio])
        assert output.p_safe == pytest.approx(p_safe_from_logprobs(first[0], safe, unsafe).p_safe)
