"""Send a workflow job's logging, stdout and stderr (progress bars included) to its log file, with the secrets
the job read (`core.secrets`) redacted from every line."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from lalm_judge.core.secrets import redact


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class _RedactingStream:
    """A text stream that writes to `stream` with the secrets redacted (what the job prints)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


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
        handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        printed = _RedactingStream(stream)
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                yield
        except BaseException:
            logging.getLogger("lalm_judge").exception("job failed")
            raise
        finally:
            root.removeHandler(handler)
