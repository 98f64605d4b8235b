rule transcribe_dialogue:
    wildcard_constraints:
        asr=get_asr_pattern(imported=False),
    input:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        tts=get_tts_tables,
    output:
        table="results/asr/{asr}/{dialogue}.parquet",
    log:
        "logs/asr/{asr}/{dialogue}.log",
    params:
        model_options=get_asr_model_options,
        seed=SEED,
        code=get_code_digest("transcribe_dialogue"),
    threads: get_asr_threads
    resources:
        gpu=get_asr_gpus,
        mem_mb=get_asr_mem_mb,
        runtime=120,
    conda:
        "../envs/asr.yaml"
    script:
        "../workflow_scripts/transcribe_dialogue.py"
