"""Pairwise judge prompts: the versioned YAML templates in `prompts/pairwise/` and the rendering of one
presentation order of an item.

A prompt file `prompts/pairwise/<name>.yaml` holds:
- `version` (bumped whenever any text changes) and `description`;
- `system` (may be empty) and `user` templates with the fields {aspect}, {aspect_description}, {query},
  {response1}, {response2}. The user template is used verbatim (no whitespace is tidied), so a prompt can
  reproduce another study's wording byte for byte (`sagelm.yaml`);
- `responses`: per modality, what fills {response1}/{response2}: `audio` with {audio} (the audio slot,
  `lalm_judge.judging.backends.base.AUDIO_SLOT`, where the backend places that response's audio), `text`
  with {transcript} (the cascade: the response's transcript), `audio_text` with both;
- `aspects` (required exactly when {aspect_description} is used): aspect -> definition. An aspect without
  a definition is an error, never an empty line.

Every pairwise prompt asks for the verdict (1, 2 or Tie) first; `lalm_judge.pairwise.parsing` reads it.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from lalm_judge.core.files import stable_hash
from lalm_judge.core.vocabulary import AUDIO, AUDIO_TEXT, MODALITIES, TEXT, TIE
from lalm_judge.judging.backends.base import AUDIO_SLOT

PAIRWISE_PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts" / "pairwise"
TEMPLATE_FIELDS = ("aspect", "aspect_description", "query", "response1", "response2")
RESPONSE_FIELDS = {AUDIO: {"audio"}, TEXT: {"transcript"}, AUDIO_TEXT: {"audio", "transcript"}}
REQUIRED_KEYS = ("version", "system", "user", "responses")
OPTIONAL_KEYS = ("description", "aspects")


class PairwisePromptError(ValueError):
    """A pairwise prompt file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class PairwisePrompt:
    name: str
    version: str
    system: str
    user: str
    responses: Mapping[str, str]
    path: str
    content_hash: str
    description: str = ""
    aspects: Mapping[str, str] | None = None

    @property
    def uses_aspect_description(self) -> bool:
        return "aspect_description" in _fields(self.user) | _fields(self.system)

    def render(
        self,
        modality: str,
        *,
        aspect: str,
        aspect_text: str,
        query: str,
        transcripts: tuple[str, str] | None = None,
    ) -> tuple[str, str]:
        """(system, user) of one presentation order: response 1 and 2 as shown to the judge. Audio modalities
        put an audio slot per response; text modalities need the two `transcripts` in the shown order."""
        if modality not in MODALITIES:
            raise ValueError(f"unknown modality {modality!r}; use one of {MODALITIES}")
        if modality != AUDIO and transcripts is None:
            raise ValueError(f"prompt {self.name}: modality {modality!r} needs the transcripts of both responses")
        responses = [
            self.responses[modality].format(
                audio=AUDIO_SLOT, transcript=transcripts[i] if transcripts is not None else ""
            )
            for i in range(2)
        ]
        fields = {
            "aspect": aspect_text,
            "aspect_description": self.aspect_description(aspect) if self.uses_aspect_description else "",
            "query": query,
            "response1": responses[0],
            "response2": responses[1],
        }
        return self.system.format(**fields), self.user.format(**fields)

    def aspect_description(self, aspect: str) -> str:
        if not self.aspects or aspect not in self.aspects:
            known = ", ".join(sorted(self.aspects or {}))
            raise PairwisePromptError(
                f"pairwise prompt file {self.path} defines no aspect {aspect!r} (key 'aspects'; it defines: {known}); "
                "add a definition or use a prompt without {aspect_description}"
            )
        return self.aspects[aspect]


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def resolve_pairwise_prompt_path(name_or_path: str | Path) -> Path:
    """A prompt name ('sagelm') resolves to `prompts/pairwise/sagelm.yaml`; a .yaml/.yml string is a path."""
    text = str(name_or_path)
    path = Path(text) if text.endswith((".yaml", ".yml")) else PAIRWISE_PROMPTS_DIR / f"{text}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PAIRWISE_PROMPTS_DIR.glob("*.yaml")))
        raise PairwisePromptError(f"pairwise prompt {text!r}: file {path} does not exist; known prompts: {known}")
    return path


def _check_template(where: str, key: str, template: str, allowed: set[str] | tuple[str, ...]) -> set[str]:
    try:
        fields = _fields(template)
    except ValueError as err:
        raise PairwisePromptError(f"{where}: key {key!r} is not a valid format template ({err})") from err
    unknown = sorted(fields - set(allowed))
    if unknown:
        raise PairwisePromptError(f"{where}: key {key!r} uses unknown fields {unknown}; allowed: {sorted(allowed)}")
    return fields


def load_pairwise_prompt(name_or_path: str | Path) -> PairwisePrompt:
    """Load and validate a pairwise prompt YAML; errors name the file and the offending key."""
    path = resolve_pairwise_prompt_path(name_or_path)
    where = f"pairwise prompt file {path}"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise PairwisePromptError(f"{where}: invalid YAML ({err})") from err
    if not isinstance(raw, Mapping):
        raise PairwisePromptError(f"{where}: expected a mapping of keys {REQUIRED_KEYS}")
    missing = [key for key in REQUIRED_KEYS if key not in raw or raw[key] is None or (key != "system" and not raw[key])]
    if missing:
        raise PairwisePromptError(f"{where}: missing key(s) {missing}")
    unknown = sorted(set(raw) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise PairwisePromptError(f"{where}: unknown keys {unknown}; allowed: {REQUIRED_KEYS + OPTIONAL_KEYS}")
    used = _check_template(where, "system", str(raw["system"]), TEMPLATE_FIELDS)
    used |= _check_template(where, "user", str(raw["user"]), TEMPLATE_FIELDS)
    for field_name in ("query", "response1", "response2"):
        if field_name not in used:
            raise PairwisePromptError(f"{where}: the templates never use {{{field_name}}}")
    if TIE not in raw["user"] and TIE not in raw["system"]:
        raise PairwisePromptError(f"{where}: the prompt must ask for a verdict of 1, 2 or {TIE}")
    responses = raw["responses"]
    if not isinstance(responses, Mapping) or set(responses) != set(MODALITIES):
        raise PairwisePromptError(f"{where}: key 'responses' must map exactly the modalities {MODALITIES} to templates")
    for modality in MODALITIES:
        fields = _check_template(where, f"responses.{modality}", str(responses[modality]), RESPONSE_FIELDS[modality])
        if fields != RESPONSE_FIELDS[modality]:
            raise PairwisePromptError(
                f"{where}: key 'responses.{modality}' must use {sorted(RESPONSE_FIELDS[modality])}, "
                f"uses {sorted(fields)}"
            )
    aspects = raw.get("aspects")
    if ("aspect_description" in used) != bool(aspects):
        raise PairwisePromptError(
            f"{where}: key 'aspects' must be given exactly when a template uses {{aspect_description}}"
        )
    if aspects is not None and not (isinstance(aspects, Mapping) and all(isinstance(v, str) for v in aspects.values())):
        raise PairwisePromptError(f"{where}: key 'aspects' must map aspect names to definitions")
    return PairwisePrompt(
        name=path.stem,
        version=str(raw["version"]),
        system=str(raw["system"]),
        user=str(raw["user"]),
        responses={m: str(responses[m]) for m in MODALITIES},
        path=str(path),
        content_hash=stable_hash(raw),
        description=str(raw.get("description", "")),
        aspects=dict(aspects) if aspects else None,
    )
