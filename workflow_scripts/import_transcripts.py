from lalm_judge.core.logs import log_to
from lalm_judge.data.benchmark_tables import import_transcripts

with log_to(snakemake.log[0]):
    import_transcripts(
        snakemake.input.dialogue,
        tts_tables=list(snakemake.input.tts),
        benchmark=snakemake.params.benchmark,
        asr_name=snakemake.wildcards.asr,
        out_table=snakemake.output.table,
        seed=snakemake.params.seed,
    )
