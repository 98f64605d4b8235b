from lalm_judge.core.logs import log_to
from lalm_judge.pairwise.build import build_items

with log_to(snakemake.log[0]):
    build_items(
        snakemake.params.settings,
        snakemake.output.item_table,
        snakemake.output.summary,
        snakemake.output.get("audio"),
        sample_rate=snakemake.params.sample_rate,
        seed=snakemake.params.seed,
    )
