from lalm_judge.core.files import write_json
from lalm_judge.core.logs import log_to
from lalm_judge.manifest.accounting import audio_accounting

with log_to(snakemake.log[0]):
    write_json(snakemake.output.summary, audio_accounting(list(snakemake.input.manifests)))
