"""Pairwise judge prompts: the versioned YAML templates in `prompts/pairwise/`, read by the one prompt loader
(`lalm_judge.judging.prompts.read_prompt_file`, which checks keys and placeholders at load), and the rendering of
one presentation order of an item.

A prompt file `prompts/pairwise/<name>.yaml` holds:
- `version` (bumped whenever any text changes) and `description`;
- `system` (may be empty) and `user` templates with the fields {aspect}, {aspect_description}, {query},
  {response1}, {response2}: {query}, {response1} and {response2} are required, {response1} and {response2} once
  each and in `user` (that is where the audio slots can go), and the aspect must be named ({aspect} or
  {aspect_description}). The user template is used verbatim (no whitespace is tidied), so a prompt can
  reproduce another study's wording byte for byte (`sagelm.yaml`);
- `responses`: per modality, what fills {response1}/{response2}: `audio` with {audio} (the audio slot,
  `lalm_judge.judging.backends.base.AUDIO_SLOT`, where the backend places that response's audio), `text`
  with {transcript} (the cascade: the response's transcript), `audio_text` with both, each exactly once;
- `aspects` (required exactly when {aspect_description} is used): aspect -> definition. An aspect without
  a definition is an error, never an empty line.

Every pairwise prompt asks for the verdict (1, 2 or Tie) first; `lalm_judge.pairwise.parsing` reads it.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lalm_judge.core.files import stable_hash
from lalm_judge.core.vocabulary import AUDIO, AUDIO_TEXT, MODALITIES, TEXT, TIE
from lalm_judge.judging.backends.base import AUDIO_SLOT
from lalm_judge.judging.prompts import PROMPTS_DIR, PromptError, PromptKind, read_prompt_file, template_fields

PAIRWISE_PROMPTS_DIR = PROMPTS_DIR / "pairwise"
RESPONSE_FIELDS = {AUDIO: {"audio"}, TEXT: {"transcript"}, AUDIO_TEXT: {"audio", "transcript"}}
PAIRWISE_PROMPTS = PromptKind(
    noun="pairwise prompt",
    directory=PAIRWISE_PROMPTS_DIR,
    required_keys=("version", "system", "user", "responses"),
    optional_keys=("description", "aspects"),
    fields=("aspect", "aspect_description", "query", "response1", "response2"),
    needed=(
        (("query",), "the judge is shown the instruction there"),
        (("response1",), "the first response (its audio slot or transcript) goes there"),
        (("response2",), "the second response goes there"),
        (("aspect", "aspect_description"), "the judge must be told which aspect to compare"),
    ),
    may_be_empty=("system",),
)
# Raised for every pairwise prompt problem (the loader's errors included).
PairwisePromptError = PromptError


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
            raise PromptError(
                f"pairwise prompt file {self.path} defines no aspect {aspect!r} (key 'aspects'; it defines: {known}); "
                "add a definition or use a prompt without {aspect_description}"
            )
        return self.aspects[aspect]


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def _count_fields(template: str, name: str) -> int:
    return sum(1 for _, field_name, _, _ in string.Formatter().parse(template) if field_name == name)


def _check_responses(where: str, raw: Mapping) -> dict[str, str]:
    """Each response slot used once, in `user`; `responses` maps every modality to its exact fields."""
    for name in ("response1", "response2"):
        if _count_fields(str(raw["user"]), name) != 1 or name in _fields(str(raw["system"])):
            raise PromptError(f"{where}: key 'user' must use {{{name}}} exactly once (and 'system' not at all)")
    responses = raw["responses"]
    if not isinstance(responses, Mapping) or set(responses) != set(MODALITIES):
        raise PromptError(f"{where}: key 'responses' must map exactly the modalities {MODALITIES} to templates")
    for modality in MODALITIES:
        template, wanted = str(responses[modality]), RESPONSE_FIELDS[modality]
        fields = template_fields(where, f"responses.{modality}", template, sorted(wanted))
        if fields != wanted or any(_count_fields(template, name) != 1 for name in wanted):
            missing = sorted(wanted - fields)
            raise PromptError(
                f"{where}: key 'responses.{modality}' must use each of {sorted(wanted)} exactly once"
                + (f"; it lacks {missing}" if missing else "")
            )
    return {m: str(responses[m]) for m in MODALITIES}


def load_pairwise_prompt(name_or_path: str | Path) -> PairwisePrompt:
    """Load and validate a pairwise prompt YAML; errors name the file and the offending key or placeholder."""
    loaded = read_prompt_file(name_or_path, PAIRWISE_PROMPTS)
    raw, where = loaded.raw, f"pairwise prompt file {loaded.path}"
    if TIE not in raw["user"] and TIE not in raw["system"]:
        raise PromptError(f"{where}: the prompt must ask for a verdict of 1, 2 or {TIE}")
    responses = _check_responses(where, raw)
    aspects = raw.get("aspects")
    if ("aspect_description" in loaded.used) != bool(aspects):
        raise PromptError(f"{where}: key 'aspects' must be given exactly when a template uses {{aspect_description}}")
    if aspects is not None and not (isinstance(aspects, Mapping) and all(isinstance(v, str) for v in aspects.values())):
        raise PromptError(f"{where}: key 'aspects' must map aspect names to definitions")
    return PairwisePrompt(
        name=loaded.path.stem,
        version=str(raw["version"]),
        system=str(raw["system"]),
        user=str(raw["user"]),
        responses=responses,
        path=str(loaded.path),
        content_hash=stable_hash(raw),
        description=str(raw.get("description", "")),
        aspects=dict(aspects) if aspects else None,
    )
