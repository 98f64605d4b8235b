"""Engine tests: a real vLLM engine (a CPU build of upstream vLLM) serves tiny random-weight models of the judges'
architectures. They run in the CPU twins of the vLLM judge environments (`.venv-vllm/bin/pytest tests/engine`) and
are skipped where vLLM is not installed."""

from __future__ import annotations

import pytest

from tests.support.cpu_engine import ENGINE_ENVIRONMENT


@pytest.fixture(scope="session", autouse=True)
def engine_environment():
    """The environment of an in-process CPU engine (tests.support.cpu_engine), for the whole session: vLLM reads it
    when an engine starts."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ENGINE_ENVIRONMENT.items():
            patch.setenv(name, value)
        yield
