from lalm_judge.core.logs import log_to
from lalm_judge.manifest.samples import export_sample_audio

with log_to(snakemake.log[0]):
    export_sample_audio(
        snakemake.input.manifest, snakemake.wildcards.sample, snakemake.output.wav, snakemake.params.sample_rate
    )
