"""Which models of a config can be pinned to a hub commit, and which are not yet: judges, ASR models, XTTS voices.

A model named by a branch (`revision: main`, the default) scores, transcribes or speaks with whatever the branch
holds on the day its job runs. `lalm-judge pin-revisions` writes the commit each branch points to; every parse
notes what is still unpinned, and the report lists it.
- judges of the transformers and vLLM backends whose model is a hub repository;
- ASR models: a faster-whisper size name ('large-v3', 'base') is the hub repository faster-whisper downloads
  (faster-whisper 1.2.1 `utils._MODELS`, e.g. Systran/faster-whisper-large-v3), a hub id is itself; the commit goes
  to `asr.models.<name>.revision`, which faster-whisper's `WhisperModel(revision=...)` downloads;
- XTTS-v2 voices: coqui-tts 0.28 downloads `tts-hub/XTTS-v2` without a revision (its `.models.json`); a voice with
  `revision` is loaded from that commit's snapshot instead (`audio.tts.xtts`).
Local folders, `bundled:` models and API models are not pinnable.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMMIT = re.compile(r"^[0-9a-f]{40}$")
LOCAL_BACKENDS = ("transformers", "vllm")
XTTS_REPOSITORY = "tts-hub/XTTS-v2"  # as `audio.tts.xtts` (the workflow plan does not import the TTS engines)
# Where voices are configured: (config path of a mapping of voices).
VOICE_SECTIONS = (("tts", "voices"), ("pairwise", "items", "voices"), ("preference", "engines"))


@dataclass(frozen=True)
class HubModel:
    """A model the config names by hub repository and revision; `path` is the config key of its entry."""

    path: tuple[str, ...]
    repository: str
    revision: str

    @property
    def key(self) -> str:
        return ".".join(self.path)

    @property
    def pinned(self) -> bool:
        return bool(COMMIT.match(self.revision))


def hub_model_id(model: str) -> bool:
    """Whether `model` names a hub repository ('owner/name'), not a local folder or a bundled model."""
    return model.count("/") == 1 and not model.startswith(("bundled:", ".", "/")) and not Path(model).exists()


def whisper_repository(model: str) -> str | None:
    """The hub repository of a faster-whisper model name or hub id; None for bundled models and local folders."""
    if model.startswith("bundled:") or model == "imported" or Path(model).exists():
        return None
    if hub_model_id(model):
        return model
    return whisper_model_repositories().get(model)


@functools.cache
def whisper_model_repositories() -> dict[str, str]:
    """faster-whisper's `utils._MODELS`: the size names `WhisperModel` accepts and the hub repositories behind them.

    Read from the installed package's source, not imported: importing `faster_whisper` loads CTranslate2, PyAV and
    the tokenizers (about 0.2 s), and every parse of the workflow (each job's too) asks this. A faster-whisper
    whose table is no longer a literal is imported after all."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("faster-whisper is not installed: the ASR stage needs it (requirements.lock)")
    source = Path(spec.submodule_search_locations[0], "utils.py")
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_MODELS" for t in node.targets):
            try:
                return dict(ast.literal_eval(node.value))
            except ValueError:
                break
    from faster_whisper.utils import _MODELS

    return dict(_MODELS)


def _voices(config: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    for section in VOICE_SECTIONS:
        voices: Any = config
        for key in section:
            voices = voices.get(key, {}) if isinstance(voices, Mapping) else {}
        for name, voice in voices.items():
            yield (*section, name), voice


def hub_models(config: Mapping[str, Any]) -> list[HubModel]:
    """Every pinnable model of the config, pinned or not."""
    found = [
        HubModel(("judges", name), entry["model"], str(entry.get("revision", "main")))
        for name, entry in (config.get("judges") or {}).items()
        if entry.get("backend") in LOCAL_BACKENDS and hub_model_id(entry["model"])
    ]
    for name, entry in ((config.get("asr") or {}).get("models") or {}).items():
        repository = whisper_repository(str(entry["model"]))
        if repository:
            found.append(HubModel(("asr", "models", name), repository, str(entry.get("revision", "main"))))
    for path, voice in _voices(config):
        if voice.get("engine") == "xtts":
            found.append(HubModel(path, XTTS_REPOSITORY, str(voice.get("revision", "main"))))
    return found


def unpinned_models(config: Mapping[str, Any]) -> list[str]:
    """'<config key> (<repository>@<branch>)' of every pinnable model still named by a branch, sorted (so that the
    order of the config's keys changes nothing)."""
    return sorted(f"{m.key} ({m.repository}@{m.revision})" for m in hub_models(config) if not m.pinned)
