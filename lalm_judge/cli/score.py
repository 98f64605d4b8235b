"""`lalm-judge score`: judge one canonical dialogue.json and print its score and parse status."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lalm_judge.core.files import read_yaml
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.judging.adhoc import sample_from_dialogue, score_one
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.workflow.config import ConfigError, validate_judge_entry


def load_judge_spec(config_path: str | Path, name: str) -> JudgeSpec:
    """The judge `name` from the `judges:` registry of a YAML file (a run config, or just a `judges:` mapping);
    the entry is validated against the config schema and its defaults filled."""
    config_path = Path(config_path)
    if not config_path.is_file():
        raise FileNotFoundError(f"config file {config_path} does not exist; pass --config")
    judges = (read_yaml(config_path) or {}).get("judges") or {}
    if name not in judges:
        raise KeyError(f"judge {name!r} is not in the 'judges' registry of {config_path}; known: {sorted(judges)}")
    return JudgeSpec.from_config(name, validate_judge_entry(name, judges[name]))


def main(argv: Sequence[str] | None = None, config_path: str | Path = "config.yaml") -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge score", description=__doc__)
    parser.add_argument("--judge", required=True, help="judge name from the config's `judges:` registry")
    parser.add_argument("--dialogue", required=True, help="a canonical dialogue.json (results/corpus/<d>/)")
    parser.add_argument("--audio", help="a full-dialogue wav to use instead of the dialogue's turn clips")
    parser.add_argument("--modality", help="text, audio or audio_text (default: text, or audio_text with --audio)")
    parser.add_argument("--prompt", default="basic", help="prompt name in prompts/ or a prompt YAML path")
    parser.add_argument("--transcript-source", default=TranscriptSource.GT, help="transcript source of text modalities")
    parser.add_argument("--config", default=str(config_path), help="config YAML with the judge registry")
    args = parser.parse_args(argv)
    try:
        spec = load_judge_spec(args.config, args.judge)
    except (FileNotFoundError, KeyError, ConfigError) as err:
        print(f"error: {err.args[0]}", file=sys.stderr)
        return 2
    modality = args.modality or ("audio_text" if args.audio else "text")
    row = score_one(
        spec, sample_from_dialogue(args.dialogue), modality, args.prompt, args.transcript_source, audio_path=args.audio
    )
    score = "none" if row["score"] is None else f"{row['score']:.4f}"
    print(
        f"judge={row['judge']} modality={row['modality']} prompt={row['prompt_version']} "
        f"long_audio={row['long_audio_action']}"
    )
    print(f"score={score} status={row['parse_status']}")
    return 0
