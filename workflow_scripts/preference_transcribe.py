from lalm_judge.core.logs import log_to
from lalm_judge.preference.render import transcribe_shard
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log[0]), job_gpus(snakemake.resources.gpu):
    transcribe_shard(
        snakemake.input.table,
        snakemake.params.root,
        {**snakemake.params.model_options, "cpu_threads": snakemake.threads},
        snakemake.output.table,
        seed=snakemake.params.seed,
    )
