from pathlib import Path

from lalm_judge.core.logs import log_to
from lalm_judge.report.controls import write_control_figures

with log_to(snakemake.log[0]):
    write_control_figures(Path(snakemake.input.tables[0]).parent, Path(snakemake.output.control_effects_png).parent)
