"""`lalm-judge train-pairwise --config FILE [--resume]`: train a pairwise judge (docs/training.md).

Reads the `training` section of FILE (a run config, or a file with only that section), trains its stages in
order, each from the previous one's checkpoint, and prints every stage's loss and checkpoint. The last
checkpoint is a `transformers` judge: name its folder as a judge's `model`. Stages already trained on the same
inputs are reused; `--resume` continues an interrupted stage from its latest trainer checkpoint (those are kept
when `hyperparameters.save_steps` is set).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lalm_judge.training.settings import TrainingError, TrainingSettings
from lalm_judge.workflow.config import ConfigError, load_training_section


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge train-pairwise", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="YAML file with a `training` section")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted stage from its last save")
    args = parser.parse_args(argv)
    try:
        settings = TrainingSettings.from_config(load_training_section(args.config))
        # Imported once the config is known to be good: torch, transformers and TRL take seconds to load.
        from lalm_judge.training.sft import run_training

        report = run_training(settings, resume=args.resume)
    except (ConfigError, TrainingError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        print(f"error: training needs {error.name} (requirements.txt; GPU runs: envs/train.yaml)", file=sys.stderr)
        return 2
    for stage in report["stages"]:
        losses = stage["losses"]
        state = "reused" if stage["reused"] else f"{stage['steps']} steps, {stage['seconds_per_step']:.2f} s/step"
        print(
            f"{stage['name']}: {stage['n_records']} records, {state}, "
            f"loss {losses[0]['loss']:.4f} -> {losses[-1]['loss']:.4f}"
        )
    print(f"judge model (backend transformers): {report['judge_model']}")
    return 0
