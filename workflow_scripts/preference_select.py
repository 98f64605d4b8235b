from lalm_judge.core.logs import log_to
from lalm_judge.preference.source import select_items

with log_to(snakemake.log[0]):
    select_items(
        snakemake.params.settings,
        snakemake.output.completions,
        snakemake.output.ratings,
        snakemake.output.report,
        shards=snakemake.params.shards,
        seed=snakemake.params.seed,
    )
