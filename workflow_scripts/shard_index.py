from lalm_judge.core.logs import log_to
from lalm_judge.manifest.build import write_shard_index

with log_to(snakemake.log[0]):
    write_shard_index(list(snakemake.input.manifests), snakemake.output.index, list(snakemake.input.condition_asr))
