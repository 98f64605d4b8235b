rule build_manifest:
    input:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        tts=get_tts_tables,
        asr=get_asr_tables,
        controls=get_control_tables,
    output:
        manifest="results/manifests/{dialogue}.json",
    log:
        "logs/manifests/{dialogue}.log",
    params:
        asr_tables=get_asr_tables_by_model,
        code=get_code_digest("build_manifest"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/build_manifest.py"


rule audio_accounting:
    input:
        manifests=get_manifests(),
    output:
        summary="results/summary/audio_accounting.json",
    log:
        "logs/summary/audio_accounting.log",
    params:
        code=get_code_digest("audio_accounting"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/audio_accounting.py"


# Full-dialogue waveforms are assembled in memory by judges; this rule writes one only on request,
# e.g. `snakemake results/export/demo_music/demo_music.t2.violence.s5.wav`.
rule export_audio:
    input:
        manifest="results/manifests/{dialogue}.json",
    output:
        wav="results/export/{dialogue}/{sample}.wav",
    log:
        "logs/export/{dialogue}/{sample}.log",
    params:
        sample_rate=config["audio"]["sample_rate"],
        code=get_code_digest("export_audio"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/export_audio.py"


# One small index per judge shard: judge jobs depend on it instead of on every manifest of the
# shard, which keeps the DAG's edges O(judge jobs) at paper scale. Judges may split the dialogues into different
# numbers of shards (lalm_judge.workflow.sizing), so an index is of shard {shard} of {n_shards}.
rule shard_index:
    input:
        manifests=get_shard_manifests,
        condition_asr=get_condition_asr_tables,
    output:
        index="results/manifests/shards/of{n_shards}/shard{shard}.json",
    log:
        "logs/manifests/shards/of{n_shards}/shard{shard}.log",
    params:
        code=get_code_digest("shard_index"),
    resources:
        mem_mb=500,
        runtime=5,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/shard_index.py"
