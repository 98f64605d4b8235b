from lalm_judge.audio.controls import ControlSettings
from lalm_judge.core.logs import log_to
from lalm_judge.manifest.conditions import transcribe_conditions
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log.job), job_gpus(snakemake.resources.gpu):
    transcribe_conditions(
        snakemake.input.manifest,
        snakemake.params.conditions,
        model_name=snakemake.wildcards.asr,
        model_options={**snakemake.params.model_options, "cpu_threads": snakemake.threads},
        settings=ControlSettings.from_config(snakemake.params.controls),
        out_table=snakemake.output.table,
        babble_manifests=list(snakemake.input.babble),
        cache_path=snakemake.params.cache,
        counts_path=snakemake.log.turns,
        seed=snakemake.params.seed,
    )
