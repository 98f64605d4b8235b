"""Llama-3.1-8B-Instruct as configs/paper.yaml serves it (`llama31_8b`, text only), on the real vLLM engine."""

from __future__ import annotations

import pytest

from tests.engine.support import QUESTION, SYSTEM, EngineContract, audio_request


class TestLlama31(EngineContract):
    judge = "llama31_8b"

    def test_one_bos_and_the_released_template(self, engine):
        """The chat template writes `<|begin_of_text|>`; vLLM adds special tokens to text prompts, so the backend
        sends token ids (one BOS, not two)."""
        from lalm_judge.judging.backends.base import JudgeRequest

        request = JudgeRequest("t", SYSTEM, QUESTION)
        ids = engine.build_prompt(request)["prompt_token_ids"]
        assert ids[0] == engine.tokenizer.bos_token_id and ids.count(engine.tokenizer.bos_token_id) == 1
        text = engine.render(request)
        assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
        assert f"{SYSTEM}<|eot_id|>" in text
        assert text.endswith(f"{QUESTION}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
        (output,) = engine.generate([request])
        assert output.n_input_tokens == len(ids)

    def test_a_text_judge_reserves_no_audio_and_refuses_it(self, engine):
        assert engine.audio_per_prompt == 0
        with pytest.raises(ValueError, match="llama31_8b.*text only"):
            engine.generate([audio_request("a", 1.0)])
