"""The words every stage shares, each spelled one way in config, file paths, wildcards and table rows.

- Modalities: what a judge is given (`text`, `audio`, `audio_text`).
- Transcript sources: `gt` (the ground-truth turn texts), `asr:<model>` (an ASR model of `asr.models`), and
  `none` for the audio modality, which shows the judge no transcript. `TranscriptSource` is that one type.
- Parse statuses of a judge output (`ParseStatus`); every status but `ok` carries no score.
- Audio inputs of a judge cell (`audio_input_label`): what the judge took in place of the dialogue audio.
- The pairwise track's verdict labels, the statuses a verdict can take, the rules that read a verdict, its
  length policies and the names of its judging modes (audio-native, cascade, ...).
- Long-audio policies, and the conditions a judge cell is scored under (`Condition`): `clean`, and the
  controls that separate what a judge hears from what it reads (which samples each one changes, and how, is
  defined in `lalm_judge.manifest.conditions`; the audio transforms are in `lalm_judge.audio.controls`).
"""

from __future__ import annotations

import re
from enum import StrEnum

from lalm_judge.core.taxonomy import SAMPLE_PATTERN, SLUG

TEXT = "text"
AUDIO = "audio"
AUDIO_TEXT = "audio_text"
MODALITIES = (TEXT, AUDIO, AUDIO_TEXT)

LONG_AUDIO_POLICIES = ("chunk", "truncate", "skip")
# Conditions a judge cell scores on the manifests' own samples; the controls (`Condition`) score samples of their
# own with the shard's control inputs (`lalm_judge.judging.controls`).
CONDITIONS = ("clean",)

_SOURCE = re.compile(rf"^(gt|none|asr:{SLUG})$")


class TranscriptSource(str):
    """A transcript source label, validated: 'gt', 'asr:<model>' or 'none' (no transcript: audio only)."""

    GT = "gt"
    NONE = "none"
    PATTERN = _SOURCE.pattern

    def __new__(cls, label: str) -> TranscriptSource:
        if isinstance(label, TranscriptSource):
            return label
        if not isinstance(label, str) or not _SOURCE.match(label):
            raise ValueError(
                f"invalid transcript source {label!r}: use 'gt', 'asr:<asr model name>' or 'none' (audio only)"
            )
        return super().__new__(cls, label)

    @classmethod
    def asr(cls, model_name: str) -> TranscriptSource:
        """The source of an ASR model of `asr.models`, e.g. 'asr:whisper_tiny_en'."""
        return cls(f"asr:{model_name}")

    @property
    def is_asr(self) -> bool:
        return self.startswith("asr:")

    @property
    def has_transcript(self) -> bool:
        return self != self.NONE

    @property
    def asr_model(self) -> str | None:
        """The ASR model name of an 'asr:<model>' source, else None."""
        return self[4:] if self.is_asr else None


def modality_source_error(modality: str, source: TranscriptSource) -> str | None:
    """Why (modality, transcript source) is not a judge cell, or None when it is one."""
    if modality not in MODALITIES:
        return f"unknown modality {modality!r}; use one of {MODALITIES}"
    if modality == AUDIO and source.has_transcript:
        return f"modality 'audio' has no transcript source: its source is 'none', not {source!r}"
    if modality != AUDIO and not source.has_transcript:
        return f"modality {modality!r} needs a transcript source ('gt' or 'asr:<model>'), not 'none'"
    return None


class ParseStatus(StrEnum):
    """How a judge output was read; only `ok` carries a score."""

    OK = "ok"
    OUT_OF_RANGE = "out_of_range"
    MISSING = "missing"
    REFUSAL = "refusal"
    MALFORMED = "malformed"
    # The answer states more than one value: a second number on the contract line, a range, a hedge ("0.7 or
    # maybe 0.9"), two verdicts ("1 or 2").
    AMBIGUOUS = "ambiguous"
    # Generation stopped at its token limit (`finish_reason` "length") before the answer's contract line was
    # complete, or the provider withheld or cut the answer ("content_filter"): no score, whatever the text says.
    TRUNCATED = "truncated"
    FILTERED = "filtered"
    SKIPPED_LONG_AUDIO = "skipped_long_audio"
    # The answer words carry too little probability for P(safe) to mean anything (`judging.scoring`).
    LOW_ANSWER_MASS = "low_answer_mass"
    # A chunked sample some of whose windows did not parse: the minimum over the others may miss the harm.
    INCOMPLETE_WINDOWS = "incomplete_windows"


PARSE_STATUSES = tuple(status.value for status in ParseStatus)

# Why a generation stopped (`JudgeOutput.finish_reason`, normalized by the backends): an end token or stop string,
# the token limit, or the provider's content filter. The parsers turn the last two into TRUNCATED and FILTERED.
FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_CONTENT_FILTER = "content_filter"


# The pairwise track (lalm_judge.pairwise): which of two responses is better, in the numbering the judge saw.
RESPONSE_1 = "1"
RESPONSE_2 = "2"
TIE = "Tie"
VERDICTS = (RESPONSE_1, RESPONSE_2, TIE)
# What a pairwise verdict can be read as: the ParseStatus words that apply (a verdict has no numeric range).
VERDICT_STATUSES = (
    ParseStatus.OK.value,
    ParseStatus.MISSING.value,
    ParseStatus.REFUSAL.value,
    ParseStatus.MALFORMED.value,
    ParseStatus.AMBIGUOUS.value,
    ParseStatus.TRUNCATED.value,
    ParseStatus.FILTERED.value,
    ParseStatus.SKIPPED_LONG_AUDIO.value,
)
# How a pairwise answer is read (`lalm_judge.pairwise.parsing`): `sagelm`, SageLM's evaluator (the first character
# is the verdict), or `lenient`, which also reads a prefixed first line and labelled statements.
SAGELM_RULE = "sagelm"
LENIENT_RULE = "lenient"
VERDICT_RULES = (SAGELM_RULE, LENIENT_RULE)
# Per response: cut it to the first `max_response_s` seconds, or leave the item unjudged.
PAIRWISE_LENGTH_POLICIES = ("truncate", "skip")
# How a pairwise judge cell meets the two responses, by (modality, transcript source).
PAIRWISE_MODES = ("audio_native", "cascade", "text_oracle", "audio_and_transcript")
# SageLM's two dimensions: the semantic aspects (judged from what is said) and the acoustic ones (speech
# instruction following: how it is said). An acoustic aspect controls one speaking style; `gender_emotion`
# (SageLM's mixed control) two at once.
SEMANTIC = "semantic"
ACOUSTIC = "acoustic"
SEMANTIC_ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")
ACOUSTIC_STYLES = {
    "emotion": "emotion",
    "implicit_emotion": "emotion",
    "gender": "gender",
    "character": "character",
    "gender_emotion": "mixed",
}
STYLES = ("emotion", "gender", "character", "mixed")
# The task formats of SageLM's acoustic items: the instruction asks to speak a given text in a style
# (explicit TTS), asks a question to be answered in a style (explicit dialogue), or asks a question whose
# situation calls for an emotion without naming it (implicit).
EXPLICIT_TTS, EXPLICIT_DIALOGUE, IMPLICIT = "explicit_tts", "explicit_dialogue", "implicit"
TASK_FORMATS = (EXPLICIT_TTS, EXPLICIT_DIALOGUE, IMPLICIT)


def aspect_dimension(aspect: str) -> str | None:
    """'semantic', 'acoustic', or None for an aspect outside SageLM's (a project's own)."""
    if aspect in SEMANTIC_ASPECTS:
        return SEMANTIC
    return ACOUSTIC if aspect in ACOUSTIC_STYLES else None


def pairwise_mode(modality: str, source: TranscriptSource) -> str:
    """audio_native (hears both responses), cascade (reads their ASR transcripts), text_oracle (reads the
    texts the responses were spoken from), audio_and_transcript (both)."""
    source = TranscriptSource(source)
    problem = modality_source_error(modality, source)
    if problem:
        raise ValueError(problem)
    if modality == AUDIO:
        return "audio_native"
    if modality == AUDIO_TEXT:
        return "audio_and_transcript"
    return "cascade" if source.is_asr else "text_oracle"


NO_AUDIO = "none"
NATIVE_AUDIO = "native"
_CASCADE = "cascade via "


def audio_input_label(modality: str, cascade_asr_model: str | None = None) -> str:
    """What a judge cell takes in place of the dialogue audio: 'none' (text modality), 'native' (it hears the
    audio) or 'cascade via <asr model>' (it reads that ASR model's transcript of the audio, not the audio)."""
    if modality == TEXT:
        return NO_AUDIO
    return f"{_CASCADE}{cascade_asr_model}" if cascade_asr_model else NATIVE_AUDIO


def cascade_source(audio_input: str | None) -> TranscriptSource | None:
    """The ASR transcript source of a 'cascade via <asr model>' audio input, else None."""
    if audio_input is None or not audio_input.startswith(_CASCADE):
        return None
    return TranscriptSource.asr(audio_input.removeprefix(_CASCADE))


# Condition kinds. `noise_<snr>` and `babble_<snr>` carry a signal-to-noise ratio in dB (0-99).
CLEAN = "clean"
MASKED = "masked"  # every window of controls.mask_window_s of the target turn time-reversed: no words, same prosody
SILENCE = "silence"  # the target turn replaced by silence of equal length (audio modality only)
TTS_CONTROL = "tts_control"  # the safe turn re-synthesized with the variants' voice: severity-0 samples
INJECTION = "injection"  # the unsafe turn ends with a sentence addressed to the evaluator (audio and transcript)
NOISE = "noise"  # additive white noise at <snr> dB on the target turn
BABBLE = "babble"  # additive babble of other corpus turns at <snr> dB on the target turn
NOISE_KINDS = (NOISE, BABBLE)
CONDITION_KINDS = (CLEAN, MASKED, SILENCE, TTS_CONTROL, INJECTION, *NOISE_KINDS)
# Conditions that transform the target turn's waveform at judge time, and those that need clips from the TTS stage.
AUDIO_TRANSFORMS = (MASKED, SILENCE, *NOISE_KINDS)
SYNTHESIZED = (TTS_CONTROL, INJECTION)

_PLAIN_CONDITIONS = "|".join((CLEAN, MASKED, SILENCE, TTS_CONTROL, INJECTION))
# No leading zeros, so that every SNR has one spelling; plain groups, so the config schema can use the pattern.
_CONDITION = re.compile(rf"^({_PLAIN_CONDITIONS}|({'|'.join(NOISE_KINDS)})_(0|[1-9][0-9]?))$")


class Condition(str):
    """A condition label, validated: 'clean', 'masked', 'silence', 'tts_control', 'injection', 'noise_<snr>'
    (white noise) or 'babble_<snr>' (babble), <snr> in dB as an integer 0-99."""

    PATTERN = _CONDITION.pattern

    def __new__(cls, label: str) -> Condition:
        if isinstance(label, Condition):
            return label
        if not isinstance(label, str) or not _CONDITION.match(label):
            raise ValueError(
                f"invalid condition {label!r}: use 'clean', 'masked', 'silence', 'tts_control', 'injection', "
                "'noise_<snr dB>' or 'babble_<snr dB>' (an integer 0-99 without leading zeros, e.g. noise_10)"
            )
        return super().__new__(cls, label)

    @property
    def kind(self) -> str:
        """The condition without its SNR: one of CONDITION_KINDS."""
        return self.split("_")[0] if self.snr_db is not None else str(self)

    @property
    def snr_db(self) -> int | None:
        match = _CONDITION.match(self)
        return int(match[3]) if match[3] is not None else None

    @property
    def transforms_audio(self) -> bool:
        return self.kind in AUDIO_TRANSFORMS

    @property
    def needs_synthesis(self) -> bool:
        return self.kind in SYNTHESIZED

    @property
    def changes_transcript(self) -> bool:
        """Whether the ground-truth transcript differs from the clean one (only the injected sentence does)."""
        return self.kind == INJECTION


def condition_cell_error(condition: Condition, modality: str, source: TranscriptSource) -> str | None:
    """Why a condition does not apply to a cell (modality, transcript source), or None when it does.

    A condition applies where it changes what the judge is given: audio conditions change the audio and the
    ASR transcripts of it, so a text cell with the ground-truth transcript would see its clean input again;
    silence is the audio-use check of the audio modality; the injection is in the audio and the transcript.
    """
    condition = Condition(condition)
    if condition.kind in (CLEAN, INJECTION):
        return None
    if condition.kind == SILENCE and modality != AUDIO:
        return f"condition 'silence' is the audio-use check of the audio modality, not of {modality!r}"
    if modality == TEXT and not source.is_asr:
        return (
            f"condition {condition!r} changes only the audio; a text cell with transcript source {source!r} "
            "would see its clean input"
        )
    return None


# The pairwise audit conditions (`pairwise.conditions`, docs/metrics.md "Pairwise audit"): one response of a pair
# changed in a surface property only, its content kept. `gain_<dB>` (the other response's level plus <dB>),
# `pad_<s>` (s seconds of silence, half before and half after), `rate_<factor>` (faster or slower, same pitch),
# `repeat` (the last sentence spoken twice), `voice` (the same text in another voice of the same engine) and
# `identical` (one clip as both responses: only Tie is right).
IDENTICAL = "identical"
REPEAT = "repeat"
VOICE = "voice"
GAIN = "gain"
PAD = "pad"
RATE = "rate"
AUDIT_KINDS = (IDENTICAL, REPEAT, VOICE, GAIN, PAD, RATE)
# Conditions spoken again by the TTS engine of the response (items spoken here only, `pairwise.items.format: jsonl`).
RESPOKEN_AUDIT_KINDS = (REPEAT, VOICE)
# Conditions whose changed response has other words than its clean text (so a ground-truth text cell sees them).
TEXT_AUDIT_KINDS = (IDENTICAL, REPEAT)
_NUMBER = r"(?:0|[1-9][0-9]?)(?:\.[0-9]+)?"
_AUDIT = re.compile(rf"^({IDENTICAL}|{REPEAT}|{VOICE}|{GAIN}_-?{_NUMBER}|{PAD}_{_NUMBER}|{RATE}_{_NUMBER})$")
AUDIT_ITEM_SEPARATOR = "__changed"


class AuditCondition(str):
    """A pairwise audit condition label, validated (`AUDIT_KINDS`; numbers without leading zeros: gain_6,
    gain_-3, pad_1, pad_0.5, rate_1.25)."""

    PATTERN = _AUDIT.pattern

    def __new__(cls, label: str) -> AuditCondition:
        if isinstance(label, AuditCondition):
            return label
        if not isinstance(label, str) or not _AUDIT.match(label):
            raise ValueError(
                f"invalid pairwise audit condition {label!r}: use 'identical', 'repeat', 'voice', 'gain_<dB>' "
                "(e.g. gain_6, gain_-3), 'pad_<seconds>' (e.g. pad_1) or 'rate_<factor>' (e.g. rate_1.25)"
            )
        return super().__new__(cls, label)

    @property
    def kind(self) -> str:
        return self.split("_")[0]

    @property
    def value(self) -> float | None:
        """The condition's number (dB, seconds or factor); None for identical, repeat and voice."""
        return float(self.split("_", 1)[1]) if "_" in self else None


def audit_item_id(item_id: str, changed_response: int) -> str:
    """The id of an audit item: the clean item with response `changed_response` (1 or 2) changed."""
    return f"{item_id}{AUDIT_ITEM_SEPARATOR}{changed_response}"


def split_audit_item_id(audit_id: str) -> tuple[str, int]:
    """(clean item id, changed response) of an audit item id (`audit_item_id`)."""
    item_id, separator, side = audit_id.rpartition(AUDIT_ITEM_SEPARATOR)
    if not separator or side not in ("1", "2"):
        raise ValueError(f"{audit_id!r} is not an audit item id ('<item>{AUDIT_ITEM_SEPARATOR}<1 or 2>')")
    return item_id, int(side)


def audit_cell_error(condition: AuditCondition, modality: str, source: TranscriptSource) -> str | None:
    """Why an audit condition does not apply to a pairwise cell, or None when it does: as for the safety
    controls, a text cell of the ground-truth texts gets only the conditions that change the words."""
    if modality == TEXT and not source.is_asr and AuditCondition(condition).kind not in TEXT_AUDIT_KINDS:
        return f"audit condition {condition!r} changes only the audio; the {source!r} texts stay as they were"
    return None


# The acoustic style categories of the preference builder's acoustic pairs (`preference.acoustic.styles`): what a
# response's voice is asked to show (`gender_emotion`: a gender and an emotion at once, SageLM's mixed control).
# Not the unsafe categories of the safety track (`taxonomy.CATEGORIES`).
STYLE_CATEGORIES = ("emotion", "gender", "character", "gender_emotion")
# Prompt names: the stems of the prompt files (prompts/<name>.yaml, prompts/pairwise/<name>.yaml).
PROMPT_NAME = "[a-z]+"


def _unanchored(pattern: str) -> str:
    return pattern.removeprefix("^").removesuffix("$")


def wildcard_patterns() -> dict[str, str]:
    """The workflow's wildcard constraints (rules/common.smk), each the pattern of the word it stands for."""
    return {
        "dialogue": SLUG,
        "turn": r"\d+",
        "asr": SLUG,
        "judge": SLUG,
        "modality": "|".join(MODALITIES),
        "source": _unanchored(TranscriptSource.PATTERN),
        "prompt": PROMPT_NAME,
        "condition": _unanchored(Condition.PATTERN),
        "audit": _unanchored(AuditCondition.PATTERN),
        "shard": r"\d+",
        "n_shards": r"\d+",
        "engine": SLUG,
        "style_category": "|".join(STYLE_CATEGORIES),
        "sample": SAMPLE_PATTERN,
    }
