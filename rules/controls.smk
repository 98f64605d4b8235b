# The controls that separate what a judge hears from what it reads (docs/metrics.md, "Controls"): the TTS controls
# and the ASR of the target turns the conditions need, the energy and pitch of every turn, and the control analysis
# comparing every control cell with its clean cell.
# Per dialogue, only when a condition needs them: the safe turns re-synthesized ('tts_control') and the sentence
# of the injection ('injection'), one per target turn, by the voice that speaks the variants.
rule synthesize_controls:
    input:
        dialogue="results/corpus/{dialogue}/dialogue.json",
    output:
        table="results/tts/{dialogue}/controls.parquet",
        clips=directory("results/tts/{dialogue}/controls"),
    log:
        "logs/tts/{dialogue}/controls.log",
    params:
        turns=get_target_turns,
        kinds=PLAN.synthesized_controls(),
        voices=canonical(config["tts"]["voices"]),
        match_loudness=config["tts"]["match_loudness"],
        emotion_reference=get_emotion_reference(),
        injection_text=config["controls"]["injection"]["text"],
        seed=SEED,
        code=get_code_digest("synthesize_controls"),
    resources:
        gpu=config["tts"]["gpu"],
        mem_mb=get_tts_mem_mb(),
        runtime=60,
    conda:
        get_tts_conda_env()
    script:
        "../workflow_scripts/synthesize_controls.py"


# One job per (ASR model, dialogue) a control cell reads, for every condition it reads: the target turn of every
# sample of each condition, as the judge hears it, transcribed (the cascade's and ASR sources' text under the
# condition, and its WER). The model loads once per dialogue; a condition added later reruns the job, which
# transcribes only the new condition's turns (the rest come from the transcript cache, `asr.cache_dir`).
rule transcribe_conditions:
    input:
        manifest="results/manifests/{dialogue}.json",
        babble=get_babble_manifests,
    output:
        table="results/asr/{asr}/conditions/{dialogue}.parquet",
    log:
        job="logs/asr/{asr}/conditions/{dialogue}.log",
        turns="logs/asr/{asr}/conditions/{dialogue}.turns.json",
    params:
        conditions=get_asr_conditions,
        model_options=get_asr_model_options,
        controls=get_control_settings(),
        cache=get_asr_cache,
        seed=SEED,
        code=get_code_digest("transcribe_conditions"),
    threads: get_asr_threads
    resources:
        gpu=get_asr_gpus,
        mem_mb=get_asr_mem_mb,
        runtime=120,
    conda:
        "../envs/asr.yaml"
    script:
        "../workflow_scripts/transcribe_conditions.py"


rule describe_turns:
    input:
        dialogue="results/corpus/{dialogue}/dialogue.json",
        tts=get_tts_tables,
    output:
        table="results/prosody/{dialogue}.parquet",
    log:
        "logs/prosody/{dialogue}.log",
    params:
        seed=SEED,
        code=get_code_digest("describe_turns"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/asr.yaml"
    script:
        "../workflow_scripts/describe_turns.py"


rule control_metrics:
    input:
        scores=get_score_indexes(),
        cells="results/metrics/cells.parquet",
        severity_curve="results/metrics/severity_curve.parquet",
        prosody=get_prosody_tables(),
        condition_asr=get_condition_asr_tables(),
        asr=get_asr_tables(),
    output:
        effects=report(
            "results/metrics/controls/effects.parquet", caption="../report/table_control_effects.rst", category="Tables"
        ),
        flags=report(
            "results/metrics/controls/flags.parquet", caption="../report/table_control_flags.rst", category="Tables"
        ),
        noise_curve="results/metrics/controls/noise_curve.parquet",
        condition_wer="results/metrics/controls/condition_wer.parquet",
        prosody_correlation="results/metrics/controls/prosody_correlation.parquet",
    log:
        "logs/metrics/controls.log",
    params:
        bootstrap=config["metrics"]["bootstrap"],
        folds=config["metrics"]["folds"],
        min_dialogues=config["metrics"]["min_dialogues"],
        equivalence_margin=config["metrics"]["equivalence_margin"],
        seed=SEED,
        code=get_code_digest("control_metrics"),
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/control_metrics.py"


rule control_figures:
    input:
        tables=rules.control_metrics.output,
    output:
        control_effects_png=report("results/figures/controls/control_effects.png", caption="../report/control_effects.rst", category="Figures", subcategory="PNG"),
        control_effects_svg=report("results/figures/controls/control_effects.svg", caption="../report/control_effects.rst", category="Figures", subcategory="SVG"),
        noise_snr_png=report("results/figures/controls/noise_snr.png", caption="../report/noise_snr.rst", category="Figures", subcategory="PNG"),
        noise_snr_svg=report("results/figures/controls/noise_snr.svg", caption="../report/noise_snr.rst", category="Figures", subcategory="SVG"),
        prosody_correlation_png=report("results/figures/controls/prosody_correlation.png", caption="../report/prosody_correlation.rst", category="Figures", subcategory="PNG"),
        prosody_correlation_svg=report("results/figures/controls/prosody_correlation.svg", caption="../report/prosody_correlation.rst", category="Figures", subcategory="SVG"),
    log:
        "logs/report/control_figures.log",
    params:
        code=get_code_digest("control_figures"),
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/control_figures.py"
