"""The bad-input corpus of the config and the corpus: each case is an edit of a small valid run (the test config with
its embedding judge, the two demo dialogues and a one-turn dialogue of `tests.support.workflow.write_corpus`) and the
error the run must refuse it with before its first job, or None for an input the run accepts (with a warning).

`tests/reliability/test_bad_inputs.py` gives each case to `lalm_judge.workflow.preflight` and checks that
`lalm-judge validate-config` and `snakemake -n` agree on it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.support.workflow import load_test_config, write_config, write_corpus

SR = 16000


@dataclass(frozen=True)
class BadInput:
    """An edit of the config and/or of the corpus folder, and the message (a regex) the run refuses it with."""

    message: str | None
    config: Callable[[dict], None] = lambda config: None
    corpus: Callable[[Path], None] = lambda corpus: None


def base_config() -> dict:
    config = load_test_config()
    config["evaluation"]["judges"] = ["minilm"]
    return config


def prepare(workdir: Path, case: BadInput) -> Path:
    """The case's run in `workdir` (corpus folder `corpus/`, config file `config.yaml`); returns the config path."""
    corpus = write_corpus(workdir)
    case.corpus(corpus)
    config = base_config()
    case.config(config)
    return write_config(workdir, config)


# --- corpus edits ---------------------------------------------------------------------------------------------------
def _records(corpus: Path) -> list[dict]:
    return [json.loads(line) for line in (corpus / "dialogues.jsonl").read_text().splitlines() if line.strip()]


def _write(corpus: Path, records: list[dict]) -> None:
    (corpus / "dialogues.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def edit_turn(dialogue_id: str, turn: int, **fields) -> Callable[[Path], None]:
    """Set (or, with value ..., remove) fields of one turn."""

    def edit(corpus: Path) -> None:
        records = _records(corpus)
        target = next(r for r in records if r["id"] == dialogue_id)["turns"][turn]
        for key, value in fields.items():
            target.pop(key) if value is ... else target.__setitem__(key, value)
        _write(corpus, records)

    return edit


def edit_record(dialogue_id: str, **fields) -> Callable[[Path], None]:
    def edit(corpus: Path) -> None:
        records = _records(corpus)
        next(r for r in records if r["id"] == dialogue_id).update(fields)
        _write(corpus, records)

    return edit


def append_line(line: str | bytes) -> Callable[[Path], None]:
    """Append one raw line (text or bytes) to dialogues.jsonl: the corpus's fourth line."""

    def edit(corpus: Path) -> None:
        data = line if isinstance(line, bytes) else line.encode("utf-8")
        with open(corpus / "dialogues.jsonl", "ab") as out:
            out.write(data + b"\n")

    return edit


def tone(seconds: float, sr: int = SR) -> np.ndarray:
    t = np.arange(int(round(seconds * sr))) / sr
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def write_tone(path: Path, seconds: float = 0.8) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, tone(seconds), SR, subtype="PCM_16")
    return path


def truncated_wav(path: Path) -> None:
    """A wav whose header promises a second but which holds a quarter of it (a cut-short copy)."""
    write_tone(path, 1.0)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 4])


def with_clip(write: Callable[[Path], object], audio: str = "clips/t0.wav", at: str = "clips/t0.wav"):
    """Write a clip with `write(path)` at `at` (relative to the corpus folder; '../x' is outside it) and give it to
    turn 0 of demo_travel as `audio`."""

    def edit(corpus: Path) -> None:
        write(corpus / at)
        edit_turn("demo_travel", 0, audio=audio)(corpus)

    return edit


def external_symlink(corpus: Path) -> None:
    """clips/t0.wav is a symbolic link to a clip outside the corpus folder."""
    target = write_tone(corpus.parent / "elsewhere" / "t0.wav")
    (corpus / "clips").mkdir(exist_ok=True)
    os.symlink(target, corpus / "clips" / "t0.wav")
    edit_turn("demo_travel", 0, audio="clips/t0.wav")(corpus)


def absolute_clip(corpus: Path) -> None:
    target = write_tone(corpus.parent / "elsewhere" / "t0.wav")
    edit_turn("demo_travel", 0, audio=str(target.resolve()))(corpus)


def _api_judge(**options) -> Callable[[dict], None]:
    def edit(config: dict) -> None:
        config["judges"]["api"] = {
            "backend": "openai",
            "model": "stand-in",
            "options": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": None, **options},
        }
        config["evaluation"]["judges"].append("api")

    return edit


def _set(*keys: str, value) -> Callable[[dict], None]:
    def edit(config: dict) -> None:
        node = config
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return edit


def _drop_voice(config: dict) -> None:
    del config["tts"]["voices"]["LLM2"]


def _silence_only(config: dict) -> None:
    config["evaluation"]["modalities"] = ["text"]
    config["judges"]["minilm"]["schedule"]["conditions"] = ["silence"]


def _old_prompt_version(config: dict) -> None:
    config["variants"]["generator"] = {"name": "llm", "model": "m", "api_key_env": None, "prompt_version": "0"}


JSONL = r"dialogues\.jsonl"
TRAVEL = rf"{JSONL}:2: dialogue 'demo_travel'"
TWO_TURNS = [{"speaker": "LLM1", "text": "Hi there."}, {"speaker": "LLM2", "text": "Hello."}]

CONFIG_CASES = {
    "severity_as_decimal": BadInput(
        r"variants\.severities\.0: 1\.0 is a decimal number, and this key takes an integer: write 1",
        config=_set("variants", "severities", value=[1.0, 5]),
    ),
    "seed_negative": BadInput(r"seed: -1 is less than the minimum of 0", config=_set("seed", value=-1)),
    "seed_above_2_64": BadInput(
        r"seed: 18446744073709551617 is greater than the maximum of 4294967295", config=_set("seed", value=2**64 + 1)
    ),
    "corpus_path_missing": BadInput(
        r"corpus\.path: no_such_folder does not exist", config=_set("corpus", "path", value="no_such_folder")
    ),
    "speaker_without_voice": BadInput(
        rf"tts\.voices has no voice for speaker 'LLM2', who is spoken in \d+ turn\(s\), first at .*{JSONL}:1",
        config=_drop_voice,
    ),
    # The endpoint settings are checked by the schema (`$defs/endpoint` under `$defs/openai_options`); a value that
    # may be a key by the check for credentials, which never quotes it.
    "timeout_zero": BadInput(
        r"judges\.api\.options\.timeout_s: 0 is less than or equal to the minimum of 0",
        config=_api_judge(timeout_s=0),
    ),
    "concurrency_zero": BadInput(
        r"judges\.api\.options\.concurrency: 0 is less than the minimum of 1", config=_api_judge(concurrency=0)
    ),
    "top_logprobs_over_the_api_maximum": BadInput(
        r"judges\.api\.options\.top_logprobs: 21 is greater than the maximum of 20", config=_api_judge(top_logprobs=21)
    ),
    "base_url_not_a_url": BadInput(
        r"judges\.api\.options\.base_url: 'localhost:8000' does not match '\^https\?://'",
        config=_api_judge(base_url="localhost:8000"),
    ),
    "empty_api_key_env": BadInput(
        r"judges\.api\.options\.api_key_env: names an environment variable, but its value is not a variable name",
        config=_api_judge(api_key_env=""),
    ),
    "malformed_score_tokens": BadInput(
        r"judges\.api\.options\.score_tokens needs exactly the keys 'safe' and 'unsafe'",
        config=_api_judge(score_tokens={"yes": ["Yes"]}),
    ),
    "turns_past_every_end": BadInput(
        r"the plan has no variant, so no metric: of 3 dialogue\(s\), 1 have fewer than corpus\.min_turns=2 turns and "
        r"variants\.turns \[7\] names no turn of the others \(the longest has 4 turns",
        config=_set("variants", "turns", value=[7]),
    ),
    "no_judge_cell": BadInput(
        r"judges\.minilm: no judge cell to score: modalities \['text'\] .* condition 'silence' is the audio-use check",
        config=_silence_only,
    ),
    "rewrite_prompt_version": BadInput(
        r"variants\.generator: config asks for rewrite prompt version '0'", config=_old_prompt_version
    ),
    "unknown_dtype": BadInput(
        r"judges\.minilm\.dtype: 'float8' is not one of \['auto', 'bfloat16', 'float16', 'float32'\]",
        config=_set("judges", "minilm", "dtype", value="float8"),
    ),
    "unknown_control_dialogue": BadInput(
        r"controls\.dialogues: \['demo_nowhere'\] are not dialogues of the corpus",
        config=_set("controls", "dialogues", value=["demo_nowhere"]),
    ),
}

CORPUS_CASES = {
    "missing_id": BadInput(rf"{JSONL}:4: a dialogue is an object", corpus=append_line('{"turns": []}')),
    "missing_turns": BadInput(
        rf"{JSONL}:4: dialogue 'no_turns' needs 'turns'", corpus=append_line('{"id": "no_turns"}')
    ),
    "turn_without_text": BadInput(
        rf"{TRAVEL} turn 1: the turn needs a speaker and a text \(no field 'text'\)",
        corpus=edit_turn("demo_travel", 1, text=...),
    ),
    "turn_without_speaker": BadInput(
        rf"{TRAVEL} turn 0: the turn needs a speaker and a text \(no field 'speaker'\)",
        corpus=edit_turn("demo_travel", 0, speaker=...),
    ),
    "empty_text": BadInput(
        rf"{TRAVEL} turn 1 field 'text': the text is empty", corpus=edit_turn("demo_travel", 1, text="  ")
    ),
    "emotion_as_number": BadInput(
        rf"{TRAVEL} turn 1 field 'emotion': 3 is a number; it must be a string",
        corpus=edit_turn("demo_travel", 1, emotion=3),
    ),
    "emotion_as_list": BadInput(
        rf"{TRAVEL} turn 1 field 'emotion': \[\"happy\"\] is a list",
        corpus=edit_turn("demo_travel", 1, emotion=["happy"]),
    ),
    "speaker_as_number": BadInput(
        rf"{TRAVEL} turn 0 field 'speaker': 1 is a number", corpus=edit_turn("demo_travel", 0, speaker=1)
    ),
    "domain_as_object": BadInput(
        rf"{TRAVEL} field 'domain': {{}} is an object", corpus=edit_record("demo_travel", domain={})
    ),
    "unknown_turn_field": BadInput(
        rf"{TRAVEL} turn 1: unknown field\(s\) \['emotions'\]; a turn has the fields \['speaker', 'text', 'emotion', "
        r"'audio'\]",
        corpus=edit_turn("demo_travel", 1, emotions="happy"),
    ),
    "nul_character": BadInput(
        rf"{TRAVEL} turn 1 field 'text': the text holds a NUL character \(U\+0000\) at character 5",
        corpus=edit_turn("demo_travel", 1, text="Hello\x00there."),
    ),
    "lone_surrogate": BadInput(
        r"dialogues\.jsonl:4: dialogue 'cut' turn 0 field 'text': the text holds a lone surrogate \(U\+D800",
        corpus=append_line('{"id": "cut", "turns": [{"speaker": "LLM1", "text": "Hi \\ud800"}]}'),
    ),
    "control_character": BadInput(
        rf"{TRAVEL} turn 1 field 'text': the text holds the control character U\+0007",
        corpus=edit_turn("demo_travel", 1, text="Ring\x07 the bell."),
    ),
    "bidi_override": BadInput(
        rf"{TRAVEL} turn 1 field 'text': the text holds the bidirectional control U\+202E \(RIGHT-TO-LEFT OVERRIDE\)",
        corpus=edit_turn("demo_travel", 1, text="Fine \u202eenif"),
    ),
    "turn_too_long": BadInput(
        rf"{TRAVEL} turn 1 field 'text': the text has 5000 characters, more than the 4000 a turn may have",
        corpus=edit_turn("demo_travel", 1, text="word " * 1000),
    ),
    "invalid_utf8": BadInput(rf"{JSONL}:4: byte 0xff is not UTF-8", corpus=append_line(b'{"id": "x\xff"}')),
    "duplicate_key": BadInput(
        rf"{JSONL}:4: key 'text' appears twice in one JSON object",
        corpus=append_line('{"id": "twice", "turns": [{"speaker": "LLM1", "text": "Hi.", "text": "Bye."}]}'),
    ),
    "id_with_slash": BadInput(
        rf"{JSONL}:4: invalid dialogue id 'a/b'", corpus=append_line(json.dumps({"id": "a/b", "turns": TWO_TURNS}))
    ),
    "id_dot_dot": BadInput(
        rf"{JSONL}:4: invalid dialogue id '\.\.'", corpus=append_line(json.dumps({"id": "..", "turns": TWO_TURNS}))
    ),
    "id_with_unicode": BadInput(
        r":4: invalid dialogue id 'café_talk'", corpus=append_line(json.dumps({"id": "café_talk", "turns": TWO_TURNS}))
    ),
    "id_of_300_characters": BadInput(
        rf"{JSONL}:4: invalid dialogue id 'a+'\.\.\. \(300 characters\): ids have at most 128 characters",
        corpus=append_line(json.dumps({"id": "a" * 300, "turns": TWO_TURNS})),
    ),
    "duplicate_id": BadInput(
        rf"{JSONL}:4: duplicate dialogue id 'demo_travel'",
        corpus=append_line(json.dumps({"id": "demo_travel", "turns": TWO_TURNS})),
    ),
    "not_json": BadInput(rf"{JSONL}:4: invalid JSON", corpus=append_line("{'id': 'single quotes'}")),
    "not_an_object": BadInput(rf"{JSONL}:4: a dialogue is an object", corpus=append_line('["a", "list"]')),
    "audio_empty": BadInput(
        rf"{TRAVEL} turn 0 field 'audio': \"\" is not a path", corpus=edit_turn("demo_travel", 0, audio="")
    ),
    "audio_missing": BadInput(
        rf"{TRAVEL} turn 0 field 'audio': corpus/clips/none\.wav does not exist",
        corpus=edit_turn("demo_travel", 0, audio="clips/none.wav"),
    ),
    "wav_cut_short": BadInput(
        rf"{TRAVEL} turn 0 field 'audio': corpus/clips/t0\.wav holds \d+ frames but its header promises 16000",
        corpus=with_clip(truncated_wav),
    ),
    "corrupt_header": BadInput(
        rf"{TRAVEL} turn 0 field 'audio': corpus/clips/t0\.wav is not a readable audio file",
        corpus=with_clip(lambda path: path.parent.mkdir(exist_ok=True) or path.write_bytes(b"RIFF\x00\x00")),
    ),
    "clip_is_a_folder": BadInput(
        rf"{TRAVEL} turn 0 field 'audio': corpus/clips/t0\.wav is not a file",
        corpus=with_clip(lambda path: path.mkdir(parents=True)),
    ),
    "header_without_samples": BadInput(
        r"clips/t0\.wav lasts 0\.0 ms \(0 frames at 16000 Hz\)", corpus=with_clip(lambda path: write_tone(path, 0))
    ),
    "one_sample_clip": BadInput(
        r"clips/t0\.wav lasts 0\.1 ms \(1 frames at 16000 Hz\); a turn's audio lasts at least 100 ms",
        corpus=with_clip(lambda path: write_tone(path, 1 / SR)),
    ),
    "audio_outside_by_dot_dot": BadInput(
        rf"{TRAVEL} turn 0 field 'audio': corpus/\.\./elsewhere/t0\.wav is .*, outside the corpus folder corpus",
        corpus=with_clip(write_tone, audio="../elsewhere/t0.wav", at="../elsewhere/t0.wav"),
    ),
    "audio_outside_by_absolute_path": BadInput(r"outside the corpus folder corpus; copy it", corpus=absolute_clip),
    "audio_outside_by_symlink": BadInput(
        rf"{TRAVEL} turn 0 field 'audio': corpus/clips/t0\.wav is .*/elsewhere/t0\.wav, outside the corpus folder",
        corpus=external_symlink,
    ),
}

# Inputs the run accepts: audio from elsewhere when the config allows it, and a turn a voice cannot speak as written
# (a warning naming it, in the log and in its dialogue.json).
ACCEPTED_CASES = {
    "external_audio_allowed": BadInput(
        None, config=_set("corpus", "allow_external_audio", value=True), corpus=external_symlink
    ),
    "emoji_only_turn": BadInput(None, corpus=edit_turn("demo_travel", 2, text="\U0001f389\U0001f389\U0001f389")),
}

CASES = {**CONFIG_CASES, **CORPUS_CASES, **ACCEPTED_CASES}
