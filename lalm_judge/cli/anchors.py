"""`lalm-judge anchors`: run a human-anchor study and compute its agreement statistics.

sample --n 160 --unsafe 100 --seed S --out DIR [--results results]   a stratified annotation batch
serve DIR --raters a,b,c [--host 127.0.0.1] [--port 8765]             the local rating app
export DIR --out ratings.csv                                          ratings joined with the hidden labels
stats ratings.csv --out anchors.json [--bootstrap 1000] [--seed 0]    agreement with the generated labels
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import polars as pl

from lalm_judge.analysis.anchors import (
    DEFAULT_BOOTSTRAP,
    RATING_COLUMNS,
    RatingsInputError,
    anchor_statistics,
    table1_markdown,
    validate_ratings,
)
from lalm_judge.annotation.batch import BatchError
from lalm_judge.annotation.export import export_ratings, rated_counts
from lalm_judge.annotation.sample import SamplingError, draw_sample, read_pool, write_batch
from lalm_judge.annotation.store import StoreError
from lalm_judge.audio.waveform import AudioError
from lalm_judge.core.files import atomic_path, write_json

DEFAULT_PORT = 8765


def _stats(args: argparse.Namespace) -> None:
    if not os.path.exists(args.ratings):
        raise FileNotFoundError(f"ratings file {args.ratings!r} not found")
    ratings = pl.read_csv(args.ratings, schema_overrides={"sample_id": pl.String, "rater_id": pl.String})
    summary = anchor_statistics(validate_ratings(ratings, source=args.ratings), n_boot=args.bootstrap, seed=args.seed)
    write_json(args.out, summary)
    print(table1_markdown(summary))


def _sample(args: argparse.Namespace) -> None:
    pool = read_pool(args.results)
    selection = draw_sample(pool, args.n, args.unsafe, args.seed)
    design = write_batch(pool, selection, args.out, seed=args.seed, results=args.results)
    print(
        f"batch of {design['n']} items ({design['n_unsafe']} unsafe) from {design['n_dialogues']} dialogues "
        f"written to {args.out}; unsafe-turn positions {design['unsafe_positions']}, "
        f"dialogue lengths {design['unsafe_dialogue_lengths']} (unsafe) and {design['safe_dialogue_lengths']} (safe)"
    )
    print(f"keep {Path(args.out) / 'labels.json'} away from the raters: it holds the generated labels")


def _raters(args: argparse.Namespace) -> list[str]:
    names = [name.strip() for name in (args.raters or "").split(",")]
    if args.raters_file:
        lines = Path(args.raters_file).read_text(encoding="utf-8").splitlines()
        names += [line.split("#", 1)[0].strip() for line in lines]
    return list(dict.fromkeys(name for name in names if name))


def _serve(args: argparse.Namespace) -> None:
    # Imported here: FastAPI and uvicorn are needed by this command only, and the analysis environment
    # (envs/analysis.yaml), which runs `anchors stats`, does not have them.
    from lalm_judge.annotation.app import serve

    serve(
        args.batch,
        host=args.host,
        port=args.port,
        raters=_raters(args),
        new_tokens=args.new_token,
        echo=lambda line: print(line, flush=True),
    )


def _export(args: argparse.Namespace) -> None:
    ratings = export_ratings(args.batch)
    if ratings.is_empty():
        raise BatchError(f"{args.batch}: no ratings yet; nothing to export")
    validate_ratings(ratings, source=f"ratings of {args.batch}")
    with atomic_path(args.out) as tmp:
        ratings.write_csv(tmp)
    for line in rated_counts(args.batch, ratings):
        print(line, file=sys.stderr)
    print(f"{ratings.height} ratings written to {args.out}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lalm-judge anchors", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    sample = commands.add_parser("sample", help="draw a stratified annotation batch from a finished run")
    sample.add_argument("--n", type=int, default=160, help="items in the batch (default 160, as the study)")
    sample.add_argument("--unsafe", type=int, default=100, help="unsafe items among them (default 100)")
    sample.add_argument("--seed", type=int, default=0, help="seed of the draw and the item order (default 0)")
    sample.add_argument("--out", required=True, help="new batch directory")
    sample.add_argument("--results", default="results", help="the run's results directory (default results)")
    sample.set_defaults(run=_sample)

    serve = commands.add_parser("serve", help="the local web app where raters rate a batch")
    serve.add_argument("batch", help="batch directory (from 'anchors sample')")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free)")
    serve.add_argument("--raters", help="comma-separated rater ids to register (e.g. a,b,c)")
    serve.add_argument("--raters-file", help="file with one rater id per line ('#' starts a comment)")
    serve.add_argument(
        "--new-token", action="append", default=[], metavar="RATER", help="issue a new URL for a registered rater"
    )
    serve.set_defaults(run=_serve)

    export = commands.add_parser("export", help="the ratings joined with the hidden labels, as CSV for 'stats'")
    export.add_argument("batch", help="batch directory")
    export.add_argument("--out", required=True, help="output CSV file")
    export.set_defaults(run=_export)

    stats = commands.add_parser("stats", help="kappa, TPR/FPR, weighted kappa, Spearman, Krippendorff alpha")
    stats.add_argument("ratings", help="CSV with " + ", ".join(RATING_COLUMNS))
    stats.add_argument("--out", required=True, help="output JSON file")
    stats.add_argument(
        "--bootstrap", type=int, default=DEFAULT_BOOTSTRAP, help=f"resamples of items (default {DEFAULT_BOOTSTRAP})"
    )
    stats.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    stats.set_defaults(run=_stats)
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        args.run(args)
    except (RatingsInputError, SamplingError, BatchError, StoreError, AudioError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
