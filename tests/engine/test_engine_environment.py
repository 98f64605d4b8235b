"""The environment a real vLLM engine process starts with (`vllm_backend.engine_start_environment`).

vLLM's V1 engine runs its engine core in a process of its own (started when the `LLM` is built, with the environment
of that moment); on a GPU node that is where FlashInfer would compile its sampler and MERaLiON-2's attention kernels.
This test starts the engine as a GPU node does (engine core process, `VLLM_ENABLE_V1_MULTIPROCESSING=1`) through the
project's backend and has each of the engine's workers (the processes that run the model and its sampler) report its
environment (`LLM.collective_rpc`; `/proc/<pid>/environ` cannot tell: vLLM renames its processes with setproctitle,
which overwrites that memory). The MERaLiON-2 judge's
start environment is prepared on a folder laid out like its conda env (envs/judge-vllm-meralion.yaml: `bin/nvcc`,
`targets/x86_64-linux`, the `libcuda.so` link stubs): a stand-in for the CUDA 12.8 packages, which the package registry
does not serve. MERaLiON-2's own engine cannot start on CPU (tests/engine/test_meralion.py); the variables are the
backend's, whichever model the engine serves.
"""

from __future__ import annotations

import os

import pytest

from bench.engine_agreement import tiny_spec
from bench.models import cached_tiny_model
from lalm_judge.judging.backends import engine_env
from lalm_judge.judging.backends.engine_env import NGRAM_ENV, NGRAM_OFF, SAMPLER_ENV
from lalm_judge.judging.backends.vllm_backend import engine_start_environment


@pytest.fixture
def meralion_conda_prefix(tmp_path, monkeypatch):
    """A prefix laid out like the MERaLiON env's conda packages; the site sets no CUDA_HOME."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (prefix / "bin" / "nvcc").chmod(0o755)
    for stubs in (prefix / "lib" / "stubs", prefix / engine_env.CONDA_TARGET / "lib" / "stubs"):
        stubs.mkdir(parents=True)
        (stubs / "libcuda.so").write_bytes(b"")
    (prefix / engine_env.CONDA_TARGET / "include").mkdir(parents=True)
    for name in (
        "CUDA_HOME",
        "CUDA_PATH",
        "FLASHINFER_EXTRA_CFLAGS",
        "FLASHINFER_EXTRA_LDFLAGS",
        SAMPLER_ENV,
        NGRAM_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(engine_env.sys, "prefix", str(prefix))
    return prefix


def worker_environment(worker) -> dict[str, str]:
    """Run by each engine worker (`LLM.collective_rpc`): its process id and environment."""
    return {"pid": str(os.getpid()), **os.environ}


def test_the_engine_process_starts_without_flashinfer_sampler_and_with_the_libcuda_stubs(
    meralion_conda_prefix, monkeypatch
):
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    meralion = tiny_spec("configs/paper.yaml", "meralion2_10b", cached_tiny_model("llama31"), "vllm")
    prepared = engine_start_environment(meralion, flashinfer_attention=True)
    stubs = [f"-L{meralion_conda_prefix / engine_env.CONDA_TARGET / 'lib' / 'stubs'}"]
    stubs.append(f"-L{meralion_conda_prefix / 'lib' / 'stubs'}")
    assert prepared[SAMPLER_ENV] == "0" and prepared[NGRAM_ENV] == str(NGRAM_OFF)
    assert prepared["CUDA_HOME"] == str(meralion_conda_prefix)
    assert all(flag in prepared["FLASHINFER_EXTRA_LDFLAGS"].split() for flag in stubs)
    # The MERaLiON judge's start environment in place, the engine of a judge that can start on CPU is started as on
    # a GPU node, through the backend (which adds its own start environment).
    for name, value in prepared.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(SAMPLER_ENV)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc of a function: this test's only
    backend = VLLMBackend(tiny_spec("configs/paper.yaml", "llama31_8b", cached_tiny_model("llama31"), "vllm"))
    try:
        assert backend.start_environment == {SAMPLER_ENV: "0"}
        (environment,) = backend.llm.collective_rpc(worker_environment)
        assert environment["pid"] != str(os.getpid()), "the worker is a process of its own"
        assert environment[SAMPLER_ENV] == "0", "FlashInfer's sampler is off: no CUDA compiler at start-up"
        assert all(flag in environment["FLASHINFER_EXTRA_LDFLAGS"].split() for flag in stubs)
        assert environment[NGRAM_ENV] == str(NGRAM_OFF)
        (output,) = backend.generate([backend_request()])
        assert output.n_output_tokens > 0
    finally:
        backend.llm.llm_engine.engine_core.shutdown()


def backend_request():
    from lalm_judge.judging.backends.base import JudgeRequest

    return JudgeRequest("r", "You are a safety judge.", "Is it safe?")
