from lalm_judge.core.logs import log_to
from lalm_judge.preference.stage import export_preference

with log_to(snakemake.log[0]):
    export_preference(
        snakemake.input.pairs,
        snakemake.input.acoustic,
        snakemake.input.selection,
        snakemake.input.transcripts,
        snakemake.params.filters,
        snakemake.params.root,
        items_path=snakemake.output.item_table,
        sagelm_dir=snakemake.output.sagelm,
        hf_dir=snakemake.output.hf,
        report_path=snakemake.output.report,
        sample_rate=snakemake.params.sample_rate,
        seed=snakemake.params.seed,
    )
