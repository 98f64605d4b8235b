"""`lalm-judge metrics SCORES... --out DIR [--bootstrap 1000] [--seed 0] [--folds 5] [--min-pb-dialogues 5]
[--permutations 200] [--min-dialogues 10]`."""

from __future__ import annotations

import argparse
import sys

from lalm_judge.analysis.engine import MetricSettings, MetricsInputError
from lalm_judge.analysis.stage import run_metrics
from lalm_judge.analysis.support import DEFAULT_MIN_DIALOGUES


def main(argv: list[str]) -> int:
    """Parse the options, compute every metric table, print the paths written; 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="lalm-judge metrics",
        description="Benchmark metrics (docs/metrics.md) from long-format score parquet files.",
    )
    parser.add_argument("scores", nargs="+", help="score parquet files (concatenated)")
    parser.add_argument("--out", required=True, help="output directory for the metric tables")
    parser.add_argument("--bootstrap", type=int, default=1000, help="cluster-bootstrap resamples B (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the CV folds (default 0)")
    parser.add_argument("--folds", type=int, default=5, help="folds of the prompt-selection CV (default 5)")
    parser.add_argument(
        "--min-pb-dialogues",
        type=int,
        default=5,
        help="dialogues a (length, position) cell needs to enter AvgAbsPB (default 5)",
    )
    parser.add_argument(
        "--permutations", type=int, default=200, help="position permutations of AvgAbsPB's null (default 200)"
    )
    parser.add_argument(
        "--min-dialogues",
        type=int,
        default=DEFAULT_MIN_DIALOGUES,
        help="dialogues a value needs for an interval, a finding or a flag; below it 'not_estimable' "
        f"(default {DEFAULT_MIN_DIALOGUES})",
    )
    args = parser.parse_args(argv)
    try:
        settings = MetricSettings(
            n_boot=args.bootstrap,
            seed=args.seed,
            n_folds=args.folds,
            min_pb_dialogues=args.min_pb_dialogues,
            n_permutations=args.permutations,
            min_dialogues=args.min_dialogues,
        )
        paths = run_metrics(args.scores, args.out, settings)
    except (MetricsInputError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
