# What defines each dialogue, as a file of its own: its record (for `jsonl`, its line of dialogues.jsonl, whose digest
# is the job's param, so that editing one dialogue reruns only that one) and the SHA-256 of its files (clips, JSON,
# recording; a param too, so that a file's content decides, not its mtime). Ingest depends on it, so a changed record
# or a replaced clip reruns that dialogue's stages.
rule index_dialogue:
    input:
        record=get_dialogue_record_file,
        files=get_dialogue_files,
    output:
        source="results/corpus/{dialogue}/source.json",
    log:
        "logs/corpus/{dialogue}.index.log",
    params:
        corpus=get_corpus_location(),
        record_digest=get_record_digest,
        files=get_dialogue_file_digests,
        code=get_code_digest("index_dialogue"),
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        "../envs/tts.yaml"
    script:
        "../workflow_scripts/index_dialogue.py"


rule ingest_dialogue:
    input:
        source="results/corpus/{dialogue}/source.json",
    output:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        clips=directory("results/corpus/{dialogue}/turns"),
    log:
        "logs/corpus/{dialogue}.log",
    params:
        corpus=get_ingest_corpus_settings(),
        sample_rate=config["audio"]["sample_rate"],
        voices=get_ingest_voices(),
        code=get_code_digest("ingest_dialogue"),
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        "../envs/tts.yaml"
    script:
        "../workflow_scripts/ingest_dialogue.py"
