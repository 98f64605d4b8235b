"""Qwen3-Omni-30B-A3B-Instruct as configs/judges-2026.yaml serves it (`qwen3_omni_30b`: the full model's checkpoint,
its MoE thinker answers, the talker is never loaded), on the real vLLM engine and on transformers."""

from __future__ import annotations

import json

from tests.engine.support import QUESTION, SYSTEM, AudioEngineContract, audio_request


class TestQwen3Omni(AudioEngineContract):
    judge = "qwen3_omni_30b"
    placeholder = "<|audio_pad|>"

    def test_the_released_processor_prompt_and_audio_rate(self, model, engine):
        """The checkpoint names the released processor classes (Qwen2-VL image and video processors beside the
        Whisper features), the chat template writes `<|audio_start|><|audio_pad|><|audio_end|>` before the question,
        and the engine expands the placeholder into 13 audio tokens a second (100 mel frames, three stride-2
        convolutions)."""
        processor = json.loads((model / "processor_config.json").read_text())
        assert processor["video_processor"]["video_processor_type"] == "Qwen2VLVideoProcessor"
        assert type(engine.template_owner).__name__ == "Qwen3OmniMoeProcessor"
        config = json.loads((model / "config.json").read_text())
        assert config["enable_audio_output"] is False and config["thinker_config"]["text_config"]["num_experts"] > 1
        request = audio_request("a", 1.0)
        assert engine.render(request) == (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>"
            f"{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
        )
        one, three = engine.generate([request, audio_request("b", 3.0)])
        assert one.n_input_tokens == len(engine.build_prompt(request)["prompt_token_ids"]) - 1 + 13
        assert three.n_input_tokens - one.n_input_tokens == 26
