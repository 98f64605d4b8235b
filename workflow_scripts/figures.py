from pathlib import Path

from lalm_judge.core.logs import log_to
from lalm_judge.report.figures import write_figures

with log_to(snakemake.log[0]):
    write_figures(Path(snakemake.input.cells).parent, Path(snakemake.output.sensitivity_png).parent)
