# A released benchmark (corpus.format hf_benchmark, written by `lalm-judge import --format hf`) judged as it
# is: its variant texts, labels and speech become the variant and TTS tables, one job per (dialogue, turn) it holds
# variants of (its index lists them), and ASR models configured as `model: imported` take its released transcripts.
rule import_variants:
    input:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        released=get_benchmark_variants,
    output:
        variants="results/variants/{dialogue}/t{turn}.parquet",
        table="results/tts/{dialogue}/t{turn}.parquet",
        clips=directory("results/tts/{dialogue}/t{turn}"),
    log:
        "logs/variants/{dialogue}/t{turn}.log",
    params:
        benchmark=config["corpus"]["path"],
        categories=canonical(config["variants"]["categories"]),
        severities=canonical(config["variants"]["severities"]),
        seed=SEED,
        code=get_code_digest("import_variants"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/import_variants.py"


rule import_transcripts:
    wildcard_constraints:
        asr=get_asr_pattern(imported=True),
    input:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        tts=get_tts_tables,
        released=get_benchmark_transcripts,
    output:
        table="results/asr/{asr}/{dialogue}.parquet",
    log:
        "logs/asr/{asr}/{dialogue}.log",
    params:
        benchmark=config["corpus"]["path"],
        seed=SEED,
        code=get_code_digest("import_transcripts"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/import_transcripts.py"
