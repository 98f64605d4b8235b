"""The environment MERaLiON-2's vLLM engine starts with (`lalm_judge.judging.backends.engine_env`).

The n-gram variable is checked where it acts: in a process the stand-in `vllm.LLM` starts the way vLLM's V1 engine
starts its engine core (spawned, so it has the environment and nothing else), the released plugin's logits
processor is built and applied (tests/support/vllm_engine.py). vLLM itself cannot be installed here (a CUDA build):
`LLM` is the stand-in of tests/judging/test_backend_vllm.py. FlashInfer's compiler check runs on a folder laid out
like the conda env's prefix (bin/nvcc, targets/x86_64-linux), a stand-in for the CUDA 12.8 packages of
envs/judge-vllm-meralion.yaml, which cannot be installed from PyPI.
"""

from __future__ import annotations

import sys

import pytest

from lalm_judge.core.registry import MissingDependency
from lalm_judge.judging.backends import engine_env
from lalm_judge.judging.backends.engine_env import NGRAM_ENV, NGRAM_OFF, prepare_flashinfer
from tests.judging import test_backend_vllm
from tests.judging.test_backend_vllm import SamplingParams016, paper_spec, stand_in
from tests.support.vllm_engine import start_engine_process

# The MERaLiON-2 tokenizer folder of the backend's request tests (Gemma-2 template, <SpeechHere>).
meralion_dir = test_backend_vllm.meralion_dir

# The prompt holds the 6-gram 1 2 3 4 5 9; the answer so far ends in 1 2 3 4 5, so the plugin's default size (6)
# bans 9 at the next step: the repeat a few-shot answer needs ('SAFETY_SCORE: 1.0' after an example's).
PROMPT, OUTPUT, REPEATED = [1, 2, 3, 4, 5, 9, 7], [1, 2, 3, 4, 5], 9


@pytest.fixture
def compiler_prefix(tmp_path, monkeypatch):
    """A prefix with nvcc and conda-forge's CUDA layout (the MERaLiON env's); no CUDA_HOME set by the site."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (prefix / "bin" / "nvcc").chmod(0o755)
    (prefix / engine_env.CONDA_TARGET / "include").mkdir(parents=True)
    for name in ("CUDA_HOME", "CUDA_PATH", "FLASHINFER_EXTRA_CFLAGS", "FLASHINFER_EXTRA_LDFLAGS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(engine_env.sys, "prefix", str(prefix))
    return prefix


def meralion_engine(monkeypatch, model_dir, **options):
    """The paper's MERaLiON-2 judge built with a stand-in vLLM whose engine process builds the plugin's processor."""
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    recorder = stand_in(monkeypatch, SamplingParams016)
    recorder.placeholder = "<SpeechHere>"
    stand_in_llm = sys.modules["vllm"].LLM
    seen = {}

    class EngineStartingLLM(stand_in_llm):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            seen["engine"] = start_engine_process(PROMPT, OUTPUT, vocab_size=16)

    sys.modules["vllm"].LLM = EngineStartingLLM
    monkeypatch.delenv(NGRAM_ENV, raising=False)
    spec = paper_spec("meralion2_10b", model_dir)
    backend = VLLMBackend(paper_spec("meralion2_10b", model_dir, options={**spec.options, **options}))
    return backend, seen["engine"]


def test_the_ngram_processor_is_off_in_meralions_engine_process(monkeypatch, meralion_dir, compiler_prefix):
    backend, (variable, size, banned) = meralion_engine(monkeypatch, meralion_dir)
    assert variable == str(NGRAM_OFF) and size == NGRAM_OFF
    assert banned == [], "nothing is banned: the answer may repeat the prompt"
    # Recorded with the judge's generation settings (the `generation` provenance column of its score rows).
    assert backend.spec.generation_settings["engine_environment"] == {NGRAM_ENV: str(NGRAM_OFF)}


def test_the_plugins_own_ngram_size_is_an_option(monkeypatch, meralion_dir, compiler_prefix):
    _, (variable, size, banned) = meralion_engine(monkeypatch, meralion_dir, no_repeat_ngram_size=6)
    assert (variable, size, banned) == ("6", 6, [REPEATED])


def test_other_judges_start_with_no_engine_environment():
    assert engine_env.engine_environment("vllm", "chat", {}) == {}
    assert engine_env.engine_environment("transformers", "meralion", {}) == {}


def test_flashinfer_finds_the_env_compiler(compiler_prefix):
    environ = {"PATH": "/nonexistent"}
    assert prepare_flashinfer(environ, compiler_prefix) == ("nvcc", str(compiler_prefix))
    assert environ["CUDA_HOME"] == str(compiler_prefix)
    target = compiler_prefix / engine_env.CONDA_TARGET
    assert environ["FLASHINFER_EXTRA_CFLAGS"] == f"-isystem {target / 'include'}"
    assert environ["FLASHINFER_EXTRA_LDFLAGS"] == f"-L{target / 'lib'} -L{compiler_prefix / 'lib'}"


def test_a_site_cuda_home_is_kept(compiler_prefix, tmp_path):
    site = tmp_path / "cuda-12.8"
    (site / "bin").mkdir(parents=True)
    (site / "bin" / "nvcc").write_text("")
    environ = {"CUDA_HOME": str(site), "PATH": "/nonexistent"}
    assert prepare_flashinfer(environ, compiler_prefix) == ("nvcc", str(site))
    assert "FLASHINFER_EXTRA_CFLAGS" not in environ


def test_without_a_compiler_the_engine_does_not_start(tmp_path):
    with pytest.raises(MissingDependency, match=r"needs nvcc.*envs/judge-vllm-meralion\.yaml.*flashinfer-jit-cache"):
        prepare_flashinfer({"PATH": "/nonexistent"}, tmp_path)


def test_the_engines_context_length_never_cuts_an_answer(monkeypatch, meralion_dir, compiler_prefix):
    """A request whose prompt (as the engine counted it) and answer budget (max_new_tokens 512) do not fit
    `max_model_len` stops the job naming the request, instead of an answer cut at the engine's length."""
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    recorder = stand_in(monkeypatch, SamplingParams016)
    recorder.placeholder = "<SpeechHere>"
    spec = paper_spec("meralion2_10b", meralion_dir)
    request = test_backend_vllm.requests_with_audio()[2]  # text only
    assert len(VLLMBackend(spec).generate([request])) == 1  # 6,144 tokens: room for the answer
    tight = VLLMBackend(paper_spec("meralion2_10b", meralion_dir, options={**spec.options, "max_model_len": 520}))
    with pytest.raises(ValueError, match=r"request text has \d+ prompt tokens and an answer budget of 512, over"):
        tight.generate([request])
    with pytest.raises(ValueError, match=r"max_model_len is 'auto'; give a number"):
        VLLMBackend(paper_spec("meralion2_10b", meralion_dir, options={**spec.options, "max_model_len": "auto"}))
