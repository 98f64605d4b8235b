"""The environment a vLLM judge's engine process starts with (`lalm_judge.judging.backends.engine_env`).

That the engine's processes get it is shown on the real engine (tests/engine/test_engine_environment.py). Here: which
variables each judge gets; what vllm-plugin-meralion2's n-gram processor does with the one it reads, the released
plugin's code built in a spawned process as vLLM builds it in its engine process (tests/support/vllm_engine.py; the
plugin needs vLLM 0.12-0.16, not the CPU twin's 0.32); and how FlashInfer finds its compiler and the `libcuda.so` link
stubs, on a folder laid out like the conda env's prefix (bin/nvcc, targets/x86_64-linux, lib/stubs), a stand-in for
the CUDA 12.8 packages of envs/judge-vllm-meralion.yaml, which the package registry does not serve.
"""

from __future__ import annotations

import pytest

from lalm_judge.core.registry import MissingDependency
from lalm_judge.judging.backends import engine_env
from lalm_judge.judging.backends.base import Capabilities, JudgeSpec
from lalm_judge.judging.backends.engine_env import NGRAM_ENV, NGRAM_OFF, SAMPLER_ENV, prepare_flashinfer
from tests.support.vllm_engine import start_engine_process

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
    return prefix


def meralion(**options) -> JudgeSpec:
    """The paper's MERaLiON-2 judge as the backend sees it (its prompt format), with these options."""
    capabilities = Capabilities(system_role=False, prompt_format="meralion")
    return JudgeSpec(
        name="m", backend="vllm", model="MERaLiON/MERaLiON-2-10B", options=options, capabilities=capabilities
    )


def test_every_vllm_engine_starts_with_flashinfers_sampler_off():
    assert engine_env.engine_environment("vllm", "chat", {}) == {SAMPLER_ENV: "0"}
    assert engine_env.engine_environment("vllm", "minicpmo", {}) == {SAMPLER_ENV: "0"}
    assert engine_env.engine_environment("transformers", "meralion", {}) == {}
    assert engine_env.engine_environment("openai", "chat", {}) == {}


def test_meralion_starts_with_the_ngram_processor_off_recorded_with_its_generation_settings():
    assert meralion().engine_environment == {SAMPLER_ENV: "0", NGRAM_ENV: str(NGRAM_OFF)}
    assert meralion(no_repeat_ngram_size=6).engine_environment[NGRAM_ENV] == "6"
    # The `generation` provenance column of the judge's score rows.
    assert meralion().generation_settings["engine_environment"] == {SAMPLER_ENV: "0", NGRAM_ENV: str(NGRAM_OFF)}


def test_with_the_ngram_size_off_the_plugin_bans_nothing_in_the_engine_process(monkeypatch):
    monkeypatch.setenv(NGRAM_ENV, str(NGRAM_OFF))
    variable, size, banned = start_engine_process(PROMPT, OUTPUT, vocab_size=16)
    assert (variable, size, banned) == (str(NGRAM_OFF), NGRAM_OFF, [])


def test_the_plugins_own_ngram_size_bans_the_repeat(monkeypatch):
    monkeypatch.setenv(NGRAM_ENV, "6")
    assert start_engine_process(PROMPT, OUTPUT, vocab_size=16) == ("6", 6, [REPEATED])


def test_flashinfer_finds_the_env_compiler_and_the_libcuda_stubs(compiler_prefix):
    environ = {"PATH": "/nonexistent"}
    assert prepare_flashinfer(environ, compiler_prefix) == ("nvcc", str(compiler_prefix))
    assert environ["CUDA_HOME"] == str(compiler_prefix)
    target = compiler_prefix / engine_env.CONDA_TARGET
    assert environ["FLASHINFER_EXTRA_CFLAGS"] == f"-isystem {target / 'include'}"
    # FlashInfer links every op with -lcuda; conda-forge ships libcuda.so (the link stub) under lib/stubs only.
    assert environ["FLASHINFER_EXTRA_LDFLAGS"].split() == [
        f"-L{target / 'lib'}",
        f"-L{compiler_prefix / 'lib'}",
        f"-L{target / 'lib' / 'stubs'}",
        f"-L{compiler_prefix / 'lib' / 'stubs'}",
    ]


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


def test_the_meralion_start_environment_adds_flashinfers_settings(compiler_prefix, monkeypatch):
    from lalm_judge.judging.backends.vllm_backend import engine_start_environment

    monkeypatch.setattr(engine_env.sys, "prefix", str(compiler_prefix))
    started = engine_start_environment(meralion(), {"PATH": "/nonexistent"}, flashinfer_attention=True)
    assert started[SAMPLER_ENV] == "0" and started[NGRAM_ENV] == str(NGRAM_OFF)
    assert started["CUDA_HOME"] == str(compiler_prefix) and "stubs" in started["FLASHINFER_EXTRA_LDFLAGS"]
    chat = JudgeSpec(name="c", backend="vllm", model="m")
    assert engine_start_environment(chat, {}) == {SAMPLER_ENV: "0"}
    # On CPU vLLM's own attention softcaps Gemma-2's logits: no FlashInfer, nothing to compile.
    assert engine_start_environment(meralion(), {"PATH": "/nonexistent"}) == {
        SAMPLER_ENV: "0",
        NGRAM_ENV: str(NGRAM_OFF),
    }
