from lalm_judge.core.logs import log_to
from lalm_judge.pairwise.transcripts import transcribe_responses

with log_to(snakemake.log[0]):
    transcribe_responses(
        snakemake.input.item_table,
        model_name=snakemake.wildcards.asr,
        model_options={**snakemake.params.model_options, "cpu_threads": snakemake.threads},
        out_path=snakemake.output.table,
        seed=snakemake.params.seed,
        known=snakemake.input.get("clean"),
    )
