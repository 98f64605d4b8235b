"""Qwen2.5-Omni-7B as configs/paper.yaml serves it (`qwen25_omni_7b`: the full model's layout, its thinker answers),
on the real vLLM engine."""

from __future__ import annotations

import json

from tests.engine.support import QUESTION, SYSTEM, AudioEngineContract, audio_request


class TestQwen25Omni(AudioEngineContract):
    judge = "qwen25_omni_7b"
    placeholder = "<|AUDIO|>"

    def test_the_released_processor_and_prompt(self, model, engine):
        """The checkpoint names the released processor classes (a Qwen2-VL video processor beside the audio one,
        which vLLM builds for every request) and the processor's 300 s window bounds the audio."""
        processor = json.loads((model / "processor_config.json").read_text())
        assert processor["video_processor"]["video_processor_type"] == "Qwen2VLVideoProcessor"
        assert type(engine.template_owner).__name__ == "Qwen2_5OmniProcessor"
        assert engine.max_audio_s == 300
        request = audio_request("a", 2.0)
        assert engine.render(request) == (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<|audio_bos|><|AUDIO|><|audio_eos|>"
            f"{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
        )
