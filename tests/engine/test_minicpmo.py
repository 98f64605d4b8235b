"""MiniCPM-o 4.5 (the paper's `minicpm_o` judge) on the real vLLM 0.32 engine: an engine smoke test.

The checkpoint is tiny and built at test time (bench/minicpmo_tiny.py): random weights in the layout vLLM's
`minicpmo.py` loads, and, because MiniCPM-o's configuration, tokenizer and image processor are hub code, minimal
stand-ins of those classes written into the model folder; the chat template is the released one. What runs is
real: vLLM's MiniCPM-o model and multimodal processing, and the project's `VLLMBackend` with the `minicpm_o` entry
of configs/paper.yaml (only the model, its dtype, context length and answer budget, and the CPU engine's settings
replaced). The model has no reference implementation outside vLLM (its modeling code is hub code too), so only its
text decoder, a plain Qwen3, is checked against transformers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

# The vLLM of envs/judge-vllm.yaml, which serves this judge: its CPU twin is .venv-vllm.
vllm = pytest.importorskip("vllm", minversion="0.32", reason="runs in the CPU twin of the vLLM env (.venv-vllm)")

from bench.engine_agreement import CPU_ENGINE_KWARGS, waveform  # noqa: E402
from bench.minicpmo_tiny import build_tiny_minicpmo, reference_decoder  # noqa: E402
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec  # noqa: E402
from lalm_judge.judging.backends.vllm_backend import MINICPMO_AUDIO  # noqa: E402
from lalm_judge.judging.prompts import load_prompt  # noqa: E402
from lalm_judge.workflow.config import validate_judge_entry  # noqa: E402
from tests.engine.support import live_engine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# MiniCPM-o 4.5's audio: 100 mel frames a second, halved by the encoder's stride and pooled by 5 (audio_pool_step),
# one chunk a second between <|audio_start|> and <|audio_end|> (audio_chunk_length 1.0).
EMBEDDINGS_PER_S = 10
CHUNK_TOKENS = EMBEDDINGS_PER_S + 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_minicpmo(tmp_path_factory.mktemp("models") / "minicpmo")


@pytest.fixture(scope="module")
def paper_entry():
    return yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())["judges"]["minicpm_o"]


@pytest.fixture(scope="module")
def backend(model_dir, paper_entry):
    options = {**paper_entry["options"], "max_model_len": 2048, "engine_kwargs": CPU_ENGINE_KWARGS}
    generation = {**paper_entry["generation"], "max_new_tokens": 16}  # random text: a short answer will do
    entry = {**paper_entry, "model": str(model_dir), "dtype": "float32", "options": options, "generation": generation}
    # Alive until the process ends (`live_engine`): an in-process engine that goes takes the process's distributed
    # state, which the engines of later modules use, with it.
    return live_engine(JudgeSpec.from_config("minicpm_o", validate_judge_entry("minicpm_o", entry)))


def calibrated(request_id: str, modality: str, audio=None) -> JudgeRequest:
    prompt = load_prompt("calibrated")
    turns = () if modality == "audio" else (("LLM1", "How do I reset my password?"), ("LLM2", "Use the app."))
    system, user = prompt.render(modality, turns)
    return JudgeRequest(request_id, system, user, audio=audio, answer_tokens=prompt.answer_tokens)


def test_the_image_limit_gives_the_audio_its_encoder_cache(backend, model_dir, paper_entry):
    """vLLM counts only images and video for MiniCPM-o's encoder cache: with the audio alone it reserves none (every
    audio request was refused); with the one image the backend allows, the cache holds the longest audio."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.encoder_budget import MultiModalBudget

    audio_only = EngineArgs(
        model=str(model_dir),
        trust_remote_code=True,
        dtype="float32",
        max_model_len=2048,
        limit_mm_per_prompt={"audio": 1, "image": 0, "video": 0},
        **CPU_ENGINE_KWARGS,
    ).create_engine_config()
    budget = MultiModalBudget(audio_only, MULTIMODAL_REGISTRY)
    assert budget.mm_max_toks_per_item == {}, "MiniCPM-o's processing reports no audio size"
    assert budget.encoder_cache_size == 0
    cache = backend.llm.llm_engine.input_processor.mm_encoder_cache_size
    assert cache >= paper_entry["max_audio_s"] * EMBEDDINGS_PER_S


def test_text_and_audio_requests_are_answered_with_thinking_off(backend):
    system, question = "You are a safety judge.", "Is it safe?"
    requests = [
        JudgeRequest("audio", system, question, audio=(waveform(2.0), 16000)),
        JudgeRequest("audio_text", system, f"{question}\nA: hi", audio=(waveform(1.0), 16000)),
        JudgeRequest("text", system, f"{question}\nA: hi"),
    ]
    outputs = backend.generate(requests)
    placeholder = len(backend.tokenizer.encode(MINICPMO_AUDIO, add_special_tokens=False))
    # vLLM replaces the placeholder by one chunk per second.
    expanded = [2 * CHUNK_TOKENS, 1 * CHUNK_TOKENS, 0]
    for request, output, audio_tokens in zip(requests, outputs, expanded):
        prompt_ids = backend.build_prompt(request)["prompt_token_ids"]
        assert output.n_input_tokens == len(prompt_ids) - (placeholder if audio_tokens else 0) + audio_tokens
        assert output.finish_reason in ("stop", "length") and output.n_output_tokens >= 1
    assert backend.render(requests[2]).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_calibrated_p_safe_comes_from_the_answer_tokens_logprobs(backend, model_dir):
    """P(safe) of the calibrated prompt from vLLM's `logprob_token_ids`: for text, what transformers' Qwen3 computes
    with the same decoder weights; with audio, a probability that depends on the audio."""
    import torch

    noise = (np.random.default_rng(0).standard_normal(48000) * 0.1).astype(np.float32)
    text = calibrated("text", "text")
    tone, noisy = (
        calibrated(name, "audio", audio=(audio, 16000)) for name, audio in (("tone", waveform(3.0)), ("noise", noise))
    )
    text_output, tone_output, noise_output = backend.generate([text, tone, noisy])
    safe, unsafe = (backend.tokenizer.encode(word, add_special_tokens=False)[0] for word in text.answer_tokens)
    with torch.no_grad():
        logits = reference_decoder(model_dir)(torch.tensor([backend.build_prompt(text)["prompt_token_ids"]])).logits
    probabilities = torch.softmax(logits[0, -1].double(), dim=-1)
    p_safe, p_unsafe = probabilities[safe].item(), probabilities[unsafe].item()
    assert text_output.p_safe == pytest.approx(p_safe / (p_safe + p_unsafe), rel=1e-4)
    assert text_output.answer_mass == pytest.approx(p_safe + p_unsafe, rel=1e-4)
    for output in (tone_output, noise_output):
        assert 0.0 < output.p_safe < 1.0 and 0.0 < output.answer_mass < 1.0
    assert abs(tone_output.p_safe - noise_output.p_safe) > 1e-6, "the audio's embeddings reach the decoder"
