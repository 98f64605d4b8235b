from lalm_judge.logs import log_to
from lalm_judge.manifest import build_manifest

with log_to(snakemake.log[0]):
    build_manifest(
        snakemake.input.dialogue,
        variant_tables=list(snakemake.input.variants),
        tts_tables=list(snakemake.input.tts),
        asr_tables=snakemake.params.asr_tables,
        out_path=snakemake.output.manifest,
    )
