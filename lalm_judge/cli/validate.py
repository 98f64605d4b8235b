"""`lalm-judge validate-config FILE`: run every check the workflow runs before its first job
(`lalm_judge.workflow.preflight`: the config, the corpus it names, the plan), with the same messages; print the
errors, or the notes (cells routed to a documented alternative, unpinned revisions, key variables not set here),
the warnings about corpus records, and 'ok' with the number of judges."""

from __future__ import annotations

import argparse
import contextlib
import sys

import yaml

from lalm_judge.workflow.config import load_config
from lalm_judge.workflow.preflight import preflight, summarized


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge validate-config", description=__doc__)
    parser.add_argument("config", help="YAML configuration file")
    parser.add_argument(
        "-d",
        "--directory",
        default=".",
        help="the run's working directory, which relative paths (corpus.path, ...) are relative to, as snakemake's "
        "--directory (default: the current directory)",
    )
    parser.add_argument(
        "--config-only",
        action="store_true",
        help="check the config alone, not the corpus, the plan or the environment (e.g. before the corpus is "
        "downloaded); the run checks all of them",
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        with contextlib.chdir(args.directory):
            checked = preflight(config, config_only=args.config_only)
    except (ValueError, OSError, yaml.YAMLError) as err:  # ConfigError, CorpusError, InvalidIdentifier
        print(f"error: {err}", file=sys.stderr)
        return 2
    for note in checked.notes:
        print(f"note: {note}")
    for warning in summarized(checked.warnings):
        print(f"warning: {warning}")
    print(f"ok: {args.config} ({len(config['judges'])} judges, seed {config['seed']})")
    return 0
