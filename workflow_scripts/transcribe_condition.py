from lalm_judge.audio.controls import ControlSettings
from lalm_judge.core.logs import log_to
from lalm_judge.manifest.conditions import transcribe_condition
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log[0]), job_gpus(snakemake.resources.gpu):
    transcribe_condition(
        snakemake.input.manifest,
        snakemake.wildcards.condition,
        model_name=snakemake.wildcards.asr,
        model_options={**snakemake.params.model_options, "cpu_threads": snakemake.threads},
        settings=ControlSettings.from_config(snakemake.params.controls),
        out_table=snakemake.output.table,
        babble_manifests=list(snakemake.input.babble),
        seed=snakemake.params.seed,
    )
