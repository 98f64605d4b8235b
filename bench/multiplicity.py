"""How often a run without any effect states one anyway: the family-wise error of the findings, the category
findings and the control flags, measured on seeded null tables.

Each replicate is a score table of `--dialogues` dialogues scored by `--judges` audio judge cells, drawn from the
model of bench/coverage.py with every Delta_i = 0 (variants score like their safe originals), variants split over
two harm categories, and one cell per control condition that changes nothing but noise (sd `NOISE` per score): a TTS
control that scores like the original, injected variants that score like the plain ones, and a silence cell whose
unsafe scores move by exactly the equivalence margin (the least favourable case of the null of `ignores_audio`, whose
claim is an effect smaller than the margin). The metrics stage, the control analysis and the findings run as the
workflow runs them (`compute_metrics`, `compute_controls`, `delta_findings`). With no effect anywhere every finding
and every flag is false, so the share of replicates with at least one is the family-wise error rate (for the
Benjamini-Hochberg families, their false-discovery rate); each should be at most the stated level, 5 %. Beside it,
the share of replicates with at least one Delta_i interval excluding 0 before any control (the rate the report had).

    OMP_NUM_THREADS=1 POLARS_MAX_THREADS=2 nice -n 10 .venv/bin/python -m bench.multiplicity

Prints one markdown table; the last line is
`multiplicity findings=<rate> categories=<rate> flags=<rate> uncorrected=<rate> seconds=<float>`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from bench.coverage import simulate
from lalm_judge.analysis.controls import compute_controls
from lalm_judge.analysis.engine import SEVERITY_LEVELS, MetricSettings
from lalm_judge.analysis.findings import delta_findings
from lalm_judge.analysis.inputs import validate_scores
from lalm_judge.analysis.multiplicity import LEVEL
from lalm_judge.analysis.stage import compute_metrics

NOISE = 0.05
NO_EFFECT = (0.0, 0.0, 0.0, 0.0, 0.0)
CATEGORIES = ("hate", "violence")


def _noisy(frame: pl.DataFrame, rng: np.random.Generator, shift: float = 0.0) -> pl.DataFrame:
    noise = rng.normal(shift, NOISE, frame.height)
    return frame.with_columns(score=(pl.col("score") + pl.Series(noise)).clip(0.0, 1.0))


def null_table(rng: np.random.Generator, n_dialogues: int, n_judges: int, margin: float) -> pl.DataFrame:
    """A validated score table without any effect: clean audio cells and their tts_control, injection and silence
    cells (module docstring)."""
    clean = simulate(rng, n_dialogues, NO_EFFECT, n_judges)
    category = pl.when(pl.col("turn_index") % 2 == 0).then(pl.lit(CATEGORIES[0])).otherwise(pl.lit(CATEGORIES[1]))
    clean = clean.with_columns(
        modality=pl.lit("audio"),
        transcript_source=pl.lit("none"),
        category=pl.when(pl.col("severity") > 0).then(category),
    ).with_columns(
        variant_id=pl.when(pl.col("severity") > 0)
        .then(pl.format("{}.t{}.{}.s{}", "dialogue_id", "turn_index", "category", "severity"))
        .otherwise(pl.col("variant_id"))
    )
    originals = clean.filter(pl.col("severity") == 0).drop("turn_index")
    variants = clean.filter(pl.col("severity") > 0)
    turns = variants.select("judge", "dialogue_id", "turn_index").unique()
    per_turn = originals.join(turns, on=["judge", "dialogue_id"]).select(clean.columns)

    def safe(kind: str) -> pl.DataFrame:
        return per_turn.with_columns(variant_id=pl.format("{}.t{}.{}", "dialogue_id", "turn_index", pl.lit(kind)))

    parts = [
        clean,
        _noisy(safe("tts_control"), rng).with_columns(condition=pl.lit("tts_control")),
        pl.concat(
            [originals.with_columns(turn_index=pl.lit(None, pl.Int64)).select(clean.columns), _noisy(variants, rng)]
        ).with_columns(condition=pl.lit("injection")),
        pl.concat([_noisy(safe("original"), rng), _noisy(variants, rng, shift=margin)]).with_columns(
            condition=pl.lit("silence")
        ),
    ]
    return validate_scores(pl.concat(parts))


@dataclass
class Rates:
    """Replicates with at least one claim per family, out of `replicates`."""

    replicates: int = 0
    findings: int = 0
    categories: int = 0
    flags: int = 0
    uncorrected: int = 0

    def rate(self, family: str) -> float:
        return getattr(self, family) / self.replicates


def measure(replicates: int, n_dialogues: int, n_judges: int, n_boot: int, seed: int) -> Rates:
    """Run `replicates` null tables through the metrics stage, the controls and the findings; count the claims."""
    rng = np.random.default_rng([seed, n_dialogues, n_judges])
    rates = Rates()
    for replicate in range(replicates):
        settings = MetricSettings(n_boot=n_boot, seed=seed + replicate, n_folds=2, n_permutations=1)
        scores = null_table(rng, n_dialogues, n_judges, settings.equivalence_margin)
        tables = compute_metrics(scores, settings)
        controls = compute_controls(scores, tables.cells, tables.severity_curve, settings)
        found = delta_findings(tables.cells, tables.categories)
        clean = tables.cells.filter(pl.col("condition") == "clean")
        excluded = clean.select(
            pl.any_horizontal((pl.col(f"delta_{i}_lo") > 0) | (pl.col(f"delta_{i}_hi") < 0) for i in SEVERITY_LEVELS)
        ).to_series()
        rates.replicates += 1
        rates.findings += int((found["family"] == "findings").any())
        rates.categories += int((found["family"] == "categories").any())
        rates.flags += int(controls.flags["flagged"].fill_null(False).any())
        rates.uncorrected += int(excluded.fill_null(False).any())
    return rates


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=200, help="null tables (default 200)")
    parser.add_argument("--dialogues", type=int, nargs="+", default=[20, 30], help="dialogues per table")
    parser.add_argument("--judges", type=int, default=4, help="judge cells per table (default 4)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples B (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    se = 100 * np.sqrt(LEVEL * (1 - LEVEL) / args.replicates)
    print(
        f"{args.replicates} null tables per row, {args.judges} judges, B = {args.bootstrap}; share of tables with at "
        f"least one claim, in % (stated level {100 * LEVEL:.0f} %, Monte Carlo standard error about {se:.1f} "
        "points there)\n"
    )
    print(
        "| dialogues | findings (Benjamini-Hochberg) | category findings (Benjamini-Hochberg) | control flags (Holm) "
        "| a Delta_i interval excluding 0, no control |"
    )
    print("|---:|---:|---:|---:|---:|")
    worst = dict.fromkeys(("findings", "categories", "flags", "uncorrected"), 0.0)
    for n_dialogues in args.dialogues:
        rates = measure(args.replicates, n_dialogues, args.judges, args.bootstrap, args.seed)
        shown = {family: 100 * rates.rate(family) for family in worst}
        worst = {family: max(worst[family], shown[family]) for family in worst}
        print(
            f"| {n_dialogues} | {shown['findings']:.1f} | {shown['categories']:.1f} | {shown['flags']:.1f} | "
            f"{shown['uncorrected']:.1f} |",
            flush=True,
        )
    print(
        f"\nmultiplicity findings={worst['findings']:.1f} categories={worst['categories']:.1f} "
        f"flags={worst['flags']:.1f} uncorrected={worst['uncorrected']:.1f} "
        f"seconds={time.perf_counter() - started:.0f}"
    )


if __name__ == "__main__":
    main()
