from pathlib import Path

from lalm_judge.core.logs import log_to
from lalm_judge.report.samples import SampleViewerInputs
from lalm_judge.report.site import build_report

with log_to(snakemake.log[0]):
    build_report(
        metrics_dir=Path(snakemake.input.metrics[0]).parent,
        figure_dir=Path(snakemake.input.figures[0]).parent,
        manifest_paths=list(snakemake.input.manifests),
        asr_paths=list(snakemake.input.asr),
        accounting_path=snakemake.input.accounting,
        config=snakemake.params.config,
        out_dir=snakemake.output.site,
        controls_dir=Path(snakemake.input.controls[0]).parent,
        control_figure_dir=Path(snakemake.input.control_figures[0]).parent,
        modality_dir=Path(snakemake.input.modality[0]).parent,
        modality_figure_dir=Path(snakemake.input.modality_figures[0]).parent,
        flow_path=snakemake.input.flow,
        viewer=SampleViewerInputs(
            score_paths=list(snakemake.params.viewer_scores),
            manifest_paths=list(snakemake.input.manifests),
            asr_paths=list(snakemake.input.asr),
            condition_asr_paths=list(snakemake.params.viewer_condition_asr),
            controls=snakemake.params.viewer_controls,
            seed=snakemake.params.config["seed"],
            threads=snakemake.threads,
            control_audio=snakemake.params.viewer_audio,
            listening_rate=snakemake.params.config["evaluation"]["audio_sample_rate"],
        ),
    )
