# Figures and reports, aggregate jobs over the metric tables. results/report/ is the standalone report
# (open results/report/index.html); `snakemake --report results/report.zip` builds Snakemake's report with
# the figures, their captions (report/*.rst) and the standalone report inside it.
rule figures:
    input:
        cells="results/metrics/cells.parquet",
        position_bias="results/metrics/position_bias.parquet",
        prompt_selection="results/metrics/prompt_selection.parquet",
        pareto="results/metrics/pareto.parquet",
        categories="results/metrics/categories.parquet",
        severity_curve="results/metrics/severity_curve.parquet",
    output:
        sensitivity_png=report("results/figures/sensitivity.png", caption="../report/sensitivity.rst", category="Figures", subcategory="PNG"),
        sensitivity_svg=report("results/figures/sensitivity.svg", caption="../report/sensitivity.rst", category="Figures", subcategory="SVG"),
        pareto_png=report("results/figures/pareto.png", caption="../report/pareto.rst", category="Figures", subcategory="PNG"),
        pareto_svg=report("results/figures/pareto.svg", caption="../report/pareto.rst", category="Figures", subcategory="SVG"),
        prompt_strategies_png=report("results/figures/prompt_strategies.png", caption="../report/prompt_strategies.rst", category="Figures", subcategory="PNG"),
        prompt_strategies_svg=report("results/figures/prompt_strategies.svg", caption="../report/prompt_strategies.rst", category="Figures", subcategory="SVG"),
        severity_curves_png=report("results/figures/severity_curves.png", caption="../report/severity_curves.rst", category="Figures", subcategory="PNG"),
        severity_curves_svg=report("results/figures/severity_curves.svg", caption="../report/severity_curves.rst", category="Figures", subcategory="SVG"),
        position_bias_sensitivity_png=report("results/figures/position_bias_sensitivity.png", caption="../report/position_bias_sensitivity.rst", category="Figures", subcategory="PNG"),
        position_bias_sensitivity_svg=report("results/figures/position_bias_sensitivity.svg", caption="../report/position_bias_sensitivity.rst", category="Figures", subcategory="SVG"),
        position_bias_specificity_png=report("results/figures/position_bias_specificity.png", caption="../report/position_bias_specificity.rst", category="Figures", subcategory="PNG"),
        position_bias_specificity_svg=report("results/figures/position_bias_specificity.svg", caption="../report/position_bias_specificity.rst", category="Figures", subcategory="SVG"),
        categories_png=report("results/figures/categories.png", caption="../report/categories.rst", category="Figures", subcategory="PNG"),
        categories_svg=report("results/figures/categories.svg", caption="../report/categories.rst", category="Figures", subcategory="SVG"),
    log:
        "logs/report/figures.log",
    params:
        code=get_code_digest("figures"),
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/figures.py"


rule modality_figures:
    input:
        effects="results/metrics/modality/effects.parquet",
        patterns="results/metrics/modality/patterns.parquet",
    output:
        modality_effects_png=report("results/figures/modality/modality_effects.png", caption="../report/modality_effects.rst", category="Figures", subcategory="PNG"),
        modality_effects_svg=report("results/figures/modality/modality_effects.svg", caption="../report/modality_effects.rst", category="Figures", subcategory="SVG"),
    log:
        "logs/report/modality_figures.log",
    params:
        code=get_code_digest("modality_figures"),
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/modality_figures.py"


# The standalone report folder: index.html, figures/, audio/, and the sample viewer samples/ (every score row, read
# from the score tables and the ASR of the changed turns); it renders the metric tables, the guide, the findings and
# the decision flow (results/metrics/), the control and the modality tables. The score and condition ASR
# tables are inputs of control_metrics, on whose outputs the report depends (so it runs after them and again when
# they change); declared again here they would double the paper-scale dry run (docs/benchmarks.md), so the viewer
# gets their paths as params.
rule report:
    input:
        metrics=rules.compute_metrics.output,
        guide=rules.guide.output,
        figures=rules.figures.output,
        controls=rules.control_metrics.output,
        control_figures=rules.control_figures.output,
        modality=rules.modality_analysis.output,
        modality_figures=rules.modality_figures.output,
        flow=rules.decision_flow.output.flow,
        manifests=all_of(get_manifests()),
        asr=all_of(get_asr_tables()),
        accounting="results/summary/audio_accounting.json",
    output:
        site=report(directory("results/report"), htmlindex="index.html", caption="../report/standalone.rst", category="Report"),
    log:
        "logs/report/report.log",
    params:
        config=get_report_config(),
        viewer_scores=get_score_tables(),
        viewer_condition_asr=get_condition_asr_tables(),
        viewer_controls=get_control_settings(),
        viewer_audio=config["controls"]["viewer_audio"],
        code=get_code_digest("report"),
    # The viewer's audio encoding and data compression run in threads (fewer when the run has fewer cores); at
    # paper scale the viewer takes about 56 CPU-minutes and 5.5 GB of memory (docs/benchmarks.md).
    threads: 4
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/report.py"
