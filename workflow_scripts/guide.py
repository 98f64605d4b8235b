from pathlib import Path

from lalm_judge.analysis.stage import run_guide
from lalm_judge.core.logs import log_to

with log_to(snakemake.log[0]):
    run_guide(
        snakemake.input.cells,
        snakemake.input.pareto,
        snakemake.input.flags,
        Path(snakemake.output.guide).parent,
        seed=snakemake.params.seed,
        categories_path=snakemake.input.categories,
        comparisons_path=snakemake.input.comparisons,
        patterns_path=snakemake.input.patterns,
    )
