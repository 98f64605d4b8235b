from pathlib import Path

from lalm_judge.analysis.engine import MetricSettings
from lalm_judge.analysis.stage import run_metrics
from lalm_judge.core.files import read_file_indexes
from lalm_judge.core.logs import log_to

with log_to(snakemake.log[0]):
    run_metrics(
        read_file_indexes(snakemake.input.scores),
        Path(snakemake.output.cells).parent,
        MetricSettings(
            n_boot=snakemake.params.bootstrap,
            seed=snakemake.params.seed,
            n_folds=snakemake.params.folds,
            min_pb_dialogues=snakemake.params.min_pb_dialogues,
            n_permutations=snakemake.params.permutations,
            min_dialogues=snakemake.params.min_dialogues,
        ),
    )
