"""Dry-run the workflow in several working directories in one process, through Snakemake's Python API (what
`snakemake -n` calls after parsing its command line), so that checking many small cases does not pay Snakemake's
start-up for each.

    python -m tests.support.plan_runs WORKDIR...     # each holding config.yaml

Prints one JSON line per working directory: {"workdir", "returncode" (0 or 1), "error" (the exception and the
exceptions it came from, as Snakemake would print them)}.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.enums import Quietness
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

ROOT = Path(__file__).resolve().parents[2]


def dry_run(workdir: Path) -> dict:
    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow = api.workflow(
                resource_settings=ResourceSettings(cores=1),
                config_settings=ConfigSettings(configfiles=[workdir / "config.yaml"]),
                snakefile=ROOT / "Snakefile",
                workdir=workdir,
            )
            workflow.dag(DAGSettings()).execute_workflow(pseudo_executor="dryrun")
    except Exception as error:  # noqa: BLE001  (every failure of the run is the answer)
        return {"workdir": str(workdir), "returncode": 1, "error": "".join(traceback.format_exception(error))}
    return {"workdir": str(workdir), "returncode": 0, "error": ""}


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        print(json.dumps(dry_run(Path(argument).resolve())), flush=True)
