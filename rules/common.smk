# Helpers shared by the rules: the plan (dialogues, turns, shards, judge cells) as a pure function
# of the config, and the get_<thing>(wildcards) input functions. Every params value taken from the config
# is canonical (`canonical`: keys sorted), so reordering or reformatting the config reruns nothing.
import functools
import os

from snakemake.logging import logger

from lalm_judge.core.vocabulary import BABBLE, RESPOKEN_AUDIT_KINDS, AuditCondition, Condition, TranscriptSource, wildcard_patterns
from lalm_judge.core.files import file_sha256
from lalm_judge.data import benchmark
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.workflow.config import PAIRWISE, PREFERENCE, SAFETY, canonical, tracks
from lalm_judge.workflow.gpu import check_gpu_budget, gpu_constraint, gpu_features, judge_gpu_memory_gb
from lalm_judge.workflow.preference import ROOT as PREFERENCE_ROOT
from lalm_judge.workflow.preference import speak_gpus
from lalm_judge.workflow.plan import export_checkout_to_jobs, gpu_requests, score_dir
from lalm_judge.workflow.preflight import preflight, summarized
from lalm_judge.workflow.pins import unpinned_models
from lalm_judge.workflow.sizing import PARTITIONS_FILE, early_warning_s, longest_partition_runtime

# Every check the run makes before its first job (lalm_judge.workflow.preflight; `lalm-judge validate-config` runs
# the same): problems stop the parse. Notes are cells routed to a documented alternative, unpinned revisions and
# unset key variables; warnings are corpus turns a voice cannot speak as written. Only the main process reads the
# corpus audio headers and prints them (jobs parse the workflow again).
PREFLIGHT = preflight(config, check_audio=workflow.is_main_process)
if workflow.is_main_process:
    for note in PREFLIGHT.notes:
        logger.warning(f"note: {note}")
    for warning in summarized(PREFLIGHT.warnings):
        logger.warning(f"warning: {warning}")
# A config runs the safety track, the pairwise track or both; each plan exists only for its track.
TRACKS = tracks(config)
PLAN = PREFLIGHT.plan
# The judge jobs' shard counts and estimates (lalm_judge.workflow.sizing), before any job runs.
if PLAN is not None and workflow.is_main_process:
    logger.info(PLAN.sizing_table())
PAIRWISE_PLAN = PREFLIGHT.pairwise_plan
PREFERENCE_PLAN = PREFLIGHT.preference_plan
SEED = config["seed"]
IMPORTED_VARIANTS = SAFETY in TRACKS and config["variants"]["source"] == benchmark.IMPORTED
# Snakemake lowers each job's `gpu` to a --resources gpu=N given on the command line or in a profile, so a
# judge, TTS or ASR job would start with fewer GPUs than it needs: stop before any job instead.
check_gpu_budget(gpu_requests(config), workflow.global_resources.get("gpu"))


@functools.cache
def get_code_digest(script):
    """The SHA-256 of the workflow script (`workflow_scripts/<script>.py`) its jobs run, one of their params: a changed
    script reruns its jobs, and an unchanged one never does, whatever its mtime. Snakemake's own `code` trigger
    compares the script's mtime with the outputs' (a new clone or checkout would rerun every job), so the profiles
    leave that trigger out (docs/cluster.md, "What reruns")."""
    return file_sha256(os.path.join(workflow.basedir, "workflow_scripts", f"{script}.py"))


# Each wildcard matches exactly the words of the vocabulary it stands for (`core.vocabulary.wildcard_patterns`).
wildcard_constraints:
    **wildcard_patterns(),


def get_dialogue_record_file(wildcards):
    """The file holding a dialogue's record when it is shared by every dialogue (`dialogues.jsonl`), as an ancient
    input: its record's digest (a param of the index job) decides, so that editing one dialogue reruns only that one."""
    source = PLAN.source(wildcards.dialogue)
    return ancient(source.source_path) if source.record_digest else []


def get_dialogue_files(wildcards):
    """The files that define a dialogue besides a shared record: its clips, its JSON and recording or segments, as
    ancient inputs: their content decides (`get_dialogue_file_digests`), not their mtime."""
    return [ancient(path) for path in PLAN.source(wildcards.dialogue).files]


def get_dialogue_file_digests(wildcards):
    """The SHA-256 of each file that defines a dialogue, a param of its index job: a file whose content changed reruns
    its dialogue whatever its mtime (a copy that keeps mtimes: `cp -p`, `rsync -a`, `tar x`; results written under a
    clock ahead of the corpus's), and one touched without a change reruns nothing. Its source.json records the same
    digests. Computed when a job's params are compared: the main process reads every corpus file once per run."""
    return {path: file_sha256(path) for path in PLAN.source(wildcards.dialogue).files}


def get_record_digest(wildcards):
    return PLAN.source(wildcards.dialogue).record_digest


def get_corpus_location():
    return canonical({key: config["corpus"][key] for key in ("format", "path")})


def get_ingest_corpus_settings():
    """The corpus settings that change an ingested dialogue; which dialogues are used (dialogues, max_dialogues),
    where audio may be (allow_external_audio) and the release's terms (license, source, citation: only the dataset
    card states them) do not, so changing them reruns no ingest."""
    unused = ("dialogues", "max_dialogues", "allow_external_audio", "license", "source", "citation")
    return canonical({key: value for key, value in config["corpus"].items() if key not in unused})


def get_corpus_outputs():
    return expand("results/corpus/{dialogue}/dialogue.json", dialogue=PLAN.dialogue_ids)


def get_variant_tables(wildcards=None):
    """All variant tables, or those of one dialogue when called with a `dialogue` wildcard."""
    if wildcards is not None and "dialogue" in wildcards.keys():
        pairs = [(wildcards.dialogue, t) for t in PLAN.turns(wildcards.dialogue)]
    else:
        pairs = PLAN.dialogue_turn_pairs()
    return [f"results/variants/{d}/t{t}.parquet" for d, t in pairs]


def get_tts_tables(wildcards=None):
    return [p.replace("results/variants/", "results/tts/") for p in get_variant_tables(wildcards)]


def get_asr_tables(wildcards=None):
    dialogues = [wildcards.dialogue] if wildcards is not None else PLAN.dialogue_ids
    return expand("results/asr/{asr}/{dialogue}.parquet", asr=PLAN.asr_models(), dialogue=dialogues)


def get_asr_tables_by_model(wildcards):
    return canonical({m: f"results/asr/{m}/{wildcards.dialogue}.parquet" for m in PLAN.asr_models()})


def get_prosody_tables():
    """Energy and pitch of every dialogue's turns (`controls.prosody`), else none."""
    if not config["controls"]["prosody"]:
        return []
    return expand("results/prosody/{dialogue}.parquet", dialogue=PLAN.dialogue_ids)


def get_condition_asr_tables(wildcards=None):
    """ASR of the target turns as the judges hear them, one table per (ASR model a control cell reads, dialogue): of
    every control dialogue with variants (`controls.dialogues`), or of those of one shard when called with `shard`
    and `n_shards` wildcards."""
    if wildcards is not None and "shard" in wildcards.keys():
        dialogues = PLAN.control_dialogues(int(wildcards.shard), int(wildcards.n_shards))
    else:
        dialogues = PLAN.control_dialogues()
    models = dict.fromkeys(asr for asr, _ in PLAN.condition_transcripts())
    return [f"results/asr/{asr}/conditions/{d}.parquet" for asr in models for d in dialogues if PLAN.turns(d)]


def get_asr_conditions(wildcards):
    """The control conditions a cell reads the ASR model's transcript under, in first-use order."""
    return [condition for asr, condition in PLAN.condition_transcripts() if asr == wildcards.asr]


def get_asr_cache(wildcards):
    """The transcript cache of a condition ASR job (`asr.cache_dir`), or None."""
    root = config["asr"]["cache_dir"]
    return None if root is None else os.path.join(root, wildcards.asr, f"{wildcards.dialogue}.parquet")


def get_control_tables(wildcards):
    """The TTS control table of a dialogue, when a condition needs re-synthesized turns or injected sentences."""
    if not PLAN.synthesized_controls() or not PLAN.turns(wildcards.dialogue):
        return []
    if not PLAN.is_control_dialogue(wildcards.dialogue):
        return []
    return [f"results/tts/{wildcards.dialogue}/controls.parquet"]


def get_babble_manifests(wildcards):
    """The manifests of a dialogue's shard: babble is made of the other dialogues' turns (only for babble)."""
    if not any(Condition(c).kind == BABBLE for c in get_asr_conditions(wildcards)):
        return []
    shard = PLAN.shard_of_dialogue(wildcards.dialogue)
    dialogues = PLAN.shard_dialogues(shard, PLAN.babble_shard_count())
    return expand("results/manifests/{dialogue}.json", dialogue=dialogues)


def get_control_settings(conditions=True):
    """The `controls` settings that change what a changed turn sounds like (not which analyses run, on which
    dialogues, or whether the viewer writes its audio); none for a judge without control conditions, so tuning them
    reruns only the jobs they affect."""
    if not conditions:
        return {}
    elsewhere = ("prosody", "dialogues", "viewer_audio")
    return canonical({k: v for k, v in config["controls"].items() if k not in elsewhere})


def get_judge_control_conditions(judge):
    """The control conditions (all but 'clean') of a judge's cells, in first-use order."""
    return [c for c in dict.fromkeys(cell.condition for cell in PLAN.judge_cells(judge)) if c != "clean"]


def get_judge_control_dialogues(judge):
    """The dialogues of a judge job's shard that its control cells cover (`controls.dialogues`); none without control
    conditions. Of the job's shard only: a dialogue added to the controls reruns the one job that scores it, and the
    param stays as long as a shard however many dialogues the corpus has (docs/benchmarks.md)."""
    if not get_judge_control_conditions(judge):
        return []
    n_shards = PLAN.judge_shard_count(judge)
    return lambda wildcards: PLAN.control_dialogues(int(wildcards.shard), n_shards)


def get_target_turns(wildcards):
    """The turns of a dialogue that get variants: the target turns of its TTS controls."""
    return PLAN.turns(wildcards.dialogue)


def all_of(paths):
    """A long list of inputs given as an input function. In a rule that also reads another rule's outputs
    (`rules.<name>.output`: the report), Snakemake looks each input path's item up among those dependencies, and a
    list item is hashed whole once per path it holds (quadratic in the dialogues: about 1 s of the 1,000-dialogue dry
    run); a function is hashed as itself (docs/benchmarks.md)."""
    return lambda wildcards: paths


def get_manifests():
    return expand("results/manifests/{dialogue}.json", dialogue=PLAN.dialogue_ids)


def get_shard_manifests(wildcards):
    dialogues = PLAN.shard_dialogues(int(wildcards.shard), int(wildcards.n_shards))
    return expand("results/manifests/{dialogue}.json", dialogue=dialogues)


def get_shard_index(judge):
    """The shard index a job of the judge reads: its shard of the judge's shard count (`workflow.sizing`)."""
    return f"results/manifests/shards/of{PLAN.judge_shard_count(judge)}/shard{{shard}}.json"


def get_score_tables():
    """Every score table of the run: one per cell of each judge and shard of the judge."""
    return [cell.score_path(k) for judge in PLAN.judges() for cell in PLAN.judge_cells(judge) for k in PLAN.shards(judge)]


def get_score_dirs():
    """The score folders of every judge job (`get_judge_score_dir`), what the final target asks for."""
    return [score_dir(judge, k) for judge in PLAN.judges() for k in PLAN.shards(judge)]


def get_score_indexes():
    """The index of each judge job's score tables (`core.files.write_file_index`), what the aggregates read: the
    tables' list, so that a stage reading them depends on one file per judge job (docs/benchmarks.md)."""
    return [get_judge_score_index(judge).format(shard=k) for judge in PLAN.judges() for k in PLAN.shards(judge)]


def get_judge_score_index(judge):
    return f"results/scores/{judge}/shard{{shard}}.index.json"


def get_judge_score_dir(judge):
    """The folder of a judge job's score tables, one per cell of the judge (`JudgeCell.score_path`): one output per
    job instead of one per cell keeps the paper plan near Snakemake's own cost per job (docs/benchmarks.md)."""
    return score_dir(judge, "{shard}")


def get_judge_score_paths(judge):
    """The score tables a judge's job writes into its folder, one per cell of the judge, for the job's shard."""
    cells = PLAN.judge_cells(judge)

    def score_paths(wildcards):
        return [cell.score_path(wildcards.shard) for cell in cells]

    return score_paths


def get_judge_cells(judge):
    """The judge's cells, in the order of its outputs."""
    return canonical([cell.job_fields() for cell in PLAN.judge_cells(judge)])


def get_judge_prompt_files(judge):
    """The judge's prompt templates, relative to the working directory (which may differ from the checkout)."""
    prompts = os.path.join(workflow.basedir, "prompts")
    return [os.path.relpath(os.path.join(prompts, f"{name}.yaml")) for name in PLAN.judge_prompts(judge)]


def judge_name(judge):
    """A judge's name, given as such (the safety track's rules, one per judge) or by a job's `judge` wildcard
    (the pairwise track's rule)."""
    return judge if isinstance(judge, str) else judge.judge


def get_judge_spec(judge):
    """What determines the judge's answers (the registry entry without its schedule and report texts), with a vLLM
    judge's `max_model_len: auto` computed from the run's longest request (lalm_judge.workflow.context_length)."""
    name = judge_name(judge)
    entry = config["judges"][name]
    spec = {k: v for k, v in entry.items() if k not in JudgeSpec.NOT_IN_SPEC}
    if PLAN is not None and name in PLAN.judges() and entry["options"].get("max_model_len") == "auto":
        spec["options"] = {**spec["options"], "max_model_len": PLAN.max_model_len(name)}
    return canonical({**spec, "gpus": entry["schedule"]["resources"]["gpu"]})


def get_report_config():
    """The config sections the report shows, and the models still named by a branch (the report flags them); job
    schedules are left out so tuning them reruns nothing."""
    judges = {n: {k: v for k, v in s.items() if k != "schedule"} for n, s in config["judges"].items()}
    return canonical(
        {
            "seed": config["seed"],
            "evaluation": config["evaluation"],
            "metrics": config["metrics"],
            "judges": judges,
            "unpinned": unpinned_models(
                {"judges": {j: config["judges"][j] for j in PLAN.judges()}, "asr": config["asr"], "tts": config["tts"]}
            ),
        }
    )


def get_judge_resources(judge):
    """Resources of a judge's jobs from the judge registry (`judges.<name>.schedule.resources`)."""
    return config["judges"][judge_name(judge)]["schedule"]["resources"]


# The SLURM profile's partition file, read once per parse.
partition_runtime_cap = functools.cache(longest_partition_runtime)
cluster_gpu_features = functools.cache(lambda: gpu_features(PARTITIONS_FILE))


def get_judge_runtime(judge=None):
    """Minutes of an attempt of the judge's job (a name; None: the job's `judge` wildcard, the pairwise track's rule):
    its runtime, doubled on each retry (a job SLURM stopped at its limit resumes from the request cache with more
    time), at most the longest SLURM partition that takes it (profiles/slurm/partitions.yaml)."""

    def runtime(wildcards, attempt):
        resources = get_judge_resources(judge if judge is not None else wildcards)
        longest = partition_runtime_cap(resources["gpu"])
        minutes = resources["runtime"] * 2 ** (attempt - 1)
        return minutes if longest is None else min(minutes, max(int(longest[1]), resources["runtime"]))

    return runtime


def get_judge_slurm_extra(judge=None):
    """The SLURM options of an attempt of the judge's job: an early SIGTERM (`--signal=TERM@<s>`) a few minutes before
    its time limit, enough for the call in flight to finish and commit (lalm_judge.workflow.sizing.early_warning_s;
    the job then stops at that commit, lalm_judge.core.signals). Only the SLURM executor reads it. It replaces a
    `slurm_extra` the profile's default-resources may set: add site options to it here."""
    runtime = get_judge_runtime(judge)

    def slurm_extra(wildcards, attempt):
        return f"--signal=TERM@{early_warning_s(runtime(wildcards, attempt))}"

    return slurm_extra


def get_judge_constraint(judge=None):
    """The SLURM constraint of the judge's jobs: the node features of the GPU models with the memory it needs
    (lalm_judge.workflow.gpu: `judge_gpu_memory_gb`, the `gpu_memory_gb` table of profiles/slurm/partitions.yaml);
    none for a judge without GPUs, with a `gpu_model` of its own, or on a cluster whose table lists no GPU model."""

    def constraint(wildcards):
        name = judge_name(judge if judge is not None else wildcards)
        entry = config["judges"][name]
        if entry["schedule"]["resources"]["gpu_model"]:
            return None
        return gpu_constraint(name, judge_gpu_memory_gb(entry), cluster_gpu_features())

    return constraint


def get_judge_resource(name):
    """One resource of a judge job, from its `judge` wildcard (the pairwise track's rule)."""

    def resource(wildcards):
        return get_judge_resources(wildcards)[name]

    return resource


def get_ingest_voices():
    """Voices that speak text-only turns at ingest: only `jsonl` corpora have such turns (DeepDialogue ships its audio),
    so for the other formats a TTS change reruns no ingest."""
    return canonical(config["tts"]["voices"]) if config["corpus"]["format"] == "jsonl" else {}


def get_generator_options():
    """The rewrite generator's own settings (the cache folder is a workflow setting)."""
    return canonical({k: v for k, v in config["variants"]["generator"].items() if k != "cache_dir"})


def get_asr_model_options(wildcards):
    """The ASR model's settings; its `gpu` request schedules the job and changes no transcript."""
    return canonical({k: v for k, v in config["asr"]["models"][wildcards.asr].items() if k != "gpu"})


def get_asr_pattern(imported):
    """The ASR model names whose tables are imported from a released benchmark (or those that are recognized)."""
    names = [m for m, e in config["asr"]["models"].items() if (e["model"] == benchmark.IMPORTED) == imported]
    return "|".join(names) or "(?!)"  # (?!) matches nothing: no model of that kind


def get_benchmark_variants(wildcards):
    return str(benchmark.variants_path(config["corpus"]["path"], wildcards.dialogue))


def get_benchmark_transcripts(wildcards):
    return str(benchmark.transcripts_path(config["corpus"]["path"], wildcards.dialogue))


def get_asr_threads(wildcards):
    return config["asr"]["models"][wildcards.asr]["cpu_threads"]


def get_asr_gpus(wildcards):
    """GPUs of an ASR job: `asr.models.<name>.gpu` (1 for a cuda model, checked when the config is parsed)."""
    return config["asr"]["models"][wildcards.asr]["gpu"]


def get_asr_mem_mb(wildcards):
    # Whisper large-v3 in float16 holds about 3 GB on the host while it loads onto the GPU.
    return 8000 if config["asr"]["models"][wildcards.asr]["gpu"] else 4000


def get_tts_mem_mb():
    # XTTS-v2 loads its 1.9 GB checkpoint through host memory (about 5 GB at peak); Piper/espeak need little.
    engines = {v["engine"] for v in config["tts"]["voices"].values()}
    return 8000 if "xtts" in engines else 2000


def get_emotion_reference():
    """tts.emotion_reference (the RAVDESS references of the TTS jobs), or None when the config sets none."""
    return canonical(config["tts"].get("emotion_reference"))


def get_tts_conda_env():
    """The TTS jobs' env, one for the whole run (a string, not a function of the job: Snakemake resolves it once)."""
    engines = {v["engine"] for v in config["tts"]["voices"].values()}
    return "../envs/tts-xtts.yaml" if "xtts" in engines else "../envs/tts.yaml"


def get_judge_conda_env(judge):
    entry = config["judges"][judge_name(judge)]
    default = "../envs/judge-vllm.yaml" if entry["backend"] == "vllm" else "../envs/judge-hf.yaml"
    return entry["schedule"].get("conda_env", default)


def get_pairwise_item_sources():
    return PAIRWISE_PLAN.item_sources()


def get_pairwise_item_outputs():
    """The item stage's outputs: the table and its summary, and the spoken audio where the stage speaks the
    items (format jsonl); SageLM records bring their own audio, so their run has no audio folder."""
    outputs = {"item_table": "results/pairwise/items.parquet", "summary": "results/pairwise/items_summary.json"}
    if PAIRWISE_PLAN.speaks_items():
        outputs["audio"] = directory("results/pairwise/audio")
    return outputs


def get_pairwise_predictions():
    return [f"results/pairwise/predictions/{cell.path}.parquet" for cell in PAIRWISE_PLAN.cells()]


def get_pairwise_prompt_file(wildcards):
    """The pairwise prompt template, relative to the working directory."""
    return os.path.relpath(os.path.join(workflow.basedir, "prompts", "pairwise", f"{wildcards.prompt}.yaml"))


def get_pairwise_transcripts(wildcards):
    """The cascade's transcript table of an 'asr:<model>' source; none for the other sources."""
    model = TranscriptSource(wildcards.source).asr_model
    return [f"results/pairwise/asr/{model}.parquet"] if model else []


def get_pairwise_transcript_tables():
    """The cascade's transcript table of every ASR model a pairwise cell reads."""
    return [f"results/pairwise/asr/{model}.parquet" for model in PAIRWISE_PLAN.asr_models()]


def get_pairwise_audit_predictions():
    return PAIRWISE_PLAN.audit_predictions()


def get_pairwise_audit_transcripts(wildcards):
    """The transcript tables an audit cell reads: the clean responses' and its condition's changed responses'."""
    return PAIRWISE_PLAN.audit_transcripts(wildcards.audit, TranscriptSource(wildcards.source).asr_model)


def get_pairwise_audit_item_sources(wildcards):
    """The clean item table, and the project items file where the condition speaks responses again (their voices)."""
    respoken = AuditCondition(wildcards.audit).kind in RESPOKEN_AUDIT_KINDS
    return [config["pairwise"]["items"]["path"]] if respoken and PAIRWISE_PLAN.speaks_items() else []


def get_pairwise_report_config():
    """The config the pairwise report shows (job schedules left out, so tuning them reruns nothing)."""
    judges = {n: {k: v for k, v in config["judges"][n].items() if k != "schedule"} for n in config["pairwise"]["judges"]}
    return canonical({"seed": config["seed"], "pairwise": config["pairwise"], "judges": judges})


def get_pairwise_outputs():
    return [
        *get_pairwise_predictions(),
        "results/pairwise/metrics/metrics.parquet",
        "results/pairwise/report",
    ]


def get_preference_root(wildcards, output):
    """The builder's folder, which every clip path is relative to, as it appears in the rule's outputs."""
    first = str(output[0])
    return first[: first.index(PREFERENCE_ROOT) + len(PREFERENCE_ROOT)]


def get_preference_source():
    return config["preference"]["source"]["path"]


def get_preference_voice(wildcards):
    return canonical(config["preference"]["engines"][wildcards.engine])


def _preference_voices(wildcards):
    """The voices a speak job (engine wildcard) or an acoustic job (style_category wildcard) uses."""
    if "engine" in wildcards.keys():
        return [config["preference"]["engines"][wildcards.engine]]
    return PREFERENCE_PLAN.style_category_voices(wildcards.style_category)


def get_preference_tts_env(wildcards):
    """XTTS runs in its GPU environment; Piper and espeak-ng in the TTS environment."""
    return "../envs/tts-xtts.yaml" if speak_gpus(_preference_voices(wildcards)) else "../envs/tts.yaml"


def get_preference_tts_gpus(wildcards):
    return speak_gpus(_preference_voices(wildcards))


def get_preference_asr_gpus():
    return config["asr"]["models"][config["preference"]["asr"]]["gpu"]


def get_preference_asr_options():
    return canonical(config["asr"]["models"][config["preference"]["asr"]])


def get_preference_asr_threads():
    return config["asr"]["models"][config["preference"]["asr"]]["cpu_threads"]


def get_preference_shard_transcripts(wildcards):
    return PREFERENCE_PLAN.transcripts(int(wildcards.shard))


def get_preference_transcripts():
    return PREFERENCE_PLAN.transcripts()


def get_preference_pair_settings():
    """What decides a shard's pairs: the clip filters, the pairing rules and the rationale generator."""
    return canonical({key: config["preference"][key] for key in ("filters", "pairs", "rationales")})


def get_preference_pairs():
    return PREFERENCE_PLAN.pairs()


def get_preference_acoustic_texts():
    return [config["preference"]["acoustic"]["items"]] if PREFERENCE_PLAN.style_categories else []


def get_preference_styles(wildcards):
    return canonical(config["preference"]["acoustic"]["styles"][wildcards.style_category])


def get_preference_acoustic_settings():
    acoustic = config["preference"].get("acoustic")
    return canonical({k: acoustic[k] for k in ("pairs_per_text", "tie_share")}) if acoustic else {}


def get_preference_acoustic_tables():
    return PREFERENCE_PLAN.acoustic()


def get_preference_outputs():
    return PREFERENCE_PLAN.outputs()


def get_safety_outputs():
    return [
        *get_manifests(),
        *get_score_dirs(),
        "results/summary/audio_accounting.json",
        "results/metrics/cells.parquet",
        "results/report",
    ]


def get_final_outputs():
    return [
        *(get_safety_outputs() if SAFETY in TRACKS else []),
        *(get_pairwise_outputs() if PAIRWISE in TRACKS else []),
        *(get_preference_outputs() if PREFERENCE in TRACKS else []),
    ]


# Jobs in per-rule conda envs import the library from this checkout, not from an installed copy.
export_checkout_to_jobs(workflow.basedir)
