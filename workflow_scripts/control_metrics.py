from pathlib import Path

from lalm_judge.analysis.controls import run_controls
from lalm_judge.analysis.engine import MetricSettings
from lalm_judge.core.files import read_file_indexes
from lalm_judge.core.logs import log_to

with log_to(snakemake.log[0]):
    run_controls(
        read_file_indexes(snakemake.input.scores),
        Path(snakemake.input.cells).parent,
        Path(snakemake.output.effects).parent,
        MetricSettings(
            n_boot=snakemake.params.bootstrap,
            seed=snakemake.params.seed,
            n_folds=snakemake.params.folds,
            min_dialogues=snakemake.params.min_dialogues,
            equivalence_margin=snakemake.params.equivalence_margin,
        ),
        prosody_paths=list(snakemake.input.prosody),
        condition_asr_paths=list(snakemake.input.condition_asr),
        clean_asr_paths=list(snakemake.input.asr),
    )
