from lalm_judge.core.logs import log_to
from lalm_judge.preference.render import transcribe_shard

with log_to(snakemake.log[0]):
    transcribe_shard(
        snakemake.input.table,
        snakemake.params.root,
        snakemake.params.model_options,
        snakemake.output.table,
        seed=snakemake.params.seed,
    )
