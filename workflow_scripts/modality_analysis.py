from pathlib import Path

from lalm_judge.analysis.engine import MetricSettings
from lalm_judge.analysis.modality import run_modality
from lalm_judge.core.files import read_file_indexes
from lalm_judge.core.logs import log_to

with log_to(snakemake.log[0]):
    run_modality(
        read_file_indexes(snakemake.input.scores),
        Path(snakemake.output.effects).parent,
        MetricSettings(
            n_boot=snakemake.params.bootstrap,
            seed=snakemake.params.seed,
            min_dialogues=snakemake.params.min_dialogues,
            equivalence_margin=snakemake.params.equivalence_margin,
            pattern_min_share=snakemake.params.pattern_min_share,
        ),
    )
