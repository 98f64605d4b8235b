"""`snakemake --lint` with every shipped config (`make lint`): the checkout's config.yaml and each file of configs/
and tests/config/ (an overlay, configs/<base>_as_published.yaml, after its base), so that no rule of any track goes
unlinted.

The workflow reads some inputs while it is parsed (the corpus, to plan dialogues and turns), so each config is
linted in a scratch working directory holding what it reads, as its users and tests have it: the checkout's data,
prompts and models folders; the `corpus/` folder the end-to-end tests write (tests/config/*: the demo dialogues,
`write_corpus`); a synthetic corpus in the DeepDialogue hub layout where a config names a hub corpus that is not
there (configs/paper.yaml: the published corpus is downloaded by its users, `write_hub_corpus`); a synthetic folder in
RAVDESS's layout where a config clones emotions from RAVDESS clips that are not there (`tts.emotion_reference`:
RAVDESS is third-party data its users unpack, `write_ravdess`). XTTS-v2's licence
acceptance (`COQUI_TOS_AGREED`), which the parse requires of configs that speak with XTTS, is set for the lint
only: linting runs no job and synthesizes nothing.

Run: .venv/bin/python -m tests.support.lint_configs   (exit status 1 when a config fails, naming it)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tests.support.corpora import write_ravdess
from tests.support.workflow import ROOT, write_corpus, write_hub_corpus

CONFIGS = [
    ROOT / "config.yaml",
    *sorted((ROOT / "configs").glob("*.yaml")),
    *sorted((ROOT / "tests/config").glob("*.yaml")),
]
# Overlays: a config given after the one it changes (configs/<base>_as_published.yaml after configs/<base>.yaml).
OVERLAY_SUFFIX = "_as_published"


def configfiles(configfile: Path) -> list[Path]:
    """The config files a config is run with: an overlay after its base, any other alone."""
    if configfile.stem.endswith(OVERLAY_SUFFIX):
        return [configfile.with_name(configfile.stem.removesuffix(OVERLAY_SUFFIX) + configfile.suffix), configfile]
    return [configfile]
SHARED = ("data", "prompts", "models")
TIMEOUT_S = 600


def prepare(workdir: Path, configfile: Path) -> None:
    """The inputs `configfile` reads at parse time, in `workdir`. The shared folders are real folders of links to
    the checkout's entries, so that what is written here (a synthetic corpus) stays in the scratch folder."""
    for name in SHARED:
        if (ROOT / name).is_dir():
            (workdir / name).mkdir()
            for entry in (ROOT / name).iterdir():
                (workdir / name / entry.name).symlink_to(entry)
    config = yaml.safe_load(configfile.read_text()) or {}
    references = (config.get("tts") or {}).get("emotion_reference")
    if references and not (workdir / references["path"]).exists():
        write_ravdess(workdir / references["path"])
    corpus = config.get("corpus", {})
    if not corpus or (workdir / corpus["path"]).exists():
        return
    if corpus["format"] == "deepdialogue_hub":
        write_hub_corpus(workdir / corpus["path"])
    elif corpus["format"] == "jsonl" and corpus["path"] == "corpus":
        write_corpus(workdir)


def lint(configfile: Path) -> subprocess.CompletedProcess:
    files = configfiles(configfile)
    with tempfile.TemporaryDirectory(prefix="lint-") as scratch:
        workdir = Path(scratch)
        prepare(workdir, files[0])
        command = [
            *("timeout", "-k", "10", str(TIMEOUT_S)),
            str(Path(sys.executable).parent / "snakemake"),
            *("--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)),
            *("--lint", "--cores", "1", "--configfile", *map(str, files)),
        ]
        env = {**os.environ, "COQUI_TOS_AGREED": "1"}
        return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


def main() -> int:
    failed = []
    for configfile in CONFIGS:
        result = lint(configfile)
        name = configfile.relative_to(ROOT)
        ok = result.returncode == 0
        given = " ".join(str(path.relative_to(ROOT)) for path in configfiles(configfile))
        print(f"{'ok' if ok else 'FAILED'}: snakemake --lint --configfile {given}")
        if not ok:
            failed.append(name)
            print((result.stdout + result.stderr)[-3000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
