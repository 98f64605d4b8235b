"""Every `lalm-judge` command, given a bad input of each kind, ends with a one-line error naming the culprit and a
non-zero exit status, never a traceback: a file that is not there, a file that cannot be read as what it should be
(broken YAML, JSON or CSV, a text where a parquet table belongs), and a bad value (an option or a config value out
of range). The commands are discovered from the dispatcher and the subcommand parsers, so a new command fails this
test until its cases are written.

The commands run in this process (`lalm_judge.cli.main`, as the console script calls it): an exception escaping
`main` is the traceback a user would see.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from lalm_judge.cli import COMMANDS, TRACEBACK_ENV, is_user_error
from lalm_judge.cli import main as cli
from lalm_judge.core.dialogue import Dialogue, Turn

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("missing_file", "unreadable_file", "bad_value")
BROKEN_YAML = "judges:\n  tiny: {backend: transformers, model: [unclosed\n"


def subcommands(command: str) -> list[str]:
    """The subcommands of a command whose parser has them (anchors, pairwise), else none."""
    module = importlib.import_module(COMMANDS[command][0])
    parser = getattr(module, "_parser", None)
    if parser is None:
        return []
    actions = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(actions[0].choices) if actions else []


def every_command() -> list[str]:
    return sorted(f"{command} {sub}".strip() for command in COMMANDS for sub in (subcommands(command) or [""]))


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """What the cases point at: broken files of each format, a good judge registry and dialogue, a folder."""
    broken = {
        "yaml": tmp_path / "broken.yaml",
        "json": tmp_path / "broken.json",
        "csv": tmp_path / "broken.csv",
        "parquet": tmp_path / "broken.parquet",
    }
    broken["yaml"].write_text(BROKEN_YAML)
    broken["json"].write_text('[{"instruction": "unclosed"')
    broken["csv"].write_text('sample_id,rater_id\n"unterminated,a\n')
    broken["parquet"].write_text("this is not a parquet file\n")
    judges = tmp_path / "judges.yaml"
    judges.write_text(yaml.safe_dump({"judges": {"tiny": {"backend": "transformers", "model": "models/none"}}}))
    clip = tmp_path / "t0.wav"
    from lalm_judge.audio.waveform import write_wav

    write_wav(clip, np.zeros(1600, np.float32), 16000)
    dialogue = tmp_path / "dialogue.json"
    turns = [
        Turn(0, "A", "Hello.", "neutral", 0.0, 0.1, str(clip)),
        Turn(1, "B", "Hi.", "neutral", 0.2, 0.3, str(clip)),
    ]
    Dialogue("d", turns, "jsonl", "memory", 16000).save(dialogue)
    prompt = tmp_path / "no_transcript.yaml"
    basic = yaml.safe_load((ROOT / "prompts" / "basic.yaml").read_text())
    basic["user"] = basic["user"].replace("{transcript}", "")
    prompt.write_text(yaml.safe_dump(basic))
    config = tmp_path / "config.yaml"
    good = yaml.safe_load((ROOT / "config.yaml").read_text())
    good["metrics"] = {"bootstrap": 0}
    config.write_text(yaml.safe_dump(good))
    training = tmp_path / "train.yaml"
    section = yaml.safe_load((ROOT / "configs" / "pairwise.yaml").read_text())["training"]
    section["grpo"]["num_generations"] = 8
    training.write_text(yaml.safe_dump({"training": section}))
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "items.json").write_text("{not json")
    empty = tmp_path / "empty"
    empty.mkdir()
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "metrics.parquet").write_text("not a table")
    return {
        **broken,
        "missing": tmp_path / "missing" / "file.yaml",
        "missing_dir": tmp_path / "missing_dir",
        "judges": judges,
        "dialogue": dialogue,
        "prompt": prompt,
        "bad_config": config,
        "bad_training": training,
        "broken_batch": batch,
        "empty": empty,
        "broken_metrics": metrics,
        "out": tmp_path / "out",
    }


Case = Callable[[dict[str, Path]], list[str]]
# Per command: the argument list of each kind of bad input.
CASES: dict[str, dict[str, Case]] = {
    "score": {
        "missing_file": lambda f: ["--config", str(f["missing"]), "--judge", "tiny", "--dialogue", str(f["dialogue"])],
        "unreadable_file": lambda f: ["--config", str(f["yaml"]), "--judge", "tiny", "--dialogue", str(f["dialogue"])],
        "bad_value": lambda f: [
            *("--config", str(f["judges"]), "--judge", "tiny", "--dialogue", str(f["dialogue"])),
            *("--prompt", str(f["prompt"])),
        ],
    },
    "metrics": {
        "missing_file": lambda f: [str(f["missing"]), "--out", str(f["out"])],
        "unreadable_file": lambda f: [str(f["parquet"]), "--out", str(f["out"])],
        "bad_value": lambda f: [str(f["parquet"]), "--out", str(f["out"]), "--bootstrap", "0"],
    },
    "anchors sample": {
        "missing_file": lambda f: ["--out", str(f["out"]), "--results", str(f["missing_dir"])],
        "unreadable_file": lambda f: ["--out", str(f["out"]), "--results", str(f["broken_batch"])],
        "bad_value": lambda f: ["--out", str(f["out"]), "--n", "0"],
    },
    "anchors serve": {
        "missing_file": lambda f: [str(f["missing_dir"]), "--raters", "a"],
        "unreadable_file": lambda f: [str(f["broken_batch"]), "--raters", "a"],
        "bad_value": lambda f: [str(f["missing_dir"]), "--raters", "a", "--port", "70000"],
    },
    "anchors export": {
        "missing_file": lambda f: [str(f["missing_dir"]), "--out", str(f["out"])],
        "unreadable_file": lambda f: [str(f["broken_batch"]), "--out", str(f["out"])],
        "bad_value": lambda f: [str(f["empty"]), "--out", str(f["out"])],
    },
    "anchors free": {
        "missing_file": lambda f: [str(f["missing_dir"]), "rater1", "--reason", "returned"],
        "unreadable_file": lambda f: [str(f["broken_batch"]), "rater1", "--reason", "returned"],
        "bad_value": lambda f: [str(f["broken_batch"]), "rater1", "--reason", "bored"],
    },
    "anchors stats": {
        "missing_file": lambda f: [str(f["missing"]), "--out", str(f["out"])],
        "unreadable_file": lambda f: [str(f["csv"]), "--out", str(f["out"])],
        "bad_value": lambda f: [str(f["csv"]), "--out", str(f["out"]), "--bootstrap", "-1"],
    },
    "pairwise import": {
        "missing_file": lambda f: [str(f["missing"]), *sagelm_import(f)],
        "unreadable_file": lambda f: [str(f["json"]), *sagelm_import(f)],
        "bad_value": lambda f: [str(f["json"]), *sagelm_import(f), "--missing-audio", "ignore"],
    },
    "pairwise export": {
        "missing_file": lambda f: [str(f["missing"]), "--format", "sagelm", "--out", str(f["out"])],
        "unreadable_file": lambda f: [str(f["parquet"]), "--format", "sagelm", "--out", str(f["out"])],
        "bad_value": lambda f: [str(f["parquet"]), "--format", "llamafactory", "--out", str(f["out"])],
    },
    "pairwise metrics": {
        "missing_file": lambda f: [str(f["missing"]), "--out", str(f["out"])],
        "unreadable_file": lambda f: [str(f["parquet"]), "--out", str(f["out"])],
        "bad_value": lambda f: [str(f["parquet"]), "--out", str(f["out"]), "--duration-bins", "0,ten"],
    },
    "pairwise findings": {
        "missing_file": lambda f: [str(f["missing_dir"])],
        "unreadable_file": lambda f: [str(f["broken_metrics"])],
        "bad_value": lambda f: [str(f["parquet"])],
    },
    "pairwise train": {
        "missing_file": lambda f: ["--config", str(f["missing"])],
        "unreadable_file": lambda f: ["--config", str(f["yaml"])],
        "bad_value": lambda f: ["--config", str(f["bad_training"]), "--method", "grpo"],
    },
    "validate-config": {
        "missing_file": lambda f: [str(f["missing"])],
        "unreadable_file": lambda f: [str(f["yaml"])],
        "bad_value": lambda f: [str(f["bad_config"]), "--config-only"],
    },
    "findings": {
        "missing_file": lambda f: [str(f["missing_dir"])],
        "unreadable_file": lambda f: [str(f["broken_metrics"])],
        "bad_value": lambda f: [str(f["parquet"])],
    },
    "judges": {
        "missing_file": lambda f: [str(f["missing"])],
        "unreadable_file": lambda f: [str(f["yaml"])],
        "bad_value": lambda f: [str(ROOT / "config.yaml"), "--judge", "no_such_judge"],
    },
    "provenance": {
        "missing_file": lambda f: [str(f["missing"])],
        "unreadable_file": lambda f: [str(f["parquet"])],
        "bad_value": lambda f: [str(f["parquet"]), "--together", "--json", "--colour"],
    },
    "export": {
        "missing_file": lambda f: ["--format", "hf", "--out", str(f["out"]), "--results", str(f["missing_dir"])],
        "unreadable_file": lambda f: ["--format", "hf", "--out", str(f["out"]), "--config", str(f["yaml"])],
        "bad_value": lambda f: ["--format", "hf", "--out", str(f["out"]), "--max-shard-mb", "-5"],
    },
    "import": {
        "missing_file": lambda f: ["--format", "hf", str(f["missing_dir"]), "--out", str(f["out"])],
        "unreadable_file": lambda f: ["--format", "hf", str(f["parquet"].parent), "--out", str(f["out"])],
        "bad_value": lambda f: ["--format", "parquet", str(f["empty"]), "--out", str(f["out"])],
    },
    "pin-revisions": {
        "missing_file": lambda f: [str(f["missing"])],
        "unreadable_file": lambda f: [str(f["yaml"])],
        "bad_value": lambda f: [str(f["bad_config"]), "--output", str(f["empty"])],
    },
}


def sagelm_import(files: dict[str, Path]) -> list[str]:
    return ["--format", "sagelm", "--audio-root", str(files["empty"]), "--out", str(files["out"])]


def argv_of(command: str, kind: str, files: dict[str, Path]) -> list[str]:
    return [*command.split(), *CASES[command][kind](files)]


def test_every_command_has_a_case_of_each_kind():
    assert sorted(CASES) == every_command()
    assert all(sorted(cases) == sorted(KINDS) for cases in CASES.values())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", every_command())
def test_a_bad_input_ends_in_one_error_line_not_a_traceback(command, kind, files, capsys, monkeypatch):
    monkeypatch.chdir(files["out"].parent)
    argv = argv_of(command, kind, files)
    try:
        status = cli(argv)
    except SystemExit as stopped:  # argparse: usage and a one-line error, status 2
        status = stopped.code
    printed = capsys.readouterr()
    lines = [line for line in printed.err.splitlines() if line.strip()]
    assert status not in (0, None), (argv, printed)
    assert "Traceback" not in printed.err and lines, (argv, printed.err)
    assert lines[-1].startswith("error: ") or ": error: " in lines[-1] or lines[0].startswith("error: "), printed.err
    assert not (files["out"].exists() and any(files["out"].iterdir())), "nothing is written for a refused input"


def test_a_bug_keeps_its_traceback_and_a_user_error_shows_one_on_request(files, monkeypatch):
    """Only errors of the input become an error line: a TypeError is a bug in the program and keeps its traceback;
    LALM_JUDGE_TRACEBACK=1 shows a user error's traceback too."""
    assert is_user_error(FileNotFoundError("x")) and is_user_error(yaml.YAMLError("x"))
    assert not is_user_error(TypeError("x")) and not is_user_error(AttributeError("x"))
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    with pytest.raises(yaml.YAMLError, match="broken.yaml is not valid YAML"):
        cli(["score", "--config", str(files["yaml"]), "--judge", "tiny", "--dialogue", str(files["dialogue"])])
