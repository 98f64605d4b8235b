"""SageLM as configs/pairwise.yaml serves it (`sagelm`): a Qwen2.5-Omni thinker saved alone (as LLaMA-Factory saves a
fine-tune), served by vLLM from its copy in the full model's layout, two spoken responses per prompt, and SageLM's
sampling protocol (temperature 0.95, top_p 0.7, top_k 50, each request once per seed 42, 123 and 1234)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.engine_agreement import MAX_NEW_TOKENS, pairwise_requests, shipped_entry, tiny_spec
from bench.models import cached_tiny_model
from lalm_judge.judging.backends.decoding import SAMPLES
from tests.engine.support import AudioEngineContract, live_engine

SAGELM_SEEDS = [42, 123, 1234]


def sampled_engine(model):
    """The shipped entry's own (sampled) decoding, with the tests' answer budget."""
    generation = {**shipped_entry("configs/pairwise.yaml", "sagelm")["generation"], "max_new_tokens": MAX_NEW_TOKENS}
    return live_engine(tiny_spec("configs/pairwise.yaml", "sagelm", model, "vllm", generation=generation))


def samples(outputs) -> list[list[tuple[int, str]]]:
    return [[(sample["seed"], sample["text"]) for sample in output.extra[SAMPLES]] for output in outputs]


class TestSageLM(AudioEngineContract):
    judge = "sagelm"
    placeholder = "<|AUDIO|>"

    def test_the_thinker_alone_is_served_from_its_full_layout_copy(self, model, engine):
        assert engine.model_path != str(model) and engine.audio_per_prompt == 2
        prompt = engine.build_prompt(pairwise_requests(1)[0])
        assert len(prompt["multi_modal_data"]["audio"]) == 2

    @pytest.fixture(scope="class")
    @classmethod
    def sampled(cls, model):
        return sampled_engine(model)

    def test_sagelm_sampling_is_the_same_for_a_seed_across_calls_batches_restarts_and_layouts(self, sampled):
        requests = pairwise_requests(2)
        assert sampled.sample_seeds == tuple(SAGELM_SEEDS)
        together = samples(sampled.generate(requests))
        assert [[seed for seed, _ in row] for row in together] == [SAGELM_SEEDS] * len(requests)
        assert all(len({text for _, text in row}) > 1 for row in together), "the seeds draw different answers"
        one_by_one = [samples(sampled.generate([request]))[0] for request in reversed(requests)][::-1]
        assert one_by_one == together, "a sample does not depend on what it is submitted with"
        # Another engine (a new engine core, the model loaded again), on the same weights saved in the full model's
        # layout (as Qwen/Qwen2.5-Omni-7B is).
        restarted = sampled_engine(cached_tiny_model("qwen25_omni"))
        assert restarted.llm is not sampled.llm and restarted.model_path != sampled.model_path
        assert samples(restarted.generate(requests)) == together

    def test_the_row_answer_is_the_first_seeds(self, sampled):
        (output,) = sampled.generate(pairwise_requests(1)[:1])
        assert output.text == output.extra[SAMPLES][0]["text"]
        # Each sample says why it stopped (a cut sample casts no vote in the pairwise majority).
        assert output.extra[SAMPLES][0]["finish_reason"] == output.finish_reason
        assert {sample["finish_reason"] for sample in output.extra[SAMPLES]} <= {"stop", "length"}
        greedy = dataclasses.replace(sampled.spec, generation={"max_new_tokens": MAX_NEW_TOKENS})
        assert greedy.generation_settings != sampled.spec.generation_settings
