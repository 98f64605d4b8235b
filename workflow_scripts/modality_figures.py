from pathlib import Path

from lalm_judge.core.logs import log_to
from lalm_judge.report.modality import write_modality_figures

with log_to(snakemake.log[0]):
    write_modality_figures(Path(snakemake.input.effects).parent, Path(snakemake.output.modality_effects_png).parent)
