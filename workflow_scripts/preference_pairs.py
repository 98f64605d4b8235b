from lalm_judge.core.logs import log_to
from lalm_judge.preference.stage import pair_shard

with log_to(snakemake.log[0]):
    pair_shard(
        snakemake.input.completions,
        snakemake.input.ratings,
        snakemake.input.transcripts,
        int(snakemake.wildcards.shard),
        snakemake.params.settings,
        snakemake.output.table,
        cache_dir=snakemake.params.cache_dir,
        seed=snakemake.params.seed,
    )
