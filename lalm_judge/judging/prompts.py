"""Judge prompts: the one loader of versioned YAML prompt templates (the safety track's in `prompts/`, the
pairwise track's in `prompts/pairwise/`, `lalm_judge.pairwise.prompts`), and the construction of safety requests.

The loader (`read_prompt_file`) checks what every kind of prompt file shares, before any request is built: the
file exists (an unknown name lists the known ones), is a YAML mapping with the kind's keys and no others, and its
templates are valid format strings that use only the kind's placeholders and every placeholder the kind's cells
need. Each error names the file and the key or placeholder. The kinds (`PromptKind`):

A safety prompt file `prompts/<strategy>.yaml` holds:
- `version` (e.g. "basic-v1"; bumped whenever any text changes), `description`;
- `system` and `user` templates with the format fields {instructions}, {transcript}, {examples}, {rubric};
  {transcript} (the dialogue of text cells) and {instructions} (what each modality's cell is given: the
  transcript, the audio or both) are required, since every prompt serves every modality;
- `instructions`: one line per modality (text: judge the transcript; audio: listen to the dialogue;
  audio_text: both), filled into {instructions};
- `transcript_heading`: the line above the speaker-labelled turns ("Speaker LLM1: ...") that fill
  {transcript}; for the audio modality {transcript} is empty, the dialogue is the attached audio;
- `examples` (few-shot dialogues with scores, filled into {examples}) and `rubric` (levels with scores,
  filled into {rubric}), each required exactly when its field is used;
- `answer_tokens` (`calibrated` only): the (safe, unsafe) first answer words. They travel in
  `JudgeRequest.answer_tokens`; a backend that exposes token probabilities returns
  `JudgeOutput.p_safe = P(safe) / (P(safe) + P(unsafe))` at the first generated token, and
  `lalm_judge.judging.scoring.resolve_score` uses p_safe when present, else the parsed SAFETY_SCORE.
A safety template has no audio slot: a request carries one dialogue audio, and where it goes is the judge's
prompt format (the chat templates: before the text; MERaLiON-2: after its "follow the text instruction based on
the following audio" line; MiniCPM-o: first), so a template cannot leave it out; `{audio}` is refused as an
unknown field. The two-audio pairwise prompts place theirs with an audio slot per response.

Every safety prompt asks for the same output contract, a final line `SAFETY_SCORE: <number in [0,1]>` with
1 = completely safe and 0 = clearly unsafe; `lalm_judge.judging.scoring` parses it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lalm_judge.core.files import read_yaml, stable_hash
from lalm_judge.core.vocabulary import MODALITIES, TEXT, TranscriptSource, modality_source_error
from lalm_judge.judging.backends.base import JudgeRequest
from lalm_judge.manifest.samples import Sample

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"
CONTRACT_KEY = "SAFETY_SCORE"


class PromptError(ValueError):
    """A prompt file that cannot be used; the message names the file and the key or placeholder."""


@dataclass(frozen=True)
class PromptKind:
    """What one kind of prompt file holds: its keys, its templates and the placeholders they may and must use.

    `needed`: (placeholders, why) pairs; the templates must use at least one of each pair's placeholders, or
    the cells that need it would be asked about something they are never shown."""

    noun: str
    directory: Path
    required_keys: tuple[str, ...]
    optional_keys: tuple[str, ...]
    fields: tuple[str, ...]
    needed: tuple[tuple[tuple[str, ...], str], ...]
    templates: tuple[str, ...] = ("system", "user")
    # Required keys that may hold an empty text (a prompt without a system message).
    may_be_empty: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return self.required_keys + self.optional_keys


@dataclass(frozen=True)
class PromptFile:
    """A prompt file that passed the loader's checks: its path, its raw mapping and the placeholders it uses."""

    path: Path
    raw: Mapping[str, Any]
    used: frozenset[str]


SAFETY_PROMPTS = PromptKind(
    noun="prompt",
    directory=PROMPTS_DIR,
    required_keys=("version", "system", "user", "instructions", "transcript_heading"),
    optional_keys=("description", "examples", "rubric", "answer_tokens"),
    fields=("instructions", "transcript", "examples", "rubric"),
    needed=(
        (("transcript",), "text and audio_text cells are shown the dialogue there"),
        (("instructions",), "each modality's cell is told there what it is given: transcript, audio or both"),
    ),
)


def template_fields(where: str, key: str, template: str, allowed: Sequence[str]) -> set[str]:
    """The placeholders of one template; PromptError naming `where` and `key` for an invalid template or a
    placeholder outside `allowed` (positional `{}`, attribute access and unknown names included)."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        raise PromptError(f"{where}: key {key!r} is not a valid format template ({err})") from err
    unknown = sorted(fields - set(allowed))
    if unknown:
        raise PromptError(f"{where}: key {key!r} uses unknown fields {unknown}; allowed: {sorted(allowed)}")
    return fields


def resolve_prompt_path(name_or_path: str | Path, kind: PromptKind = SAFETY_PROMPTS) -> Path:
    """A prompt name ('cot') resolves to `<kind's folder>/cot.yaml`; anything ending in .yaml/.yml is a path."""
    text = str(name_or_path)
    path = Path(text) if text.endswith((".yaml", ".yml")) else kind.directory / f"{text}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in kind.directory.glob("*.yaml")))
        raise PromptError(f"{kind.noun} {text!r}: file {path} does not exist; known prompts: {known}")
    return path


def read_prompt_file(name_or_path: str | Path, kind: PromptKind) -> PromptFile:
    """Read a prompt file of `kind` and check its keys and templates (see the module docstring)."""
    path = resolve_prompt_path(name_or_path, kind)
    where = f"{kind.noun} file {path}"
    try:
        raw = read_yaml(path)
    except yaml.YAMLError as err:
        raise PromptError(f"{where}: invalid YAML ({err})") from err
    if not isinstance(raw, Mapping):
        raise PromptError(f"{where}: expected a mapping of keys {kind.required_keys}")
    missing = [k for k in kind.required_keys if raw.get(k) is None or (k not in kind.may_be_empty and raw[k] == "")]
    if missing:
        raise PromptError(f"{where}: missing key {missing[0]!r}" + (f" (and {missing[1:]})" if missing[1:] else ""))
    unknown = sorted(set(raw) - set(kind.keys))
    if unknown:
        raise PromptError(f"{where}: unknown keys {unknown}; allowed: {kind.keys}")
    used: set[str] = set()
    for key in kind.templates:
        used |= template_fields(where, key, str(raw[key]), kind.fields)
    for placeholders, why in kind.needed:
        if not used & set(placeholders):
            names = " or ".join(f"{{{name}}}" for name in placeholders)
            raise PromptError(f"{where}: the templates ({', '.join(kind.templates)}) never use {names}; {why}")
    return PromptFile(path, raw, frozenset(used))


@dataclass(frozen=True)
class FewShotExample:
    turns: tuple[tuple[str, str], ...]
    explanation: str
    score: float


@dataclass(frozen=True)
class RubricLevel:
    score: float
    label: str
    description: str


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    system: str
    user: str
    instructions: Mapping[str, str]
    transcript_heading: str
    path: str
    content_hash: str
    description: str = ""
    examples: tuple[FewShotExample, ...] = ()
    rubric: tuple[RubricLevel, ...] = ()
    answer_tokens: tuple[str, str] | None = None

    def render(self, modality: str, transcript: Sequence[tuple[str, str]] = ()) -> tuple[str, str]:
        """(system, user) texts for one request; `transcript` is empty for the audio modality."""
        fields = {
            "instructions": self.instructions[modality],
            "transcript": f"{self.transcript_heading}\n{format_turns(transcript)}" if transcript else "",
            "examples": "\n\n".join(_format_example(i, e) for i, e in enumerate(self.examples, 1)),
            "rubric": "\n".join(f"- {level.score:.1f} = {level.label}: {level.description}" for level in self.rubric),
        }
        return _tidy(self.system.format(**fields)), _tidy(self.user.format(**fields))


def format_turns(turns: Sequence[tuple[str, str]]) -> str:
    """Speaker-labelled turns, one per line: 'Speaker LLM1: ...'."""
    return "\n".join(f"Speaker {speaker}: {text}" for speaker, text in turns)


def _format_example(number: int, example: FewShotExample) -> str:
    return (
        f"Example {number}:\n{format_turns(example.turns)}\n"
        f"Explanation: {example.explanation}\n{CONTRACT_KEY}: {example.score!r}"
    )


def _tidy(text: str) -> str:
    """Drop the blank lines an empty field leaves behind."""
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _unit_score(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise PromptError(f"{where}: score must be a number in [0, 1], got {value!r}")
    return float(value)


def _examples(raw: Any, where: str) -> tuple[FewShotExample, ...]:
    if not isinstance(raw, list):
        raise PromptError(f"{where}: key 'examples' must be a list")
    examples = []
    for i, item in enumerate(raw):
        at = f"{where}: examples[{i}]"
        if not isinstance(item, Mapping) or not {"turns", "explanation", "score"} <= set(item):
            raise PromptError(f"{at} needs the keys 'turns', 'explanation' and 'score'")
        turns = item["turns"]
        if not turns or not all(isinstance(t, list | tuple) and len(t) == 2 for t in turns):
            raise PromptError(f"{at}: 'turns' must be a non-empty list of [speaker, text] pairs")
        examples.append(
            FewShotExample(
                tuple((str(s), str(t)) for s, t in turns), str(item["explanation"]), _unit_score(item["score"], at)
            )
        )
    return tuple(examples)


def _rubric(raw: Any, where: str) -> tuple[RubricLevel, ...]:
    if not isinstance(raw, list):
        raise PromptError(f"{where}: key 'rubric' must be a list")
    levels = []
    for i, item in enumerate(raw):
        at = f"{where}: rubric[{i}]"
        if not isinstance(item, Mapping) or not {"score", "label", "description"} <= set(item):
            raise PromptError(f"{at} needs the keys 'score', 'label' and 'description'")
        levels.append(RubricLevel(_unit_score(item["score"], at), str(item["label"]), str(item["description"])))
    return tuple(levels)


def _answer_tokens(raw: Any, where: str) -> tuple[str, str]:
    if not isinstance(raw, Mapping) or not all(isinstance(raw.get(k), str) and raw[k] for k in ("safe", "unsafe")):
        raise PromptError(f"{where}: key 'answer_tokens' must map 'safe' and 'unsafe' to answer words")
    return raw["safe"], raw["unsafe"]


def load_prompt(name_or_path: str | Path) -> Prompt:
    """Load and validate a safety prompt YAML; errors name the file and the offending key or placeholder."""
    loaded = read_prompt_file(name_or_path, SAFETY_PROMPTS)
    raw, where = loaded.raw, f"prompt file {loaded.path}"
    instructions = raw["instructions"]
    if not isinstance(instructions, Mapping):
        raise PromptError(f"{where}: key 'instructions' must map each modality {MODALITIES} to a text")
    for modality in MODALITIES:
        if not instructions.get(modality):
            raise PromptError(f"{where}: missing key 'instructions.{modality}'")
    if CONTRACT_KEY not in raw["user"]:
        raise PromptError(
            f"{where}: key 'user' must ask for the output contract line '{CONTRACT_KEY}: <number in [0,1]>'"
        )
    for field_name in ("examples", "rubric"):
        if (field_name in loaded.used) != bool(raw.get(field_name)):
            raise PromptError(
                f"{where}: key {field_name!r} must be given exactly when a template uses {{{field_name}}}"
            )
    return Prompt(
        name=loaded.path.stem,
        version=str(raw["version"]),
        system=raw["system"],
        user=raw["user"],
        instructions={m: str(instructions[m]) for m in MODALITIES},
        transcript_heading=str(raw["transcript_heading"]),
        path=str(loaded.path),
        content_hash=stable_hash(raw),
        description=str(raw.get("description", "")),
        examples=_examples(raw["examples"], where) if raw.get("examples") else (),
        rubric=_rubric(raw["rubric"], where) if raw.get("rubric") else (),
        answer_tokens=_answer_tokens(raw["answer_tokens"], where) if "answer_tokens" in raw else None,
    )


def build_request(
    prompt: Prompt,
    sample: Sample,
    modality: str,
    transcript_source: str,
    audio: tuple[np.ndarray, int] | None = None,
    request_id: str | None = None,
    *,
    turn_indices: Sequence[int] | None = None,
    cascade_source: str | None = None,
) -> JudgeRequest:
    """The request a judge sees for one sample (or one long-audio window of it).

    text: the transcript of `transcript_source`, no audio. audio: the waveform, no transcript in the prompt
    (`transcript_source` is 'none'). audio_text: both. `turn_indices` limits the transcript to the turns of
    a long-audio window. `cascade_source` (audio modality only) fills `JudgeRequest.transcript` with that ASR
    transcript without showing it in the prompt: text-only judges (the embedding baseline) score the audio
    through this ASR cascade.
    """
    source = TranscriptSource(transcript_source)
    problem = modality_source_error(modality, source)
    if problem:
        raise ValueError(f"sample {sample.sample_id}: {problem}")
    if modality != TEXT and audio is None:
        raise ValueError(f"modality {modality!r} needs audio for sample {sample.sample_id}")
    if modality == TEXT and audio is not None:
        raise ValueError(f"modality 'text' takes no audio (sample {sample.sample_id})")

    def turns_of(transcript_label: str) -> tuple[tuple[str, str], ...]:
        turns = sample.transcript(transcript_label)
        keep = range(len(turns)) if turn_indices is None else turn_indices
        return tuple(turns[i] for i in keep)

    shown = turns_of(source) if source.has_transcript else ()
    system, user = prompt.render(modality, shown)
    return JudgeRequest(
        request_id=request_id or sample.sample_id,
        system=system,
        user=user,
        audio=audio,
        transcript=turns_of(cascade_source) if cascade_source is not None else shown,
        answer_tokens=prompt.answer_tokens,
    )
