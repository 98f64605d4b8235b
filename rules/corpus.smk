rule ingest_dialogue:
    output:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        clips=directory("results/corpus/{dialogue}/turns"),
    log:
        "logs/corpus/{dialogue}.log",
    params:
        corpus=get_ingest_corpus(),
        sample_rate=config["audio"]["sample_rate"],
        voices=get_ingest_voices(),
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        "../envs/tts.yaml"
    script:
        "../workflow_scripts/ingest_dialogue.py"
