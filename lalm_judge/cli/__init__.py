"""`lalm-judge` command line: ad-hoc scoring, metrics, the human-anchor study, judge training, config checks,
and the export and import of the benchmark as a dataset.

Each command is a module of this package with a `main(argv)`; this file only dispatches, importing the
command's module lazily so that `lalm-judge metrics` never loads torch. A user error that a command does not turn
into its own message (a file that is not there or cannot be read, a value out of range: `is_user_error`) ends the
command with one `error:` line naming the culprit and status 2, never a traceback; `LALM_JUDGE_TRACEBACK=1` shows
the traceback instead.
"""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "score": ("lalm_judge.cli.score", "score one dialogue with a configured judge"),
    "metrics": ("lalm_judge.cli.metrics", "sensitivity, specificity, position bias, CIs from score tables"),
    "findings": ("lalm_judge.cli.findings", "a safety run's families of tests, findings, flags and patterns"),
    "anchors": ("lalm_judge.cli.anchors", "human-anchor study: sample a batch, serve the rating app, export, stats"),
    "pairwise": ("lalm_judge.cli.pairwise", "pairwise track: SageLM import/export, metrics of predictions"),
    "validate-config": ("lalm_judge.cli.validate", "check a config file against the schema"),
    "judges": ("lalm_judge.cli.judges", "what the project knows about each judge's model family and will assume"),
    "provenance": ("lalm_judge.cli.provenance", "how each row of output tables was made; rows that differ"),
    "export": ("lalm_judge.cli.export", "the run's benchmark as a Hugging Face dataset ('export --format hf')"),
    "import": ("lalm_judge.cli.import_benchmark", "a released benchmark as a corpus to judge ('import --format hf')"),
    "pin-revisions": ("lalm_judge.cli.pin", "write the hub commit of every judge model into a config"),
}


# Packages whose exceptions describe bad input: YAML and table readers, audio files, and the project's own (every
# one names its file, key or id).
INPUT_PACKAGES = ("yaml", "polars", "pyarrow", "soundfile", "jsonschema", "lalm_judge")
TRACEBACK_ENV = "LALM_JUDGE_TRACEBACK"


def is_user_error(error: BaseException) -> bool:
    """An error of the input, not of the program: a value (ValueError), a file (OSError), a missing optional
    package (ImportError), or an exception of a package that reads input or of the project. A TypeError or an
    AttributeError is a bug, and shows its traceback."""
    if isinstance(error, ValueError | OSError | ImportError):
        return True
    return type(error).__module__.split(".")[0] in INPUT_PACKAGES


def error_line(error: BaseException, argv: list[str]) -> str:
    """The one line a user error ends a command with. The project's messages name their culprit and stay as they are
    (a config's problems, one per line); another package's message is put on one line and, when it names none of the
    command's inputs (the files and folders it was given to read), followed by them."""
    if type(error).__module__.split(".")[0] == "lalm_judge":
        return f"error: {error}"
    message = " ".join(str(error).split()) or type(error).__name__
    outputs = {value for option, value in zip(argv, argv[1:]) if option.startswith("--") and "out" in option}
    inputs = [arg for arg in argv if not arg.startswith("-") and arg not in outputs and os.path.exists(arg)]
    named = any(arg in message or os.path.basename(arg.rstrip("/")) in message for arg in inputs)
    return f"error: {message}" + (f" (reading {', '.join(inputs)})" if inputs and not named else "")


def usage() -> str:
    lines = ["usage: lalm-judge COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<16} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines.append("\nRun 'lalm-judge COMMAND --help' for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, _ = COMMANDS[command]
    try:
        return int(importlib.import_module(module_name).main(rest) or 0)
    except Exception as error:
        if not is_user_error(error) or os.environ.get(TRACEBACK_ENV) == "1":
            raise
        print(error_line(error, rest), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
