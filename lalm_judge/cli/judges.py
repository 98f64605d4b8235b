"""`lalm-judge judges [CONFIG] [--judge NAME ...]`: per judge of a config, what the project knows about its model's
family and what it will assume (`lalm_judge.workflow.judge_facts`); without a config, every known family. The config
is validated first (its errors are `validate-config`'s)."""

from __future__ import annotations

import argparse

from lalm_judge.workflow.config import load_config
from lalm_judge.workflow.judge_facts import judge_facts, known_families


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge judges", description=__doc__)
    parser.add_argument("config", nargs="?", help="YAML configuration file (default: list the known families)")
    parser.add_argument("--judge", action="append", default=[], help="only this judge (repeatable)")
    args = parser.parse_args(argv)
    if args.config is None:
        if args.judge:
            parser.error("--judge names a judge of a config: give the config")
        blocks = known_families()
    else:
        config = load_config(args.config)
        unknown = [name for name in args.judge if name not in config["judges"]]
        if unknown:
            raise ValueError(f"{args.config}: no judge {', '.join(unknown)}; its judges: {', '.join(config['judges'])}")
        names = args.judge or list(config["judges"])
        blocks = [judge_facts(name, config["judges"][name]).lines() for name in names]
    for index, block in enumerate(blocks):
        print(("\n" if index else "") + block[0])
        for line in block[1:]:
            print(line if line.startswith("  ") else f"  {line}")
    return 0
