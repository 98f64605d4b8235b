"""`lalm-judge provenance TABLE... [--together] [--json]`: how the rows of output tables were made (model and
revision, prompt version, generation settings, seed, package versions, config hash), per judge cell or component,
and the rows whose provenance differs within one table. Exit status 0 when every table is consistent, 1 when one
is not (or lacks the run provenance columns), 2 when a file cannot be read."""

from __future__ import annotations

import argparse
import json
import sys

import polars as pl

from lalm_judge.core.provenance import provenance_report, read_tables
from lalm_judge.core.tables import TableError


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge provenance", description=__doc__)
    parser.add_argument("tables", nargs="+", help="parquet tables written by the workflow or the commands")
    parser.add_argument("--together", action="store_true", help="check the files as one table (e.g. all shards)")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    args = parser.parse_args(argv)
    try:
        tables = read_tables(args.tables, together=args.together)
    except (OSError, pl.exceptions.PolarsError, TableError) as err:
        print(f"error: cannot read the tables: {err}", file=sys.stderr)
        return 2
    reports = [provenance_report(frame, name) for name, frame in tables]
    if args.json:
        print(json.dumps([report.as_dict() for report in reports], indent=2, default=str))
    else:
        print("\n".join(line for report in reports for line in report.lines()))
    return 0 if all(report.consistent for report in reports) else 1
