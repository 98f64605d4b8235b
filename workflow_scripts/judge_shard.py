from lalm_judge.core.files import write_file_index
from lalm_judge.core.logs import log_to
from lalm_judge.core.signals import stop_on_sigterm
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.controls import shard_conditions
from lalm_judge.judging.job import score_judge_shard
from lalm_judge.manifest.build import read_shard_index
from lalm_judge.workflow.gpu import job_gpus

score_paths = list(snakemake.params.score_paths)
with (
    log_to(snakemake.log.job),
    job_gpus(snakemake.resources.gpu),
    stop_on_sigterm(f"judge {snakemake.params.judge}, shard {snakemake.wildcards.shard}"),
):
    score_judge_shard(
        read_shard_index(snakemake.input.shard_index),
        JudgeSpec.from_config(snakemake.params.judge, snakemake.params.spec),
        cells=snakemake.params.cells,
        out_paths=score_paths,
        prompt_files=list(snakemake.input.prompts),
        shard=int(snakemake.wildcards.shard),
        cache_dir=snakemake.params.cache_dir,
        stats_path=snakemake.log.requests,
        audio_sample_rate=snakemake.params.audio_sample_rate,
        seed=snakemake.params.seed,
        controls=shard_conditions(
            snakemake.input.shard_index,
            snakemake.params.control_conditions,
            snakemake.params.controls,
            snakemake.params.control_dialogues,
            snakemake.params.seed,
        ),
    )
    write_file_index(snakemake.output.score_index, score_paths)
