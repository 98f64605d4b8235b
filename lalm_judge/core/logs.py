"""Send a workflow job's logging, stdout and stderr (progress bars included) to its log file."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def log_to(path: str | Path | None) -> Iterator[None]:
    """Everything the job prints goes to `path`; an exception is logged with its traceback, then re-raised."""
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", buffering=1) as stream:
        if os.environ.get("SLURM_JOB_ID"):  # which batch job wrote this log (cluster runs)
            stream.write(f"SLURM_JOB_ID={os.environ['SLURM_JOB_ID']}\n")
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
                yield
        except BaseException:
            logging.getLogger("lalm_judge").exception("job failed")
            raise
        finally:
            root.removeHandler(handler)
