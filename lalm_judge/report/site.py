"""The standalone report folder: `index.html` (the findings; judges, with a visible warning for weak demo models;
the practitioner guide and its decision flow (`lalm_judge.report.flow`); figures; metric, Pareto and
prompt-selection tables; parse failures and refusals per cell; the controls (`lalm_judge.report.controls`); the
modality analysis (`lalm_judge.report.modality`); WER per transcript source; the audio accounting; audio examples),
`figures/`, `audio/` and the sample viewer `samples/` (`lalm_judge.report.samples`), which the tables link to. The
report renders what the metrics stage wrote (`core.table_sets`: the metric tables, the control tables, the modality
tables, the guide and findings of `results/metrics/`, and the decision flow); it computes no metric. Everything
depends only on its inputs: no dates, examples chosen by sorted ids, numbers rounded for display only."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lalm_judge.core.files import atomic_path, read_json
from lalm_judge.core.table_sets import ControlTables, GuideTables, MetricTables, ModalityTables
from lalm_judge.manifest.samples import Manifest
from lalm_judge.report import figures
from lalm_judge.report.controls import CONTROL_FIGURES, controls_section
from lalm_judge.report.examples import N_AUDIO_EXAMPLES, write_audio_examples
from lalm_judge.report.html import ReportContent, render_html
from lalm_judge.report.modality import MODALITY_FIGURES, modality_section
from lalm_judge.report.samples import SampleViewerInputs, write_sample_viewer
from lalm_judge.report.tables import (
    accounting_table,
    judge_table,
    overview_table,
    prompt_selection_summary,
    provenance_table,
    wer_table,
)
from lalm_judge.report.viewer import VIEWER_DIR


def copy_figures(
    figure_dir: str | os.PathLike, out_dir: str | os.PathLike, specs: Sequence[Any] = figures.FIGURES
) -> tuple[str, ...]:
    """Copy every figure of `specs` (PNG and SVG) from figure_dir into out_dir; return their names."""
    for spec in specs:
        for fmt in figures.FORMATS:
            source = Path(figure_dir) / f"{spec.name}.{fmt}"
            if not source.exists():
                raise FileNotFoundError(f"figure {source} is missing; draw the figures first (`write_figures`)")
            with atomic_path(Path(out_dir) / source.name) as tmp:
                shutil.copyfile(source, tmp)
    return tuple(spec.name for spec in specs)


def build_report(
    *,
    metrics_dir: str | os.PathLike,
    figure_dir: str | os.PathLike,
    manifest_paths: Sequence[str | os.PathLike],
    asr_paths: Sequence[str | os.PathLike],
    accounting_path: str | os.PathLike,
    config: Mapping[str, Any],
    out_dir: str | os.PathLike,
    controls_dir: str | os.PathLike,
    control_figure_dir: str | os.PathLike,
    modality_dir: str | os.PathLike,
    modality_figure_dir: str | os.PathLike,
    flow_path: str | os.PathLike,
    n_examples: int = N_AUDIO_EXAMPLES,
    title: str = "lalm-judge: LALMs as safety judges of spoken dialogue",
    viewer: SampleViewerInputs | None = None,
) -> Path:
    """Write the standalone report folder (index.html, figures/, audio/, and with `viewer` the sample viewer,
    samples/) from the tables under `metrics_dir` (the metric tables, the guide and the findings), `controls_dir`
    and `modality_dir` and the decision flow at `flow_path`; return index.html."""
    out_dir = Path(out_dir)
    tables, summary = MetricTables.read(metrics_dir), GuideTables.read(metrics_dir)
    controls = ControlTables.read(controls_dir)
    judges = judge_table(config, tables.cells["judge"].unique().to_list())
    manifests = [Manifest.load(path) for path in manifest_paths]
    content = ReportContent(
        title=title,
        overview=overview_table(config, manifests, tables.cells),
        judges=judges,
        findings=summary.findings,
        families=summary.families,
        guide=summary.guide,
        figure_names=copy_figures(figure_dir, out_dir / "figures"),
        cells=tables.cells,
        pareto=tables.pareto,
        prompt_selection=prompt_selection_summary(tables.prompt_selection),
        parse_status=tables.parse_status,
        wer=wer_table(asr_paths),
        accounting=accounting_table(read_json(accounting_path)),
        examples=tuple(write_audio_examples(manifests, out_dir / "audio", n_examples)),
        provenance=provenance_table(tables.cells),
        controls=controls_section(controls, copy_figures(control_figure_dir, out_dir / "figures", CONTROL_FIGURES)),
        control_flags=controls.flags,
        unpinned=tuple(config.get("unpinned", ())),
        flow=read_json(flow_path),
        modality=modality_section(
            ModalityTables.read(modality_dir),
            copy_figures(modality_figure_dir, out_dir / "figures", MODALITY_FIGURES),
            {r["judge"]: r["weak_reason"] for r in judges.iter_rows(named=True) if r["weak_reason"]},
        ),
    )
    index = out_dir / "index.html"
    with atomic_path(index) as tmp:
        tmp.write_text(render_html(content), encoding="utf-8")
    if viewer is not None:
        write_sample_viewer(viewer, out_dir / VIEWER_DIR)
    return index
