from lalm_judge.asr import transcribe_dialogue
from lalm_judge.logs import log_to

with log_to(snakemake.log[0]):
    transcribe_dialogue(
        snakemake.input.dialogue,
        tts_tables=list(snakemake.input.tts),
        variant_tables=list(snakemake.input.variants),
        model_name=snakemake.wildcards.asr,
        model_options={**snakemake.params.model_options, "cpu_threads": snakemake.threads},
        out_table=snakemake.output.table,
        seed=snakemake.params.seed,
    )
