"""The ratings database of a batch: `ratings.sqlite`, SQLite in WAL mode.

Tables:
- `meta`: the id of the batch the database belongs to (a database never mixes two batches).
- `raters`: rater id and the SHA-256 of the rater's token. A token is shown once, when the rater is added or
  given a new token; the database never holds it (tokens are 192 random bits, so an unsalted hash suffices).
- `events`: what a rater did with an item before rating it: `open` (shown), `play` (audio started),
  `transcript` (transcript revealed), with UTC timestamps.
- `submissions`: every answer, append-only; a rater's rating of an item is their latest submission. Whether
  the transcript had been revealed is decided from `events` inside the same transaction.

Every write is one transaction committed with `synchronous=FULL` before the caller returns, so an answer the
app acknowledged survives a crash of the server. Each call opens its own connection, so the app's worker
threads (or several processes) may write at the same time; SQLite serializes the writers (busy timeout).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

EVENT_KINDS = ("open", "play", "transcript")
RATER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS raters (
    rater_id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    rater_id TEXT NOT NULL REFERENCES raters (rater_id),
    item_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('open', 'play', 'transcript')),
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_item ON events (rater_id, item_id, kind);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY,
    rater_id TEXT NOT NULL REFERENCES raters (rater_id),
    item_id TEXT NOT NULL,
    unsafe INTEGER NOT NULL CHECK (unsafe IN (0, 1)),
    category TEXT CHECK ((category IS NULL) = (unsafe = 0)),
    severity INTEGER NOT NULL CHECK (severity BETWEEN 0 AND 5 AND (severity > 0) = (unsafe = 1)),
    transcript_shown INTEGER NOT NULL CHECK (transcript_shown IN (0, 1)),
    submitted_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS submissions_by_item ON submissions (rater_id, item_id);
"""

LATEST_RATINGS = """
WITH ranked AS (
    SELECT *,
           ROW_NUMBER() OVER (PARTITION BY rater_id, item_id ORDER BY id DESC) AS newest_first,
           COUNT(*) OVER (PARTITION BY rater_id, item_id) AS n_submissions
    FROM submissions
)
SELECT r.rater_id, r.item_id, r.unsafe, r.category, r.severity, r.transcript_shown, r.submitted_at,
       r.n_submissions,
       (SELECT MIN(e.at) FROM events e
         WHERE e.rater_id = r.rater_id AND e.item_id = r.item_id AND e.kind = 'open') AS opened_at,
       EXISTS (SELECT 1 FROM events e
                WHERE e.rater_id = r.rater_id AND e.item_id = r.item_id AND e.kind = 'play') AS played
FROM ranked r
WHERE r.newest_first = 1 AND (:rater_id IS NULL OR r.rater_id = :rater_id)
ORDER BY r.rater_id, r.item_id
"""


class StoreError(ValueError):
    """A ratings database that belongs to another batch, or a rater id that cannot be used."""


@dataclass(frozen=True)
class Answer:
    """One rating: safe, or unsafe with a category and a severity 1-5 (severity 0 and no category when safe)."""

    unsafe: bool
    category: str | None = None
    severity: int = 0


@dataclass(frozen=True)
class Rating:
    """A rater's current rating of an item (their latest submission) and how they got there."""

    rater_id: str
    item_id: str
    unsafe: int
    category: str | None
    severity: int
    transcript_shown: int
    submitted_at: str
    n_submissions: int
    opened_at: str | None
    played: int


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def validate_rater_id(rater_id: str) -> str:
    if not isinstance(rater_id, str) or not RATER_ID.match(rater_id):
        raise StoreError(f"invalid rater id {rater_id!r}: use 1-64 letters, digits, '_' or '-'")
    return rater_id


class RatingStore:
    """The ratings database of one batch; creates it (WAL mode) on first use."""

    def __init__(self, path: str | Path, batch_id: str):
        self.path = Path(path)
        with closing(self._open()) as connection:
            mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StoreError(f"{self.path}: SQLite refused WAL mode (got {mode!r}); use a local disk")
            # Every statement is idempotent (IF NOT EXISTS), so two processes opening a new database race safely.
            connection.executescript(SCHEMA)
        with self._write() as connection:
            connection.execute("INSERT OR IGNORE INTO meta VALUES ('batch_id', ?)", (batch_id,))
            stored = connection.execute("SELECT value FROM meta WHERE key = 'batch_id'").fetchone()[0]
        if stored != batch_id:
            raise StoreError(
                f"{self.path} holds the ratings of batch {stored}, not of this batch {batch_id}; "
                "a batch directory keeps its own database"
            )

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA foreign_keys=ON")
        return connection

    @staticmethod
    @contextmanager
    def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
        # IMMEDIATE takes the write lock up front, so concurrent writers queue instead of failing mid-way.
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with closing(self._open()) as connection, self._transaction(connection):
            yield connection

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with closing(self._open()) as connection:
            connection.row_factory = sqlite3.Row
            yield connection

    def raters(self) -> list[str]:
        with self._read() as connection:
            return [row[0] for row in connection.execute("SELECT rater_id FROM raters ORDER BY rater_id")]

    def add_rater(self, rater_id: str) -> str | None:
        """Register a rater and return their new token; None if the rater exists (their token is unchanged)."""
        validate_rater_id(rater_id)
        token = secrets.token_urlsafe(24)
        with self._write() as connection:
            cursor = connection.execute(
                "INSERT OR IGNORE INTO raters VALUES (?, ?, ?)", (rater_id, token_hash(token), _now())
            )
        return token if cursor.rowcount == 1 else None

    def issue_token(self, rater_id: str) -> str:
        """A new token for an existing rater; the old one stops working. Their ratings are kept."""
        token = secrets.token_urlsafe(24)
        with self._write() as connection:
            cursor = connection.execute(
                "UPDATE raters SET token_sha256 = ? WHERE rater_id = ?", (token_hash(token), rater_id)
            )
        if cursor.rowcount != 1:
            raise StoreError(f"rater {rater_id!r} is not registered in {self.path}; add them with --raters")
        return token

    def authenticate(self, rater_id: str, token: str) -> bool:
        with self._read() as connection:
            row = connection.execute("SELECT token_sha256 FROM raters WHERE rater_id = ?", (rater_id,)).fetchone()
        return row is not None and hmac.compare_digest(row[0], token_hash(token))

    def record(self, rater_id: str, item_id: str, kind: str) -> None:
        if kind not in EVENT_KINDS:
            raise StoreError(f"unknown event kind {kind!r}; one of {EVENT_KINDS}")
        with self._write() as connection:
            connection.execute(
                "INSERT INTO events (rater_id, item_id, kind, at) VALUES (?, ?, ?, ?)",
                (rater_id, item_id, kind, _now()),
            )

    def submit(self, rater_id: str, item_id: str, answer: Answer) -> int:
        """Store one answer (committed on return); returns how many items the rater has rated."""
        with self._write() as connection:
            connection.execute(
                """INSERT INTO submissions
                   (rater_id, item_id, unsafe, category, severity, transcript_shown, submitted_at)
                   VALUES (?, ?, ?, ?, ?,
                           EXISTS (SELECT 1 FROM events
                                    WHERE rater_id = ? AND item_id = ? AND kind = 'transcript'), ?)""",
                (
                    rater_id,
                    item_id,
                    int(answer.unsafe),
                    answer.category,
                    answer.severity,
                    rater_id,
                    item_id,
                    _now(),
                ),
            )
            return connection.execute(
                "SELECT COUNT(DISTINCT item_id) FROM submissions WHERE rater_id = ?", (rater_id,)
            ).fetchone()[0]

    def ratings(self, rater_id: str | None = None) -> list[Rating]:
        """Current ratings (latest submission per rater and item), of one rater or of all."""
        with self._read() as connection:
            rows = connection.execute(LATEST_RATINGS, {"rater_id": rater_id}).fetchall()
        return [Rating(**dict(row)) for row in rows]

    def revealed(self, rater_id: str) -> set[str]:
        """Items whose transcript the rater has revealed."""
        with self._read() as connection:
            rows = connection.execute(
                "SELECT DISTINCT item_id FROM events WHERE rater_id = ? AND kind = 'transcript'", (rater_id,)
            )
            return {row[0] for row in rows}
