"""Time `snakemake -n` on a synthetic paper-scale workflow: N dialogues x 6 turns x 40 variants, the
paper's 7 judges x 7 modality/transcript cells x 5 prompts, in a scratch working directory, beside the floor:
Snakemake's own time for a trivial workflow of the same job count (one rule with a lambda param, a log and a
resource), measured in the same run, and their ratio.

    .venv/bin/python -m bench.dag_scale --dialogues 100
    .venv/bin/python -m bench.dag_scale --dialogues 100 --noop   # also a no-op rerun (all outputs present), its floor
    .venv/bin/python -m bench.dag_scale --dialogues 100 --profile plan.prof   # cProfile of the project's dry run
    .venv/bin/python -m bench.dag_scale --dialogues 100 --frozen-floor   # also the floor with the project's gc.freeze()
Last line: dry_run_s=<float> floor_s=<float> ratio=<float> peak_rss_mb=<float> jobs=<int>
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


# The floor: the cheapest workflow Snakemake can plan with `jobs` jobs of the project's kind (a wildcard, a param
# callable, a log and a resource each), plus the target rule.
FLOOR_SNAKEFILE = """
N = int(config["jobs"]) - 1

rule all:
    input: expand("out/{i}.txt", i=range(N))

rule make:
    output: "out/{i}.txt"
    log: "logs/{i}.log"
    params: value=lambda wildcards: wildcards.i
    resources: mem_mb=100
    shell: "touch {output} {log}"
"""


# The floor with what the project's Snakefile does after its parse (gc.freeze(): the collector stops scanning the
# objects built so far), for a like-for-like comparison of everything else.
FROZEN_FLOOR_SNAKEFILE = FLOOR_SNAKEFILE.replace("N = int", "import gc\n\nN = int") + "\ngc.freeze()\n"


def snakemake_command(snakefile: Path, workdir: Path, extra: list[str], quiet: bool, profile: str | None) -> list[str]:
    quiet_args = ["--quiet", "rules"] if quiet else []
    runner = ["-m", "cProfile", "-o", profile, "-m", "snakemake"] if profile else ["-m", "snakemake"]
    return [
        sys.executable,
        *runner,
        "-n",
        *quiet_args,
        "--cores",
        "2",
        "-s",
        str(snakefile),
        "-d",
        str(workdir),
        *extra,
    ]


def dry_run(
    workdir: Path, config_path: Path, extra: list[str], quiet: bool = True, profile: str | None = None
) -> tuple[float, float, str]:
    """Time one `snakemake -n` of the project; return (seconds, peak RSS of the children in MB, its output)."""
    command = [*snakemake_command(ROOT / "Snakefile", workdir, extra, quiet, profile), "--configfile", str(config_path)]
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


def floor_run(workdir: Path, jobs: int, quiet: bool = True, frozen: bool = False) -> tuple[float, str]:
    """Time one `snakemake -n` of the trivial workflow of `jobs` jobs in `workdir`; (seconds, its output)."""
    snakefile = workdir / "Snakefile"
    snakefile.write_text(FROZEN_FLOOR_SNAKEFILE if frozen else FLOOR_SNAKEFILE)
    command = [*snakemake_command(snakefile, workdir, [], quiet, None), "--config", f"jobs={jobs}"]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the floor's snakemake -n failed:\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout + proc.stderr


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
    parser.add_argument("--repeat", type=int, default=1, help="time each dry run this many times; report the fastest")
    parser.add_argument("--profile", help="write a cProfile of one more project dry run to this file")
    parser.add_argument(
        "--frozen-floor",
        action="store_true",
        help="also time the floor with gc.freeze() after its parse, as the project does",
    )
    parser.add_argument("--keep", help="keep the scratch directory here instead of a temporary one")
    args, extra = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep or tmp)
        write_synthetic_corpus(workdir / "corpus", args.dialogues)
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(synthetic_config(workdir / "corpus")))
        floor_dir = workdir / "floor"
        floor_dir.mkdir(exist_ok=True)
        runs, floors, frozen_floors = [], [], []
        for _ in range(args.repeat):  # interleaved, so that a change of the machine's load hits both alike
            runs.append(dry_run(workdir, config_path, extra))
            planned = job_count(runs[-1][2])
            floors.append(floor_run(floor_dir, planned)[0])
            if args.frozen_floor:
                frozen_floors.append(floor_run(floor_dir, planned, frozen=True)[0])
        elapsed, peak_mb, output = min(runs)
        floor_s = min(floors)
        jobs = job_count(output)
        if args.profile:
            dry_run(workdir, config_path, extra, profile=args.profile)
        if args.noop:
            _, _, verbose = dry_run(workdir, config_path, extra, quiet=False)
            n_files = materialize_outputs(workdir, verbose)
            materialize_outputs(floor_dir, floor_run(floor_dir, jobs, quiet=False)[1])
            noops, noop_floors = [], []
            for _ in range(args.repeat):
                noop_s, _, noop_output = dry_run(workdir, config_path, extra)
                if "Nothing to be done" not in noop_output:
                    raise SystemExit(f"the rerun was not a no-op ({job_count(noop_output)} jobs)")
                noops.append(noop_s)
                noop_floors.append(floor_run(floor_dir, jobs)[0])
            noop_s, noop_floor_s = min(noops), min(noop_floors)
            print(
                f"noop_rerun_s={noop_s:.2f} noop_floor_s={noop_floor_s:.2f} noop_ratio={noop_s / noop_floor_s:.2f} "
                f"outputs={n_files}"
            )
    if frozen_floors:
        print(f"frozen_floor_s={min(frozen_floors):.2f} ratio_to_frozen_floor={elapsed / min(frozen_floors):.2f}")
    print(f"dialogues={args.dialogues} variants={args.dialogues * 6 * 40}")
    print(
        f"dry_run_s={elapsed:.2f} floor_s={floor_s:.2f} ratio={elapsed / floor_s:.2f} peak_rss_mb={peak_mb:.1f} "
        f"jobs={jobs}"
    )


if __name__ == "__main__":
    main()
