from lalm_judge.logs import log_to
from lalm_judge.tts import synthesize_turn_variants

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
