from lalm_judge.core.logs import log_to
from lalm_judge.pairwise.audit import run_audit_items

with log_to(snakemake.log[0]):
    run_audit_items(
        snakemake.input.item_table,
        snakemake.wildcards.audit,
        snakemake.output.item_table,
        snakemake.output.audio,
        sample_rate=snakemake.params.sample_rate,
        item_settings=snakemake.params.settings,
        seed=snakemake.params.seed,
    )
