from lalm_judge.logs import log_to
from lalm_judge.manifest import write_shard_index

with log_to(snakemake.log[0]):
    write_shard_index(list(snakemake.input.manifests), snakemake.output.index)
