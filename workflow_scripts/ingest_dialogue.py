from lalm_judge.core.files import read_json
from lalm_judge.core.logs import log_to
from lalm_judge.data.corpus import ingest

with log_to(snakemake.log[0]):
    ingest(
        snakemake.params.corpus,
        snakemake.wildcards.dialogue,
        out_json=snakemake.output.dialogue,
        clips_dir=snakemake.output.clips,
        sample_rate=snakemake.params.sample_rate,
        voices=snakemake.params.voices,
        min_turns=snakemake.params.corpus["min_turns"],
        record=read_json(snakemake.input.source).get("record"),
    )
