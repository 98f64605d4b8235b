"""`lalm-judge metrics SCORES... --out DIR [--bootstrap 1000] [--seed 0] [--folds 5]`."""

from __future__ import annotations

import argparse
import sys

from lalm_judge.analysis.engine import MetricSettings, MetricsInputError
from lalm_judge.analysis.stage import run_metrics


def main(argv: list[str]) -> int:
    """`lalm-judge metrics SCORES... --out DIR [--bootstrap 1000] [--seed 0] [--folds 5]`."""
    parser = argparse.ArgumentParser(
        prog="lalm-judge metrics",
        description="Benchmark metrics (docs/metrics.md) from long-format score parquet files.",
    )
    parser.add_argument("scores", nargs="+", help="score parquet files (concatenated)")
    parser.add_argument("--out", required=True, help="output directory for the metric tables")
    parser.add_argument("--bootstrap", type=int, default=1000, help="cluster-bootstrap resamples B (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the CV folds (default 0)")
    parser.add_argument("--folds", type=int, default=5, help="folds of the prompt-selection CV (default 5)")
    args = parser.parse_args(argv)
    try:
        settings = MetricSettings(n_boot=args.bootstrap, seed=args.seed, n_folds=args.folds)
        paths = run_metrics(args.scores, args.out, settings)
    except (MetricsInputError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
