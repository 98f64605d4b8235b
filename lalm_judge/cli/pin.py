"""`lalm-judge pin-revisions CONFIG`: write the current hub commit of every model into the config, and the corpus
copy's checksum.

A model whose `revision` is a branch (`main`, the default) runs with whatever the branch holds on the day its job
runs. This command asks the hub for the commit each branch points to (`HfApi().model_info(repo,
revision).sha`; gated repositories need HF_TOKEN) and writes it as the entry's `revision:`, for the judges, the
ASR models and the XTTS voices (`lalm_judge.workflow.pins`), leaving the rest of the file, comments included, as it
was. It also writes `corpus.checksum`: the sha256 of the names and bytes of every file under `corpus.path`, so a
run records which copy of the corpus it read. Entries already on a 40-hex commit, local folders, `bundled:` models
and API models are left alone. `--dry-run` prints what it would write.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lalm_judge.core.files import atomic_path, load_yaml, read_yaml
from lalm_judge.workflow.config import ConfigError, read_config_file, validate_config
from lalm_judge.workflow.pins import COMMIT, hub_models

__all__ = ["COMMIT", "corpus_checksum", "main", "pin", "with_values"]

CHECKSUM = "checksum"
REVISION = "revision"
Setting = tuple[tuple[str, ...], str]  # (config path of a mapping, key in it)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_end(lines: list[str], start: int) -> int:
    indent = _indent(lines[start])
    return next(
        (i for i in range(start + 1, len(lines)) if lines[i].strip() and _indent(lines[i]) <= indent), len(lines)
    )


def _child_indent(lines: list[str], start: int, end: int) -> int:
    """The indentation of the keys directly below line `start` (0 for the top level, `start` -1)."""
    content = (i for i in range(start + 1, end) if lines[i].strip() and not lines[i].lstrip().startswith("#"))
    return _indent(lines[next(content, start + 1)]) if start >= 0 else 0


def _entry_line(lines: list[str], path: tuple[str, ...]) -> int:
    """The line of the key at `path` (each key in the block of the previous one, on a line of its own)."""
    start, end = -1, len(lines)
    for key in path:
        pattern = re.compile(rf"^ {{{_child_indent(lines, start, end)}}}{re.escape(key)}:(\s|$)")
        found = next((i for i in range(start + 1, end) if pattern.match(lines[i])), None)
        if found is None:
            raise ConfigError(f"{'.'.join(path)} is not written as its own line of a block mapping; write it so")
        start, end = found, _block_end(lines, found)
    return start


def _set_in_flow(line: str, key: str, value: str) -> str:
    """`name: {a: 1, key: old}` -> with `key: value` (replaced, or appended inside the braces)."""
    head, _, flow = line.partition("{")
    body, _, tail = flow.rpartition("}")
    replaced, count = re.subn(rf"(^|,\s*){re.escape(key)}:\s*[^,]*", rf"\g<1>{key}: {value}", body)
    body = replaced if count else f"{body.rstrip()}, {key}: {value}"
    return f"{head}{{{body}}}{tail}"


def _set_value(lines: list[str], path: tuple[str, ...], key: str, value: str) -> None:
    start = _entry_line(lines, path)
    if re.search(r":\s*\{.*\}\s*(#.*)?$", lines[start]):
        lines[start] = _set_in_flow(lines[start].rstrip("\n"), key, value) + "\n"
        return
    end = _block_end(lines, start)
    block = [i for i in range(start + 1, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")]
    if not block:
        raise ConfigError(f"{'.'.join(path)} has no keys of its own to put {key} beside")
    key_indent = _indent(lines[block[0]])
    line = f"{' ' * key_indent}{key}: {value}\n"
    existing = [i for i in block if re.match(rf"^\s{{{key_indent}}}{re.escape(key)}:", lines[i])]
    if existing:
        lines[existing[0]] = line
    else:
        lines.insert(block[0], line)


def with_values(text: str, values: Mapping[Setting, str]) -> str:
    """The config text with each (path, key) set to its value, everything else (comments, styles) kept."""
    lines = text.splitlines(keepends=True)
    for (path, key), value in values.items():
        _set_value(lines, path, key, value)
    return "".join(lines)


def hub_commit(repository: str, branch: str) -> str:
    from huggingface_hub import HfApi

    commit = HfApi().model_info(repository, revision=branch).sha
    if not commit or not COMMIT.match(commit):
        raise RuntimeError(f"the hub gave no commit for {repository}@{branch} (got {commit!r})")
    return commit


def corpus_checksum(folder: str | Path) -> str | None:
    """sha256 over the relative path and bytes of every file under `folder` (hidden ones aside), in sorted order;
    None when there is no such folder yet."""
    root = Path(folder)
    if not root.is_dir():
        return None
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.parts))
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        with path.open("rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def planned_values(
    config: Mapping[str, Any], resolve: Callable[[str, str], str], checksum: Callable[[str], str | None]
) -> dict[Setting, str]:
    """What pinning writes: the commit of every unpinned hub model, and the corpus checksum."""
    commits: dict[tuple[str, str], str] = {}
    values: dict[Setting, str] = {}
    for model in hub_models(config):
        if not model.pinned:
            branch = (model.repository, model.revision)
            if branch not in commits:
                commits[branch] = resolve(*branch)
            values[(model.path, REVISION)] = commits[branch]
    corpus = config.get("corpus")
    digest = checksum(corpus["path"]) if corpus and corpus.get("path") else None
    if digest is not None:
        values[(("corpus",), CHECKSUM)] = digest
    return values


def pin(
    config_path: Path,
    output: Path,
    resolve: Callable[[str, str], str] = hub_commit,
    write: bool = True,
    checksum: Callable[[str], str | None] = corpus_checksum,
) -> dict[str, str]:
    """Resolve and write the commits and the corpus checksum; return '<config key>' -> value."""
    text = config_path.read_text(encoding="utf-8")
    config = load_yaml(text)
    values = planned_values(config, resolve, checksum)
    if write and values:
        pinned = with_values(text, values)
        expected = load_yaml(text)
        for (path, key), value in values.items():
            entry = expected
            for part in path:
                entry = entry[part]
            entry[key] = value
        if load_yaml(pinned) != expected:  # only the pinned values may differ
            raise RuntimeError(f"pinning {config_path} would change more than the pinned values; nothing written")
        with atomic_path(output) as staging:
            Path(staging).write_text(pinned, encoding="utf-8")
    return {".".join((*path, key)): value for (path, key), value in values.items()}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge pin-revisions", description=__doc__)
    parser.add_argument("config", help="YAML configuration file whose models get pinned")
    parser.add_argument("--output", help="write the pinned config here instead of over CONFIG")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")
    args = parser.parse_args(argv)
    config_path = Path(args.config)
    try:
        validate_config(read_config_file(config_path))  # an invalid config is refused before the hub is asked
        values = pin(config_path, Path(args.output or config_path), write=not args.dry_run)
    except (ConfigError, OSError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for key, value in values.items():
        print(f"{key}: {value}")
    if not any(key.endswith(f".{REVISION}") for key in values):
        print("every hub model is already pinned to a commit")
    corpus = (read_yaml(config_path) or {}).get("corpus") or {}
    if corpus.get("path") and "corpus.checksum" not in values:
        print(f"note: corpus.path {corpus['path']} is not here, so no checksum is recorded; run again once it is")
    return 0
