from lalm_judge.core.logs import log_to
from lalm_judge.core.signals import stop_on_sigterm
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.pairwise.judge import LengthPolicy, judge_cell
from lalm_judge.workflow.gpu import job_gpus

with (
    log_to(snakemake.log.job),
    job_gpus(snakemake.resources.gpu),
    stop_on_sigterm(f"pairwise judge {snakemake.wildcards.judge}, {snakemake.wildcards.modality} cell"),
):
    judge_cell(
        snakemake.input.item_table,
        JudgeSpec.from_config(snakemake.wildcards.judge, snakemake.params.spec),
        modality=snakemake.wildcards.modality,
        transcript_source=snakemake.wildcards.source,
        prompt_path=snakemake.input.prompt,
        out_path=snakemake.output.predictions,
        length=LengthPolicy(**snakemake.params.length),
        sample_rate=snakemake.params.sample_rate,
        transcript_paths=list(snakemake.input.transcripts),
        cache_dir=snakemake.params.cache_dir,
        stats_path=snakemake.log.requests,
        seed=snakemake.params.seed,
        verdict_rule=snakemake.params.verdict_rule,
        audit_condition=snakemake.wildcards.get("audit"),
    )
