from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.logs import log_to
from lalm_judge.data.variants import rewrite_turn, write_variant_table

with log_to(snakemake.log[0]):
    frame = rewrite_turn(
        Dialogue.load(snakemake.input.dialogue),
        int(snakemake.wildcards.turn),
        categories=snakemake.params.categories,
        severities=snakemake.params.severities,
        generator=snakemake.params.generator,
        seed=snakemake.params.seed,
        cache_dir=snakemake.params.cache_dir,
    )
    write_variant_table(frame, snakemake.output.table)
