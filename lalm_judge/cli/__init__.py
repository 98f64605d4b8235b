"""`lalm-judge` command line: ad-hoc scoring, metrics, the human-anchor study, judge training, config checks,
and the export and import of the benchmark as a dataset.

Each command is a module of this package with a `main(argv)`; this file only dispatches, importing the
command's module lazily so that `lalm-judge metrics` never loads torch.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "score": ("lalm_judge.cli.score", "score one dialogue with a configured judge"),
    "metrics": ("lalm_judge.cli.metrics", "sensitivity, specificity, position bias, CIs from score tables"),
    "findings": ("lalm_judge.cli.findings", "a safety run's families of tests, findings, flags and patterns"),
    "anchors": ("lalm_judge.cli.anchors", "human-anchor study: sample a batch, serve the rating app, export, stats"),
    "pairwise": ("lalm_judge.cli.pairwise", "pairwise track: SageLM import/export, metrics of predictions"),
    "validate-config": ("lalm_judge.cli.validate", "check a config file against the schema"),
    "provenance": ("lalm_judge.cli.provenance", "how each row of output tables was made; rows that differ"),
    "export": ("lalm_judge.cli.export", "the run's benchmark as a Hugging Face dataset ('export --format hf')"),
    "import": ("lalm_judge.cli.import_benchmark", "a released benchmark as a corpus to judge ('import --format hf')"),
    "pin-revisions": ("lalm_judge.cli.pin", "write the hub commit of every judge model into a config"),
}


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
    return int(importlib.import_module(module_name).main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
