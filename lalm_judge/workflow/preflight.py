"""Everything a run checks before its first job, in one place: the workflow (`rules/common.smk`) and
`lalm-judge validate-config` both call `preflight`, so they refuse the same inputs with the same messages.

In order: the value types the schema names, strictly (an integer key refuses 1.0, which would name files
'...s1.0'); the cross-references of `workflow.config.check_config` and the run environment; the endpoint
settings the schema cannot check (the judges' `score_tokens`); every prompt file a judge reads, loaded as its job
loads it; the rewrite generator's own settings; the corpus, listed and checked record by record (`data.records`,
audio headers with `check_audio`); that every speaker who is spoken has a voice; and that the plan measures
something: variants, judge cells, a metric.
A problem is a ConfigError (or CorpusError) naming the key, the value and what is allowed; what the run can go on
with is a note (cells routed to a documented alternative, unpinned revisions, a variable not set here) or a
warning about a corpus record (a turn a voice cannot speak as written).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import yaml

from lalm_judge.core.endpoints import endpoint_defaults
from lalm_judge.core.files import read_schema
from lalm_judge.core.vocabulary import AUDIO, Condition, TranscriptSource, condition_cell_error
from lalm_judge.data import benchmark
from lalm_judge.data.generators import GeneratorConfigError, build_generator
from lalm_judge.judging.backends.chat import validate_score_tokens
from lalm_judge.judging.prompts import PromptError, load_prompt
from lalm_judge.pairwise.prompts import load_pairwise_prompt
from lalm_judge.workflow.config import (
    PAIRWISE,
    PREFERENCE,
    SAFETY,
    SCHEMA_PATH,
    ConfigError,
    check_config,
    check_run_environment,
    tracks,
)
from lalm_judge.workflow.pairwise import PairwisePlan
from lalm_judge.workflow.plan import Plan, judge_cells
from lalm_judge.workflow.preference import PreferencePlan


@dataclass
class Preflight:
    """The checked run: the plans of its tracks, notes on the config and warnings about corpus records."""

    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plan: Plan | None = None
    pairwise_plan: PairwisePlan | None = None
    preference_plan: PreferencePlan | None = None


def preflight(
    config: dict[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    check_audio: bool = True,
    config_only: bool = False,
) -> Preflight:
    """Check a schema-validated config (defaults filled) and its corpus as the run would; raise the first problem.

    `check_audio` reads the header of every corpus audio file; the jobs' own parses of the workflow skip it (the
    main process has checked). `config_only` checks the config alone: not the run environment, the corpus or the
    plan made of it (`lalm-judge validate-config --config-only`, before the corpus is downloaded)."""
    environ = os.environ if environ is None else environ
    check_value_types(config)
    notes = check_config(config) + ([] if config_only else check_run_environment(config, environ))
    notes += check_endpoints(config, environ)
    check_prompts(config)
    result = Preflight(notes=notes)
    if SAFETY in tracks(config):
        check_generator(config)
    if config_only:
        return result
    if SAFETY in tracks(config):
        result.plan = Plan(config, check_audio=check_audio)
        check_voices(config, result.plan)
        check_plan_measures(config, result.plan)
        result.warnings = result.plan.warnings()
    if PAIRWISE in tracks(config):
        result.pairwise_plan = PairwisePlan(config)
    if PREFERENCE in tracks(config):
        result.preference_plan = PreferencePlan(config)
    return result


def summarized(warnings: list[str], limit: int = 10) -> list[str]:
    """The first `limit` warnings and a line counting the rest (each is also in its dialogue.json)."""
    rest = len(warnings) - limit
    more = [f"... and {rest} more like these (each dialogue's dialogue.json lists its own)"] if rest > 0 else []
    return warnings[:limit] + more


# --- value types --------------------------------------------------------------------------------------------------
def _is_integer(_checker: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def _strict_validator() -> jsonschema.protocols.Validator:
    """The schema's validator with `integer` meaning an integer, not also a float with no fractional part (JSON
    Schema's rule, which Snakemake's validation follows)."""
    base = jsonschema.Draft202012Validator
    strict = jsonschema.validators.extend(base, type_checker=base.TYPE_CHECKER.redefine("integer", _is_integer))
    return strict(read_schema(SCHEMA_PATH))


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """Of a oneOf / anyOf error, the error of the alternative that got furthest into the value (for `turns: [1.0]`,
    the list's item, not 'is not a string')."""
    while error.context:
        error = max(error.context, key=lambda sub: len(sub.absolute_path))
    return error


def _type_message(error: jsonschema.ValidationError) -> str:
    if error.validator == "type" and isinstance(error.instance, float) and "integer" in str(error.validator_value):
        return (
            f"{error.instance!r} is a decimal number, and this key takes an integer: write {int(error.instance)} "
            f"(as given it would name ids and files '...{error.instance!r}')"
            if error.instance.is_integer()
            else f"{error.instance!r} is not an integer"
        )
    return error.message


def check_value_types(config: Mapping[str, Any]) -> None:
    """Refuse values of the wrong JSON type under the strict reading of `integer`, naming key and value."""
    errors = [_deepest(error) for error in _strict_validator().iter_errors(config)]
    errors.sort(key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        lines = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {_type_message(e)}" for e in errors]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))


# --- endpoints ----------------------------------------------------------------------------------------------------
def _run_judges(config: Mapping[str, Any]) -> list[str]:
    names = [*config.get("evaluation", {}).get("judges", []), *config.get("pairwise", {}).get("judges", [])]
    return list(dict.fromkeys(names))


def _score_token_problem(name: str, options: Mapping[str, Any]) -> str | None:
    score_tokens = options.get("score_tokens")
    if not score_tokens:
        return None
    try:
        validate_score_tokens(score_tokens if isinstance(score_tokens, Mapping) else {})
    except ValueError as err:
        return f"judges.{name}.{err}"
    return None


def _key_variables(config: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """(key path, variable name) of every key variable of an endpoint the run calls (`api_key_env`, or None for
    none, and each `header_env` variable); the schema has filled in the endpoint defaults."""
    endpoints = []
    generator = config.get("variants", {}).get("generator", {}) if SAFETY in tracks(config) else {}
    if generator.get("name") == "llm":
        endpoints.append(("variants.generator", generator))
    for name in _run_judges(config):
        entry = config["judges"][name]
        if entry["backend"] == "openai":
            endpoints.append((f"judges.{name}.options", entry["options"]))
    rationales = config.get("preference", {}).get("rationales", {})
    if rationales.get("generator") == "llm":
        endpoints.append(("preference.rationales.llm", rationales["llm"]))
    default = endpoint_defaults()["api_key_env"]
    used = []
    for where, settings in endpoints:
        used.append((f"{where}.api_key_env", settings.get("api_key_env", default)))
        used += [
            (f"{where}.header_env.{header}", variable) for header, variable in settings.get("header_env", {}).items()
        ]
    return used


def check_endpoints(config: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    """Refuse what the schema cannot check of the judges' endpoint settings: malformed `score_tokens` (the schema
    holds the ranges, URLs and variable names; `workflow.config.secret_problems` the credentials). Returns notes on
    key variables that are not set in this environment (the jobs may run where they are)."""
    problems = [
        problem
        for name in _run_judges(config)
        if (problem := _score_token_problem(name, config["judges"][name]["options"]))
    ]
    if problems:
        raise ConfigError("configuration cannot run:\n  " + "\n  ".join(problems))
    return [
        f"{where}: the environment variable {variable} is not set here; the jobs that call this endpoint fail at "
        f"their first request unless it is set where they run"
        for where, variable in _key_variables(config)
        if variable is not None and not environ.get(variable)
    ]


def check_generator(config: Mapping[str, Any]) -> None:
    """The rewrite generator's settings as its jobs read them: keys, the llm generator's prompt file and version,
    the template generator's bank."""
    generator = config["variants"].get("generator")
    if config["variants"]["source"] == benchmark.IMPORTED or generator is None:
        return
    options = {key: value for key, value in generator.items() if key != "cache_dir"}
    try:
        if options["name"] == "llm":
            from lalm_judge.data.generators.llm import load_rewrite_prompt, rewrite_settings

            load_rewrite_prompt(rewrite_settings(options))
        else:
            build_generator(options, generator["cache_dir"])
    except (GeneratorConfigError, OSError, yaml.YAMLError) as err:
        raise ConfigError(f"variants.generator: {err}") from None


# --- prompts ------------------------------------------------------------------------------------------------------
def _judge_prompts(config: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(track, prompt name) -> the config key that asks for it, for every prompt file a judge of the run reads."""
    used: dict[tuple[str, str], str] = {}
    if SAFETY in tracks(config):
        for judge in config["evaluation"]["judges"]:
            scheduled = config["judges"][judge]["schedule"].get("prompts")
            key = f"judges.{judge}.schedule.prompts" if scheduled else "evaluation.prompts"
            for cell in judge_cells(dict(config), judge):
                used.setdefault((SAFETY, cell.prompt), key)
    if PAIRWISE in tracks(config):
        for name in config["pairwise"]["prompts"]:
            used.setdefault((PAIRWISE, name), "pairwise.prompts")
    return used


def check_prompts(config: Mapping[str, Any]) -> None:
    """Load every prompt file a judge of the run reads, as its job will (`judging.prompts.load_prompt`,
    `pairwise.prompts.load_pairwise_prompt`): a file without a placeholder its cells need, with an unknown one or
    without a key is refused now, with the loader's message after the config key that asks for it, not when the
    judge job starts after ingest, TTS and ASR."""
    loaders = {SAFETY: load_prompt, PAIRWISE: load_pairwise_prompt}
    problems = []
    for (track, name), key in _judge_prompts(config).items():
        try:
            loaders[track](name)
        except PromptError as err:
            problems.append(f"{key}: {err}")
    if problems:
        raise ConfigError("configuration cannot run:\n  " + "\n  ".join(problems))


# --- voices and the plan --------------------------------------------------------------------------------------------
def _spoken_turns(config: Mapping[str, Any], plan: Plan, dialogue_id: str) -> list[int]:
    """Turns of a dialogue some voice speaks: text-only turns at ingest, and the turns that get variants (generated
    variants are spoken in their speaker's voice; an imported benchmark's TTS controls re-speak its target turns)."""
    source = plan.source(dialogue_id)
    turns = set(source.spoken_turns)
    if config["variants"]["source"] != benchmark.IMPORTED or plan.synthesized_controls():
        turns |= set(plan.turns(dialogue_id))
    return sorted(turns)


def check_voices(config: Mapping[str, Any], plan: Plan) -> None:
    """Every speaker who is spoken has a voice (`tts.voices`: their own, or the 'default*' voices), else a
    ConfigError naming the speaker, where they speak first and how many turns they have."""
    voices = config["tts"]["voices"]
    if any(name.startswith("default") for name in voices):
        return
    missing: dict[str, list[str]] = {}
    for dialogue in plan.dialogues:
        if not dialogue.speakers:  # the listing does not know them (an imported benchmark's index)
            continue
        for turn in _spoken_turns(config, plan, dialogue.dialogue_id):
            speaker = dialogue.speakers[turn]
            if speaker not in voices:
                place = f"{dialogue.location}: dialogue {dialogue.dialogue_id!r} turn {turn}"
                missing.setdefault(speaker, []).append(place)
    if missing:
        lines = [
            f"tts.voices has no voice for speaker {speaker!r}, who is spoken in {len(places)} turn(s), first at "
            f"{places[0]}; add tts.voices.{speaker} (configured: {sorted(voices)}), or a 'default' voice for every "
            "speaker without one"
            for speaker, places in missing.items()
        ]
        raise ConfigError("configuration cannot run:\n  " + "\n  ".join(lines))


def _empty_cells_reason(config: Mapping[str, Any], judge: str) -> str:
    """Why a judge has no cell: the counts of what its cells are made of and what the conditions took away."""
    evaluation, entry = config["evaluation"], config["judges"][judge]
    schedule = entry["schedule"]
    modalities = [m for m in evaluation["modalities"] if m in entry["modalities"]]
    sources = schedule.get("transcript_sources") or evaluation["transcript_sources"]
    conditions = schedule.get("conditions") or evaluation["conditions"]
    reasons = {
        condition_cell_error(Condition(c), m, TranscriptSource(s))
        for m in modalities
        for s in ([TranscriptSource.NONE] if m == AUDIO else sources)
        for c in conditions
    }
    return (
        f"modalities {modalities} x transcript sources {list(sources)} x conditions {list(conditions)} leave no cell: "
        + "; ".join(sorted(filter(None, reasons)))
    )


def check_plan_measures(config: Mapping[str, Any], plan: Plan) -> None:
    """A plan that would measure nothing is an error with the counts that made it empty: no dialogue, no variant
    (every dialogue too short, or `variants.turns` past their ends), a judge with no cell."""
    corpus, variants = config["corpus"], config["variants"]
    if not plan.dialogues:
        raise ConfigError(
            f"corpus: {corpus['path']} ({corpus['format']}) lists no dialogue"
            + (f" (corpus.max_dialogues {corpus['max_dialogues']})" if corpus.get("max_dialogues") else "")
        )
    n_variants = len(plan.dialogue_turn_pairs()) * len(variants["categories"]) * len(variants["severities"])
    if n_variants == 0:
        short = [d for d in plan.dialogues if d.n_turns < corpus["min_turns"]]
        longest = max(d.n_turns for d in plan.dialogues)
        raise ConfigError(
            f"the plan has no variant, so no metric: of {len(plan.dialogues)} dialogue(s), {len(short)} have fewer "
            f"than corpus.min_turns={corpus['min_turns']} turns and variants.turns {variants['turns']} names no turn "
            f"of the others (the longest has {longest} turns, indices 0-{longest - 1})"
        )
    empty = [judge for judge in config["evaluation"]["judges"] if not judge_cells(dict(config), judge)]
    if empty:
        lines = [f"judges.{judge}: no judge cell to score: {_empty_cells_reason(config, judge)}" for judge in empty]
        raise ConfigError("the plan measures nothing for:\n  " + "\n  ".join(lines))
