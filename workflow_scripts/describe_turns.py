from lalm_judge.audio.prosody import describe_turns
from lalm_judge.core.logs import log_to

with log_to(snakemake.log[0]):
    describe_turns(
        snakemake.input.dialogue, list(snakemake.input.tts), snakemake.output.table, seed=snakemake.params.seed
    )
