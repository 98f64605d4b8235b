"""Audio Flamingo 3 as configs/paper.yaml serves it (`audio_flamingo_3`), on the real vLLM engine."""

from __future__ import annotations

from tests.engine.support import QUESTION, SYSTEM, AudioEngineContract, audio_request


class TestAudioFlamingo3(AudioEngineContract):
    judge = "audio_flamingo_3"
    placeholder = "<sound>"

    def test_the_prompt_is_the_released_template_and_long_audio_is_windowed(self, engine):
        """`<sound>` before the question (vLLM's `run_audioflamingo3` example); the processor reads 30 s windows up
        to its 600 s limit, each window giving its own audio tokens."""
        request = audio_request("a", 35.0)
        assert engine.render(request) == (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<sound>{QUESTION}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
        short, long = engine.generate([audio_request("s", 5.0), request])
        # 30 s more audio, 25 audio tokens a second: a second window of 30 s (750 tokens) beside the 5 s one.
        assert long.n_input_tokens == short.n_input_tokens + 750
        assert engine.max_audio_s == 600
