"""The terms a released benchmark is under, from the run's own facts: the corpus's licence, source and citation
(`corpus.license`, `corpus.source`, `corpus.citation` of the run's config; DeepDialogue's are the defaults of the
DeepDialogue formats only, and a corpus that states none is released as `unknown`, which the card says), and the
licences of the speech engines and voices that spoke its turns.

The engine and voice licences were read from their upstream sources: piper-tts's package metadata
(GPL-3.0-or-later), the `joe` voice's MODEL_CARD in rhasspy/piper-voices v1.0.0 (repository MIT; voice data
NabuCasa voice-datasets, CC0; fine-tuned from the `lessac` voice, whose data is under the Blizzard 2013 Lessac
licence), espeak-ng's Debian copyright file (GPL-3.0-or-later) and coqui/XTTS-v2's LICENSE (Coqui Public Model
License 1.0.0: non-commercial use of the model and of its outputs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEEPDIALOGUE_FORMATS = ("deepdialogue", "deepdialogue_hub")
# The loading script of the hub datasets states CC BY-NC-SA 4.0, as does the project's reference copy; the hub's
# metadata header shows cc-by-nc-4.0. The stricter of the two is the default; corpus.license overrides it.
DEEPDIALOGUE_LICENSE = "cc-by-nc-sa-4.0"
DEEPDIALOGUE_SOURCES = {"xtts": "SALT-Research/DeepDialogue-xtts", "orpheus": "SALT-Research/DeepDialogue-orpheus"}
DEEPDIALOGUE_CITATION = """@misc{koudounas2025deepdialogue,
  title = {DeepDialogue: A Multi-Turn Emotionally-Rich Spoken Dialogue Dataset},
  author = {Alkis Koudounas and Moreno La Quatra and Elena Baralis},
  year = {2025},
  eprint = {2505.19978},
  archivePrefix = {arXiv},
  primaryClass = {cs.CL},
  url = {https://arxiv.org/abs/2505.19978}
}"""
# `source: original`: the dialogues were written for this benchmark (the Hub's source_datasets value for that).
ORIGINAL = "original"
UNKNOWN = "unknown"
STATED = "as the run's configuration states in corpus.license"
DEEPDIALOGUE_DEFAULTS = "DeepDialogue's published terms, the default of the DeepDialogue formats"
NOT_STATED = "not stated by the run's configuration"


@dataclass(frozen=True)
class CorpusTerms:
    """The corpus's licence (a Hub licence id), source (a Hub dataset id, `original`, or a description) and
    citation, and whether the run's config stated them (False: DeepDialogue defaults or unknown)."""

    license: str
    source: str
    citation: str | None
    origin: str  # STATED, DEEPDIALOGUE_DEFAULTS or NOT_STATED

    @property
    def known(self) -> bool:
        return UNKNOWN not in (self.license, self.source)

    @property
    def source_datasets(self) -> list[str]:
        """The card header's `source_datasets`: a Hub id or 'original' (a description is no Hub value)."""
        if self.source == ORIGINAL or _is_hub_id(self.source):
            return [self.source]
        return []

    def source_text(self) -> str:
        if self.source == ORIGINAL:
            return "written for this benchmark (not drawn from another dataset)"
        if _is_hub_id(self.source):
            return f"the Hugging Face dataset `{self.source}`"
        return self.source


def _is_hub_id(source: str) -> bool:
    owner, _, name = source.partition("/")
    return bool(owner and name) and "/" not in name and ":" not in source and " " not in source


def corpus_terms(corpus: Mapping[str, Any] | None, formats: Sequence[str]) -> CorpusTerms:
    """The terms of the corpus the released dialogues come from: the config's `corpus.license`, `.source` and
    `.citation`; what it leaves out is DeepDialogue's when every dialogue was read in a DeepDialogue format, and
    `unknown` otherwise."""
    corpus = dict(corpus or {})
    deepdialogue = bool(formats) and all(f in DEEPDIALOGUE_FORMATS for f in formats)
    defaults = {
        "license": DEEPDIALOGUE_LICENSE if deepdialogue else UNKNOWN,
        "source": DEEPDIALOGUE_SOURCES[corpus.get("tts_system", "xtts")] if deepdialogue else UNKNOWN,
        "citation": DEEPDIALOGUE_CITATION if deepdialogue else None,
    }
    stated = {key: corpus[key] for key in defaults if corpus.get(key) is not None}
    default_origin = DEEPDIALOGUE_DEFAULTS if deepdialogue else NOT_STATED
    origin = STATED if "license" in stated else default_origin
    values = {**defaults, **stated}
    return CorpusTerms(values["license"], values["source"], values["citation"], origin)


@dataclass(frozen=True)
class SpeechLicense:
    """What spoke some of the turns and under which terms."""

    what: str
    terms: str


ENGINE_LICENSES = {
    "piper": SpeechLicense("Piper (piper-tts), the synthesis engine", "GPL-3.0-or-later"),
    "espeak": SpeechLicense("espeak-ng, the synthesis engine and its voices", "GPL-3.0-or-later"),
    "xtts": SpeechLicense(
        "XTTS-v2 (coqui/XTTS-v2), the voice-cloning model",
        "Coqui Public Model License 1.0.0 (https://coqui.ai/cpml): non-commercial use of the model and of its "
        "outputs only",
    ),
}
# (engine, a part of the voice's model name) -> its licence.
VOICE_LICENSES = {
    ("piper", "joe"): SpeechLicense(
        "the Piper voice en_US-joe-medium (rhasspy/piper-voices v1.0.0)",
        "MIT (the voice repository); trained on NabuCasa voice-datasets (CC0), fine-tuned from the en_US lessac "
        "voice, whose data is under the Blizzard 2013 Lessac licence "
        "(https://www.cstr.ed.ac.uk/projects/blizzard/2013/lessac_blizzard2013/license.html)",
    ),
}


def speech_licenses(voices: Iterable[tuple[str, str]]) -> list[SpeechLicense]:
    """The licences of the (engine, model) pairs that spoke turns; an engine or voice not in the tables is listed
    with the terms 'not recorded by lalm-judge: check its own licence'."""
    found: dict[object, SpeechLicense] = {}
    for engine, model in sorted(set(voices)):
        found.setdefault(engine, ENGINE_LICENSES.get(engine) or SpeechLicense(f"the TTS engine {engine}", _UNRECORDED))
        for (voice_engine, key), voice in VOICE_LICENSES.items():
            if voice_engine == engine and key in model:
                found.setdefault((engine, key), voice)  # one voice, however its runs name its model
    return list(found.values())


_UNRECORDED = "not recorded by lalm-judge: check its own licence"
