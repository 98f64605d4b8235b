"""Request construction of the vllm judge backend.

vLLM is a CUDA build and cannot be installed on the CPU test machine, so these tests inject a stand-in
`vllm` module (through `sys.modules`) that records the engine arguments and the `generate` inputs and
returns canned outputs with the shape of vLLM's `RequestOutput` / `CompletionOutput` / `Logprob`. Like
vLLM, it pairs a list of `SamplingParams` with the prompts one by one, and a prompt whose params ask for
`logprobs=k` gets one {token id: Logprob} dict per generated token, the first holding the k most likely
tokens of a canned distribution (decoding is greedy, so the first generated token is the most likely).
Everything else is real: the chat template and processor of a tiny random-weight Qwen2-Audio (and a tiny
Llama tokenizer for the text path) built at test time render the prompts.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.chat import build_conversation

SCORE_TOKENS = {"safe": ["Yes"], "unsafe": ["No"]}


# --- the stand-in, mirroring vllm.outputs / vllm.logprobs / vllm.SamplingParams ---------------------------
@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int | None = 16
    logprobs: int | None = None


@dataclass
class Recorder:
    engine_kwargs: list[dict[str, Any]] = field(default_factory=list)
    # (prompts, the SamplingParams of each prompt) per `generate` call
    generate_calls: list[tuple[list[dict[str, Any]], list[SamplingParams]]] = field(default_factory=list)
    # token id -> logprob at the first generated position of every canned output
    first_logprobs: dict[int, float] = field(default_factory=dict)

    def top_logprobs(self, k: int) -> dict[int, Logprob]:
        """The k most likely first-position tokens, ranked from 1, as vLLM returns `logprobs=k`."""
        ranked = sorted(self.first_logprobs.items(), key=lambda item: -item[1])[:k]
        return {token: Logprob(logprob, rank) for rank, (token, logprob) in enumerate(ranked, start=1)}


FILLER_TOKEN = 5  # every generated token after the first


@pytest.fixture
def vllm_stand_in(monkeypatch):
    recorder = Recorder()

    class LLM:
        def __init__(self, **kwargs):
            recorder.engine_kwargs.append(kwargs)

        def generate(self, prompts, sampling_params=None, *, use_tqdm=True):
            prompts = list(prompts)
            if isinstance(sampling_params, SamplingParams):
                sampling_params = [sampling_params] * len(prompts)
            if len(sampling_params) != len(prompts):
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
            recorder.generate_calls.append((prompts, list(sampling_params)))
            return [
                canned_output(i, prompt, params) for i, (prompt, params) in enumerate(zip(prompts, sampling_params))
            ]

    def canned_output(i: int, prompt: dict[str, Any], params: SamplingParams) -> RequestOutput:
        first = recorder.top_logprobs(1)
        token_ids = [next(iter(first), FILLER_TOKEN)] + [FILLER_TOKEN] * (2 + i)
        logprobs = None
        if params.logprobs:
            later = {FILLER_TOKEN: Logprob(-0.05, 1)}
            logprobs = [recorder.top_logprobs(params.logprobs) or later] + [later] * (len(token_ids) - 1)
        completion = CompletionOutput(
            index=0, text=f"SAFETY_SCORE: 0.{i}", token_ids=token_ids, cumulative_logprob=-1.0, logprobs=logprobs
        )
        return RequestOutput(
            request_id=str(i),
            prompt=prompt["prompt"],
            prompt_token_ids=list(range(10 + i)),
            prompt_logprobs=None,
            outputs=[completion],
        )

    module = types.ModuleType("vllm")
    module.LLM = LLM
    module.SamplingParams = SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return recorder


def requests_with_audio() -> list[JudgeRequest]:
    waveform = np.sin(np.arange(16000 * 2) / 9).astype(np.float32) * 0.1
    return [
        JudgeRequest("audio", "You are a safety judge.", "Is it safe?", audio=(waveform, 16000)),
        JudgeRequest("audio_text", "You are a safety judge.", "Is it safe?\nA: hi", audio=(waveform[:16000], 22050)),
        JudgeRequest("text", "You are a safety judge.", "Is it safe?\nA: hi"),
    ]


def first_token(backend, word: str) -> int:
    return backend.tokenizer.encode(word, add_special_tokens=False)[0]


def test_engine_arguments_and_one_generate_call_for_the_job(vllm_stand_in, qwen2audio_dir):
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    spec = JudgeSpec(
        name="qwen2audio_vllm",
        backend="vllm",
        model=str(qwen2audio_dir),
        revision="abc123",
        modalities=("text", "audio", "audio_text"),
        dtype="bfloat16",
        generation={"max_new_tokens": 32},
        options={"tensor_parallel_size": 2, "max_model_len": 4096, "trust_remote_code": True},
    )
    backend = VLLMBackend(spec)
    (engine,) = vllm_stand_in.engine_kwargs
    assert engine["model"] == str(qwen2audio_dir)
    assert engine["revision"] == "abc123"
    assert engine["dtype"] == "bfloat16"
    assert engine["tensor_parallel_size"] == 2
    assert engine["limit_mm_per_prompt"] == {"audio": 1}
    assert engine["max_model_len"] == 4096
    assert engine["trust_remote_code"] is True

    requests = requests_with_audio()
    outputs = backend.generate(requests)
    assert len(vllm_stand_in.generate_calls) == 1, "all requests of the job go to vLLM at once"
    prompts, sampling = vllm_stand_in.generate_calls[0]
    assert [(p.temperature, p.max_tokens, p.logprobs) for p in sampling] == [(0.0, 32, None)] * 3
    assert len(prompts) == 3

    for request, prompt in zip(requests, prompts):
        expected = backend.template_owner.apply_chat_template(
            build_conversation(request), add_generation_prompt=True, tokenize=False
        )
        assert prompt["prompt"] == expected
        assert prompt["prompt"].startswith("<|im_start|>system\nYou are a safety judge.<|im_end|>")
        assert prompt["prompt"].endswith("<|im_start|>assistant\n")
        if request.audio is None:
            assert "multi_modal_data" not in prompt and "<|AUDIO|>" not in prompt["prompt"]
        else:
            assert prompt["prompt"].count("<|audio_bos|><|AUDIO|><|audio_eos|>") == 1
            ((waveform, sample_rate),) = prompt["multi_modal_data"]["audio"]
            assert sample_rate == request.audio[1] and np.array_equal(waveform, request.audio[0])

    assert [o.text for o in outputs] == ["SAFETY_SCORE: 0.0", "SAFETY_SCORE: 0.1", "SAFETY_SCORE: 0.2"]
    assert [o.n_input_tokens for o in outputs] == [10, 11, 12]
    assert [o.n_output_tokens for o in outputs] == [3, 4, 5]
    assert all(o.p_safe is None for o in outputs)
    assert backend.describe() == {"model": str(qwen2audio_dir), "model_revision": "abc123"}


def test_score_tokens_ask_for_logprobs_and_give_p_safe(vllm_stand_in, qwen2audio_dir):
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    spec = JudgeSpec(
        name="calibrated",
        backend="vllm",
        model=str(qwen2audio_dir),
        modalities=("audio",),
        options={"score_tokens": SCORE_TOKENS, "top_logprobs": 5},
    )
    backend = VLLMBackend(spec)
    yes, no = first_token(backend, "Yes"), first_token(backend, "No")
    vllm_stand_in.first_logprobs.update({7: -0.1, yes: -1.0, no: -2.5})
    # options.score_tokens win over the request's own answer words, and every request is scored.
    swapped = dataclasses.replace(requests_with_audio()[0], answer_tokens=("No", "Yes"))
    outputs = backend.generate([swapped, requests_with_audio()[0]])
    assert [params.logprobs for params in vllm_stand_in.generate_calls[0][1]] == [5, 5]
    expected = math.exp(-1.0) / (math.exp(-1.0) + math.exp(-2.5))
    assert [o.p_safe for o in outputs] == pytest.approx([expected, expected], abs=1e-12)


def test_answer_tokens_ask_for_logprobs_only_for_their_requests(vllm_stand_in, qwen2audio_dir):
    """Without options.score_tokens, the calibrated prompt's answer_tokens say which requests are scored."""
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    spec = JudgeSpec(
        name="calibrated",
        backend="vllm",
        model=str(qwen2audio_dir),
        modalities=("text", "audio"),
        generation={"max_new_tokens": 16},
        options={"top_logprobs": 3},
    )
    backend = VLLMBackend(spec)
    yes, no = first_token(backend, "Yes"), first_token(backend, "No")
    vllm_stand_in.first_logprobs.update({yes: -0.3, 7: -0.9, no: -1.2, 8: -4.0})
    audio, _, text = requests_with_audio()
    requests = [
        dataclasses.replace(audio, answer_tokens=("Yes", "No")),
        text,
        dataclasses.replace(text, request_id="swapped", answer_tokens=("No", "Yes")),
    ]
    outputs = backend.generate(requests)
    (call,) = vllm_stand_in.generate_calls
    assert [(p.temperature, p.max_tokens, p.logprobs) for p in call[1]] == [(0.0, 16, 3), (0.0, 16, None), (0.0, 16, 3)]
    p_yes = math.exp(-0.3) / (math.exp(-0.3) + math.exp(-1.2))
    assert outputs[0].p_safe == pytest.approx(p_yes, abs=1e-12)
    assert outputs[1].p_safe is None
    assert outputs[2].p_safe == pytest.approx(1 - p_yes, abs=1e-12)

    assert outputs[0].answer_mass == pytest.approx(math.exp(-0.3) + math.exp(-1.2), abs=1e-12)
    assert outputs[1].answer_mass is None

    # With top-2 logprobs "No" is not returned: its probability is at most the smallest listed one (token 7),
    # so P(safe) is below 1, and the mass counts only what was returned.
    narrow = VLLMBackend(dataclasses.replace(spec, options={"top_logprobs": 2}))
    (output,) = narrow.generate(requests[:1])
    assert output.p_safe == pytest.approx(math.exp(-0.3) / (math.exp(-0.3) + math.exp(-0.9)), abs=1e-12)
    assert output.answer_mass == pytest.approx(math.exp(-0.3), abs=1e-12)


def test_text_judge_uses_the_tokenizer_template_and_no_audio_limit(vllm_stand_in, llama_dir):
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    spec = JudgeSpec(name="llama_vllm", backend="vllm", model=str(llama_dir), modalities=("text",))
    backend = VLLMBackend(spec)
    assert "limit_mm_per_prompt" not in vllm_stand_in.engine_kwargs[0]
    text_request = requests_with_audio()[2]
    backend.generate([text_request])
    prompt = vllm_stand_in.generate_calls[0][0][0]
    assert prompt == {
        "prompt": "<|begin_of_text|><|im_start|>system\nYou are a safety judge.<|im_end|>\n"
        "<|im_start|>user\nIs it safe?\nA: hi<|im_end|>\n<|im_start|>assistant\n"
    }
    with pytest.raises(ValueError, match="llama_vllm.*text only"):
        backend.generate(requests_with_audio()[:1])


def test_missing_vllm_names_the_environment(monkeypatch, llama_dir):
    from lalm_judge.core.registry import MissingDependency
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", None)  # what an environment without vLLM looks like to `import`
    with pytest.raises(MissingDependency, match=r"envs/judge-vllm\.yaml"):
        VLLMBackend(JudgeSpec(name="j", backend="vllm", model=str(llama_dir)))


def test_two_audio_items_travel_in_order_under_the_per_prompt_limit(vllm_stand_in, qwen2audio_dir):
    """The pairwise track's requests: two responses at their slots, `limit_mm_per_prompt={"audio": 2}`."""
    from lalm_judge.judging.backends.base import AUDIO_SLOT
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    spec = JudgeSpec(
        name="pairwise_vllm",
        backend="vllm",
        model=str(qwen2audio_dir),
        modalities=("audio",),
        options={"audio_per_prompt": 2},
    )
    backend = VLLMBackend(spec)
    assert vllm_stand_in.engine_kwargs[0]["limit_mm_per_prompt"] == {"audio": 2}
    first, second = np.zeros(16000, dtype=np.float32), np.ones(8000, dtype=np.float32) * 0.1
    request = JudgeRequest(
        "pair", "", f"Response 1:\n{AUDIO_SLOT}\nResponse 2:\n{AUDIO_SLOT}\nWhich is better?",
        audios=((first, 16000), (second, 16000)),
    )  # fmt: skip
    prompt = backend.build_prompt(request)
    assert [len(w) for w, _ in prompt["multi_modal_data"]["audio"]] == [16000, 8000]
    text = prompt["prompt"]
    assert text.count("<|audio_bos|><|AUDIO|><|audio_eos|>") == 2
    assert text.index("Response 1:") < text.index("Audio 1:") < text.index("Response 2:") < text.index("Audio 2:")

    single = VLLMBackend(dataclasses.replace(spec, options={}))
    with pytest.raises(ValueError, match="2 audio items, over options.audio_per_prompt=1"):
        single.build_prompt(request)
