from pathlib import Path

from lalm_judge.logs import log_to
from lalm_judge.metrics import metrics_main

with log_to(snakemake.log[0]):
    status = metrics_main(
        [
            *snakemake.input.scores,
            "--out", str(Path(snakemake.output.cells).parent),
            "--bootstrap", str(snakemake.params.bootstrap),
            "--folds", str(snakemake.params.folds),
            "--seed", str(snakemake.params.seed),
        ]
    )
    if status != 0:
        raise SystemExit(status)
