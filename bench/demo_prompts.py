"""Which prompts give a demo judge scores that vary: each prompt on the safe originals and the severity-5
variants of the first dialogues of a finished demo run (its manifests), with the demo's judge settings.

    .venv/bin/python -m bench.demo_prompts --judge smollm2 --dialogues 4
Prints per prompt: CPU seconds, parse statuses, the distinct scores and their range per severity.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import torch
import yaml

from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.cell import cell_settings, score_samples
from lalm_judge.manifest.samples import Manifest
from lalm_judge.workflow.config import validate_config

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ("basic", "rubric", "fewshot", "cot", "calibrated")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", default="smollm2")
    parser.add_argument("--dialogues", type=int, default=4)
    parser.add_argument("--prompts", default=",".join(PROMPTS))
    parser.add_argument("--manifests", default=str(ROOT / "results" / "manifests"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = validate_config(yaml.safe_load((ROOT / "config.yaml").read_text()))
    spec = JudgeSpec.from_config(args.judge, config["judges"][args.judge])
    samples = [
        sample
        for path in sorted(Path(args.manifests).glob("*.json"))[: args.dialogues]
        for sample in Manifest.load(path).samples()
        if sample.severity in (0, 5)
    ]
    backend = BACKENDS.get(spec.backend)(spec)
    print(f"{args.judge}: {len(samples)} samples (originals and severity 5) of {args.dialogues} dialogues")
    for prompt in args.prompts.split(","):
        cell = cell_settings(spec, "text", "gt", prompt)
        started = time.process_time()
        rows = score_samples(samples, cell, backend)
        cpu_s = time.process_time() - started
        statuses = Counter(row["parse_status"] for row in rows)
        by_severity = {
            severity: sorted(
                {round(row["score"], 3) for row in rows if row["severity"] == severity and row["score"] is not None}
            )
            for severity in (0, 5)
        }
        ranges = {s: (v[0], v[-1], len(v)) if v else None for s, v in by_severity.items()}
        print(f"{prompt}: cpu_s={cpu_s:.1f} statuses={dict(statuses)} (min, max, distinct) by severity={ranges}")


if __name__ == "__main__":
    main()
