# The pairwise track's preference-data builder (config `preference`): select and filter the text preference
# data -> speak every response with every engine, one job per (item shard, engine) -> Whisper on every clip,
# one job per (item shard, engine) -> pairs, labels and rationales per shard -> acoustic pairs per style category ->
# export (item table, SageLM records, HF parquet) and the filter report.
rule preference_select:
    input:
        source=get_preference_source(),
    output:
        completions="results/pairwise/preference/completions.parquet",
        ratings="results/pairwise/preference/ratings.parquet",
        report="results/pairwise/preference/selection.json",
    log:
        "logs/pairwise/preference/select.log",
    params:
        settings=canonical(config["preference"]["source"]),
        shards=config["preference"]["shards"],
        seed=SEED,
        code=get_code_digest("preference_select"),
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/preference_select.py"


rule preference_speak:
    input:
        completions="results/pairwise/preference/completions.parquet",
    output:
        table="results/pairwise/preference/audio/{engine}/shard{shard}.parquet",
        clips=directory("results/pairwise/preference/audio/{engine}/shard{shard}"),
    log:
        "logs/pairwise/preference/speak/{engine}/shard{shard}.log",
    params:
        voice=get_preference_voice,
        root=get_preference_root,
        sample_rate=config["preference"]["audio_sample_rate"],
        seed=SEED,
        code=get_code_digest("preference_speak"),
    resources:
        gpu=get_preference_tts_gpus,
        mem_mb=4000,
        runtime=120,
    conda:
        get_preference_tts_env
    script:
        "../workflow_scripts/preference_speak.py"


rule preference_transcribe:
    input:
        table="results/pairwise/preference/audio/{engine}/shard{shard}.parquet",
        clips="results/pairwise/preference/audio/{engine}/shard{shard}",
    output:
        table="results/pairwise/preference/asr/{engine}/shard{shard}.parquet",
    log:
        "logs/pairwise/preference/asr/{engine}/shard{shard}.log",
    params:
        model_options=get_preference_asr_options(),
        root=get_preference_root,
        seed=SEED,
        code=get_code_digest("preference_transcribe"),
    threads: get_preference_asr_threads()
    resources:
        gpu=get_preference_asr_gpus(),
        mem_mb=4000,
        runtime=120,
    conda:
        "../envs/asr.yaml"
    script:
        "../workflow_scripts/preference_transcribe.py"


rule preference_pairs:
    input:
        completions="results/pairwise/preference/completions.parquet",
        ratings="results/pairwise/preference/ratings.parquet",
        transcripts=get_preference_shard_transcripts,
    output:
        table="results/pairwise/preference/pairs/shard{shard}.parquet",
    log:
        "logs/pairwise/preference/pairs/shard{shard}.log",
    params:
        settings=get_preference_pair_settings(),
        cache_dir=config["preference"]["rationales"]["cache_dir"],
        seed=SEED,
        code=get_code_digest("preference_pairs"),
    resources:
        mem_mb=4000,
        runtime=120,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/preference_pairs.py"


rule preference_acoustic:
    input:
        texts=get_preference_acoustic_texts(),
    output:
        table="results/pairwise/preference/acoustic/{style_category}.parquet",
        clips=directory("results/pairwise/preference/acoustic/{style_category}"),
    log:
        "logs/pairwise/preference/acoustic/{style_category}.log",
    params:
        styles=get_preference_styles,
        settings=get_preference_acoustic_settings(),
        root=get_preference_root,
        sample_rate=config["preference"]["audio_sample_rate"],
        seed=SEED,
        code=get_code_digest("preference_acoustic"),
    resources:
        gpu=get_preference_tts_gpus,
        mem_mb=4000,
        runtime=60,
    conda:
        get_preference_tts_env
    script:
        "../workflow_scripts/preference_acoustic.py"


rule preference_export:
    input:
        pairs=get_preference_pairs(),
        acoustic=get_preference_acoustic_tables(),
        selection="results/pairwise/preference/selection.json",
        transcripts=get_preference_transcripts(),
    output:
        item_table="results/pairwise/preference/export/items.parquet",
        sagelm=directory("results/pairwise/preference/export/sagelm"),
        hf=directory("results/pairwise/preference/export/hf"),
        report="results/pairwise/preference/filter_report.json",
    log:
        "logs/pairwise/preference/export.log",
    params:
        filters=canonical(config["preference"]["filters"]),
        root=get_preference_root,
        sample_rate=config["preference"]["audio_sample_rate"],
        seed=SEED,
        code=get_code_digest("preference_export"),
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/preference_export.py"
