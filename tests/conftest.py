"""Fixtures shared across test modules: tiny random-weight models built from configs (about 1 MB each)."""

import pytest

from bench.models import (
    build_tiny_audioflamingo3,
    build_tiny_llama,
    build_tiny_qwen2audio,
    build_tiny_qwen25omni_thinker,
)


@pytest.fixture(scope="session")
def qwen2audio_dir(tmp_path_factory):
    return build_tiny_qwen2audio(tmp_path_factory.mktemp("models") / "qwen2audio")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("models") / "llama")


@pytest.fixture(scope="session")
def audioflamingo3_dir(tmp_path_factory):
    return build_tiny_audioflamingo3(tmp_path_factory.mktemp("models") / "audioflamingo3")


@pytest.fixture(scope="session")
def qwen25omni_dir(tmp_path_factory):
    return build_tiny_qwen25omni_thinker(tmp_path_factory.mktemp("models") / "qwen25omni")
