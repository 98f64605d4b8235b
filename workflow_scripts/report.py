from lalm_judge.logs import log_to
from lalm_judge.report import build_report

with log_to(snakemake.log[0]):
    build_report(
        metrics_dir=snakemake.params.metrics_dir,
        score_paths=list(snakemake.params.scores),
        manifest_paths=list(snakemake.input.manifests),
        accounting_path=snakemake.input.accounting,
        config=snakemake.params.config,
        out_html=snakemake.output.html,
    )
