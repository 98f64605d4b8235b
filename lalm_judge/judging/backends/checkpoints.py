"""What a checkpoint is, read from its `config.json`, and the layout each engine loads it in.

A fine-tuned Qwen2.5-Omni is often saved as its thinker alone: LLaMA-Factory trains and saves
`Qwen2_5OmniThinkerForConditionalGeneration` (config `model_type` 'qwen2_5_omni_thinker', weights without the
'thinker.' prefix), which is what a SageLM-style judge checkpoint is. The engines read it differently:
- transformers loads either layout through the thinker class (`THINKER_CLASS`; `hf.model_class_name` reads the
  architecture from the config);
- vLLM's registry knows only the full model's architectures, `Qwen2_5OmniModel` and
  `Qwen2_5OmniForConditionalGeneration`, both served by its thinker class, which reads
  `hf_config.thinker_config` and maps 'thinker.model.' / 'thinker.lm_head.' / 'thinker.' weight names
  (vLLM 0.32 `model_executor/models/registry.py`, `qwen2_5_omni_thinker.py` `hf_to_vllm_mapper`). A thinker-only
  checkpoint is therefore served from a copy in the full layout (`full_omni_layout`): a `Qwen2_5OmniConfig`
  config with the checkpoint's config as `thinker_config` (no audio output), every tensor renamed 'thinker.<name>'
  (the safetensors headers are rewritten; the tensor bytes are copied as they are), the processor and tokenizer
  files as they are. The copy is made once per checkpoint and revision under the model cache
  (`options.cache_dir`, default ~/.cache/lalm-judge/models) and read from there afterwards.

Only the standard library is imported here; huggingface_hub (for hub ids) on use.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

THINKER_CLASS = "Qwen2_5OmniThinkerForConditionalGeneration"
THINKER_ONLY_ARCHITECTURES = frozenset({THINKER_CLASS})
FULL_OMNI_ARCHITECTURE = "Qwen2_5OmniForConditionalGeneration"
FULL_OMNI_ARCHITECTURES = frozenset({FULL_OMNI_ARCHITECTURE, "Qwen2_5OmniModel"})
THINKER_PREFIX = "thinker."
WEIGHT_INDEX = "model.safetensors.index.json"
_HEADER_ALIGNMENT = 8


def default_cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lalm-judge" / "models"


def local_checkpoint(model: str, revision: str, files: tuple[str, ...] | None = None) -> Path:
    """The folder of a checkpoint: `model` itself when it is one, else the hub snapshot of `revision` (only
    `files` when given, e.g. the config)."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, revision=revision, allow_patterns=list(files) if files else None))


def read_checkpoint_config(model: str, revision: str) -> dict[str, Any]:
    """The checkpoint's `config.json` (from the hub when `model` is a hub id); empty for a folder without one
    (a tokenizer alone)."""
    path = local_checkpoint(model, revision, ("config.json",)) / "config.json"
    return json.loads(path.read_text("utf-8")) if path.is_file() else {}


def architectures(config: Mapping[str, Any]) -> list[str]:
    return list(config.get("architectures") or [])


def is_thinker_only(config: Mapping[str, Any]) -> bool:
    """A Qwen2.5-Omni thinker saved on its own (LLaMA-Factory's layout), not the full model."""
    return bool(set(architectures(config)) & THINKER_ONLY_ARCHITECTURES) or config.get("model_type") == (
        "qwen2_5_omni_thinker"
    )


def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    """(header, byte offset of the tensor data) of a safetensors file."""
    with path.open("rb") as stream:
        (length,) = struct.unpack("<Q", stream.read(8))
        return json.loads(stream.read(length)), 8 + length


def rename_safetensors(source: Path, target: Path, prefix: str) -> None:
    """Copy a safetensors file with `prefix` before every tensor name; offsets are relative to the data, which is
    copied byte for byte."""
    header, data_start = _read_header(source)
    renamed = {(k if k == "__metadata__" else prefix + k): v for k, v in header.items()}
    encoded = json.dumps(renamed, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % _HEADER_ALIGNMENT)
    with source.open("rb") as reader, target.open("wb") as writer:
        writer.write(struct.pack("<Q", len(encoded)))
        writer.write(encoded)
        reader.seek(data_start)
        shutil.copyfileobj(reader, writer, length=64 * 1024 * 1024)


def full_omni_config(thinker: Mapping[str, Any]) -> dict[str, Any]:
    """A Qwen2.5-Omni config holding a thinker config, for an engine that serves the thinker of the full model."""
    inner = {k: v for k, v in thinker.items() if k not in ("architectures", "auto_map")}
    dtype = thinker.get("dtype") or thinker.get("torch_dtype")
    config = {
        "architectures": [FULL_OMNI_ARCHITECTURE],
        "model_type": "qwen2_5_omni",
        "enable_audio_output": False,
        "thinker_config": inner,
    }
    return {**config, **({"torch_dtype": dtype} if dtype else {})}


def _write_full_layout(checkpoint: Path, target: Path) -> None:
    weights = sorted(checkpoint.glob("*.safetensors"))
    if not weights:
        raise ValueError(
            f"{checkpoint}: a thinker-only Qwen2.5-Omni checkpoint is served by vLLM from a copy in the full model's "
            "layout, which needs safetensors weights; convert its weights to safetensors"
        )
    for item in checkpoint.iterdir():
        if item.name in ("config.json", WEIGHT_INDEX) or item.suffix == ".safetensors" or not item.is_file():
            continue
        shutil.copy2(item, target / item.name)
    for weight in weights:
        rename_safetensors(weight, target / weight.name, THINKER_PREFIX)
    index = checkpoint / WEIGHT_INDEX
    if index.is_file():
        content = json.loads(index.read_text("utf-8"))
        content["weight_map"] = {THINKER_PREFIX + k: v for k, v in content["weight_map"].items()}
        (target / WEIGHT_INDEX).write_text(json.dumps(content, indent=2), encoding="utf-8")
    thinker = json.loads((checkpoint / "config.json").read_text("utf-8"))
    (target / "config.json").write_text(json.dumps(full_omni_config(thinker), indent=2), encoding="utf-8")


def full_omni_layout(model: str, revision: str, cache_root: Path | None = None) -> Path:
    """The folder vLLM serves a thinker-only Qwen2.5-Omni checkpoint from (module docstring), made once."""
    from lalm_judge.core.files import stable_hash  # with polars, present in every judge environment

    checkpoint = local_checkpoint(model, revision)
    root = cache_root or default_cache_root()
    identity = {"model": model, "revision": revision, "source": str(checkpoint)}
    return cached_folder(
        root / f"omni-full-{stable_hash(identity)}", lambda staging: _write_full_layout(checkpoint, staging)
    )


def cached_folder(target: Path, write: Callable[[Path], None]) -> Path:
    """`target`, written once by `write` into a staging folder beside it and then renamed into place (a directory
    rename: readers see a complete copy or none; a concurrent job that finished first wins)."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        write(staging)
        os.replace(staging, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
