"""Paper-scale metrics benchmark: vectorized cluster bootstrap vs a per-resample polars group_by.

Builds a synthetic score table of paper size (100 dialogues, 24,100 samples x 245 judge cells, about 5.9 M
rows), times `lalm_judge.analysis.stage.run_metrics` end to end (read parquet, every table, write) with B resamples,
then times the straightforward bootstrap -- resample dialogues, recompute with polars group_by -- on a few
cells and a small B, and scales it per resample and per cell to the full run.

    POLARS_MAX_THREADS=2 OMP_NUM_THREADS=2 .venv/bin/python -m bench.metrics_scale

Last line: `metrics_s=<float> naive_ratio=<float>`.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from bench.simulated import cell_metrics_by_group_by, resample_dialogues, simulate_scores
from lalm_judge.analysis.engine import CELL_KEYS, MetricSettings
from lalm_judge.analysis.inputs import read_scores
from lalm_judge.analysis.stage import run_metrics
from lalm_judge.analysis.stats import bootstrap_weights
from lalm_judge.core.files import write_parquet

PAPER_MODALITIES = (
    ("text", "gt"),
    ("text", "asr:whisper-large-v3"),
    ("text", "asr:whisper-base"),
    ("audio", "none"),
    ("audio_text", "gt"),
    ("audio_text", "asr:whisper-large-v3"),
    ("audio_text", "asr:whisper-base"),
)
PAPER_CATEGORIES = ("overall", "dangerous", "harassment", "hate", "sexual", "violence", "self_harm", "deception")


def paper_scale_scores(seed: int) -> pl.DataFrame:
    """100 dialogues of 4-8 turns (600 turns: 24,000 variants + 100 originals) x 245 cells."""
    return simulate_scores(
        n_dialogues=100,
        turn_counts=(4, 5, 6, 7, 8),
        categories=PAPER_CATEGORIES,
        judges=tuple(f"judge_{j}" for j in range(7)),
        modalities=PAPER_MODALITIES,
        prompts=("basic", "cot", "fewshot", "rubric", "calibrated"),
        conditions=("clean",),
        seed=seed,
    )


def time_naive(scores: pl.DataFrame, n_cells: int, n_boot: int, seed: int) -> float:
    """Seconds per resample per cell of the straightforward bootstrap, on the first n_cells cells."""
    cells = scores.select(CELL_KEYS).unique().sort(CELL_KEYS, nulls_last=True).head(n_cells)
    subset = scores.join(cells, on=CELL_KEYS, how="semi", nulls_equal=True)
    dialogue_ids = sorted(subset["dialogue_id"].unique().to_list())
    weights = bootstrap_weights(len(dialogue_ids), n_boot, seed)
    start = time.perf_counter()
    for counts in weights:
        cell_metrics_by_group_by(resample_dialogues(subset, dialogue_ids, counts))
    return (time.perf_counter() - start) / (n_boot * n_cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--naive-cells", type=int, default=2)
    parser.add_argument("--naive-bootstrap", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        scores_path = Path(tmp) / "scores.parquet"
        scores = paper_scale_scores(args.seed)
        n_cells = scores.select(CELL_KEYS).n_unique()
        print(f"rows={scores.height} cells={n_cells} samples={scores['variant_id'].n_unique()}")
        write_parquet(scores_path, scores)
        del scores

        settings = MetricSettings(n_boot=args.bootstrap, seed=args.seed, n_folds=5)
        start, cpu_start = time.perf_counter(), time.process_time()
        run_metrics([scores_path], Path(tmp) / "metrics", settings)
        metrics_s = time.perf_counter() - start
        # CPU seconds of this process: comparable across runs on a machine shared with other work.
        print(f"full metrics, B={args.bootstrap}: {metrics_s:.2f} s ({time.process_time() - cpu_start:.2f} s CPU)")

        scores = read_scores([scores_path])
        per_resample_cell = time_naive(scores, args.naive_cells, args.naive_bootstrap, args.seed)
    naive_total = per_resample_cell * args.bootstrap * n_cells
    print(
        f"naive group_by bootstrap: {per_resample_cell * 1e3:.1f} ms per resample per cell "
        f"({args.naive_cells} cells x B={args.naive_bootstrap}); scaled to {n_cells} cells x B={args.bootstrap}: "
        f"{naive_total:.0f} s"
    )
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak_rss_gib={peak_gib:.2f}")
    print(f"metrics_s={metrics_s:.3f} naive_ratio={naive_total / metrics_s:.1f}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
