from lalm_judge.io import write_json
from lalm_judge.logs import log_to
from lalm_judge.manifest import audio_accounting

with log_to(snakemake.log[0]):
    write_json(snakemake.output.summary, audio_accounting(list(snakemake.input.manifests)))
