"""Every conda env of the rules (envs/*.yaml) can be built: its pip list resolves with pip's resolver against PyPI.

Each env's pip list goes through `pip install --dry-run --ignore-installed --report` in a scratch venv with
pip 26.3, isolated from this machine's pip configuration (local wheel folders, indexes and constraints), so
the resolver sees what a GPU node's fresh conda env sees: PyPI only, CUDA builds of torch included. The envs resolve
side by side (one pip process each; a resolution mostly waits on PyPI), and one test per env reads its result.
pip >= 25.3 reads wheel metadata with HTTP range requests (`--use-feature=fast-deps`), so a check downloads tens
of MB instead of whole CUDA wheels (about 5-30 s per env). The conda-only lines (python, espeak-ng) are not pip's.
Needs PyPI (marker `network`); it fails, naming the problem, when PyPI cannot be reached.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
ENV_FILES = sorted((ROOT / "envs").glob("*.yaml"))
PIP_VERSION = "26.3"  # >= 25.3: a dry run with fast-deps reads metadata by HTTP range, without wheel downloads
PIP_FLAGS = ["--isolated", "--disable-pip-version-check", "--timeout", "60", "--retries", "5"]
# vllm-plugin-meralion2 declares no vllm requirement; its register() refuses vLLM outside this range
# (vllm_plugin_meralion2/__init__.py of 0.3.0).
MERALION_PLUGIN_VLLM = (Version("0.12.0"), Version("0.17.0"))


def conda_env(path: Path) -> tuple[str, list[str]]:
    """(python version, pip requirement lines) of a conda env file."""
    dependencies = yaml.safe_load(path.read_text())["dependencies"]
    python = next(d.split("=", 1)[1] for d in dependencies if isinstance(d, str) and re.match(r"python\s*=", d))
    pip = [line for d in dependencies if isinstance(d, dict) and "pip" in d for line in d["pip"]]
    return python, pip


def pip_env() -> dict[str, str]:
    """The environment of the scratch pip: no pip config file (PIP_CONFIG_FILE is read even with --isolated)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull}


@pytest.fixture(scope="session")
def scratch_pip(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("envcheck") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    upgrade = subprocess.run(
        [python, "-m", "pip", *PIP_FLAGS, "install", "-q", f"pip=={PIP_VERSION}"],
        capture_output=True,
        text=True,
        env=pip_env(),
        timeout=300,
    )
    assert upgrade.returncode == 0, (
        f"cannot install pip {PIP_VERSION} from PyPI into a scratch venv (is PyPI reachable? deselect with "
        f"-m 'not network'):\n{upgrade.stdout[-2000:]}\n{upgrade.stderr[-2000:]}"
    )
    return python


@dataclass(frozen=True)
class Resolution:
    requirements: list[str]
    result: subprocess.CompletedProcess
    report: Path


@pytest.fixture(scope="module")
def resolutions(scratch_pip: Path, tmp_path_factory) -> dict[Path, Resolution]:
    """Every env's pip list resolved at once: each resolution mostly waits on PyPI (about 8 s of CPU in 30 s), so
    the resolutions run side by side, one pip process each."""
    started = {}
    for env_file in ENV_FILES:
        python, requirements = conda_env(env_file)
        assert python == f"{sys.version_info.major}.{sys.version_info.minor}", (
            f"{env_file.name} wants python {python}; resolve it with that interpreter"
        )
        assert requirements, f"{env_file.name} has no pip list"
        folder = tmp_path_factory.mktemp(env_file.stem)
        (folder / "requirements.txt").write_text("\n".join(requirements) + "\n")
        command = [
            scratch_pip,
            "-m",
            "pip",
            *PIP_FLAGS,
            "install",
            "--dry-run",
            "--ignore-installed",
            "--use-feature=fast-deps",
            "--report",
            folder / "report.json",
            "-r",
            folder / "requirements.txt",
        ]
        # No -q: pip explains a conflict ("The conflict is caused by: ...") on stdout.
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pip_env())
        started[env_file] = (requirements, process, command, folder / "report.json")
    finished = {}
    for env_file, (requirements, process, command, report) in started.items():
        stdout, stderr = process.communicate(timeout=600)
        result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
        finished[env_file] = Resolution(requirements, result, report)
    return finished


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("env_file", ENV_FILES, ids=[p.stem for p in ENV_FILES])
def test_env_resolves_with_pip(env_file: Path, resolutions: dict[Path, Resolution]):
    requirements, result, report = (
        resolutions[env_file].requirements,
        resolutions[env_file].result,
        resolutions[env_file].report,
    )
    assert result.returncode == 0, (
        f"{env_file.name} does not resolve:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    )
    resolved = {
        canonicalize_name(item["metadata"]["name"]): Version(item["metadata"]["version"])
        for item in json.loads(report.read_text())["install"]
    }
    for line in requirements:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in resolved, f"{env_file.name}: {requirement.name} is missing from the resolution"
        assert requirement.specifier.contains(resolved[name], prereleases=True), (line, resolved[name])
    if "vllm-plugin-meralion2" in resolved:
        low, high = MERALION_PLUGIN_VLLM
        assert low <= resolved["vllm"] < high, f"{env_file.name}: vllm {resolved['vllm']} outside the plugin's range"
        # FlashInfer compiles MERaLiON-2's attention kernels with the env's CUDA compiler, of the wheels' CUDA.
        runtime = resolved["nvidia-cuda-runtime-cu12"]
        assert cuda_compiler(env_file) == f"{runtime.major}.{runtime.minor}", (env_file.name, runtime)


def cuda_compiler(path: Path) -> str | None:
    """The CUDA version of the compiler a conda env file brings (`cuda-version` with `cuda-nvcc`, its headers and a
    host compiler), or None."""
    dependencies = [d for d in yaml.safe_load(path.read_text())["dependencies"] if isinstance(d, str)]
    names = {re.split(r"[=<> ]", d, maxsplit=1)[0] for d in dependencies}
    versions = [d.split("=", 1)[1] for d in dependencies if d.startswith("cuda-version=")]
    needed = {"cuda-nvcc", "cuda-cudart-dev", "cuda-cccl", "gxx_linux-64"}
    return versions[0] if versions and needed <= names else None


def test_the_meralion_env_brings_a_cuda_compiler():
    """FlashInfer, MERaLiON-2's attention backend, JIT-compiles at engine start (flashinfer/jit/cpp_ext.py)."""
    assert cuda_compiler(ROOT / "envs" / "judge-vllm-meralion.yaml") == "12.8"


def test_the_judge_env_has_what_the_omni_processor_needs():
    """Qwen2.5-Omni's processor builds an image processor (Pillow) and a video processor (torchvision)."""
    _, requirements = conda_env(ROOT / "envs" / "judge-hf.yaml")
    names = {canonicalize_name(Requirement(line).name) for line in requirements}
    assert {"torchvision", "pillow"} <= names
