# The pairwise track (config `pairwise`): items -> response transcripts (the cascade's ASR) -> one judge job
# per pairwise cell (judge, modality, transcript source, prompt), every item in both orders, through the judge's
# request cache (`pairwise.cache_dir`: a rerun or a killed job computes only what is missing) -> metrics -> report.
# Judge jobs take their resources and conda env from the judge registry, as the safety track's do (the GPU
# constraint, the runtime doubled on each retry, the early SIGTERM before the limit).
rule pairwise_items:
    input:
        sources=get_pairwise_item_sources(),
    output:
        **get_pairwise_item_outputs(),
    log:
        "logs/pairwise/items.log",
    params:
        settings=canonical(config["pairwise"]["items"]),
        sample_rate=config["pairwise"]["audio_sample_rate"],
        seed=SEED,
        code=get_code_digest("pairwise_items"),
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/tts.yaml"
    script:
        "../workflow_scripts/pairwise_items.py"


rule pairwise_transcribe:
    input:
        item_table="results/pairwise/items.parquet",
    output:
        table="results/pairwise/asr/{asr}.parquet",
    log:
        "logs/pairwise/asr/{asr}.log",
    params:
        model_options=get_asr_model_options,
        seed=SEED,
        code=get_code_digest("pairwise_transcribe"),
    threads: get_asr_threads
    resources:
        mem_mb=4000,
        runtime=120,
    conda:
        "../envs/asr.yaml"
    script:
        "../workflow_scripts/pairwise_transcribe.py"


rule pairwise_judge:
    input:
        item_table="results/pairwise/items.parquet",
        prompt=get_pairwise_prompt_file,
        transcripts=get_pairwise_transcripts,
    output:
        predictions="results/pairwise/predictions/{judge}/{modality}-{source}/{prompt}.parquet",
    log:
        job="logs/pairwise/predictions/{judge}/{modality}-{source}/{prompt}.log",
        requests="logs/pairwise/predictions/{judge}/{modality}-{source}/{prompt}.requests.json",
    benchmark:
        "benchmarks/pairwise/{judge}/{modality}-{source}/{prompt}.tsv"
    params:
        spec=get_judge_spec,
        length=canonical(config["pairwise"]["long_audio"]),
        sample_rate=config["pairwise"]["audio_sample_rate"],
        verdict_rule=config["pairwise"]["verdict_rule"],
        cache_dir=config["pairwise"]["cache_dir"],
        seed=SEED,
        code=get_code_digest("pairwise_judge"),
    threads: get_judge_resource("threads")
    resources:
        gpu=get_judge_resource("gpu"),
        gpu_model=get_judge_resource("gpu_model"),
        mem_mb=get_judge_resource("mem_mb"),
        runtime=get_judge_runtime(),
        cpus_per_gpu=get_judge_resource("cpus_per_gpu"),
        constraint=get_judge_constraint(),
        slurm_extra=get_judge_slurm_extra(),
    conda:
        get_judge_conda_env
    script:
        "../workflow_scripts/pairwise_judge.py"


# The pairwise audit (`pairwise.conditions`, docs/metrics.md "Pairwise audit"): per condition, the item table with
# one response changed (response 1, and separately response 2) and the changed clips; their transcripts for the
# cascade (only the changed clips: the clean ones are in the clean table); one judge job per (condition, cell), with
# its own request-cache file, so adding a condition computes only its requests.
rule pairwise_audit_items:
    input:
        item_table="results/pairwise/items.parquet",
        voices=get_pairwise_audit_item_sources,
    output:
        item_table="results/pairwise/audit/{audit}/items.parquet",
        audio=directory("results/pairwise/audit/{audit}/audio"),
    log:
        "logs/pairwise/audit/{audit}/items.log",
    params:
        settings=canonical(config["pairwise"]["items"]),
        sample_rate=config["pairwise"]["audio_sample_rate"],
        seed=SEED,
        code=get_code_digest("pairwise_audit_items"),
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/tts.yaml"
    script:
        "../workflow_scripts/pairwise_audit_items.py"


use rule pairwise_transcribe as pairwise_audit_transcribe with:
    input:
        item_table="results/pairwise/audit/{audit}/items.parquet",
        clean="results/pairwise/asr/{asr}.parquet",
    output:
        table="results/pairwise/audit/{audit}/asr/{asr}.parquet",
    log:
        "logs/pairwise/audit/{audit}/asr/{asr}.log",


use rule pairwise_judge as pairwise_audit_judge with:
    input:
        item_table="results/pairwise/audit/{audit}/items.parquet",
        prompt=get_pairwise_prompt_file,
        transcripts=get_pairwise_audit_transcripts,
    output:
        predictions="results/pairwise/audit/{audit}/predictions/{judge}/{modality}-{source}/{prompt}.parquet",
    log:
        job="logs/pairwise/audit/{audit}/predictions/{judge}/{modality}-{source}/{prompt}.log",
        requests="logs/pairwise/audit/{audit}/predictions/{judge}/{modality}-{source}/{prompt}.requests.json",
    benchmark:
        "benchmarks/pairwise/audit/{audit}/{judge}/{modality}-{source}/{prompt}.tsv"


rule pairwise_metrics:
    input:
        predictions=get_pairwise_predictions(),
        audit=get_pairwise_audit_predictions(),
        item_table="results/pairwise/items.parquet",
    output:
        table=report("results/pairwise/metrics/metrics.parquet", caption="../report/table_pairwise.rst", category="Pairwise"),
        document="results/pairwise/metrics/metrics.json",
        comparisons="results/pairwise/metrics/comparisons.parquet",
        statuses="results/pairwise/metrics/statuses.parquet",
        findings="results/pairwise/metrics/findings.parquet",
        audit="results/pairwise/metrics/audit.parquet",
        sagelm_compatible="results/pairwise/metrics/metrics_sagelm_compatible.parquet",
    log:
        "logs/pairwise/metrics.log",
    params:
        bootstrap=config["pairwise"]["metrics"]["bootstrap"],
        duration_bins=config["pairwise"]["metrics"]["duration_bins"],
        min_items=config["pairwise"]["metrics"]["min_items"],
        seed=SEED,
        code=get_code_digest("pairwise_metrics"),
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/pairwise_metrics.py"


# The standalone pairwise report: results/pairwise/report/index.html with its figure, and the item viewer
# samples/ (every item with both responses and every cell's answers in both orders).
rule pairwise_report:
    input:
        metrics=rules.pairwise_metrics.output,
        summary="results/pairwise/items_summary.json",
        predictions=get_pairwise_predictions(),
        viewer_items="results/pairwise/items.parquet",
        viewer_transcripts=get_pairwise_transcript_tables(),
    output:
        site=report(directory("results/pairwise/report"), htmlindex="index.html", caption="../report/pairwise.rst", category="Pairwise"),
    log:
        "logs/pairwise/report.log",
    params:
        config=get_pairwise_report_config(),
        code=get_code_digest("pairwise_report"),
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/pairwise_report.py"
