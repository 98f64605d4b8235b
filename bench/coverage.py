"""Coverage of the metrics' 95 % intervals, measured on score tables with a known truth, per tail.

Each replicate is a score table of N dialogues drawn from a model whose Delta_i are known exactly; the tool's own
metrics stage (`lalm_judge.analysis.stage.compute_metrics`, as `lalm-judge metrics` runs it) computes the intervals,
and the benchmark counts how often they contain the truth and, on each side, how often they miss it: the lower bound
above the truth, the upper bound below it (a 95 % interval should miss 2.5 % on each side). Intervals: Delta_i's
studentized interval and sensitivity's (`stats.sensitivity_interval`); the percentile interval of the resampled
minimum is shown beside them for reference. Replicates are the judge cells of a score table (`--batch` per table,
one bootstrap seed per table): cells over the same dialogues share one resample matrix, as in a real run.

Model, per dialogue d: a base score a_d ~ U(0.6, 0.9) and a reaction g_d ~ U(-0.05, 0.05); the safe original
scores ~ Beta with mean a_d, each variant of severity i ~ Beta with mean a_d - delta_i - g_d (concentration 30, so
a score's sd is about 0.08); 1 to 3 variants per (dialogue, severity), spread over 3 turns. Delta_i = E[safe -
variant] = delta_i exactly, and sensitivity = min_i delta_i. Scenarios: the minimum attained by one severity
(`separated`), by two (`two_tied`), by all five (`equal`), and no effect at all (`none`, where Delta_i's
non-coverage is the rate of false findings).

    OMP_NUM_THREADS=1 POLARS_MAX_THREADS=2 nice -n 10 .venv/bin/python -m bench.coverage

Prints one markdown table (the one in docs/metrics.md), then per size the lowest coverage over the scenarios (the
figures `lalm_judge.report.coverage` holds, from which the report words its intervals); the last line is
`coverage delta=<min over rows> sensitivity=<min> tail_max=<largest one-sided miss of sensitivity> seconds=<float>`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from lalm_judge.analysis import stats as st
from lalm_judge.analysis.engine import (
    SEVERITY_LEVELS,
    MetricSettings,
    densify,
    encode_scores,
    paired_variants,
    slice_statistics,
)
from lalm_judge.analysis.inputs import validate_scores
from lalm_judge.analysis.stage import compute_metrics

SCENARIOS = {
    "separated": (0.05, 0.10, 0.20, 0.30, 0.45),
    "two_tied": (0.10, 0.10, 0.25, 0.35, 0.45),
    "equal": (0.15, 0.15, 0.15, 0.15, 0.15),
    "none": (0.0, 0.0, 0.0, 0.0, 0.0),
}
SIZES = (10, 20, 40, 100)
CONCENTRATION = 30.0
N_TURNS = 3


def simulate(rng: np.random.Generator, n_dialogues: int, deltas: Sequence[float], n_cells: int) -> pl.DataFrame:
    """A score table of n_cells independent replicates (judge cells) over the same n_dialogues dialogue ids."""
    deltas = np.asarray(deltas)
    shape = (n_cells, n_dialogues)
    base = rng.uniform(0.6, 0.9, shape)
    reaction = rng.uniform(-0.05, 0.05, shape)
    counts = rng.integers(1, N_TURNS + 1, (*shape, deltas.size))
    cell, dialogue, severity = np.nonzero(counts)
    repeats = counts[cell, dialogue, severity]
    cell, dialogue, severity = (np.repeat(a, repeats) for a in (cell, dialogue, severity))
    copy = np.concatenate([np.arange(n) for n in repeats])
    mean = base[cell, dialogue] - deltas[severity] - reaction[cell, dialogue]
    variant_scores = rng.beta(mean * CONCENTRATION, (1.0 - mean) * CONCENTRATION)
    safe_cell, safe_dialogue = np.indices(shape).reshape(2, -1)
    safe_mean = base[safe_cell, safe_dialogue]
    safe_scores = rng.beta(safe_mean * CONCENTRATION, (1.0 - safe_mean) * CONCENTRATION)
    dialogue_ids = np.array([f"d{d:03d}" for d in range(n_dialogues)], dtype=object)
    variants = pl.DataFrame(
        {
            "judge": [f"r{c:04d}" for c in cell],
            "dialogue_id": dialogue_ids[dialogue],
            "variant_id": [f"{dialogue_ids[d]}.t{k}.hate.s{s + 1}" for d, s, k in zip(dialogue, severity, copy)],
            "category": "hate",
            "severity": severity + 1,
            "turn_index": copy,  # the k-th variant of a (dialogue, severity) replaces turn k
            "score": variant_scores,
        }
    )
    originals = pl.DataFrame(
        {
            "judge": [f"r{c:04d}" for c in safe_cell],
            "dialogue_id": dialogue_ids[safe_dialogue],
            "variant_id": [f"{d}.original" for d in dialogue_ids[safe_dialogue]],
            "category": None,
            "severity": 0,
            "turn_index": None,
            "score": safe_scores,
        },
        schema_overrides={"category": pl.String, "turn_index": pl.Int64},
    )
    typed = {"severity": pl.Int64, "turn_index": pl.Int64}
    table = pl.concat([originals.cast(typed), variants.cast(typed)])
    cell_keys = {"modality": "text", "transcript_source": "gt", "prompt": "basic", "condition": "clean"}
    return validate_scores(
        table.with_columns(
            *(pl.lit(value).alias(key) for key, value in cell_keys.items()),
            n_turns=pl.lit(N_TURNS, pl.Int64),
            parse_status=pl.lit("ok"),
        )
    )


def percentile_of_minimum(scores: pl.DataFrame, settings: MetricSettings) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of the resampled minimum, for reference, on the resamples of the metrics stage (same
    dialogues, B and seed). One row per cell, in cell order."""
    encoded = encode_scores(scores)
    dense = densify(slice_statistics(paired_variants(encoded.rows), ["cell"]), ["cell"], len(encoded.dialogues))
    weights = st.bootstrap_weights(len(encoded.dialogues), settings.n_boot, settings.seed)
    deltas, _ = st.bootstrap_severity_arrays(dense.arrays, weights)
    return st.percentile_interval(st.sensitivity_from_deltas(deltas))


@dataclass
class Coverage:
    """Counts of intervals containing the truth and missing it on each side, over the replicates of one (scenario,
    size): `delta_*` per severity, the sensitivity interval's and the percentile interval of the minimum's."""

    replicates: int = 0
    delta: np.ndarray | None = None
    delta_low: np.ndarray | None = None  # lower bound above the truth
    delta_high: np.ndarray | None = None  # upper bound below the truth
    sensitivity_low: int = 0
    sensitivity_high: int = 0
    minimum: int = 0
    width: float = 0.0
    width_minimum: float = 0.0

    def add(self, cells: pl.DataFrame, minimum: tuple[np.ndarray, np.ndarray], truth: np.ndarray) -> None:
        low = cells.select(f"delta_{i}_lo" for i in SEVERITY_LEVELS).to_numpy()
        high = cells.select(f"delta_{i}_hi" for i in SEVERITY_LEVELS).to_numpy()
        counts = {
            "delta": ((low <= truth) & (truth <= high)).sum(axis=0),
            "delta_low": (low > truth).sum(axis=0),
            "delta_high": (high < truth).sum(axis=0),
        }
        for name, count in counts.items():
            setattr(self, name, count if getattr(self, name) is None else getattr(self, name) + count)
        smallest = truth.min()
        sensitivity = cells["sensitivity_lo"].to_numpy(), cells["sensitivity_hi"].to_numpy()
        self.sensitivity_low += int((sensitivity[0] > smallest).sum())
        self.sensitivity_high += int((sensitivity[1] < smallest).sum())
        self.minimum += int(((minimum[0] <= smallest) & (smallest <= minimum[1])).sum())
        self.width += float((sensitivity[1] - sensitivity[0]).sum())
        self.width_minimum += float((minimum[1] - minimum[0]).sum())
        self.replicates += cells.height

    def rates(self) -> dict[str, float]:
        """Coverage and one-sided misses in %."""
        share = 100.0 / self.replicates
        return {
            "delta": float(self.delta.mean() * share),
            "delta_lowest": float(self.delta.min() * share),
            "delta_low": float(self.delta_low.mean() * share),
            "delta_high": float(self.delta_high.mean() * share),
            "sensitivity": 100.0 - (self.sensitivity_low + self.sensitivity_high) * share,
            "sensitivity_low": self.sensitivity_low * share,
            "sensitivity_high": self.sensitivity_high * share,
            "minimum": self.minimum * share,
            "width": self.width / self.replicates,
            "width_minimum": self.width_minimum / self.replicates,
        }


def measure(deltas: Sequence[float], n_dialogues: int, replicates: int, batch: int, n_boot: int, seed: int) -> Coverage:
    rng = np.random.default_rng([seed, n_dialogues, int(1000 * sum(deltas))])
    coverage = Coverage()
    truth = np.asarray(deltas)
    for table_index, start in enumerate(range(0, replicates, batch)):
        settings = MetricSettings(n_boot=n_boot, seed=seed + table_index, n_folds=2, n_permutations=1)
        scores = simulate(rng, n_dialogues, deltas, min(batch, replicates - start))
        cells = compute_metrics(scores, settings).cells.sort("judge")
        if (cells["sensitivity_status"] != "ok").any():
            raise RuntimeError(f"{n_dialogues} dialogues are below the minimum support; use sizes >= 10")
        coverage.add(cells, percentile_of_minimum(scores, settings), truth)
    return coverage


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=1000, help="simulated tables per scenario and size")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples B of every interval (default 1000)")
    parser.add_argument("--batch", type=int, default=25, help="replicates per score table (one bootstrap seed each)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="dialogues per table")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(
        f"{args.replicates} simulated tables per row, B = {args.bootstrap}, 95 % intervals; coverage and one-sided "
        f"misses in % (Monte Carlo standard error about {100 * np.sqrt(0.95 * 0.05 / args.replicates):.1f} points "
        f"on coverage, {100 * np.sqrt(0.025 * 0.975 / args.replicates):.1f} on a tail)\n"
    )
    print(
        "| scenario (true Delta_1..5) | dialogues | Delta_i covered: mean (lowest) | Delta_i lower bound above / upper "
        "bound below the truth | sensitivity covered | sensitivity lower bound above / upper bound below the truth "
        "| sensitivity width | percentile of the minimum: covered, width |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    by_size: dict[int, list[dict[str, float]]] = {}
    for name in args.scenarios:
        deltas = SCENARIOS[name]
        for n_dialogues in args.sizes:
            r = measure(deltas, n_dialogues, args.replicates, args.batch, args.bootstrap, args.seed).rates()
            by_size.setdefault(n_dialogues, []).append(r)
            truth = ", ".join(f"{d:g}" for d in deltas)
            print(
                f"| {name} ({truth}) | {n_dialogues} | {r['delta']:.1f} ({r['delta_lowest']:.1f}) | "
                f"{r['delta_low']:.1f} / {r['delta_high']:.1f} | {r['sensitivity']:.1f} | "
                f"{r['sensitivity_low']:.1f} / {r['sensitivity_high']:.1f} | {r['width']:.3f} | "
                f"{r['minimum']:.1f}, {r['width_minimum']:.3f} |",
                flush=True,
            )
    print("\nPer size, the lowest over the scenarios (lalm_judge.report.coverage.MEASURED):")
    for n_dialogues, rows in sorted(by_size.items()):
        print(
            f"    {n_dialogues}: MeasuredCoverage(delta={min(r['delta_lowest'] for r in rows):.1f}, "
            f"sensitivity={min(r['sensitivity'] for r in rows):.1f}),"
        )
    rows = [r for group in by_size.values() for r in group]
    tail_max = max(max(r["sensitivity_low"], r["sensitivity_high"]) for r in rows)
    print(
        f"\ncoverage delta={min(r['delta_lowest'] for r in rows):.1f} "
        f"sensitivity={min(r['sensitivity'] for r in rows):.1f} tail_max={tail_max:.1f} "
        f"seconds={time.perf_counter() - started:.0f}"
    )


if __name__ == "__main__":
    main()
