"""Where the test suite's time goes: each module's share and the slowest tests, from pytest's JUnit XML reports.

    make test TEST_REPORTS=reports                   # each pytest run of `make test` writes its JUnit report there
    python -m bench.test_durations reports/*.xml --runs reports/*-tmp   # the tables of docs/benchmarks.md

A test's time is pytest's (set-up, call and tear-down: a module's first test carries the fixtures it builds, such as a
finished workflow run or an engine). Module times add up the time of their tests on whichever process ran them; the
wall time of a run is shorter, since its two processes run modules side by side.

`--runs` counts the workflow runs the tests made end to end, from the temporary folders of the pytest runs (their
`--basetemp`): Snakemake writes a log for a run it starts (a dry run writes none; one that fails to parse leaves its
log empty), naming each job it finished ("Finished job"). Runs that finished no job are not counted.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path


def test_times(report: Path) -> dict[str, float]:
    """Test id ('tests/x/test_y.py::name') -> seconds, from one JUnit XML report."""
    times = {}
    for case in ElementTree.parse(report).iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")
        # pytest writes 'tests.x.test_y' or 'tests.x.test_y.TestClass'.
        module_parts = parts if not parts[-1][:1].isupper() else parts[:-1]
        path = "/".join(module_parts) + ".py"
        times[f"{path}::{case.get('name')}"] = float(case.get("time") or 0.0)
    return times


def module_of(test: str) -> str:
    return test.split("::", 1)[0]


def tables(times: dict[str, float], slowest: int = 25, modules: int = 25) -> str:
    by_module: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for test, seconds in times.items():
        by_module[module_of(test)] += seconds
        counts[module_of(test)] += 1
    total = sum(by_module.values())
    lines = [
        f"{len(times)} tests, {total / 60:.1f} min of test time in all",
        "",
        "| module | tests | seconds | share |",
        "|---|---:|---:|---:|",
    ]
    for module, seconds in sorted(by_module.items(), key=lambda item: -item[1])[:modules]:
        lines.append(f"| {module} | {counts[module]} | {seconds:.0f} | {100 * seconds / total:.1f} % |")
    lines += ["", "| slowest tests | seconds |", "|---|---:|"]
    for test, seconds in sorted(times.items(), key=lambda item: -item[1])[:slowest]:
        lines.append(f"| {test} | {seconds:.1f} |")
    return "\n".join(lines)


FINISHED_JOB = "Finished job"


def workflow_runs(basetemps: list[Path]) -> tuple[int, int]:
    """(workflow runs that ran at least one job, jobs they finished) in these pytest temporary folders."""
    runs = jobs = 0
    for basetemp in basetemps:
        for log in basetemp.rglob(".snakemake/log/*.snakemake.log"):
            finished = log.read_text(encoding="utf-8", errors="replace").count(FINISHED_JOB)
            runs += finished > 0
            jobs += finished
    return runs, jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JUnit XML reports of pytest runs (--junitxml)")
    parser.add_argument("--slowest", type=int, default=25)
    parser.add_argument("--modules", type=int, default=25)
    parser.add_argument("--runs", nargs="*", type=Path, default=[], help="the pytest runs' --basetemp folders")
    args = parser.parse_args()
    times: dict[str, float] = {}
    for report in args.reports:
        times.update(test_times(report))
    print(tables(times, args.slowest, args.modules))
    if args.runs:
        runs, jobs = workflow_runs(args.runs)
        print(f"\n{runs} workflow runs end to end ({jobs} jobs finished), in {', '.join(map(str, args.runs))}")


if __name__ == "__main__":
    main()
