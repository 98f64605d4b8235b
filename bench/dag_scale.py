"""Time `snakemake -n` on a synthetic paper-scale workflow: N dialogues x 6 turns x 40 variants, the
paper's 7 judges x 7 modality/transcript cells x 5 prompts, in a scratch working directory.

    .venv/bin/python -m bench.dag_scale --dialogues 100
    .venv/bin/python -m bench.dag_scale --dialogues 100 --noop   # also a no-op rerun with all outputs present
Last line: dry_run_s=<float> peak_rss_mb=<float> jobs=<int>
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TURN = {"speaker": "LLM1", "text": "A short synthetic turn about the weather.", "emotion": "neutral"}


def write_synthetic_corpus(folder: Path, n_dialogues: int, n_turns: int = 6) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "dialogues.jsonl", "w") as out:
        for i in range(n_dialogues):
            turns = [{**TURN, "speaker": f"LLM{1 + t % 2}"} for t in range(n_turns)]
            out.write(json.dumps({"id": f"synthetic_{i:05d}", "turns": turns}) + "\n")


def synthetic_config(corpus: Path) -> dict:
    config = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    config["corpus"] = {"format": "jsonl", "path": str(corpus), "min_turns": 2}
    # The emotion references add no job to the plan; without them planning needs no RAVDESS folder.
    config["tts"].pop("emotion_reference", None)
    return config


def dry_run(workdir: Path, config_path: Path, extra: list[str], quiet: bool = True) -> tuple[float, float, str]:
    """Time one `snakemake -n`; return (seconds, peak RSS of the children in MB, its output)."""
    quiet_args = ["--quiet", "rules"] if quiet else []
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-n",
        *quiet_args,
        "--cores",
        "2",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(workdir),
        *extra,
        "--configfile",
        str(config_path),
    ]
    # The paper config's XTTS voices need the Coqui licence accepted before the workflow parses; planning
    # synthetic dialogues downloads and runs nothing.
    env = {**os.environ, "COQUI_TOS_AGREED": "1"}
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"snakemake -n failed:\n{proc.stderr[-3000:]}")
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return elapsed, peak_mb, proc.stdout + proc.stderr


def job_count(output: str) -> int:
    match = re.search(r"^total\s+(\d+)", output, re.MULTILINE)
    return int(match.group(1)) if match else 0


def materialize_outputs(workdir: Path, dry_run_output: str) -> int:
    """Create every planned output (empty files; suffix-less paths are directory outputs), all with one
    mtime, so that the next `snakemake -n` measures a no-op rerun at this scale."""
    paths = {
        p.strip()
        for line in dry_run_output.splitlines()
        if line.strip().startswith("output:")
        for p in line.split(":", 1)[1].split(",")
    }
    for relative in paths:
        path = workdir / relative
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            path.mkdir(parents=True, exist_ok=True)
    stamp = time.time() + 60  # newer than the corpus and config, equal among themselves
    for relative in paths:
        os.utime(workdir / relative, (stamp, stamp))
    return len(paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialogues", type=int, default=100)
    parser.add_argument("--noop", action="store_true", help="also time a no-op rerun with every output present")
    parser.add_argument("--keep", help="keep the scratch directory here instead of a temporary one")
    args, extra = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep or tmp)
        write_synthetic_corpus(workdir / "corpus", args.dialogues)
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(synthetic_config(workdir / "corpus")))
        elapsed, peak_mb, output = dry_run(workdir, config_path, extra)
        if args.noop:
            _, _, verbose = dry_run(workdir, config_path, extra, quiet=False)
            n_files = materialize_outputs(workdir, verbose)
            noop_s, _, noop_output = dry_run(workdir, config_path, extra)
            if "Nothing to be done" not in noop_output:
                raise SystemExit(f"the rerun was not a no-op ({job_count(noop_output)} jobs)")
            print(f"noop_rerun_s={noop_s:.2f} outputs={n_files}")
    print(f"dialogues={args.dialogues} variants={args.dialogues * 6 * 40}")
    print(f"dry_run_s={elapsed:.2f} peak_rss_mb={peak_mb:.1f} jobs={job_count(output)}")


if __name__ == "__main__":
    main()
