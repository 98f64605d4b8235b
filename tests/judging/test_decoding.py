"""Decoding as configured: the transformers backend samples for real (a tiny random-weight Llama: the same seed
gives the same answers, another seed others, one sample per seed recorded), and settings a backend cannot honour
are refused when the judge entry is validated, never recorded as if used."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.decoding import Decoding, decoding_problems
from lalm_judge.judging.backends.hf import TransformersBackend
from lalm_judge.workflow.config import ConfigError, validate_judge_entry

torch.set_num_threads(1)
SAGELM = {"temperature": 0.95, "top_p": 0.7, "top_k": 50}
REQUESTS = [JudgeRequest(f"r{i}", "You judge.", f"Which response is better, number {i}?") for i in range(3)]


def llama(llama_dir, **generation) -> TransformersBackend:
    spec = JudgeSpec(
        name="tiny",
        backend="transformers",
        model=str(llama_dir),
        generation={"max_new_tokens": 12, **generation},
        options={"device": "cpu"},
    )
    return TransformersBackend(spec)


def answers(backend) -> list[list[str]]:
    """Per request, the text of every sample in seed order."""
    return [[s["text"] for s in output.extra["samples"]] for output in backend.generate(REQUESTS)]


def test_same_seed_same_answers_other_seed_other_answers(llama_dir):
    sampled = llama(llama_dir, **SAGELM, seeds=[42, 123, 1234])
    # Sampled by the backend's RequestSampler (generate itself selects greedily after it).
    assert sampled.decoding.top_k == 50 and not sampled.generation_config.do_sample
    first, again = answers(sampled), answers(sampled)
    assert first == again, "the same seeds give the same samples"
    outputs = sampled.generate(REQUESTS)
    for output, texts in zip(outputs, first):
        assert [s["seed"] for s in output.extra["samples"]] == [42, 123, 1234]
        assert output.text == texts[0], "a request's answer is its first seed's sample"
        # Each sample says why it stopped (a cut sample casts no vote in the pairwise majority).
        assert output.extra["samples"][0]["finish_reason"] == output.finish_reason
        assert {s["finish_reason"] for s in output.extra["samples"]} <= {"stop", "length"}
    # Another seed gives other answers; the samples of one request differ from each other.
    other = answers(llama(llama_dir, **SAGELM, seeds=[7]))
    assert [texts[0] for texts in other] != [texts[0] for texts in first]
    assert any(len(set(texts)) > 1 for texts in first)
    # A seed's sample does not depend on the seeds after it.
    assert [texts[:1] for texts in answers(llama(llama_dir, **SAGELM, seeds=[42]))] == [t[:1] for t in first]


def test_greedy_decoding_answers_once_without_the_checkpoint_s_sampling_defaults(llama_dir):
    greedy = llama(llama_dir)
    assert not greedy.generation_config.do_sample and greedy.generation_config.top_k is None
    outputs = greedy.generate(REQUESTS)
    assert all("samples" not in output.extra for output in outputs)
    assert [o.text for o in greedy.generate(REQUESTS)] == [o.text for o in outputs]


@pytest.mark.parametrize(
    ("backend", "generation", "message"),
    [
        ("transformers", {"temperature": 0.95}, r"samples the answers; give `seeds`"),
        ("vllm", {"top_k": 50}, r"generation.top_k: greedy decoding \(temperature 0\) gives one answer"),
        ("transformers", {"n": 3}, r"generation.n: the transformers backend does not use 'n'"),
        ("vllm", {"repetition_penalty": 1.1}, r"does not use 'repetition_penalty'"),
        ("openai", {"seeds": [1, 2]}, r"generation.seeds: the openai backend asks each request once"),
        ("embedding", {"temperature": 0.5}, r"the embedding backend does not decode"),
    ],
)
def test_settings_a_backend_cannot_honour_are_refused(backend, generation, message):
    entry = {"backend": backend, "model": "some/model", "generation": generation}
    with pytest.raises(ConfigError, match=message):
        validate_judge_entry("j", entry)


def test_sagelm_s_protocol_is_accepted_and_read_exactly():
    generation = {"max_new_tokens": 1024, **SAGELM, "seeds": [42, 123, 1234]}
    assert decoding_problems("vllm", generation) == []
    decoding = Decoding.from_generation(generation, "sagelm", "vllm")
    assert (decoding.temperature, decoding.top_p, decoding.top_k) == (0.95, 0.7, 50)
    assert decoding.sample_seeds == (42, 123, 1234) and decoding.sampled
    assert Decoding.from_generation({}, "j", "transformers").sample_seeds == (None,)
    assert decoding_problems("transformers", {"temperature": 0.9, "seeds": [1, 1]}) == [
        "judges.judge.generation.seeds: [1, 1] repeats a seed (its samples would be the same answer)"
    ]


def test_a_requests_sample_is_the_same_alone_and_in_any_batch(llama_dir, qwen2audio_dir):
    """Each request samples from its own generator (seeded from its id and the seed): alone, in a batch of 3, first
    or last, beside other requests or reordered, its samples are the same. So a rerun that computes only uncached
    requests is a fresh run's twin. Tiny random-weight Llama (text) and Qwen2-Audio (audio) from bench/models.py."""
    text = llama(llama_dir, **SAGELM, seeds=[42, 123])
    tone = (0.1 * np.sin(np.arange(16000) / 7.0)).astype(np.float32)
    audio_requests = [
        JudgeRequest(f"a{i}", "You judge.", f"Is this safe? {i}", audio=(np.roll(tone, 500 * i), 16000))
        for i in range(3)
    ]
    spec = JudgeSpec(
        name="tiny_audio",
        backend="transformers",
        model=str(qwen2audio_dir),
        modalities=("audio",),
        generation={"max_new_tokens": 8, **SAGELM, "seeds": [42, 123]},
        batch_size=8,
        options={"device": "cpu"},
    )
    for backend, requests in ((text, REQUESTS), (TransformersBackend(spec), audio_requests)):
        alone = {r.request_id: samples_by_request(backend, [r])[r.request_id] for r in requests}
        assert samples_by_request(backend, requests) == alone
        assert samples_by_request(backend, requests[::-1]) == alone
        pair = [requests[2], requests[0]]
        assert samples_by_request(backend, pair) == {r.request_id: alone[r.request_id] for r in pair}
        assert any(len(set(texts)) > 1 for texts in alone.values()), "the seeds sample different answers"


def samples_by_request(backend, batch: list[JudgeRequest]) -> dict[str, list[str]]:
    """Request id -> the text of every sample, from one call with the whole batch."""
    return {r.request_id: [s["text"] for s in o.extra["samples"]] for r, o in zip(batch, backend.generate(batch))}
