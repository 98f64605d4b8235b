from lalm_judge.audio.transcription import transcribe_dialogue
from lalm_judge.core.logs import log_to
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log[0]), job_gpus(snakemake.resources.gpu):
    transcribe_dialogue(
        snakemake.input.dialogue,
        tts_tables=list(snakemake.input.tts),
        model_name=snakemake.wildcards.asr,
        model_options={**snakemake.params.model_options, "cpu_threads": snakemake.threads},
        out_table=snakemake.output.table,
        seed=snakemake.params.seed,
    )
