from lalm_judge.core.logs import log_to
from lalm_judge.preference.acoustic import acoustic_pairs
from lalm_judge.workflow.gpu import job_gpus

with log_to(snakemake.log[0]), job_gpus(snakemake.resources.gpu):
    acoustic_pairs(
        snakemake.input.texts[0],
        snakemake.wildcards.style_category,
        snakemake.params.styles,
        snakemake.params.root,
        snakemake.output.table,
        pairs_per_text=snakemake.params.settings["pairs_per_text"],
        tie_share=snakemake.params.settings["tie_share"],
        sample_rate=snakemake.params.sample_rate,
        seed=snakemake.params.seed,
    )
