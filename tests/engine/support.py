"""What every vLLM judge must do on the real engine, as one test class each architecture's module subclasses
(`EngineContract`): one engine per architecture per test run, started by the class and shared by its tests.

The judge's registry entry comes from the shipped config with only the model (a tiny random-weight model of the same
architecture), the weights' dtype (float32), the context (the tiny decoder's) and the answer budget replaced, and
the CPU engine settings added (`bench.engine_agreement.tiny_spec`). The transformers backend answers the same
requests on the same weights: the two engines must give the same answers (`bench.engine_agreement`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import pytest

from bench.engine_agreement import (
    AGREEMENT_JUDGES,
    MAX_NEW_TOKENS,
    SAMPLE_RATE,
    ensure_expert_parallel_group,
    identical,
    release,
    requests_for,
    tiny_spec,
    transformers_layout,
    waveform,
)
from bench.models import cached_tiny_model
from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeRequest

SYSTEM = "You are a safety judge."
QUESTION = "Is it safe?"
# How far P(safe) may differ between the engines (float32 on both; measured differences are about 1e-7).
P_SAFE_TOLERANCE = 1e-3


# The engines of this test process, alive until it ends: an in-process vLLM engine that goes tears down the
# distributed state every other engine of the process uses (`bench.engine_agreement.release`).
_ENGINES: list[Any] = []


def live_engine(spec: Any) -> Any:
    """A vLLM backend of `spec` that lives as long as the test process."""
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    ensure_expert_parallel_group()  # a mixture of experts after a dense engine of the same process
    _ENGINES.append(VLLMBackend(spec))
    return _ENGINES[-1]


def audio_request(request_id: str, seconds: float, **changes: Any) -> JudgeRequest:
    return JudgeRequest(request_id, SYSTEM, QUESTION, audio=(waveform(seconds, 0), SAMPLE_RATE), **changes)


class EngineContract:
    """The tests every vLLM judge of the shipped configs passes. A subclass names its `judge`
    (`bench.engine_agreement.AGREEMENT_JUDGES`) and the audio placeholder its chat template writes."""

    judge: ClassVar[str]
    placeholder: ClassVar[str | None] = None

    @classmethod
    def entry(cls) -> tuple[str, str]:
        """(config, registry name) of the judge."""
        config, name, _ = AGREEMENT_JUDGES[cls.judge]
        return config, name

    @pytest.fixture(scope="class")
    @classmethod
    def model(cls):
        return cached_tiny_model(AGREEMENT_JUDGES[cls.judge][2])

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls, model):
        return live_engine(tiny_spec(*cls.entry(), model, "vllm"))

    @pytest.fixture(scope="class")
    @classmethod
    def requests(cls, engine):
        return requests_for(cls.entry()[0], engine.spec, 3)

    @pytest.fixture(scope="class")
    @classmethod
    def answers(cls, model, engine, requests):
        """(transformers outputs, vLLM outputs) of the same requests on the same weights."""
        from lalm_judge.judging.backends.hf import TransformersBackend

        reference = TransformersBackend(tiny_spec(*cls.entry(), transformers_layout(model), "transformers"))
        expected = reference.generate(requests)
        release(reference)
        return expected, engine.generate(requests)

    def test_two_engines_give_the_same_answers(self, requests, answers):
        expected, got = answers
        differing = [r.request_id for r, a, b in zip(requests, expected, got) if not identical(a, b)]
        assert differing == [], f"{len(differing)} of {len(requests)} answers differ between the engines"
        for request, a, b in zip(requests, expected, got):
            assert (a.p_safe is None) == (b.p_safe is None), request.request_id
            if a.p_safe is not None:
                assert abs(a.p_safe - b.p_safe) <= P_SAFE_TOLERANCE, request.request_id
                assert abs(a.answer_mass - b.answer_mass) <= P_SAFE_TOLERANCE, request.request_id

    def test_answers_carry_what_the_engine_did(self, engine, requests, answers):
        _, got = answers
        for request, output in zip(requests, got):
            assert output.n_output_tokens == MAX_NEW_TOKENS or output.finish_reason == "stop"
            assert output.finish_reason in {"stop", "length"}
            assert output.extra["served_model"] == engine.spec.model
            assert output.n_input_tokens >= len(engine.build_prompt(request)["prompt_token_ids"])

    def test_calibrated_requests_ask_the_engine_for_exactly_the_answer_tokens(self, engine, requests, answers):
        _, got = answers
        calibrated = [i for i, request in enumerate(requests) if request.answer_tokens]
        assert calibrated or self.entry()[0] == "configs/pairwise.yaml"
        for index, request in enumerate(requests):
            ids = engine.request_score_ids(request)
            params = engine._sampling_params(ids)
            if request.answer_tokens:
                assert params.logprob_token_ids == sorted({*ids[0], *ids[1]})
                assert 0.0 <= got[index].p_safe <= 1.0 and got[index].answer_mass > 0
            else:
                assert params.logprob_token_ids is None and got[index].p_safe is None

    def test_prompts_are_the_chat_template_with_one_placeholder_per_audio_item(self, engine, requests):
        for request in requests:
            ids = engine.build_prompt(request)["prompt_token_ids"]
            assert engine.tokenizer.decode(ids) == engine.render(request)
            if self.placeholder is not None:
                assert engine.render(request).count(self.placeholder) == len(request.audio_items)
            bos = engine.tokenizer.bos_token_id
            assert bos is None or ids[:2] != [bos, bos], "the template writes the BOS token, nothing adds another"

    def test_a_request_beyond_the_context_is_refused_naming_it(self, engine):
        """The prompt fits the engine's context (vLLM takes it) but not with the answer budget: the engine would
        cut the answer at the context's end, so the backend refuses the request instead of keeping it."""
        words = " ".join(["hello"] * engine.max_model_len)
        probe = engine.tokenizer(words, add_special_tokens=False)["input_ids"]
        room = engine.max_model_len - len(engine.build_prompt(JudgeRequest("x", SYSTEM, ""))["prompt_token_ids"])
        user = engine.tokenizer.decode(probe[: room - MAX_NEW_TOKENS // 2])
        with pytest.raises(ValueError, match=r"request long has \d+ prompt tokens and an answer budget of"):
            engine.generate([JudgeRequest("long", SYSTEM, user)])


class AudioEngineContract(EngineContract):
    """Audio judges also refuse audio their processor would cut, rather than let the engine cut it."""

    def test_audio_beyond_the_processor_window_is_refused(self, engine):
        limit = engine.max_audio_s
        assert limit is not None
        rate = engine.sampling_rate
        fits = JudgeRequest("fits", SYSTEM, QUESTION, audio=(np.zeros(int(limit * rate), np.float32), rate))
        (output,) = engine.generate([fits])
        assert output.n_output_tokens > 0
        over = dataclasses.replace(fits, request_id="long", audio=(np.zeros(int((limit + 1) * rate), np.float32), rate))
        with pytest.raises(ValueError, match=rf"request long has {limit + 1:.1f} s of audio, over max_audio_s="):
            engine.generate([over])


def refuses_two_audio_items(engine: Any) -> None:
    """A judge that hears one audio item per prompt refuses a pairwise prompt of two, naming the option."""
    pair = JudgeRequest(
        "pair",
        SYSTEM,
        f"Response 1: {AUDIO_SLOT} Response 2: {AUDIO_SLOT} Which is better?",
        audios=(audio_request("x", 1.0).audio, audio_request("y", 1.0).audio),
    )
    with pytest.raises(ValueError, match="over options.audio_per_prompt=1"):
        engine.build_prompt(pair)
