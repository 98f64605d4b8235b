rule compute_metrics:
    input:
        scores=get_score_indexes(),
    output:
        cells=report(
            "results/metrics/cells.parquet", caption="../report/table_cells.rst", category="Tables"
        ),
        position_bias=report(
            "results/metrics/position_bias.parquet", caption="../report/table_position_bias.rst", category="Tables"
        ),
        prompt_selection=report(
            "results/metrics/prompt_selection.parquet", caption="../report/table_prompt_selection.rst", category="Tables"
        ),
        pareto=report(
            "results/metrics/pareto.parquet", caption="../report/table_pareto.rst", category="Tables"
        ),
        categories=report(
            "results/metrics/categories.parquet", caption="../report/table_categories.rst", category="Tables"
        ),
        severity_curve=report(
            "results/metrics/severity_curve.parquet", caption="../report/table_severity_curve.rst", category="Tables"
        ),
        parse_status=report(
            "results/metrics/parse_status.parquet", caption="../report/table_parse_status.rst", category="Tables"
        ),
        comparisons="results/metrics/comparisons.parquet",
    log:
        "logs/metrics/metrics.log",
    params:
        bootstrap=config["metrics"]["bootstrap"],
        folds=config["metrics"]["folds"],
        min_pb_dialogues=config["metrics"]["position_bias_min_dialogues"],
        permutations=config["metrics"]["permutations"],
        min_dialogues=config["metrics"]["min_dialogues"],
        seed=SEED,
        code=get_code_digest("compute_metrics"),
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/compute_metrics.py"


# The practitioner guide, the findings and the families of tests, computed from the metric tables, the control flags
# and the modality patterns beside them (results/metrics/); the report only renders them.
rule guide:
    input:
        cells="results/metrics/cells.parquet",
        pareto="results/metrics/pareto.parquet",
        categories="results/metrics/categories.parquet",
        comparisons="results/metrics/comparisons.parquet",
        flags="results/metrics/controls/flags.parquet",
        patterns="results/metrics/modality/patterns.parquet",
    output:
        guide=report("results/metrics/guide.parquet", caption="../report/table_guide.rst", category="Tables"),
        findings="results/metrics/findings.parquet",
        families="results/metrics/families.parquet",
    log:
        "logs/metrics/guide.log",
    params:
        seed=SEED,
        code=get_code_digest("guide"),
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/guide.py"


# The modality analysis: what the audio adds per transcript source, the ASR loss it rescues, the judges' behaviour
# patterns (docs/metrics.md, "Modality"), on the clean cells.
rule modality_analysis:
    input:
        scores=get_score_indexes(),
    output:
        effects=report(
            "results/metrics/modality/effects.parquet", caption="../report/table_modality_effects.rst", category="Tables"
        ),
        patterns=report(
            "results/metrics/modality/patterns.parquet", caption="../report/table_modality_patterns.rst", category="Tables"
        ),
    log:
        "logs/metrics/modality.log",
    params:
        bootstrap=config["metrics"]["bootstrap"],
        min_dialogues=config["metrics"]["min_dialogues"],
        equivalence_margin=config["metrics"]["equivalence_margin"],
        pattern_min_share=config["metrics"]["pattern_min_share"],
        seed=SEED,
        code=get_code_digest("modality_analysis"),
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/modality_analysis.py"


# The practitioner guide as a decision flow (input -> transcript -> priority -> judge cell), drawn from the guide
# table; the report draws it.
rule decision_flow:
    input:
        guide=rules.guide.output.guide,
    output:
        flow="results/metrics/decision_flow.json",
    log:
        "logs/metrics/decision_flow.log",
    params:
        code=get_code_digest("decision_flow"),
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/analysis.yaml"
    script:
        "../workflow_scripts/decision_flow.py"
