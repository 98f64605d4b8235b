"""`lalm-judge` command line: ad-hoc scoring, metrics and human-anchor statistics on any table.

Each subcommand lives with its module; this file only dispatches, importing the module lazily so
that `lalm-judge metrics` never loads torch.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "score": ("lalm_judge.judging", "score_main", "score one dialogue with a configured judge"),
    "metrics": ("lalm_judge.metrics", "metrics_main", "sensitivity, specificity, position bias, CIs from score tables"),
    "anchors": ("lalm_judge.anchors", "anchors_main", "human-anchor agreement statistics ('anchors stats FILE.csv')"),
    "validate-config": ("lalm_judge.config", "validate_main", "check a config file against the schema"),
}


def usage() -> str:
    lines = ["usage: lalm-judge COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<16} {help_text}" for name, (_, _, help_text) in COMMANDS.items()]
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
    module_name, function, _ = COMMANDS[command]
    return int(getattr(importlib.import_module(module_name), function)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
