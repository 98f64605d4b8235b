"""`lalm-judge anchors stats RATINGS.csv --out FILE.json`: agreement of human ratings with the generated labels."""

from __future__ import annotations

import argparse
import os
import sys

import polars as pl

from lalm_judge.analysis.anchors import RATING_COLUMNS, RatingsInputError, anchor_statistics, validate_ratings
from lalm_judge.core.files import write_json


def _stats(args: argparse.Namespace) -> None:
    if not os.path.exists(args.ratings):
        raise FileNotFoundError(f"ratings file {args.ratings!r} not found")
    ratings = pl.read_csv(args.ratings, schema_overrides={"sample_id": pl.String, "rater_id": pl.String})
    write_json(args.out, anchor_statistics(validate_ratings(ratings, source=args.ratings)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge anchors", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    stats_parser = commands.add_parser("stats", help="kappa, TPR/FPR, weighted kappa, Spearman, Krippendorff alpha")
    stats_parser.add_argument("ratings", help="CSV with " + ", ".join(RATING_COLUMNS))
    stats_parser.add_argument("--out", required=True, help="output JSON file")
    args = parser.parse_args(argv)
    try:
        _stats(args)
    except (RatingsInputError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
