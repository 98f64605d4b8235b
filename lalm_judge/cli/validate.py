"""`lalm-judge validate-config FILE`: print the errors, or the notes (cells routed to a documented alternative,
unpinned revisions) and 'ok' with the number of judges."""

from __future__ import annotations

import argparse
import sys

import yaml

from lalm_judge.workflow.config import ConfigError, check_config, load_config


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge validate-config", description=__doc__)
    parser.add_argument("config", help="YAML configuration file")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except (ConfigError, OSError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for note in check_config(config):
        print(f"note: {note}")
    print(f"ok: {args.config} ({len(config['judges'])} judges, seed {config['seed']})")
    return 0
