from lalm_judge.analysis.flow import run_decision_flow
from lalm_judge.core.logs import log_to

with log_to(snakemake.log[0]):
    run_decision_flow(snakemake.input.guide, snakemake.output.flow)
