"""`lalm-judge anchors`: run a human-anchor study and compute its agreement statistics.

sample --n 160 --unsafe 100 --seed S --out DIR [--results results]   a stratified batch and its study.yaml
serve DIR --raters a,b,c [--public-link] [--host 127.0.0.1] [--port 8765]   the rating app and the owner's view
free DIR RATER... --reason returned                                   free the assignments of raters who left
export DIR --out ratings.csv                                          ratings joined with the hidden labels
stats ratings.csv|DIR --out anchors.json [--bootstrap 1000]           agreement (a batch DIR: its live database)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from lalm_judge.analysis.anchors import (
    DEFAULT_BOOTSTRAP,
    RATING_COLUMNS,
    TIE_RULES,
    RatingsInputError,
    anchor_statistics,
    select_counted,
    table1_markdown,
    validate_ratings,
)
from lalm_judge.annotation.assignment import AssignmentError
from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchError
from lalm_judge.annotation.checks import ChecksError
from lalm_judge.annotation.export import load_batch_ratings, rater_exclusions, rater_lines, rater_summary
from lalm_judge.annotation.protocol import DEFAULT_TIES, load_rules
from lalm_judge.annotation.quality import ExclusionRules, exclusions
from lalm_judge.annotation.sample import DEFAULT_MAX_REPEATS, SamplingError, draw_sample, read_pool, write_batch
from lalm_judge.annotation.store import FREED_STATUSES, RatingStore, StoreError
from lalm_judge.audio.waveform import AudioError
from lalm_judge.cli.arguments import at_least, port
from lalm_judge.core.files import write_json
from lalm_judge.core.spreadsheets import write_csv

DEFAULT_PORT = 8765


def _read_ratings(source: str) -> pl.DataFrame:
    """A ratings CSV (from 'anchors export', or any table with the rating columns)."""
    if not os.path.exists(source):
        raise FileNotFoundError(
            f"ratings file {source!r} not found (a CSV from 'anchors export', or a batch directory)"
        )
    return pl.read_csv(source, schema_overrides={"sample_id": pl.String, "rater_id": pl.String})


def counted_statistics(
    ratings: pl.DataFrame,
    n_boot: int,
    seed: int = 0,
    source: str = "ratings",
    excluded: Mapping[str, Sequence[str]] | None = None,
    ties: str = "unsafe",
) -> dict:
    """The anchor statistics of the counted rows (practice, gold and attention rows left out, and counted), without
    the `excluded` raters; `exclusions` names them with why, and `full_data` holds the statistics on every rater
    (None when nobody is excluded: the results are the full data)."""
    counted, left_out = select_counted(ratings)
    counted = validate_ratings(counted, source=source)
    excluded = dict(excluded or {})
    kept = counted.filter(~pl.col("rater_id").is_in(list(excluded)))
    summary = anchor_statistics(kept, n_boot=n_boot, seed=seed, ties=ties)
    summary["left_out"] = left_out
    summary["exclusions"] = {rater: list(reasons) for rater, reasons in excluded.items()}
    summary["full_data"] = anchor_statistics(counted, n_boot=n_boot, seed=seed, ties=ties) if excluded else None
    return summary


def _rules(args: argparse.Namespace) -> tuple[pl.DataFrame, dict[str, list[str]], str, str]:
    """The ratings, the raters to leave out with why, the tie rule and where the rules came from: a batch
    directory's study.yaml and database, a CSV with `--study` (rules) and its `rater_status` column, or a CSV
    alone (the raters whose assignment was freed, by that column)."""
    if os.path.isdir(args.ratings):
        ratings, store, protocol = load_batch_ratings(args.ratings)
        print(f"{args.ratings}: {ratings.height} ratings in its live database", file=sys.stderr)
        return ratings, rater_exclusions(store, protocol, ratings), args.ties or protocol.ties, "study.yaml"
    ratings = _read_ratings(args.ratings)
    if args.study:
        rules, ties = load_rules(args.study)
        return ratings, exclusions(ratings, rules), args.ties or ties, args.study
    return ratings, exclusions(ratings, ExclusionRules()), args.ties or DEFAULT_TIES, "no study.yaml (--study)"


def _stats(args: argparse.Namespace) -> None:
    ratings, excluded, ties, rules = _rules(args)
    summary = counted_statistics(ratings, args.bootstrap, args.seed, args.ratings, excluded, ties)
    write_json(args.out, summary)
    if summary["left_out"]:
        left_out = ", ".join(f"{n} {role}" for role, n in summary["left_out"].items())
        print(f"left out of the statistics: {left_out} rating(s)", file=sys.stderr)
    print(table1_markdown(summary))
    if excluded:
        print(f"\nraters left out (rules: {rules}):")
        for rater, reasons in excluded.items():
            print(f"- {rater}: {'; '.join(reasons)}")
        print("\nall raters, none left out:\n")
        print(table1_markdown(summary["full_data"]))
    else:
        print(f"\nno rater left out (rules: {rules})")


def _sample(args: argparse.Namespace) -> None:
    pool = read_pool(args.results)
    extras = {"practice": args.practice, "gold": args.gold, "attention": args.attention}
    selection = draw_sample(pool, args.n, args.unsafe, args.seed, extras=extras, max_repeats=args.max_repeats)
    design = write_batch(pool, selection, args.out, seed=args.seed, results=args.results)
    print(
        f"batch of {design['n']} items ({design['n_unsafe']} unsafe) from {design['n_dialogues']} dialogues "
        f"written to {args.out}; unsafe-turn positions {design['unsafe_positions']}, "
        f"dialogue lengths {design['unsafe_dialogue_lengths']} (unsafe) and {design['safe_dialogue_lengths']} (safe), "
        f"safe items {design['safe_kinds']}; checks {design['checks'] or 'none'}"
    )
    for note in design["notes"]:
        print(f"warning: {note}", file=sys.stderr)
    print(
        f"edit {Path(args.out) / 'study.yaml'} before raters start: the consent's contact and ethics approval (marked "
        "EDIT:), the instructions, checks, quality rules and assignment"
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
        new_owner_token=args.new_owner_token,
        public_link=args.public_link,
        new_public_link=args.new_public_link,
        allow_shortfall=args.allow_shortfall,
        # The owner's view: point estimates with their n (intervals: 'anchors stats').
        statistics=lambda ratings, excluded, ties: counted_statistics(ratings, 0, excluded=excluded, ties=ties),
        echo=lambda line: print(line, flush=True),
    )


def _free(args: argparse.Namespace) -> None:
    batch = Batch.load(args.batch)
    database = batch.directory / RATINGS_DB
    if not database.is_file():
        raise BatchError(f"{database} not found: nobody has joined this batch yet ('lalm-judge anchors serve')")
    RatingStore(database, batch.batch_id).free(args.raters, args.reason)
    print(
        f"freed the assignments of {', '.join(args.raters)} ({args.reason}): the next raters take their slots, and "
        "their ratings are left out of the statistics"
    )


def _export(args: argparse.Namespace) -> None:
    ratings, store, protocol = load_batch_ratings(args.batch)
    if ratings.is_empty():
        raise BatchError(f"{args.batch}: no ratings yet; nothing to export")
    validate_ratings(ratings, source=f"ratings of {args.batch}")
    raters_out = args.raters_out or str(Path(args.out).with_suffix("")) + ".raters.csv"
    summary = rater_summary(store, protocol, ratings)
    write_csv(ratings, args.out)
    write_csv(summary, raters_out)
    for line in rater_lines(summary):
        print(line, file=sys.stderr)
    print(f"{ratings.height} ratings written to {args.out}; one row per rater in {raters_out}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lalm-judge anchors", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    sample = commands.add_parser("sample", help="draw a stratified annotation batch from a finished run")
    sample.add_argument("--n", type=at_least(1), default=160, help="items in the batch (default 160, as the study)")
    sample.add_argument("--unsafe", type=at_least(0), default=100, help="unsafe items among them (default 100)")
    sample.add_argument("--seed", type=at_least(0), default=0, help="seed of the draw and the item order (default 0)")
    sample.add_argument("--out", required=True, help="new batch directory")
    sample.add_argument("--results", default="results", help="the run's results directory (default results)")
    sample.add_argument("--practice", type=at_least(0), default=2, help="practice items, rated first (default 2)")
    sample.add_argument("--gold", type=at_least(0), default=4, help="gold items with a known answer (default 4)")
    sample.add_argument(
        "--attention", type=at_least(0), default=2, help="attention checks, spoken with espeak-ng (default 2; 0: none)"
    )
    sample.add_argument(
        "--max-repeats",
        type=at_least(1),
        default=DEFAULT_MAX_REPEATS,
        help=f"warn when a source dialogue appears more often in the batch (default {DEFAULT_MAX_REPEATS})",
    )
    sample.set_defaults(run=_sample)

    serve = commands.add_parser("serve", help="the local web app where raters rate a batch")
    serve.add_argument("batch", help="batch directory (from 'anchors sample')")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    serve.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free)")
    serve.add_argument("--raters", help="comma-separated rater ids to register (e.g. a,b,c)")
    serve.add_argument("--raters-file", help="file with one rater id per line ('#' starts a comment)")
    serve.add_argument(
        "--new-token", action="append", default=[], metavar="RATER", help="issue a new URL for a registered rater"
    )
    serve.add_argument("--new-owner-token", action="store_true", help="issue a new URL for the owner's view")
    serve.add_argument(
        "--public-link",
        action="store_true",
        help="open the public entry link for a crowd platform (printed at its first start)",
    )
    serve.add_argument("--new-public-link", action="store_true", help="issue a new public link (the old one stops)")
    serve.add_argument(
        "--allow-shortfall",
        action="store_true",
        help="serve a design whose items cannot all get raters_per_item raters (refused otherwise)",
    )
    serve.set_defaults(run=_serve)

    free = commands.add_parser("free", help="free the assignments of raters who left (the next raters take them)")
    free.add_argument("batch", help="batch directory")
    free.add_argument("raters", nargs="+", help="rater (participant) ids")
    free.add_argument(
        "--reason", required=True, choices=FREED_STATUSES, help="why: returned (on the platform), timed_out, ..."
    )
    free.set_defaults(run=_free)

    export = commands.add_parser("export", help="the ratings joined with the hidden labels, as CSV for 'stats'")
    export.add_argument("batch", help="batch directory")
    export.add_argument("--out", required=True, help="output CSV file")
    export.add_argument("--raters-out", help="per-rater summary CSV (default: beside --out, '.raters.csv')")
    export.set_defaults(run=_export)

    stats = commands.add_parser("stats", help="kappa, TPR/FPR, weighted kappa, Spearman, Krippendorff alpha")
    stats.add_argument(
        "ratings", help="CSV with " + ", ".join(RATING_COLUMNS) + ", or a batch directory (its live database)"
    )
    stats.add_argument("--out", required=True, help="output JSON file")
    stats.add_argument(
        "--bootstrap",
        type=at_least(0),
        default=DEFAULT_BOOTSTRAP,
        help=f"resamples of items (default {DEFAULT_BOOTSTRAP})",
    )
    stats.add_argument("--seed", type=at_least(0), default=0, help="seed of the bootstrap (default 0)")
    stats.add_argument(
        "--study", help="a CSV's study.yaml: its quality.exclude rules and statistics.ties (a batch DIR: its own)"
    )
    stats.add_argument("--ties", choices=TIE_RULES, help="how the majority counts a tie (default: study.yaml's)")
    stats.set_defaults(run=_stats)
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        args.run(args)
    except (
        RatingsInputError,
        SamplingError,
        ChecksError,
        AssignmentError,
        BatchError,
        StoreError,
        AudioError,
        FileNotFoundError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
