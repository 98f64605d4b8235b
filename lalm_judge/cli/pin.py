"""`lalm-judge pin-revisions CONFIG`: write the current hub commit of every judge model into the config.

A judge whose `revision` is a branch (`main`, the default) scores with whatever the branch holds on the day its
job runs. This command asks the hub for the commit each branch points to (`HfApi().model_info(repo,
revision).sha`; gated repositories need HF_TOKEN) and writes it as the judge's `revision:`, leaving the rest of
the file, comments included, as it was. Judges whose revision is already a 40-hex commit, local folders,
`bundled:` models and API judges are left alone. `--dry-run` prints the commits without writing.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from lalm_judge.core.files import atomic_path
from lalm_judge.workflow.config import LOCAL_BACKENDS, ConfigError, hub_model_id

COMMIT = re.compile(r"^[0-9a-f]{40}$")


def judges_to_pin(config: dict) -> dict[str, tuple[str, str]]:
    """name -> (hub repository, branch) of every judge whose revision is not yet a commit."""
    judges = config.get("judges") or {}
    return {
        name: (entry["model"], str(entry.get("revision", "main")))
        for name, entry in judges.items()
        if entry.get("backend") in LOCAL_BACKENDS
        and hub_model_id(entry["model"])
        and not COMMIT.match(str(entry.get("revision", "main")))
    }


def with_revisions(text: str, revisions: dict[str, str]) -> str:
    """The config text with `revision: <commit>` in each named judge's block (replaced, or added after `model:`)."""
    lines = text.splitlines(keepends=True)
    top = next((i for i, line in enumerate(lines) if re.match(r"^judges:\s*(#.*)?$", line)), None)
    if top is None:
        raise ConfigError("no block-style 'judges:' mapping at the top level of the config")
    for name, commit in revisions.items():
        start = next(
            (i for i in range(top + 1, len(lines)) if re.match(rf"^(\s+){re.escape(name)}:\s*(#.*)?$", lines[i])), None
        )
        if start is None:
            raise ConfigError(
                f"judges.{name} is not a block mapping of its own line; write it in block style to pin it"
            )
        indent = len(lines[start]) - len(lines[start].lstrip())
        end = next(
            (
                i
                for i in range(start + 1, len(lines))
                if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent
            ),
            len(lines),
        )
        block = range(start + 1, end)
        key_indent = next(len(lines[i]) - len(lines[i].lstrip()) for i in block if lines[i].strip())
        revision_line = f"{' ' * key_indent}revision: {commit}\n"
        existing = [i for i in block if re.match(rf"^\s{{{key_indent}}}revision:", lines[i])]
        if existing:
            lines[existing[0]] = revision_line
        else:
            model = next(i for i in block if re.match(rf"^\s{{{key_indent}}}model:", lines[i]))
            lines.insert(model + 1, revision_line)
    return "".join(lines)


def hub_commit(repository: str, branch: str) -> str:
    from huggingface_hub import HfApi

    commit = HfApi().model_info(repository, revision=branch).sha
    if not commit or not COMMIT.match(commit):
        raise RuntimeError(f"the hub gave no commit for {repository}@{branch} (got {commit!r})")
    return commit


def pin(config_path: Path, output: Path, resolve: Callable[[str, str], str] = hub_commit, write: bool = True) -> dict:
    """Resolve and write the commits; return name -> commit."""
    text = config_path.read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    revisions = {name: resolve(repository, branch) for name, (repository, branch) in judges_to_pin(config).items()}
    if write and revisions:
        pinned = with_revisions(text, revisions)
        expected = yaml.safe_load(text)
        for name, commit in revisions.items():
            expected["judges"][name]["revision"] = commit
        if yaml.safe_load(pinned) != expected:  # only the revisions may differ
            raise RuntimeError(f"pinning {config_path} would change more than the judges' revisions; nothing written")
        with atomic_path(output) as staging:
            Path(staging).write_text(pinned, encoding="utf-8")
    return revisions


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge pin-revisions", description=__doc__)
    parser.add_argument("config", help="YAML configuration file whose judges get pinned")
    parser.add_argument("--output", help="write the pinned config here instead of over CONFIG")
    parser.add_argument("--dry-run", action="store_true", help="print the commits, write nothing")
    args = parser.parse_args(argv)
    config_path = Path(args.config)
    try:
        revisions = pin(config_path, Path(args.output or config_path), write=not args.dry_run)
    except (ConfigError, OSError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name, commit in revisions.items():
        print(f"{name}: {commit}")
    if not revisions:
        print("every hub judge is already pinned to a commit")
    return 0
