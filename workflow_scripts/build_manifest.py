from lalm_judge.core.logs import log_to
from lalm_judge.manifest.build import build_manifest

with log_to(snakemake.log[0]):
    build_manifest(
        snakemake.input.dialogue,
        tts_tables=list(snakemake.input.tts),
        asr_tables=snakemake.params.asr_tables,
        out_path=snakemake.output.manifest,
        control_tables=list(snakemake.input.controls),
    )
