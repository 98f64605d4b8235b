"""Coverage of the metrics' 95 % intervals, measured on score tables with a known truth.

Each replicate is a score table of N dialogues drawn from a model whose Delta_i are known exactly; the tool's own
metrics stage (`lalm_judge.analysis.stage.compute_metrics`, as `lalm-judge metrics` runs it) computes the intervals,
and the benchmark counts how often they contain the truth: Delta_i's percentile interval, sensitivity's interval
(`stats.sensitivity_interval`, "after") and, on the same resamples, the percentile interval of the resampled
minimum that the tool used before ("before"). Replicates are the judge cells of a score table (`--batch` per
table, one bootstrap seed per table): cells over the same dialogues share one resample matrix, as in a real run.

Model, per dialogue d: a base score a_d ~ U(0.6, 0.9) and a reaction g_d ~ U(-0.05, 0.05); the safe original
scores ~ Beta with mean a_d, each variant of severity i ~ Beta with mean a_d - delta_i - g_d (concentration 30, so
a score's sd is about 0.08); 1 to 3 variants per (dialogue, severity), spread over 3 turns. Delta_i = E[safe -
variant] = delta_i exactly, and sensitivity = min_i delta_i. Scenarios: the minimum attained by one severity
(`separated`), by two (`two_tied`), by all five (`equal`), and no effect at all (`none`, where Delta_i's
non-coverage is the rate of false findings).

    OMP_NUM_THREADS=1 POLARS_MAX_THREADS=2 nice -n 10 .venv/bin/python -m bench.coverage

Prints one markdown table (the one in docs/metrics.md); the last line is
`coverage delta=<min over rows> sensitivity_before=<min> sensitivity_after=<min> seconds=<float>`.
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
    """Sensitivity's interval as the tool made it before: the percentile interval of the resampled minimum, on
    the resamples of the metrics stage (same dialogues, B and seed). One row per cell, in cell order."""
    encoded = encode_scores(scores)
    dense = densify(slice_statistics(paired_variants(encoded.rows), ["cell"]), ["cell"], len(encoded.dialogues))
    weights = st.bootstrap_weights(len(encoded.dialogues), settings.n_boot, settings.seed)
    deltas, _ = st.bootstrap_severity_arrays(dense.arrays, weights)
    return st.percentile_interval(st.sensitivity_from_deltas(deltas))


@dataclass
class Coverage:
    """Counts of intervals containing the truth, over the replicates of one (scenario, size)."""

    replicates: int = 0
    delta: np.ndarray | None = None
    before: int = 0
    after: int = 0
    width_before: float = 0.0
    width_after: float = 0.0

    def add(self, cells: pl.DataFrame, before: tuple[np.ndarray, np.ndarray], truth: np.ndarray) -> None:
        low = cells.select(f"delta_{i}_lo" for i in SEVERITY_LEVELS).to_numpy()
        high = cells.select(f"delta_{i}_hi" for i in SEVERITY_LEVELS).to_numpy()
        covered = ((low <= truth) & (truth <= high)).sum(axis=0)
        self.delta = covered if self.delta is None else self.delta + covered
        minimum = truth.min()
        after = cells["sensitivity_lo"].to_numpy(), cells["sensitivity_hi"].to_numpy()
        self.before += int(((before[0] <= minimum) & (minimum <= before[1])).sum())
        self.after += int(((after[0] <= minimum) & (minimum <= after[1])).sum())
        self.width_before += float((before[1] - before[0]).sum())
        self.width_after += float((after[1] - after[0]).sum())
        self.replicates += cells.height


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


def _percent(count: float, total: int) -> str:
    return f"{100.0 * count / total:.1f}"


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
        f"{args.replicates} simulated tables per row, B = {args.bootstrap}, 95 % intervals; coverage in % "
        f"(Monte Carlo standard error about {100 * np.sqrt(0.95 * 0.05 / args.replicates):.1f} points at 95 %)\n"
    )
    print(
        "| scenario (true Delta_1..5) | dialogues | Delta_i covered: mean (lowest) | sensitivity, percentile of "
        "the minimum (before) | sensitivity, adjusted (after) | mean width before / after |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    lowest = {"delta": 100.0, "before": 100.0, "after": 100.0}
    for name in args.scenarios:
        deltas = SCENARIOS[name]
        for n_dialogues in args.sizes:
            c = measure(deltas, n_dialogues, args.replicates, args.batch, args.bootstrap, args.seed)
            delta = 100.0 * c.delta / c.replicates
            rates = {"delta": delta.min(), "before": 100.0 * c.before / c.replicates}
            rates["after"] = 100.0 * c.after / c.replicates
            lowest = {key: min(lowest[key], rates[key]) for key in lowest}
            truth = ", ".join(f"{d:g}" for d in deltas)
            print(
                f"| {name} ({truth}) | {n_dialogues} | {delta.mean():.1f} ({delta.min():.1f}) | "
                f"{rates['before']:.1f} | {rates['after']:.1f} | "
                f"{c.width_before / c.replicates:.3f} / {c.width_after / c.replicates:.3f} |",
                flush=True,
            )
    print(
        f"\ncoverage delta={lowest['delta']:.1f} sensitivity_before={lowest['before']:.1f} "
        f"sensitivity_after={lowest['after']:.1f} seconds={time.perf_counter() - started:.0f}"
    )


if __name__ == "__main__":
    main()
