"""The environment a vLLM engine needs before it starts.

- **No CUDA compiler at start-up (every vLLM judge).** vLLM 0.32 turns FlashInfer's top-k/top-p sampler on by default
  on CUDA (`envs.py`, `VLLM_USE_FLASHINFER_SAMPLER`); the engine's start-up profiling runs the sampler on dummy
  top-k/top-p requests, and FlashInfer 0.7 then JIT-compiles its sampling kernels, which fails with "Could not find
  nvcc" on a node with a driver and no CUDA toolkit (vllm-project/vllm issue 49497). `VLLM_USE_FLASHINFER_SAMPLER=0`
  makes that sampler the PyTorch one (`v1/sample/ops/topk_topp_sampler.py`, `forward_native`). It changes no answer
  of this project: greedy decoding never samples, and every sampled request carries a seed, which the FlashInfer path
  does not support and hands to `forward_native` anyway (`forward_cuda`: "per-request generators"). The other route,
  FlashInfer's prebuilt JIT cache, is a wheel from FlashInfer's own index: a second thing to keep in step with vLLM.
- **The plugin's n-gram processor is off.** The plugin registers `NoRepeatNGramV1LogitsProcessor` as a
  `vllm.logits_processors` entry point, which vLLM loads into every engine of the environment, whatever the model
  (vLLM 0.16 `v1/sample/logits_processor/__init__.py` `_load_logitsprocs_plugins`, no switch). It bans any token
  that would repeat an n-gram of the prompt or the output (`MERALION_NGRAM_SIZE`, default 6, read from the
  environment when the processor is built in the engine process): a few-shot answer could not repeat the examples'
  `SAFETY_SCORE: 1.0`, a chain of thought could not quote a turn. The processor skips a sequence shorter than the
  size, so a size beyond any context (`NGRAM_OFF`) switches it off (what remains is one list concatenation per
  sequence and step). The value goes into the process environment before vLLM starts the engine process, which
  inherits it, and into the judge's generation settings (the `generation` provenance column of its rows);
  `options.no_repeat_ngram_size` restores the plugin's behaviour with a size of its own.
For MERaLiON-2 (vllm-plugin-meralion2 0.3.0, vLLM 0.16) also:
- **FlashInfer can build its kernels.** MERaLiON-2 runs on the FLASHINFER attention backend (Gemma-2's logit
  softcapping), whose kernels flashinfer-python 0.6.3 JIT-compiles at engine start with `nvcc`
  (`flashinfer/jit/cpp_ext.py`: `$CUDA_HOME/bin/nvcc`, `$CUDA_HOME/include`, `-L$CUDA_HOME/lib64`); vLLM 0.16
  drops FlashInfer when neither `nvcc` nor the prebuilt cubins are there (`utils/flashinfer.py`). The MERaLiON
  environment (envs/judge-vllm-meralion.yaml) brings the CUDA 12.8 compiler from conda-forge into the env's prefix;
  `prepare_flashinfer` points `CUDA_HOME` there (and FlashInfer's extra include and library flags at the
  conda layout, `targets/x86_64-linux`; FlashInfer links every op with `-lcuda`, and conda-forge ships the driver
  library's link stub `libcuda.so` only under `lib/stubs` and `targets/x86_64-linux/lib/stubs`, so those are on the
  library path too: the driver's own `libcuda.so.1` is what loads at run time), or accepts a
  `flashinfer-jit-cache` of the pinned version (prebuilt kernels, docs/cluster.md) or a `CUDA_HOME` the site sets.
  Without any of them it stops before vLLM starts, saying what to install.

Only the standard library is imported here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from lalm_judge.core.registry import MissingDependency

SAMPLER_ENV = "VLLM_USE_FLASHINFER_SAMPLER"
NGRAM_ENV = "MERALION_NGRAM_SIZE"
NGRAM_OFF = 2**31 - 1
MERALION_FORMAT = "meralion"
CONDA_TARGET = Path("targets") / "x86_64-linux"


def engine_environment(backend: str, prompt_format: str, options: Mapping[str, Any]) -> dict[str, str]:
    """Environment variables the judge's engine process must start with (module docstring); none but for vLLM."""
    if backend != "vllm":
        return {}
    environment = {SAMPLER_ENV: "0"}
    if prompt_format == MERALION_FORMAT:
        size = options.get("no_repeat_ngram_size")
        environment[NGRAM_ENV] = str(NGRAM_OFF if size is None else int(size))
    return environment


def conda_library_flags(prefix: Path) -> str:
    """FlashInfer's extra linker flags for a conda env's CUDA packages: their libraries and the `libcuda.so` link
    stubs (module docstring)."""
    target = prefix / CONDA_TARGET
    folders = (target / "lib", prefix / "lib", target / "lib" / "stubs", prefix / "lib" / "stubs")
    return " ".join(f"-L{folder}" for folder in folders)


def prepare_flashinfer(
    environ: MutableMapping[str, str] | None = None, prefix: str | Path | None = None
) -> tuple[str, str]:
    """Make FlashInfer's kernel build work in this process and the engine processes it starts (the environment's
    prefix is the conda env's); (route, where)."""
    environ = os.environ if environ is None else environ
    prefix = sys.prefix if prefix is None else prefix
    if importlib.util.find_spec("flashinfer_jit_cache") is not None:
        return "flashinfer-jit-cache", "prebuilt kernels"
    cuda_home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if not cuda_home and (Path(prefix) / "bin" / "nvcc").is_file():
        cuda_home = environ["CUDA_HOME"] = str(prefix)
        target = Path(prefix) / CONDA_TARGET
        if target.is_dir():  # conda-forge keeps the CUDA headers and libraries here, the libcuda.so stubs below
            environ.setdefault("FLASHINFER_EXTRA_CFLAGS", f"-isystem {target / 'include'}")
            environ.setdefault("FLASHINFER_EXTRA_LDFLAGS", conda_library_flags(Path(prefix)))
    if not cuda_home and shutil.which("nvcc", path=environ.get("PATH")):
        return "nvcc", str(shutil.which("nvcc", path=environ.get("PATH")))
    if not cuda_home or not (Path(cuda_home) / "bin" / "nvcc").is_file():
        raise MissingDependency(
            "MERaLiON-2's FlashInfer attention compiles its kernels when the engine starts and needs nvcc, but there "
            f"is none (CUDA_HOME={cuda_home!r}, no nvcc on PATH or in {prefix}/bin). Run the judge in "
            "envs/judge-vllm-meralion.yaml (it brings the CUDA 12.8 compiler), set CUDA_HOME to a CUDA 12.8 toolkit, "
            "or install flashinfer-jit-cache==0.6.3 from https://flashinfer.ai/whl/cu128 (docs/cluster.md)"
        )
    return "nvcc", cuda_home
