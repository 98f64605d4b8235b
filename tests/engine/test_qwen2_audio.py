"""Qwen2-Audio-7B-Instruct as configs/paper.yaml serves it (`qwen2_audio_7b`), on the real vLLM engine."""

from __future__ import annotations

from tests.engine.support import QUESTION, SYSTEM, AudioEngineContract, audio_request


class TestQwen2Audio(AudioEngineContract):
    judge = "qwen2_audio_7b"
    placeholder = "<|AUDIO|>"

    def test_the_prompt_is_vllms_documented_prompt(self, engine):
        """The processor's template (transformers) gives vLLM's example prompt
        (examples/generate/multimodal/audio_language_offline.py), and the engine expands the placeholder into the
        audio's tokens."""
        request = audio_request("a", 3.0)
        assert engine.render(request) == (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
            f"Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
        )
        (output,) = engine.generate([request])
        rendered = len(engine.build_prompt(request)["prompt_token_ids"])
        # 3 s of audio: 300 mel frames, pooled by the encoder to 75 tokens, in place of the one placeholder.
        assert output.n_input_tokens == rendered - 1 + 75
