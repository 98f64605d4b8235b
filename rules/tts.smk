rule synthesize_variants:
    input:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        variants="results/variants/{dialogue}/t{turn}.parquet",
    output:
        table="results/tts/{dialogue}/t{turn}.parquet",
        clips=directory("results/tts/{dialogue}/t{turn}"),
    log:
        "logs/tts/{dialogue}/t{turn}.log",
    params:
        voices=config["tts"]["voices"],
        match_loudness=config["tts"].get("match_loudness", True),
        seed=SEED,
    resources:
        mem_mb=2000,
        runtime=60,
    conda:
        get_tts_conda_env
    script:
        "../workflow_scripts/synthesize_variants.py"
