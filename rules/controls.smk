# The controls that separate what a judge hears from what it reads (docs/metrics.md, "Controls"): the energy and
# pitch of every turn, and the control analysis comparing every control cell with its clean cell.
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
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../envs/asr.yaml"
    script:
        "../workflow_scripts/describe_turns.py"


rule control_metrics:
    input:
        scores=get_score_shards(),
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
        seed=SEED,
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
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/control_figures.py"
