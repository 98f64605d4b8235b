"""Loading and checking a run configuration: JSON-Schema validation with defaults, then the
cross-references a schema cannot express (judge names, transcript sources, modalities, what each judge can
serve, GPU requests), and the run environment a config needs (licences, tokens).

A config holds the safety track (`evaluation` and its data sections), the pairwise track (`pairwise`) or
both; `tracks` says which, and each track's checks run only when it is present. Everything here runs when
the workflow is parsed, before any job: a config that cannot run fails with a message naming the key, the
judge and the cell; a cell routed to a documented alternative (the calibrated prompt on a judge without token
probabilities) is reported as a note.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jsonschema
import yaml

from lalm_judge.core.endpoints import ChatSettings, reasoning_sampling_problem
from lalm_judge.core.files import CONFIG_SCHEMA_PATH, one_line, read_schema
from lalm_judge.core.vocabulary import (
    AUDIO,
    AUDIO_TEXT,
    CLEAN,
    RESPOKEN_AUDIT_KINDS,
    AuditCondition,
    Condition,
    TranscriptSource,
)
from lalm_judge.data.benchmark import FORMAT as BENCHMARK_FORMAT
from lalm_judge.data.benchmark import IMPORTED
from lalm_judge.judging.backends.capabilities import family_of
from lalm_judge.judging.backends.chat import PHI4MM_FORMAT
from lalm_judge.judging.backends.decoding import decoding_problems
from lalm_judge.judging.backends.granite import GRANITE_FORMAT
from lalm_judge.judging.backends.voxtral import VOXTRAL_FORMAT
from lalm_judge.training.settings import GRPO, GRPOSettings, Hyperparameters, grpo_batch_problem
from lalm_judge.workflow.context_length import max_model_len_problems
from lalm_judge.workflow.pins import LOCAL_BACKENDS, hub_model_id, hub_models
from lalm_judge.workflow.plan import ConfigError, JudgeCell, judge_cells, transcript_model  # see workflow.plan
from lalm_judge.workflow.preference import preference_voices

# Accepting the Coqui Public Model License of XTTS-v2 without coqui-tts asking on stdin (which hangs or
# fails in a batch job): coqui-tts `TTS/utils/manage.py`, `ModelManager.tos_agreed`.
COQUI_LICENCE_ENV = "COQUI_TOS_AGREED"
CALIBRATED_PROMPT = "calibrated"

SCHEMA_PATH = CONFIG_SCHEMA_PATH  # schemas/config.schema.yaml
SAFETY = "safety"
PAIRWISE = "pairwise"
# The pairwise track's preference-data builder: its own section, so that a run can build data without judging.
PREFERENCE = "preference"
# Backends that judge a pair from its texts only (the embedding baseline's relevance verdict, the likelihood judge).
TEXT_ONLY_PAIRWISE_BACKENDS = ("embedding", "likelihood")
# Backends that give pairwise verdicts only (no safety score).
PAIRWISE_ONLY_BACKENDS = ("likelihood",)
# The prompt formats the transformers backend builds too (the others only the vllm backend does).
TRANSFORMERS_PROMPT_FORMATS = ("chat", VOXTRAL_FORMAT, PHI4MM_FORMAT, GRANITE_FORMAT)


def _with_defaults(validator_class):
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate_config(config: dict[str, Any], schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """Fill defaults and validate against the JSON schema; errors name the offending key path."""
    # Before the schema, whose messages quote the values they reject: a credential is named by its place only.
    _check_no_secrets(config)
    schema = read_schema(schema_path)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    given_training = config.get("training") if isinstance(config, Mapping) else None
    config = copy.deepcopy(config)
    errors = sorted(map(most_specific, validator.iter_errors(config)), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [schema_error_line(e, schema) for e in errors]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    check_config(config)
    if given_training is not None:
        check_training(config["training"], given_training)
    return config


def check_training(section: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """What a validated `training` section (defaults filled) cannot train, before any model is loaded: GRPO's batch
    arithmetic on one GPU (and so on any number), when the section asks for GRPO or sets its `grpo` settings
    (`given`: the section as written; `--method grpo` checks a section that does neither when it starts)."""
    if section["method"] != GRPO and "grpo" not in given:
        return
    problem = grpo_batch_problem(Hyperparameters(**section["hyperparameters"]), GRPOSettings(**section["grpo"]))
    if problem:
        raise ConfigError(f"training cannot run:\n  {problem}")


def most_specific(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """Of a oneOf / anyOf error, the error of an alternative that got deeper into the value, if one did (an acoustic
    style that is one voice or a list of them, with a bad `pitch_shift`: that key, not 'not valid under any of the
    given schemas'), or of the list alternative that failed on a repeated entry (`variants.turns: [1, 1]`); else the
    error itself."""
    while error.context:
        deepest = max(error.context, key=lambda sub: len(sub.absolute_path))
        repeated = [sub for sub in error.context if sub.validator == "uniqueItems"]
        if len(deepest.absolute_path) > len(error.absolute_path):
            error = deepest
        elif repeated:
            error = repeated[0]
        else:
            break
    return error


def _known_properties(schema: Mapping[str, Any], root: Mapping[str, Any]) -> set[str]:
    """The property names a schema object declares, through its local `$ref`s and combinators."""
    names = set(schema.get("properties", {}))
    reference = schema.get("$ref", "")
    if reference.startswith("#/"):
        target: Any = root
        for part in reference[2:].split("/"):
            target = target[part]
        names |= _known_properties(target, root)
    for combinator in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(combinator, []):
            names |= _known_properties(sub, root)
    for branch in ("then", "else"):
        if isinstance(schema.get(branch), Mapping):
            names |= _known_properties(schema[branch], root)
    return names


def schema_error_line(error: jsonschema.ValidationError, root: Mapping[str, Any], prefix: Sequence[str] = ()) -> str:
    """One line per problem of a schema error, at its key path; an unknown key (`additionalProperties: false`,
    `unevaluatedProperties: false`) is named with the nearest valid name and the valid names."""
    where = ".".join([*prefix, *map(str, error.absolute_path)]) or "<root>"
    if error.validator == "uniqueItems" and isinstance(error.instance, list):
        return f"{where}: {_repeated_entries(error.instance)}; each entry once (they name things the run makes once)"
    unknown_keys = error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(
        error.instance, Mapping
    )
    allowed = sorted(_known_properties(error.schema, root)) if unknown_keys else []
    patterns = list(error.schema.get("patternProperties", {})) if unknown_keys else []
    unknown = [
        str(key)
        for key in (error.instance if unknown_keys else {})
        if key not in allowed and not any(re.search(pattern, str(key)) for pattern in patterns)
    ]
    if not unknown or not allowed:
        return f"{where}: {error.message}"
    lines = []
    for key in unknown:
        nearest = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
        lines.append(f"{where}: unknown key {key!r}{hint} (valid keys: {', '.join(allowed)})")
    return "\n  ".join(lines)


def _repeated_entries(entries: Sequence[Any]) -> str:
    """'x' is listed twice, 'y' 3 times: the entries of a list that should be unique that are not."""
    keys = [json.dumps(entry, sort_keys=True) for entry in entries]
    counts = {key: keys.count(key) for key in dict.fromkeys(keys)}
    repeated = [(entries[keys.index(key)], n) for key, n in counts.items() if n > 1]
    said = [f"{entry!r} is listed {'twice' if n == 2 else f'{n} times'}" for entry, n in repeated]
    return ", ".join(said)


def _validate_part(part: Any, schema_keys: Sequence[str], key: str, what: str, schema_path: str | Path) -> Any:
    """One part of a config validated (defaults filled) against the piece of the schema at `schema_keys`;
    errors name `key.<path>`."""
    schema = read_schema(schema_path)
    part_schema = schema
    for schema_key in schema_keys:
        part_schema = part_schema[schema_key]
    part_root = {"$defs": schema.get("$defs", {}), **part_schema}
    validator = _with_defaults(jsonschema.Draft202012Validator)(part_root)
    part = copy.deepcopy(part)
    errors = sorted(map(most_specific, validator.iter_errors(part)), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [schema_error_line(e, part_root, [key]) for e in errors]
        raise ConfigError(f"invalid {what}:\n  " + "\n  ".join(lines))
    return part


def validate_judge_entry(name: str, entry: dict[str, Any], schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """One judge registry entry validated (defaults filled) on its own, for ad-hoc use outside a run config."""
    entry = _validate_part(
        entry,
        ("properties", "judges", "additionalProperties"),
        f"judges.{name}",
        "judge entry",
        schema_path,
    )
    problems = judge_problems(name, entry)
    if problems:
        raise ConfigError("invalid judge entry:\n  " + "\n  ".join(problems))
    return entry


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML that rejects a key repeated in one mapping: PyYAML (and Snakemake's config loading) keeps the last
    value silently, so two judges under one name would lose the first without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` entries may be overridden on purpose
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise ConfigError(
                    f"{key_node.start_mark.name}:{line}: duplicate key {key!r} (first at line {first_line[key]}); "
                    "YAML would keep only the last one: rename or remove one of them"
                )
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str | Path) -> Any:
    """A YAML (or JSON) config file as data; a key repeated in one mapping is a ConfigError naming file and line."""
    if not Path(path).is_file():
        raise ConfigError(f"config file {path} does not exist")
    with open(path, encoding="utf-8") as stream:
        try:
            return yaml.load(stream, Loader=_UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {one_line(err)}") from None


def check_config_files(paths: Sequence[str | Path]) -> None:
    """Reject config files with repeated keys (the workflow's `--configfile`s, read again before Snakemake's
    merged config is trusted)."""
    for path in paths:
        read_config_file(path)


def load_training_section(path: str | Path, schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """The `training` section of a YAML file, validated (defaults filled) on its own: a training run needs no
    other section, so a file with just `training:` works as well as a run config that also has one."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    document = read_config_file(path) or {}
    if not isinstance(document, Mapping) or "training" not in document:
        raise ConfigError(f"{path} has no 'training' section (schemas/config.schema.yaml, key training)")
    section = _validate_part(
        document["training"],
        ("properties", "training"),
        "training",
        f"training section of {path}",
        schema_path,
    )
    check_training(section, document["training"])
    return section


def load_config(path: str | Path) -> dict[str, Any]:
    return validate_config(read_config_file(path))


def tracks(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The tracks a validated config runs: 'safety' (it has `evaluation`), 'pairwise' (it has `pairwise`),
    'preference' (it has `preference`: the pairwise track's data builder)."""
    keys = ((SAFETY, "evaluation"), (PAIRWISE, "pairwise"), (PREFERENCE, "preference"))
    return tuple(track for track, key in keys if key in config)


def check_config(config: dict[str, Any]) -> list[str]:
    """Cross-reference checks of a validated config, run at parse time before any job is scheduled.

    Raises ConfigError naming the problems; returns notes on cells routed to a documented alternative and on
    settings that make a run irreproducible (unpinned model revisions).
    """
    _check_no_secrets(config)
    notes = _check_safety(config) if SAFETY in tracks(config) else []
    if PAIRWISE in tracks(config):
        _check_pairwise(config)
        notes += [
            note
            for name in config["pairwise"]["judges"]
            if SAFETY not in tracks(config) or name not in config["evaluation"]["judges"]
            for note in judge_notes(name, config["judges"][name], [])
        ]
    if PREFERENCE in tracks(config):
        _check_preference(config)
    notes += [
        f"{model.key} ({model.repository}) is on branch {model.revision!r}: a rerun may use other weights; pin the "
        "commit with `lalm-judge pin-revisions CONFIG`"
        for model in hub_models(config)
        if not model.pinned and model.path[0] != "judges"
    ]
    safety_judges = config["evaluation"]["judges"] if SAFETY in tracks(config) else []
    pairwise_judges = config["pairwise"]["judges"] if PAIRWISE in tracks(config) else []
    problems = max_model_len_problems(config, safety_judges, pairwise_judges) + _chat_sampling_problems(config)
    if problems:
        raise ConfigError("configuration cannot run:\n  " + "\n  ".join(problems))
    _check_imported(config)
    return notes


def _chat_sampling_problems(config: Mapping[str, Any]) -> list[str]:
    """What the llm rewrite generator's and the rationale writer's models would refuse of their sampling
    (`core.endpoints.reasoning_sampling_problem`), with their defaults (`ChatSettings`)."""
    blocks = []
    generator = config.get("variants", {}).get("generator", {}) if SAFETY in tracks(config) else {}
    if generator.get("name") == "llm":
        blocks.append(("variants.generator", generator))
    rationales = config["preference"]["rationales"] if PREFERENCE in tracks(config) else {}
    if rationales.get("generator") == "llm":
        blocks.append(("preference.rationales.llm", rationales["llm"]))
    defaults = ChatSettings.__dataclass_fields__
    problems = (
        reasoning_sampling_problem(
            block.get("model", ""),
            block.get("temperature", defaults["temperature"].default),
            block.get("reasoning_effort"),
            where,
        )
        for where, block in blocks
    )
    return [problem for problem in problems if problem]


def _check_preference(config: dict[str, Any]) -> None:
    preference = config["preference"]
    if preference["asr"] not in config["asr"]["models"]:
        raise ConfigError(
            f"preference.asr: {preference['asr']!r} is not in asr.models ({sorted(config['asr']['models'])})"
        )
    if config["asr"]["models"][preference["asr"]]["model"] == IMPORTED:
        raise ConfigError(
            f"preference.asr: {preference['asr']!r} has released transcripts only; the WER filter needs a model "
            "that recognizes the built clips"
        )
    rationales = preference["rationales"]
    if rationales["generator"] == "llm" and not rationales["llm"].get("model"):
        raise ConfigError("preference.rationales.llm.model is required for the llm rationale generator")
    styles = preference["acoustic"]["styles"] if "acoustic" in preference else {}
    if "gender" in styles and set(styles["gender"]) != {"male", "female"}:
        raise ConfigError(
            f"preference.acoustic.styles.gender must have the styles male and female, has {sorted(styles['gender'])}"
        )
    if "emotion" in styles and not set(styles["emotion"]) - {"neutral"}:
        raise ConfigError("preference.acoustic.styles.emotion needs an emotion besides neutral to ask for")
    mixed = styles.get("gender_emotion", {})
    badly_named = sorted(s for s in mixed if s.partition("_")[0] not in ("male", "female") or not s.partition("_")[2])
    if badly_named:
        raise ConfigError(
            f"preference.acoustic.styles.gender_emotion: styles {badly_named} must be named <male|female>_<emotion> "
            "(e.g. female_happy, male_sad)"
        )
    if mixed and all(s.endswith("_neutral") for s in mixed):
        raise ConfigError("preference.acoustic.styles.gender_emotion needs a style with an emotion besides neutral")


# Keys under which a secret might be written into a config (compared lowercased, '-' as '_'); `*_env` keys name
# environment variables instead. The header names are those providers read keys from (OpenAI and most servers
# `Authorization`, Azure `api-key`, Anthropic and others `x-api-key`, Gemini `x-goog-api-key`, Azure API
# Management `Ocp-Apim-Subscription-Key`).
_SECRET_KEY = re.compile(
    r"^(?:x_)?(?:goog_)?(?:api_?key|key|token|access_token|auth_token|secret|password|(?:proxy_)?authorization|"
    r"bearer|cookie|(?:ocp_apim_)?subscription_key)$",
    re.IGNORECASE,
)
# In a mapping of HTTP headers (a key ending in 'headers': extra_headers, default_headers, ...), any header whose
# name says it carries a credential, and any value that is one.
_HEADERS = re.compile(r"headers$", re.IGNORECASE)
_CREDENTIAL_HEADER = re.compile(
    r"auth|api[-_]?key|token|secret|passw|cookie|signature|credential|subscription[-_]key", re.IGNORECASE
)
_CREDENTIAL_VALUE = re.compile(r"^\s*(?:bearer|basic|token)\s+\S", re.IGNORECASE)
_URL = re.compile(r"^[a-z][a-z0-9+.\-]*://", re.IGNORECASE)
_CREDENTIAL_QUERY = re.compile(r"^(?:key|api[-_]?key|token|access[-_]token|auth|sig|signature|password|secret)$", re.I)
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Keys that name the environment variable of a credential (api_key_env), whose value must be a variable name.
_KEY_VARIABLE = re.compile(r"(?:key|token|secret|password)_env$", re.IGNORECASE)
_WHERE_CONFIG_GOES = (
    "(what a config holds reaches job parameters, the score tables' generation column, Snakemake's metadata and the "
    "logs)"
)
_ENVIRONMENT_WAY = (
    f"export it in an environment variable and give that variable's NAME as api_key_env {_WHERE_CONFIG_GOES}"
)
# For a key sent in a header: the endpoint's `header_env` maps the header to the variable (the bearer key, sent as
# `Authorization`, is api_key_env's).
_HEADER_ENVIRONMENT_WAY = (
    "export it in an environment variable and name that variable under the endpoint's header_env (header name -> "
    f"variable NAME; a bearer key in Authorization is api_key_env's) {_WHERE_CONFIG_GOES}"
)


# Path segments that are keys: the prefixes providers give their keys (OpenAI and Anthropic `sk-`, Google `AIza`,
# Hugging Face `hf_`, Groq `gsk_`, xAI `xai-`, GitHub `ghp_`/`github_pat_`, GitLab `glpat-`, Slack `xox?-`, AWS access
# key ids `AKIA`/`ASIA`), and a long run of letters and digits mixed (a random token: 20 or more, where model and
# deployment names have a separator every few characters).
_KEY_PREFIX = re.compile(
    r"^(?:(?:sk|pk|rk)[-_]|AIza|hf_|gsk_|xai-|gh[pousr]_|github_pat_|glpat-|xox[abpors]-|AKIA|ASIA)[A-Za-z0-9_\-]{8,}"
)
_RANDOM_RUN = re.compile(r"[A-Za-z0-9]{20,}")


def _key_like_segment(segment: str, previous: str) -> str | None:
    """Why a URL path segment is a credential, without quoting it; None when it is not one."""
    name, equals, _ = segment.partition("=")
    if equals and _CREDENTIAL_QUERY.match(name):
        return f"it is the parameter {name!r}"
    if _CREDENTIAL_QUERY.match(previous) and segment:
        return f"it follows {previous!r}"
    if _KEY_PREFIX.match(segment):
        return "it starts as API keys do"
    if any(re.search(r"[A-Za-z]", run) and re.search(r"[0-9]", run) for run in _RANDOM_RUN.findall(segment)):
        return "it holds a long random token"
    return None


def _url_problem(value: str) -> str | None:
    """Where a URL carries a credential: userinfo (`https://user:KEY@host`), a key-like query parameter, or a key in
    its path (`https://host/v1/sk-.../`, `/key/VALUE`, `/key=VALUE`)."""
    try:
        parts = urlsplit(value)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return None
    if parts.username or parts.password:
        return "the URL holds user credentials (user:password@host)"
    names = [name for name, _ in query if _CREDENTIAL_QUERY.match(name)]
    if names:
        return f"the URL's query parameter {names[0]!r} holds a credential"
    segments = [segment for piece in parts.path.split("/") for segment in piece.split(";")]
    for number, segment in enumerate(segments):
        why = _key_like_segment(segment, segments[number - 1] if number else "")
        if why:
            return f"the URL's path holds a credential (segment {number}: {why})"
    return None


def _header_problems(headers: Mapping[Any, Any], where: str) -> list[str]:
    problems = []
    for name, value in headers.items():
        if _CREDENTIAL_HEADER.search(str(name)) or (isinstance(value, str) and _CREDENTIAL_VALUE.match(value)):
            problems.append(f"{where}.{name}: a credential in an HTTP header; {_HEADER_ENVIRONMENT_WAY}")
    return problems


def secret_problems(config: Any, path: str = "") -> list[str]:
    """Every place of a config that holds a credential: a key-named entry, a credential HTTP header, a URL with
    userinfo or a key in its query or its path, an `api_key_env` or `header_env` variable that is not a variable name
    (the header names under `header_env` are names, not keys). The messages name the place, never the value."""
    items = config.items() if isinstance(config, Mapping) else enumerate(config) if isinstance(config, list) else ()
    problems = []
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        name = str(key).replace("-", "_")
        if isinstance(key, str) and _SECRET_KEY.match(name) and value is not None:
            problems.append(f"{where}: a config never holds a key; {_ENVIRONMENT_WAY}")
            continue
        if isinstance(key, str) and _HEADERS.search(key) and isinstance(value, Mapping):
            problems += _header_problems(value, where)
            continue
        if key == "header_env" and isinstance(value, Mapping):
            problems += [
                f"{where}.{header}: names an environment variable, but its value is not a variable name (a key?)"
                for header, variable in value.items()
                if isinstance(variable, str) and not _VARIABLE_NAME.match(variable)
            ]
            continue
        if (
            isinstance(key, str)
            and _KEY_VARIABLE.search(key)
            and isinstance(value, str)
            and not _VARIABLE_NAME.match(value)
        ):
            problems.append(f"{where}: names an environment variable, but its value is not a variable name (a key?)")
        elif isinstance(value, str) and _URL.match(value) and (problem := _url_problem(value)):
            problems.append(f"{where}: {problem}; {_ENVIRONMENT_WAY}")
        problems += secret_problems(value, where)
    return problems


def _check_no_secrets(config: Any) -> None:
    """API keys are read only from environment variables: a config that holds one is an error naming each place."""
    problems = secret_problems(config)
    if problems:
        raise ConfigError("configuration holds credentials:\n  " + "\n  ".join(problems))


def _check_asr_source(key: str, source: str, config: Mapping[str, Any]) -> None:
    model = TranscriptSource(source).asr_model
    asr_models = config["asr"]["models"] if "asr" in config else {}
    if model is not None and model not in asr_models:
        raise ConfigError(f"{key}: {source!r} names no model in asr.models ({sorted(asr_models)})")


def _check_pairwise(config: dict[str, Any]) -> None:
    pairwise, judges = config["pairwise"], config["judges"]
    items = pairwise["items"]
    required = {"sagelm": ("files", "audio_root"), "jsonl": ("path", "voices")}[items["format"]]
    for key in required:
        if not items.get(key):
            raise ConfigError(f"pairwise.items.{key} is required for format {items['format']!r}")
    unknown = [j for j in pairwise["judges"] if j not in judges]
    if unknown:
        raise ConfigError(f"pairwise.judges: unknown judge(s) {unknown}; known judges: {sorted(judges)}")
    for source in pairwise["transcript_sources"]:
        _check_asr_source("pairwise.transcript_sources", source, config)
    wanted = set(pairwise["modalities"])
    for name in pairwise["judges"]:
        entry = judges[name]
        usable = set(entry["modalities"]) & wanted
        if entry["backend"] in TEXT_ONLY_PAIRWISE_BACKENDS and usable - {"text"}:
            raise ConfigError(
                f"judges.{name}: the {entry['backend']} baseline judges pairs from their texts only, but would get "
                f"the pairwise modalities {sorted(usable - {'text'})}; give it modalities [text] (a cascade with "
                "an 'asr:<model>' source)"
            )
        if not usable:
            raise ConfigError(
                f"judges.{name}.modalities: {sorted(entry['modalities'])} shares no modality with "
                f"pairwise.modalities {sorted(wanted)}"
            )
        if usable == {"text"} and not pairwise["transcript_sources"]:
            raise ConfigError(
                f"pairwise.judges: judge {name!r} reads text only, so it needs pairwise.transcript_sources "
                "(e.g. 'asr:<asr model>' for the cascade)"
            )
    problems = [problem for name in pairwise["judges"] for problem in judge_problems(name, judges[name])]
    problems += _pairwise_gt_problems(config)
    problems += _pairwise_audit_problems(config)
    if problems:
        raise ConfigError("configuration cannot run:\n  " + "\n  ".join(problems))


def _pairwise_audit_problems(config: Mapping[str, Any]) -> list[str]:
    """Audit conditions the run could not build: `repeat` and `voice` speak responses again (items spoken here,
    format jsonl), `voice` needs another voice of the same engine for every voice the items use (each condition
    once: the schema's `uniqueItems`)."""
    pairwise = config["pairwise"]
    conditions, items = pairwise.get("conditions", []), pairwise["items"]
    problems = []
    respoken = [c for c in conditions if AuditCondition(c).kind in RESPOKEN_AUDIT_KINDS]
    if respoken and items["format"] != "jsonl":
        problems.append(
            f"pairwise.conditions: {respoken} speak the responses again with their voices, which only the project's "
            "items (pairwise.items.format: jsonl) have; SageLM records bring audio only. Drop them from the conditions"
        )
    elif respoken and items.get("path") and os.path.exists(items["path"]):
        # Imported here: the item and audit modules read tables (polars), which the workflow's parse does not need
        # otherwise, and every job parses the workflow again.
        from lalm_judge.pairwise.audit import respoken_voice_error
        from lalm_judge.pairwise.items import read_jsonl_items

        used = {voice for item in read_jsonl_items(items["path"]) for voice in (r.voice for r in item.responses)}
        problems += [p for p in (respoken_voice_error(c, used, items["voices"]) for c in respoken) if p]
    return problems


def _pairwise_gt_problems(config: Mapping[str, Any]) -> list[str]:
    """The `gt` transcript source reads the texts the responses were spoken from, which only the project's own
    items have: SageLM records bring audio only."""
    pairwise = config["pairwise"]
    if pairwise["items"]["format"] != "sagelm" or "gt" not in pairwise["transcript_sources"]:
        return []
    text_modalities = [m for m in pairwise["modalities"] if m != AUDIO]
    cells = [
        f"{name}/{modality}-gt"
        for name in pairwise["judges"]
        for modality in text_modalities
        if modality in config["judges"][name]["modalities"]
    ]
    if not cells:
        return []
    return [
        f"pairwise.transcript_sources: 'gt' reads the texts the responses were spoken from, but SageLM records "
        f"(pairwise.items.format: sagelm) have only their audio, so the cells {', '.join(cells)} cannot be served; "
        "judge them from an 'asr:<model>' source (the cascade) or remove 'gt'"
    ]


def _check_safety(config: dict[str, Any]) -> list[str]:
    judges = config["judges"]
    evaluation = config["evaluation"]
    unknown = [j for j in evaluation["judges"] if j not in judges]
    if unknown:
        raise ConfigError(f"evaluation.judges: unknown judge(s) {unknown}; known judges: {sorted(judges)}")
    asr_models = config["asr"]["models"]
    sources = [("evaluation.transcript_sources", s) for s in evaluation["transcript_sources"]]
    sources += [
        (f"judges.{j}.schedule.transcript_sources", s)
        for j in evaluation["judges"]
        for s in judges[j]["schedule"].get("transcript_sources", [])
    ]
    for key, source in sources:
        _check_asr_source(key, source, config)
    for name in evaluation["judges"]:
        entry = judges[name]
        if entry["backend"] in PAIRWISE_ONLY_BACKENDS:
            raise ConfigError(
                f"evaluation.judges: judge {name!r} (backend {entry['backend']!r}) compares two responses and gives "
                "no safety score; use it in pairwise.judges"
            )
        supported, wanted = set(entry["modalities"]), set(evaluation["modalities"])
        if not supported & wanted:
            raise ConfigError(
                f"judges.{name}.modalities: {sorted(supported)} shares no modality with "
                f"evaluation.modalities {sorted(wanted)}"
            )
        cascade = entry["options"].get("cascade_asr")
        if cascade is not None and cascade not in asr_models:
            raise ConfigError(f"judges.{name}.options.cascade_asr: {cascade!r} is not in asr.models")
    problems = _gpu_problems(config) + _emotion_reference_problems(config["tts"])
    cells = judge_cells(config)
    for name in evaluation["judges"]:
        problems += judge_problems(name, judges[name], [c for c in cells if c.judge == name])
    if problems:
        raise ConfigError("configuration cannot run:\n  " + "\n  ".join(problems))
    return [note for name in evaluation["judges"] for note in judge_notes(name, judges[name], cells)]


def _cell_list(cells: Sequence[JudgeCell]) -> str:
    shown = ", ".join(c.label for c in cells[:4])
    return shown + (f" and {len(cells) - 4} more" if len(cells) > 4 else "")


def judge_problems(name: str, entry: Mapping[str, Any], cells: Sequence[JudgeCell] = ()) -> list[str]:
    """What a judge entry asks of its model that the model cannot serve (see `capabilities` for the facts)."""
    where = f"judges.{name}"
    backend, capabilities = entry["backend"], entry["capabilities"]
    audio_modalities = [m for m in entry["modalities"] if m in (AUDIO, AUDIO_TEXT)]
    audio_cells = [c for c in cells if c.modality in (AUDIO, AUDIO_TEXT)]
    problems = decoding_problems(backend, entry.get("generation", {}), name, model=entry["model"])
    if capabilities["prompt_format"] not in TRANSFORMERS_PROMPT_FORMATS and backend != "vllm":
        problems.append(
            f"{where}.capabilities.prompt_format: {capabilities['prompt_format']!r} is built by the vllm backend only, "
            f"not by {backend!r}"
        )
    if entry["options"].get("score_tokens") and not capabilities["logprobs"]:
        problems.append(f"{where}.options.score_tokens needs token probabilities, but capabilities.logprobs is false")
    family = family_of(entry["model"])
    if family is None:
        return problems
    if backend not in family.backends:
        reason = f" ({family.why_backends})" if family.why_backends else ""
        problems.append(
            f"{where}.backend: {family.name} ({entry['model']}) runs on {' or '.join(family.backends)}, "
            f"not {backend!r}{reason}"
        )
    if audio_modalities and not family.audio:
        cells_text = f"; cells {_cell_list(audio_cells)} cannot be served" if audio_cells else ""
        problems.append(
            f"{where}.modalities: {audio_modalities} need audio input, but {family.name} is a text model{cells_text}; "
            "keep only 'text'"
        )
    limit = family.max_audio_s
    if audio_modalities and limit is not None and (entry["max_audio_s"] is None or entry["max_audio_s"] > limit):
        problems.append(
            f"{where}.max_audio_s: {entry['max_audio_s']} is over {family.name}'s {limit:g} s of audio (it would cut "
            f"the rest silently); set max_audio_s <= {limit:g} and let long_audio ({entry['long_audio']}) handle "
            "longer dialogues"
        )
    for key in ("system_role", "prompt_format", "logprobs"):
        known = getattr(family, key)
        if known is not None and capabilities[key] != known:
            problems.append(
                f"{where}.capabilities.{key} is {json.dumps(capabilities[key])}, but {family.name} needs "
                f"{json.dumps(known)}: set capabilities.{key}: {json.dumps(known)}"
            )
    return problems


def judge_notes(name: str, entry: Mapping[str, Any], cells: Sequence[JudgeCell]) -> list[str]:
    """Cells of this judge routed to their documented alternative, and an unpinned model revision."""
    notes = []
    calibrated = [c for c in cells if c.judge == name and c.prompt == CALIBRATED_PROMPT]
    if calibrated and not entry["capabilities"]["logprobs"]:
        notes.append(
            f"judge {name}, cells {_cell_list(calibrated)}: no token probabilities (capabilities.logprobs: false), "
            "so the calibrated prompt is scored from its parsed SAFETY_SCORE line (score_source 'parsed')"
        )
    if entry["backend"] in LOCAL_BACKENDS and entry["revision"] == "main" and hub_model_id(entry["model"]):
        notes.append(
            f"judges.{name}.revision is 'main': a rerun may score with other weights; pin the commit with "
            "`lalm-judge pin-revisions CONFIG`"
        )
    return notes


def _gpu_problems(config: dict[str, Any]) -> list[str]:
    """A stage on cuda must request a GPU (or SLURM puts it on a CPU node), and one on the CPU requests none."""
    problems = []
    for name, model in config["asr"]["models"].items():
        if (model["device"] == "cuda") != (model["gpu"] > 0):
            problems.append(
                f"asr.models.{name}: device {model['device']!r} with gpu {model['gpu']}; "
                + ("a cuda model needs gpu: 1" if model["device"] == "cuda" else "set gpu: 0 on the CPU")
            )
    cuda_voices = sorted(v for v, voice in config["tts"]["voices"].items() if voice.get("device") == "cuda")
    if cuda_voices and config["tts"]["gpu"] == 0:
        problems.append(f"tts.gpu is 0, but the voices {cuda_voices} run on cuda; set tts.gpu: 1")
    return problems


def _emotion_reference_problems(tts: Mapping[str, Any]) -> list[str]:
    """Emotion references are clips another speaker spoke: only a cloning engine can take the prosody from them."""
    if not tts.get("emotion_reference"):
        return []
    others = sorted(name for name, voice in tts["voices"].items() if voice["engine"] != "xtts")
    if not others:
        return []
    return [
        f"tts.emotion_reference: the voices {others} do not clone from reference audio (only xtts does); use xtts "
        "voices or remove tts.emotion_reference"
    ]


def _voices(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every TTS voice of the config: the safety track's `tts.voices`, the pairwise items' voices and the
    preference builder's engines and acoustic styles."""
    voices = {f"tts.voices.{v}": voice for v, voice in config.get("tts", {}).get("voices", {}).items()}
    items = config.get("pairwise", {}).get("items", {})
    voices.update({f"pairwise.items.voices.{v}": voice for v, voice in items.get("voices", {}).items()})
    if "preference" in config:
        voices.update(preference_voices(config["preference"]))
    return voices


def _run_judges(config: Mapping[str, Any]) -> list[str]:
    names = [*config.get("evaluation", {}).get("judges", []), *config.get("pairwise", {}).get("judges", [])]
    return list(dict.fromkeys(names))


def check_run_environment(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """What the run needs from the environment before any job starts.

    Raises ConfigError when XTTS voices are configured but the Coqui licence is not accepted (coqui-tts would
    ask on stdin inside a batch job and fail or hang). Returns warnings, e.g. a gated model without a token.
    """
    environ = os.environ if environ is None else environ
    xtts_voices = sorted(key for key, voice in _voices(config).items() if voice["engine"] == "xtts")
    if xtts_voices and environ.get(COQUI_LICENCE_ENV) != "1":
        raise ConfigError(
            f"{', '.join(xtts_voices)} use XTTS-v2, whose weights are under the Coqui Public Model License "
            "(non-commercial, https://tts-hub.github.io/cpml). Read it; if you accept it, export "
            f"{COQUI_LICENCE_ENV}=1 in the shell that starts snakemake (jobs inherit it). Without it coqui-tts "
            "would ask on stdin inside every TTS job."
        )
    warnings = []
    token = environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN")
    hf_home = Path(environ.get("HF_HOME", Path.home() / ".cache/huggingface"))
    token_file = Path(environ.get("HF_TOKEN_PATH") or hf_home / "token")
    for name in _run_judges(config):
        family = family_of(config["judges"][name]["model"])
        if family is not None and family.gated and not token and not token_file.is_file():
            warnings.append(
                f"judges.{name}: {config['judges'][name]['model']} is a gated hub repository; request access on its "
                "model page and export HF_TOKEN (or run `hf auth login`), or its jobs fail at download"
            )
    return warnings


def _check_imported(config: dict[str, Any]) -> None:
    """An imported benchmark (safety track) comes from its own corpus format, and nothing of it is generated
    again; released transcripts exist only for it."""
    imported = SAFETY in tracks(config) and config["variants"]["source"] == IMPORTED
    if imported and config["corpus"]["format"] != BENCHMARK_FORMAT:
        raise ConfigError(
            f"variants.source: {IMPORTED!r} reads the variants of a released benchmark and needs corpus.format "
            f"{BENCHMARK_FORMAT!r} (a folder written by 'lalm-judge import --format hf'), not "
            f"{config['corpus']['format']!r}"
        )
    if imported and "generator" in config["variants"]:
        raise ConfigError(
            f"variants.generator: unused when variants.source is {IMPORTED!r} (the benchmark's variants are "
            "judged as released); remove it"
        )
    if imported:
        _check_imported_controls(config)
    for name, entry in (config["asr"]["models"] if "asr" in config else {}).items():
        if entry["model"] == IMPORTED and not imported:
            raise ConfigError(
                f"asr.models.{name}.model: {IMPORTED!r} takes released transcripts, which exist only for an "
                f"imported benchmark (variants.source: {IMPORTED!r})"
            )
    pairwise_sources = config["pairwise"]["transcript_sources"] if PAIRWISE in tracks(config) else []
    for model in filter(None, (TranscriptSource(source).asr_model for source in pairwise_sources)):
        if config["asr"]["models"][model]["model"] == IMPORTED:
            raise ConfigError(
                f"pairwise.transcript_sources: asr:{model} has released transcripts of the safety benchmark only; "
                "the pairwise track needs a model that recognizes its audio"
            )


def _check_imported_controls(config: dict[str, Any]) -> None:
    """A control of an imported benchmark makes new audio from the released one: one that speaks (tts_control,
    injection) needs TTS voices, one whose changed turn is transcribed needs an ASR model that hears it."""
    cells = judge_cells(config)
    speaking = sorted({c.condition for c in cells if Condition(c.condition).needs_synthesis})
    if speaking and not config["tts"]["voices"]:
        raise ConfigError(
            f"evaluation.conditions / judges.*.schedule.conditions: {speaking} speak new turns, but tts.voices is "
            "empty (an imported benchmark brings no voices); configure voices or judge the other conditions"
        )
    for cell in cells:
        model = transcript_model(config, cell)
        if cell.condition != CLEAN and model is not None and config["asr"]["models"][model]["model"] == IMPORTED:
            raise ConfigError(
                f"judges.{cell.judge}: the {cell.condition!r} cell {cell.label} reads a transcript of the changed "
                f"turn, but asr.models.{model} has only the released transcripts of the unchanged turns; use an ASR "
                "model that recognizes audio, or judge the clean condition only"
            )


def canonical(value: Any) -> Any:
    """`value` with every mapping's keys sorted, recursively (lists keep their order).

    Snakemake compares a job's params by their repr, in which a dict shows its keys in insertion order: a
    config written back with sorted keys (or any other order) would rerun every job. Every `params:` value
    taken from the config goes through this, so key order, comments, quoting and YAML style never rerun a job.
    """
    if isinstance(value, Mapping):
        return {str(key): canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    return value
