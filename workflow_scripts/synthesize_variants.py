from lalm_judge.audio.synthesis import synthesize_turn_variants
from lalm_judge.core.logs import log_to

with log_to(snakemake.log[0]):
    synthesize_turn_variants(
        snakemake.input.dialogue,
        snakemake.input.variants,
        clips_dir=snakemake.output.clips,
        out_table=snakemake.output.table,
        voices=snakemake.params.voices,
        match_loudness=snakemake.params.match_loudness,
        seed=snakemake.params.seed,
    )
