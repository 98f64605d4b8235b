from lalm_judge.core.logs import log_to
from lalm_judge.data.benchmark_tables import import_turn_variants

with log_to(snakemake.log[0]):
    import_turn_variants(
        snakemake.input.dialogue,
        snakemake.params.benchmark,
        int(snakemake.wildcards.turn),
        categories=snakemake.params.categories,
        severities=snakemake.params.severities,
        variants_table=snakemake.output.variants,
        tts_table=snakemake.output.table,
        clips_dir=snakemake.output.clips,
        seed=snakemake.params.seed,
    )
