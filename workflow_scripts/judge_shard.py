from lalm_judge.core.logs import log_to
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.cell import score_cell
from lalm_judge.manifest.build import read_shard_index
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log[0]), job_gpus(snakemake.resources.gpu):
    score_cell(
        read_shard_index(snakemake.input.shard_index),
        JudgeSpec.from_config(snakemake.wildcards.judge, snakemake.params.spec),
        modality=snakemake.wildcards.modality,
        transcript_source=snakemake.wildcards.source,
        prompt_path=snakemake.input.prompt,
        condition=snakemake.wildcards.condition,
        out_path=snakemake.output.scores,
        shard=int(snakemake.wildcards.shard),
        audio_sample_rate=snakemake.params.audio_sample_rate,
        seed=snakemake.params.seed,
    )
