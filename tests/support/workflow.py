"""Run the workflow in a scratch working directory, as users run it, with a time limit.

Every snakemake call goes through `timeout -k` so a hung scheduler can never hang the test run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEST_CONFIG = ROOT / "tests" / "config" / "test.yaml"
DEMO_CORPUS = ROOT / "data" / "demo" / "dialogues.jsonl"
# Two demo dialogues (3 and 4 turns) and a 1-turn dialogue that must be skipped, not crash.
TEST_DIALOGUES = ("demo_hiking", "demo_travel")
ONE_TURN = {"id": "single_turn", "turns": [{"speaker": "LLM1", "text": "Just one line here.", "emotion": "neutral"}]}


def write_corpus(workdir: Path, dialogue_ids=TEST_DIALOGUES, extra=(ONE_TURN,)) -> Path:
    records = [json.loads(line) for line in DEMO_CORPUS.read_text().splitlines() if line.strip()]
    chosen = [r for r in records if r["id"] in dialogue_ids] + list(extra)
    corpus = workdir / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "dialogues.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return corpus


# (configuration folder, dialogue name, turns) of a synthetic corpus in the hub layout of DeepDialogue-xtts.
HUB_DIALOGUES = (
    ("dialogues_llama3-8B", "art_22_4", 4),
    ("dialogues_llama3-8B", "travel_3_3", 3),
    ("dialogues_gemma2-9B", "music_7_5", 5),
)
_EMOTIONS = ("neutral", "happy", "curious", "sad", "angry")


def write_hub_corpus(
    root: Path, dialogues: Sequence[tuple[str, str, int]] = HUB_DIALOGUES, sample_rate: int = 24000
) -> Path:
    """A corpus in the layout of SALT-Research/DeepDialogue-xtts (lalm_judge.data.deepdialogue, `deepdialogue_hub`):
    `data/<configuration>/<name>.json` beside `<name>/segments/NNN_<speaker>_<emotion>.wav`, speakers LLM1/LLM2.
    The segments are 0.1 s of silence: enough for planning and for ingest, not for listening."""
    for configuration, name, n_turns in dialogues:
        folder = root / "data" / configuration
        (folder / name / "segments").mkdir(parents=True, exist_ok=True)
        turns = [
            {
                "speaker": f"LLM{1 + i % 2}",
                "text": f"Turn {i} of a synthetic dialogue about {name}.",
                "emotion": _EMOTIONS[i % 5],
            }
            for i in range(n_turns)
        ]
        (folder / f"{name}.json").write_text(json.dumps({"domain": name.split("_")[0], "conversation": turns}))
        for i, turn in enumerate(turns):
            segment = folder / name / "segments" / f"{i + 1:03d}_{turn['speaker']}_{turn['emotion']}.wav"
            sf.write(segment, np.zeros(sample_rate // 10, dtype=np.float32), sample_rate)
    return root


def reordered(value):
    """The same config with every mapping's keys in reverse order (recursively); lists keep their order."""
    if isinstance(value, dict):
        return {key: reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(item) for item in value]
    return value


def reformatted(config: dict) -> str:
    """Every mapping reordered, written in flow style with comments and quoted strings, as other tools do."""
    body = yaml.safe_dump(reordered(config), sort_keys=False, default_flow_style=True, default_style='"', width=60)
    return "# written back by another tool\n" + body


def load_test_config() -> dict:
    return yaml.safe_load(TEST_CONFIG.read_text())


def write_config(workdir: Path, config: dict, name: str = "config.yaml") -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def prepare_workdir(workdir: Path, *, with_tiny_lalm: bool = True) -> Path:
    """Corpus, tiny random-weight Qwen2-Audio and config in `workdir`; returns the config path."""
    workdir.mkdir(parents=True, exist_ok=True)
    write_corpus(workdir)
    config = load_test_config()
    if with_tiny_lalm:
        from bench.models import build_tiny_qwen2audio

        model_dir = workdir / config["judges"]["tiny_qwen2_audio"]["model"]
        if not model_dir.exists():
            build_tiny_qwen2audio(model_dir)
    else:
        config["evaluation"]["judges"] = ["minilm"]
    return write_config(workdir, config)


def snakemake_command(workdir: Path, configfile: Path, *args: str, timeout_s: int = 900) -> tuple[list[str], dict]:
    """The command line and environment of `snakemake -s <checkout>/Snakefile -d workdir --configfile ...`,
    under `timeout -k` so that a hung scheduler can never hang the test run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    command = [
        shutil.which("timeout") or "timeout",
        "-k",
        "20",
        str(timeout_s),
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(workdir),
        *args,
        # Last: --configfile takes several values and would swallow a target named after it.
        "--configfile",
        str(configfile),
    ]
    return command, env


def snakemake(
    workdir: Path, configfile: Path, *args: str, timeout_s: int = 900, check: bool = True
) -> subprocess.CompletedProcess:
    """Run snakemake in `workdir` (`snakemake_command`) and wait for it; fail with its output unless it succeeds."""
    command, env = snakemake_command(workdir, configfile, *args, timeout_s=timeout_s)
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({result.returncode}):\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
        )
    return result


def start_snakemake(
    workdir: Path, configfile: Path, *args: str, output: Path, timeout_s: int = 900
) -> subprocess.Popen:
    """Start snakemake in its own process group (so that `os.killpg` reaches every job it started), its output
    going to `output`; return at once."""
    command, env = snakemake_command(workdir, configfile, *args, timeout_s=timeout_s)
    with open(output, "a", encoding="utf-8") as sink:
        return subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir, start_new_session=True
        )


def scheduled_jobs(result: subprocess.CompletedProcess) -> dict[str, int]:
    """Rule -> job count from a dry run's 'Job stats' table."""
    counts, in_table = {}, False
    for line in (result.stdout + result.stderr).splitlines():
        if line.startswith("job ") and "count" in line:
            in_table, counts = True, {}
            continue
        if in_table:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                if parts[0] == "total":
                    in_table = False
                else:
                    counts[parts[0]] = int(parts[1])
            elif parts and not set(line.strip()) <= {"-", " "}:
                in_table = False
    return counts


@dataclass(frozen=True)
class PlannedJob:
    """One job of a dry run: its rule, output paths, Snakemake's reason for running it and its resources."""

    rule: str
    outputs: tuple[str, ...]
    reason: str
    resources: str = ""
    inputs: tuple[str, ...] = ()

    def resource(self, name: str) -> str | None:
        """One resource as the dry run prints it ('gpu' -> '1'), None when the job has none of that name."""
        match = re.search(rf"(?:^|, ){re.escape(name)}=([^,]*)", self.resources)
        return match.group(1) if match else None


def planned_jobs(result: subprocess.CompletedProcess) -> list[PlannedJob]:
    """The jobs a dry run (`-n`) would run, from its per-job 'rule <name>:' blocks."""
    jobs: list[PlannedJob] = []
    rule, fields = None, {}

    def finish():
        if rule is not None:
            outputs, inputs = (
                tuple(p.strip() for p in fields.get(k, "").split(",") if p.strip()) for k in ("output", "input")
            )
            jobs.append(PlannedJob(rule, outputs, fields.get("reason", ""), fields.get("resources", ""), inputs))

    for line in (result.stdout + result.stderr).splitlines():
        header = re.match(r"^(?:local)?rule (\w+):$", line)
        if header:
            finish()
            rule, fields = header.group(1), {}
        elif rule is not None and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            fields.setdefault(key, value)
        elif rule is not None and not line.startswith("    "):
            finish()
            rule, fields = None, {}
    finish()
    return jobs
