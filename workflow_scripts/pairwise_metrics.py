from pathlib import Path

from lalm_judge.core.logs import log_to
from lalm_judge.pairwise.metrics import PairwiseMetricSettings, run_pairwise_stage

with log_to(snakemake.log[0]):
    run_pairwise_stage(
        list(snakemake.input.predictions),
        Path(snakemake.output.table).parent,
        PairwiseMetricSettings(
            n_boot=snakemake.params.bootstrap,
            seed=snakemake.params.seed,
            duration_bins=tuple(snakemake.params.duration_bins),
            min_items=snakemake.params.min_items,
        ),
        audit_paths=list(snakemake.input.audit),
        items_path=snakemake.input.item_table,
    )
