"""`lalm-judge export --format hf --out DIR [--results results] [--config CONFIG]`: the run's benchmark as a
Hugging Face dataset (parquet shards with the full-dialogue audio, and a dataset card)."""

from __future__ import annotations

import argparse
import sys

import yaml

from lalm_judge.cli.arguments import at_least, positive
from lalm_judge.export.hf import DEFAULT_MAX_SHARD_MB, DEFAULT_ROW_GROUP_SIZE, ShardSettings, export_hf
from lalm_judge.export.rows import ExportError
from lalm_judge.workflow.config import ConfigError, load_config
from lalm_judge.workflow.plan import Plan


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge export", description=__doc__)
    parser.add_argument("--format", required=True, choices=["hf"], help="hf = a Hugging Face dataset folder")
    parser.add_argument("--out", required=True, help="output folder (replaced only if an earlier export wrote it)")
    parser.add_argument("--results", default="results", help="the run's results folder (default: results)")
    parser.add_argument(
        "--config",
        help="the run's config: export only its dialogues and record its generation settings in the card "
        "(run from the run's working directory; default: every manifest in the results folder)",
    )
    parser.add_argument("--split", default="test", help="split name of the samples (default: test)")
    parser.add_argument(
        "--max-shard-mb", type=positive, default=DEFAULT_MAX_SHARD_MB, help="largest shard in MB (default: 500)"
    )
    parser.add_argument(
        "--row-group-size",
        type=at_least(1),
        default=DEFAULT_ROW_GROUP_SIZE,
        help="rows per parquet row group (default: 100)",
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config) if args.config else None
        info = export_hf(
            args.results,
            args.out,
            dialogue_ids=Plan(config).dialogue_ids if config else None,
            settings=ShardSettings(args.max_shard_mb, args.row_group_size),
            split=args.split,
            run_config=config,
        )
    except (ExportError, ConfigError, FileExistsError, FileNotFoundError, ValueError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.out}: {info.num_examples} samples in split {info.name!r}, {len(info.files)} shard(s)")
    return 0
