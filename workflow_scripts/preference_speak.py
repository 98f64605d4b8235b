from lalm_judge.core.logs import log_to
from lalm_judge.preference.render import render_shard
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log[0]), job_gpus(snakemake.resources.gpu):
    render_shard(
        snakemake.input.completions,
        int(snakemake.wildcards.shard),
        snakemake.wildcards.engine,
        snakemake.params.voice,
        snakemake.params.root,
        snakemake.output.table,
        sample_rate=snakemake.params.sample_rate,
        seed=snakemake.params.seed,
    )
