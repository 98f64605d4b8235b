"""The request cache of judge outputs: each distinct request is computed once, whichever job, cell or run asks
for it, so a rerun computes only new requests and a killed job resumes where it stopped.

- `request_key`: a hash of what determines an answer: the judge's identity (`judge_identity`: backend, model,
  revision, dtype, generation settings and the options that change answers), the request's context (for the
  judge stage the prompt version and content hash, and the modality) and the exact inputs: every field of the
  request but its id, with each audio waveform hashed sample by sample (`waveform_digest`). Where and how fast
  requests run (batch size, GPUs, concurrency, retries, devices, cache folders) is not in it.
- `RequestCache`: a folder of SQLite databases, one per partition (the judge stage uses one per judge and
  dialogue, `<cache_dir>/<judge>/<dialogue>.sqlite`). Entries are only ever added (`INSERT OR IGNORE`), one
  transaction per `store`, so a process killed at any point leaves every committed entry intact and none half
  written. An output that carries neither text nor P(safe) nor a provider's refusal to answer (finish reason
  `content_filter`), or that its backend reports as failed (`FAILED_FINISH_REASONS`), is never stored and never
  served; nor is an entry stored before `JudgeOutput` gained a field it now has. Every entry carries a checksum of
  its key and value, checked on read; a database that fails a check (SQLite's `quick_check` at its first open in a
  process, or an entry's checksum) is moved aside as `<file>.corrupt-<UTC time>` with a warning naming it, and its
  requests are computed again into a new database. Nothing is written into a database that failed a check.
The request engine (`lalm_judge.judging.runner`) puts a backend behind this cache: cached requests are
answered from it, each backend call's outputs are stored as soon as it returns.

Why SQLite: it is in the standard library of every environment the judges run in (the vLLM and transformers
conda envs included), a transaction is atomic and durable (the write-ahead log is replayed or discarded on the
next open), and lookups are indexed. Each connection lives for one transaction, in WAL mode with
`locking_mode=EXCLUSIVE`: SQLite then keeps the WAL index in process memory instead of a shared-memory file,
which is what makes a database safe to use from different hosts of a cluster one after the other (WAL's
shared memory does not work across hosts of a network file system). Processes on one host that write the same
database at once take turns (busy timeout; a connection that meets another while setting up starts again,
`RequestCache._open`).

Requests in flight are claimed (`RequestCache.claim`), so that jobs sharing a cache folder compute each request
once: in the workflow a partition is written by one job at a time, but two runs may share `cache_dir` (two checkouts,
or a run started again while the first is still alive, e.g. after `--unlock`). Before a call, the request engine
claims its requests in their partitions' `claims` table; a request another holder claimed and still renews (a
heartbeat, every `CLAIM_RENEW_S`) is left to that holder and its answer read from the cache once stored; a claim whose
holder is gone may be taken over: one not renewed for `CLAIM_TTL_S`, or at once one of a process of this host that no
longer runs (a SIGKILLed job, whose retry then waits for nothing; `holder_is_gone`). Storing an answer drops its
claims. Claims only decide who computes: an answer is an answer whoever stored it first (`INSERT OR IGNORE`), so a
lost or expired claim costs at most a duplicated call, never a wrong row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import re
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from lalm_judge.core.files import stable_hash
from lalm_judge.judging.backends.base import JudgeOutput, JudgeSpec

logger = logging.getLogger(__name__)

# 2: every entry carries a checksum of its key and value (`entry_checksum`).
FORMAT_VERSION = 2
KEY_LENGTH = 40
BUSY_TIMEOUT_S = 300.0
SETUP_BUSY_TIMEOUT_S = 1.0  # waiting of one attempt to set a connection up (`RequestCache._open`)
LOOKUP_CHUNK = 500  # keys per SELECT (SQLite bounds the number of bound parameters)
# A claim's holder renews its claims this often while it holds them; one not renewed for CLAIM_TTL_S is expired (its
# holder died: a SIGKILL, a lost node) and may be taken over.
CLAIM_RENEW_S = 20.0
CLAIM_TTL_S = 120.0
FAILED_FINISH_REASONS = frozenset({"abort", "error"})
_PARTITION = re.compile(r"^[A-Za-z0-9_.\-]+$")

# Judge settings that change where or how fast requests run, not what a model answers. Everything else of the
# spec is in the key (unknown options included), so a setting that might change answers invalidates entries.
SPEC_FIELDS_NOT_IN_KEY = frozenset(
    {"name", "batch_size", "gpus", "modalities", "max_audio_s", "long_audio", "accept_served_models"}
)
OPTIONS_NOT_IN_KEY = frozenset(
    {
        "api_key_env",
        "backoff_base_s",
        "backoff_max_s",
        "base_url",  # where the model is served; `model` says which model it is
        "cache_dir",
        "cascade_asr",  # chooses the transcript the request carries, which is hashed with the request
        "concurrency",
        "device",
        "gpu_memory_utilization",
        "header_env",
        "max_model_len",  # the vllm backend refuses an answer the engine's length could cut (`_check_context`)
        "max_retries",
        "num_threads",
        "tensor_parallel_size",
        "threads",
        "timeout_s",
    }
)


def judge_identity(spec: JudgeSpec) -> dict[str, Any]:
    """The part of a judge spec that determines its answers (`SPEC_FIELDS_NOT_IN_KEY`, `OPTIONS_NOT_IN_KEY`)."""
    identity = {k: v for k, v in dataclasses.asdict(spec).items() if k not in SPEC_FIELDS_NOT_IN_KEY}
    identity["options"] = {k: v for k, v in spec.options.items() if k not in OPTIONS_NOT_IN_KEY}
    return identity


def waveform_digest(waveform: np.ndarray) -> str:
    """sha256 of the samples exactly as given (dtype and shape included)."""
    array = np.ascontiguousarray(waveform)
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _fingerprint(value: Any, digests: Callable[[np.ndarray], str]) -> Any:
    """A JSON-able stand-in of a request's inputs: arrays become their digests."""
    if isinstance(value, np.ndarray):
        return {"sha256": digests(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _fingerprint(getattr(value, f.name), digests)
            for f in dataclasses.fields(value)
            if f.name != "request_id"
        }
    if isinstance(value, Mapping):
        return {str(k): _fingerprint(v, digests) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fingerprint(v, digests) for v in value]
    return value


def request_key(
    identity: Mapping[str, Any],
    context: Mapping[str, Any],
    request: Any,
    digests: Callable[[np.ndarray], str] = waveform_digest,
) -> str:
    """The cache key of `request` (any dataclass of inputs: a `JudgeRequest`, or a pairwise request) for the judge
    `identity` in `context`. The request id is not part of it: equal inputs are one request."""
    return stable_hash(
        {"format": FORMAT_VERSION, "judge": identity, "context": context, "inputs": _fingerprint(request, digests)},
        length=KEY_LENGTH,
    )


def is_servable(output: JudgeOutput) -> bool:
    """Whether an output may be stored and served: it has text (not only blanks), P(safe) or the provider's
    refusal to answer, and its backend did not fail it (`extra['raw_finish_reason']`, the engine's own word)."""
    if output.extra.get("raw_finish_reason") in FAILED_FINISH_REASONS:
        return False
    return bool(output.text.strip()) or output.p_safe is not None or output.finish_reason == "content_filter"


def _encode_output(output: JudgeOutput) -> str:
    return json.dumps(dataclasses.asdict(output), sort_keys=True, default=str)


_OUTPUT_FIELDS = frozenset(f.name for f in dataclasses.fields(JudgeOutput))


def _decode_output(text: str) -> JudgeOutput | None:
    """The stored output, or None when it lacks a field `JudgeOutput` has now (stored before the field existed:
    not a complete answer, so not a hit)."""
    record = json.loads(text)
    return JudgeOutput(**record) if set(record) == _OUTPUT_FIELDS else None


def claim_holder() -> str:
    """A name for one process's claims, `<host>:<pid>:<random>`: unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_is_gone(holder: str) -> bool:
    """Whether a claim's holder is a process of this host that no longer runs (of another host, or one this process
    may not signal, it is taken to live: its claim then expires by its age)."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass(frozen=True)
class Claimed:
    """What a claim of some keys found (`RequestCache.claim`): the keys now held by the claimant, those already
    stored (by another process since the claimant looked), and those another live holder is computing."""

    granted: list[str]
    stored: list[str]
    held: list[str]


@dataclass(frozen=True)
class CachedEntry:
    output: JudgeOutput
    # Who computed it: model, model_revision (as the backend described itself), package_versions, created (UTC).
    provenance: dict[str, Any]


def entry_checksum(key: str, output: str, provenance: str) -> str:
    """sha256 of one stored entry: its key and its value (the encoded output and provenance), as stored."""
    return hashlib.sha256(json.dumps([key, output, provenance]).encode()).hexdigest()


_ENTRY = "key, output, provenance, checksum"


def _verified(path: Path, rows: Iterable[tuple[str, str, str, str]]) -> Iterator[tuple[str, str, str]]:
    """(key, output, provenance) of each stored row whose checksum matches; `_FailedCheck` at the first that does
    not."""
    for key, output, provenance, checksum in rows:
        if entry_checksum(key, output, provenance) != checksum:
            raise _FailedCheck(path, f"the entry {key} does not match its checksum")
        yield key, output, provenance


class _FailedCheck(Exception):
    """A database that failed a check (`RequestCache`): the reason, for the message that names the file."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def _is_corruption(err: sqlite3.DatabaseError) -> bool:
    """SQLite's verdict that a file is damaged or not a database (not a busy database or a failing disk)."""
    name = getattr(err, "sqlite_errorname", "")
    return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in str(err) or "not a database" in str(err)


class RequestCache:
    """A folder of SQLite databases of judge outputs, one per partition (see the module docstring).

    Integrity: every entry carries `entry_checksum` of its key and value. The first time a process opens a
    database it runs SQLite's `quick_check` and verifies every entry's checksum; each read verifies the entries it
    returns. A database that fails (a damaged file, truncated at or inside a page, an entry whose bytes changed, a
    file that is not a database) is moved aside as `<file>.corrupt-<UTC time>` with a warning naming both files,
    and its requests count as not cached, so they are computed again and stored in a new database: nothing is
    ever written into a database that failed a check. `moved_aside` lists the files moved by this instance."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.moved_aside: list[Path] = []
        self._checked: set[Path] = set()

    def path(self, partition: str) -> Path:
        if not _PARTITION.match(partition):
            raise ValueError(f"cache partition {partition!r} must be a file name of letters, digits and _ . -")
        return self.root / f"{partition}.sqlite"

    def partitions(self) -> list[str]:
        return sorted(p.stem for p in self.root.glob("*.sqlite"))

    @contextmanager
    def _connect(self, partition: str, *, create: bool) -> Iterator[sqlite3.Connection | None]:
        path = self.path(partition)
        if not create and not path.is_file():
            yield None
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = self._open(path)
        try:
            yield connection
        except sqlite3.DatabaseError as err:
            if _is_corruption(err):
                raise _FailedCheck(path, str(err)) from err
            raise
        finally:
            connection.close()

    def _open(self, path: Path) -> sqlite3.Connection:
        """A connection set up for one transaction. In exclusive locking mode a connection keeps every lock it
        took until it closes, so two processes setting up one database at once (a new file, still in rollback
        mode) can each hold the shared lock the other needs to switch it to WAL, and would wait for each other
        forever. A setup that finds the database busy therefore closes its connection, letting its locks go,
        and starts again after a random pause (so the two do not meet again)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            connection = sqlite3.connect(path, timeout=SETUP_BUSY_TIMEOUT_S, isolation_level=None)
            try:
                # Before the first access: no shared-memory WAL index (see the module docstring).
                connection.execute("PRAGMA locking_mode=EXCLUSIVE")
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=FULL")
                self._prepare(connection, path)
                connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
                return connection
            except sqlite3.OperationalError as err:
                connection.close()
                if not _is_busy(err):
                    if _is_corruption(err):
                        raise _FailedCheck(path, str(err)) from err
                    raise RuntimeError(f"request cache {path}: {err}") from err
                if time.monotonic() > deadline:
                    raise RuntimeError(f"request cache {path} stayed locked for {BUSY_TIMEOUT_S:.0f} s") from err
                time.sleep(random.uniform(0.01, 0.2))
            except sqlite3.DatabaseError as err:
                connection.close()
                if _is_corruption(err):
                    raise _FailedCheck(path, str(err)) from err
                raise
            except BaseException:
                connection.close()
                raise

    def _prepare(self, connection: sqlite3.Connection, path: Path) -> None:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS outputs (key TEXT PRIMARY KEY, output TEXT NOT NULL, "
                "provenance TEXT NOT NULL, checksum TEXT NOT NULL) WITHOUT ROWID"
            )
            connection.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
        elif version < FORMAT_VERSION:
            raise _FailedCheck(path, f"format {version}, from before entry checksums (format {FORMAT_VERSION})")
        elif version != FORMAT_VERSION:
            raise RuntimeError(
                f"request cache {path} has format {version}, this code reads format {FORMAT_VERSION}; "
                "point evaluation.cache_dir elsewhere or delete the file"
            )
        if path not in self._checked:
            self._check(connection, path)
            self._checked.add(path)

    @staticmethod
    def _check(connection: sqlite3.Connection, path: Path) -> None:
        """SQLite's structural check, then every entry's checksum."""
        problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise _FailedCheck(path, f"SQLite quick_check: {'; '.join(problems[:3])}")
        for _ in _verified(path, connection.execute(f"SELECT {_ENTRY} FROM outputs")):
            pass

    def _move_aside(self, failed: _FailedCheck) -> None:
        path = failed.path
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target, n = path.with_name(f"{path.name}.corrupt-{stamp}"), 1
        while target.exists():
            target, n = path.with_name(f"{path.name}.corrupt-{stamp}-{n}"), n + 1
        path.rename(target)
        for suffix in ("-wal", "-shm", "-journal"):
            sidecar = path.with_name(path.name + suffix)
            if sidecar.exists():
                sidecar.rename(target.with_name(target.name + suffix))
        self._checked.discard(path)
        self.moved_aside.append(target)
        logger.warning(
            "request cache %s failed its check (%s): moved to %s; its requests are computed again",
            path,
            failed.reason,
            target.name,
        )

    def lookup(self, partition: str, keys: Iterable[str]) -> dict[str, CachedEntry]:
        """The servable entries of `keys` found in the partition (none when its database fails a check)."""
        try:
            return self._lookup(partition, list(dict.fromkeys(keys)))
        except _FailedCheck as failed:
            self._move_aside(failed)
            return {}

    def _lookup(self, partition: str, keys: list[str]) -> dict[str, CachedEntry]:
        found: dict[str, CachedEntry] = {}
        with self._connect(partition, create=False) as connection:
            if connection is None:
                return found
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start : start + LOOKUP_CHUNK]
                rows = connection.execute(
                    f"SELECT {_ENTRY} FROM outputs WHERE key IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
                for key, output, provenance in _verified(self.path(partition), rows):
                    decoded = _decode_output(output)
                    if decoded is not None and is_servable(decoded):
                        found[key] = CachedEntry(decoded, json.loads(provenance))
        return found

    def store(self, partition: str, outputs: Sequence[tuple[str, JudgeOutput]], provenance: Mapping[str, Any]) -> int:
        """Add the servable outputs in one transaction (a key already present keeps its entry); how many were new.
        A database that fails a check is moved aside first, and the outputs go to a new one."""
        rows = [(key, _encode_output(output)) for key, output in outputs if is_servable(output)]
        if not rows:
            return 0
        stamped = json.dumps({**provenance, "created": datetime.now(UTC).isoformat(timespec="seconds")})
        entries = [(key, output, stamped, entry_checksum(key, output, stamped)) for key, output in rows]
        try:
            return self._insert(partition, entries)
        except _FailedCheck as failed:
            self._move_aside(failed)
            return self._insert(partition, entries)

    def _insert(self, partition: str, entries: list[tuple[str, str, str, str]]) -> int:
        with self._transaction(partition) as connection:
            before = connection.total_changes
            connection.executemany(f"INSERT OR IGNORE INTO outputs ({_ENTRY}) VALUES (?, ?, ?, ?)", entries)
            added = connection.total_changes - before
            # A stored answer needs no claim: whoever held it is done with it, or was computing it twice.
            keys = [(entry[0],) for entry in entries]
            connection.executemany("DELETE FROM claims WHERE key = ?", keys)
        return added

    @contextmanager
    def _transaction(self, partition: str) -> Iterator[sqlite3.Connection]:
        """One write transaction on the partition's database (created if missing, with its claims table)."""
        with self._connect(partition, create=True) as connection:
            assert connection is not None
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, holder TEXT NOT NULL, "
                    "renewed REAL NOT NULL) WITHOUT ROWID"
                )
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                # A signal may land after the COMMIT went through (`core.signals`): nothing left to roll back.
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

    def claim(self, partition: str, keys: Sequence[str], holder: str, ttl_s: float = CLAIM_TTL_S) -> Claimed:
        """Claim the keys for `holder` in one transaction: a key neither stored nor claimed by another holder that
        renewed its claim within `ttl_s` is granted (module docstring). A database that fails a check is moved aside
        first."""
        try:
            return self._claim(partition, list(dict.fromkeys(keys)), holder, ttl_s)
        except _FailedCheck as failed:
            self._move_aside(failed)
            return self._claim(partition, list(dict.fromkeys(keys)), holder, ttl_s)

    def _claim(self, partition: str, keys: list[str], holder: str, ttl_s: float) -> Claimed:
        granted, stored, held = [], [], []
        now = time.time()
        with self._transaction(partition) as connection:
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start : start + LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                done = {row[0] for row in connection.execute(f"SELECT key FROM outputs WHERE key IN ({marks})", chunk)}
                live = f"SELECT key, holder FROM claims WHERE key IN ({marks}) AND renewed >= ?"
                claims = dict(connection.execute(live, [*chunk, now - ttl_s]))
                gone = {other: holder_is_gone(other) for other in set(claims.values()) - {holder}}
                for key in chunk:
                    if key in done:
                        stored.append(key)
                    elif claims.get(key, holder) != holder and not gone[claims[key]]:
                        held.append(key)
                    else:
                        granted.append(key)
            connection.executemany(
                "INSERT OR REPLACE INTO claims (key, holder, renewed) VALUES (?, ?, ?)",
                [(key, holder, now) for key in granted],
            )
        return Claimed(granted, stored, held)

    def renew(self, partition: str, holder: str) -> int:
        """Renew every claim `holder` has in the partition (its heartbeat); how many it has (none in a database that
        fails a check: moved aside)."""
        try:
            with self._transaction(partition) as connection:
                return connection.execute(
                    "UPDATE claims SET renewed = ? WHERE holder = ?", (time.time(), holder)
                ).rowcount
        except _FailedCheck as failed:
            self._move_aside(failed)
            return 0

    def release(self, partition: str, holder: str) -> None:
        """Drop every claim `holder` has in the partition (it stops without computing them)."""
        if not self.path(partition).is_file():
            return
        try:
            with self._transaction(partition) as connection:
                connection.execute("DELETE FROM claims WHERE holder = ?", (holder,))
        except _FailedCheck as failed:
            self._move_aside(failed)

    def count(self, partition: str | None = None) -> int:
        """Entries in one partition, or in all of them (a database that fails a check is moved aside: 0)."""
        total = 0
        for name in [partition] if partition is not None else self.partitions():
            try:
                with self._connect(name, create=False) as connection:
                    if connection is not None:
                        total += connection.execute("SELECT COUNT(*) FROM outputs").fetchone()[0]
            except _FailedCheck as failed:
                self._move_aside(failed)
        return total


def _is_busy(err: sqlite3.OperationalError) -> bool:
    return "locked" in str(err) or "busy" in str(err)
