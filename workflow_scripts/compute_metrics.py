from pathlib import Path

from lalm_judge.logs import log_to
from lalm_judge.metrics import MetricSettings, run_metrics

with log_to(snakemake.log[0]):
    run_metrics(
        list(snakemake.input.scores),
        Path(snakemake.output.cells).parent,
        MetricSettings(n_boot=snakemake.params.bootstrap, seed=snakemake.params.seed, n_folds=snakemake.params.folds),
    )
