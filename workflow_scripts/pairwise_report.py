from pathlib import Path

from lalm_judge.core.logs import log_to
from lalm_judge.report.pairwise import build_pairwise_report
from lalm_judge.report.pairwise_samples import PairwiseViewerInputs

with log_to(snakemake.log[0]):
    build_pairwise_report(
        metrics_dir=Path(snakemake.input.metrics[0]).parent,
        items_summary_path=snakemake.input.summary,
        config=snakemake.params.config,
        out_dir=snakemake.output.site,
        prediction_paths=list(snakemake.input.predictions),
        viewer=PairwiseViewerInputs(
            items_path=snakemake.input.viewer_items,
            prediction_paths=list(snakemake.input.predictions),
            transcript_paths=list(snakemake.input.viewer_transcripts),
        ),
    )
