# lalm-judge: LALM-as-a-judge benchmark of spoken dialogue (safety track) and spoken responses (pairwise track).
# Table of contents only; each stage lives in rules/<stage>.smk.
import gc

from snakemake.utils import min_version

from lalm_judge.workflow.config import check_config_files, validate_config

min_version("9.0")


# The demo config is read only when no --configfile is given: Snakemake merges a --configfile into the
# workflow's configfile mapping by mapping, so configs/paper.yaml would otherwise inherit the demo's voices,
# ASR models and judges.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


# The schema (schemas/config.schema.yaml), defaults filled in, by the code of `lalm-judge validate-config`, so that an
# error reads the same in both (the key path, the value, what is allowed); the checks beyond it: rules/common.smk.
# The config files themselves first: a key given twice in one file (in `config` the last one silently wins) is named
# with its file and line.
check_config_files(workflow.configfiles)
config.update(validate_config(config))


report: "report/workflow.rst"


include: "rules/common.smk"


# The safety track (config `evaluation`), the pairwise track (config `pairwise`) and its preference-data builder
# (config `preference`); a config runs any of them.
if SAFETY in TRACKS:

    include: "rules/corpus.smk"

    # Variants are generated (rewritten, then spoken) or, for a released benchmark, imported as they are.
    if IMPORTED_VARIANTS:

        include: "rules/imported.smk"

    else:

        include: "rules/variants.smk"
        include: "rules/tts.smk"

    include: "rules/asr.smk"
    include: "rules/manifest.smk"
    include: "rules/judge.smk"
    include: "rules/metrics.smk"
    include: "rules/controls.smk"
    include: "rules/report.smk"


if PAIRWISE in TRACKS:

    include: "rules/pairwise.smk"


if PREFERENCE in TRACKS:

    include: "rules/preference.smk"


rule all:
    input:
        get_final_outputs(),
    default_target: True


# Named partial targets: `snakemake corpus`, `snakemake variants`, ..., `snakemake pairwise`, `snakemake preference`
if SAFETY in TRACKS:

    rule corpus:
        input:
            get_corpus_outputs(),

    rule variants:
        input:
            get_variant_tables(),

    rule audio:
        input:
            get_tts_tables(),

    rule transcripts:
        input:
            get_asr_tables(),

    rule manifests:
        input:
            get_manifests(),

    rule scores:
        input:
            get_score_dirs(),


if PAIRWISE in TRACKS:

    rule pairwise:
        input:
            get_pairwise_outputs(),


if PREFERENCE in TRACKS:

    rule preference:
        input:
            get_preference_outputs(),


# Everything alive after the parse (the config and its schema, the plan, the rules, the imported modules) lives
# until Snakemake exits. Frozen (moved to the collector's permanent generation), it is no longer scanned by each
# collection while Snakemake builds the DAG and runs: the 100-dialogue paper dry run takes 4.3 s instead of 6.1 s
# (docs/benchmarks.md, "Workflow DAG at paper scale"). The cost: garbage the parse left in reference cycles, if any,
# is not freed before the process ends.
gc.freeze()
