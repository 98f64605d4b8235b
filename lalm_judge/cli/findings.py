"""`lalm-judge findings [METRICS_DIR]`: the families of tests of a safety run and what each states (default
`results/metrics`): one line per family (its size, its control, its claims), then every finding, every flagged
control check and every stated behaviour pattern, from the tables the metrics stage wrote (docs/metrics.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from lalm_judge.core.table_sets import ControlTables, GuideTables, ModalityTables
from lalm_judge.report.html import finding_sentence
from lalm_judge.report.tables import family_sentence


def _print_findings(metrics_dir: Path) -> None:
    summary = GuideTables.read(metrics_dir)
    for family in summary.families.iter_rows(named=True):
        print(f"Family {family_sentence(family)}")
    if summary.findings.height == 0:
        print("No Delta_i survives the control of its family in this run.")
    for finding in summary.findings.iter_rows(named=True):
        label = "Category finding" if finding["family"] == "categories" else "Finding"
        print(f"{label}: {finding_sentence(finding)}")
    controls, modality = metrics_dir / "controls", metrics_dir / "modality"
    if controls.exists():
        for flag in ControlTables.read(controls).flags.filter(pl.col("flagged").fill_null(False)).iter_rows(named=True):
            print(
                f"Flag: {flag['check']} of {flag['judge']} {flag['modality']}/{flag['transcript_source']} "
                f"{flag['prompt']} ({flag['verdict']}; p = {flag['p_value']:.3g}, Holm-adjusted "
                f"{flag['p_adjusted']:.3g} over {flag['family_size']} checks)"
            )
    if modality.exists():
        patterns = ModalityTables.read(modality).patterns.filter(pl.col("pattern").is_not_null())
        for row in patterns.iter_rows(named=True):
            share = (
                ""
                if row["pattern_share"] is None
                else f" ({row['data_pattern']} in {row['pattern_share']:.0%} of the resamples)"
            )
            print(f"Pattern: {row['judge']} {row['prompt']} {row['condition']}: {row['pattern']}{share}")


def main(argv: list[str]) -> int:
    """Print the families and the claims of a run's metrics folder; 2 when a table is missing."""
    parser = argparse.ArgumentParser(
        prog="lalm-judge findings",
        description="The families of tests of a safety run, their control, and every finding, flag and pattern.",
    )
    parser.add_argument("metrics_dir", nargs="?", default="results/metrics", help="the metrics stage's folder")
    args = parser.parse_args(argv)
    try:
        _print_findings(Path(args.metrics_dir))
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
