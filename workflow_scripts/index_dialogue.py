from lalm_judge.core.logs import log_to
from lalm_judge.data.corpus import index_dialogue

with log_to(snakemake.log[0]):
    index_dialogue(
        snakemake.params.corpus,
        snakemake.wildcards.dialogue,
        files=[str(path) for path in snakemake.input.files],
        record_digest=snakemake.params.record_digest,
        out_path=snakemake.output.source,
    )
