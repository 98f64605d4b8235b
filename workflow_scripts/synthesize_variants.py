from lalm_judge.audio.synthesis import synthesize_turn_variants
from lalm_judge.core.logs import log_to
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log[0]), job_gpus(snakemake.resources.gpu):
    synthesize_turn_variants(
        snakemake.input.dialogue,
        snakemake.input.variants,
        clips_dir=snakemake.output.clips,
        out_table=snakemake.output.table,
        voices=snakemake.params.voices,
        match_loudness=snakemake.params.match_loudness,
        emotion_reference=snakemake.params.emotion_reference,
        seed=snakemake.params.seed,
    )
