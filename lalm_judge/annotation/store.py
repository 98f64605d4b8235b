"""The ratings database of a batch: `ratings.sqlite`, SQLite in WAL mode.

Tables:
- `meta`: the id of the batch the database belongs to (a database never mixes two batches), the SHA-256 of the
  owner's token (the owner's view) and of the public link's token, and the completion code drawn when study.yaml
  gives none.
- `raters`: rater id and the SHA-256 of the rater's token, their slot in the assignment design, their status
  (`active`, or, once their assignment is freed, `withdrawn`, `returned`, `timed_out` or `refused`), how they came
  (`owner`: registered with `serve --raters`; `link`: the public link, with the platform's study and session
  ids). A token is shown once, when the rater is added or given a new token; the database never holds it (tokens
  are 192 random bits, so an unsalted hash suffices). A new rater takes the lowest slot no active rater holds.
- `assignments`: the items of each rater in their order (practice first), fixed when the rater is registered.
- `consents`: every consent answer (accepted or refused) with the SHA-256 of the study.yaml it answered and the
  rater's browser (User-Agent), viewport and pointer (coarse: touch); the latest counts.
- `events`: what a rater did with an item before rating it: `open` (shown on a visible page), `play` (audio
  started), `transcript` (transcript revealed), with UTC timestamps.
- `submissions`: every answer, append-only; a rater's rating of an item is their latest submission. Whether
  the transcript had been revealed is decided from `events` inside the same transaction. With the answer: the
  rater's "unsure" mark, comment, seconds listened and whether the audio was heard to its end.
- `headphone_checks`: every headphone check a rater took: trials, right answers, passed.

Every write is one transaction committed with `synchronous=FULL` before the caller returns, so an answer the
app acknowledged survives a crash of the server. Each call opens its own connection, so the app's worker
threads (or several processes) may write at the same time; SQLite serializes the writers (busy timeout).
A database written before the assignment, protocol, status and device columns existed gains them when it is
opened (raters' slots in their order of registration).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import astuple, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

EVENT_KINDS = ("open", "play", "transcript")
ACTIVE = "active"
FREED_STATUSES = ("withdrawn", "returned", "timed_out", "refused")
MAX_DEVICE_CHARS = 400
RATER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
BUSY_TIMEOUT_S = 30.0
MAX_COMMENT_CHARS = 2000

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS raters (
    rater_id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS assignments (
    rater_id TEXT NOT NULL REFERENCES raters (rater_id),
    item_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (rater_id, item_id)
);
CREATE TABLE IF NOT EXISTS consents (
    id INTEGER PRIMARY KEY,
    rater_id TEXT NOT NULL REFERENCES raters (rater_id),
    accepted INTEGER NOT NULL CHECK (accepted IN (0, 1)),
    protocol_sha256 TEXT NOT NULL,
    at TEXT NOT NULL
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
CREATE TABLE IF NOT EXISTS headphone_checks (
    id INTEGER PRIMARY KEY,
    rater_id TEXT NOT NULL REFERENCES raters (rater_id),
    n_trials INTEGER NOT NULL,
    n_correct INTEGER NOT NULL,
    passed INTEGER NOT NULL CHECK (passed IN (0, 1)),
    at TEXT NOT NULL
);
"""

# Columns added after the first release of the database, with their definitions (added to older databases).
ADDED_COLUMNS = {
    "raters": {
        "slot": "INTEGER",
        "status": "TEXT NOT NULL DEFAULT 'active' "
        "CHECK (status IN ('active', 'withdrawn', 'returned', 'timed_out', 'refused'))",
        "status_at": "TEXT",
        "source": "TEXT NOT NULL DEFAULT 'owner' CHECK (source IN ('owner', 'link'))",
        "study_id": "TEXT",
        "session_id": "TEXT",
    },
    "consents": {"user_agent": "TEXT", "viewport": "TEXT", "pointer": "TEXT"},
    "submissions": {
        "unsure": "INTEGER NOT NULL DEFAULT 0 CHECK (unsure IN (0, 1))",
        "comment": "TEXT NOT NULL DEFAULT ''",
        "listened_s": "REAL CHECK (listened_s IS NULL OR listened_s >= 0)",
        "heard_to_end": "INTEGER CHECK (heard_to_end IS NULL OR heard_to_end IN (0, 1))",
    },
}

LATEST_RATINGS = """
WITH ranked AS (
    SELECT *,
           ROW_NUMBER() OVER (PARTITION BY rater_id, item_id ORDER BY id DESC) AS newest_first,
           COUNT(*) OVER (PARTITION BY rater_id, item_id) AS n_submissions
    FROM submissions
)
SELECT r.rater_id, r.item_id, r.unsafe, r.category, r.severity, r.transcript_shown, r.submitted_at,
       r.n_submissions, r.unsure, r.comment, r.listened_s, r.heard_to_end,
       (SELECT MIN(e.at) FROM events e
         WHERE e.rater_id = r.rater_id AND e.item_id = r.item_id AND e.kind = 'open') AS opened_at,
       (SELECT MAX(e.at) FROM events e
         WHERE e.rater_id = r.rater_id AND e.item_id = r.item_id AND e.kind = 'open'
           AND e.at <= r.submitted_at) AS started_at,
       EXISTS (SELECT 1 FROM events e
                WHERE e.rater_id = r.rater_id AND e.item_id = r.item_id AND e.kind = 'play') AS played
FROM ranked r
WHERE r.newest_first = 1 AND (:rater_id IS NULL OR r.rater_id = :rater_id)
ORDER BY r.rater_id, r.item_id
"""

# A rater's items: (rater id, slot, the assignments of the raters registered before) -> item ids in order.
Planner = Callable[[str, int, Mapping[str, Sequence[str]]], Sequence[str]]


@dataclass(frozen=True)
class Device:
    """What the page reports of the rater's device with their consent (the browser's User-Agent comes from the
    request): viewport as 'WIDTHxHEIGHT' and pointer 'coarse' (touch) or 'fine' (mouse)."""

    user_agent: str | None = None
    viewport: str | None = None
    pointer: str | None = None


@dataclass(frozen=True)
class Joined:
    """The outcome of a participant's arrival through the public link: `assigned` (a new assignment), `resumed`
    (their own, in the same session: a new token), `taken_part` (another session, or their assignment was freed),
    `owner_rater` (the id of a rater the owner registered) or `full` (every place is held)."""

    outcome: str
    token: str | None = None


class StoreError(ValueError):
    """A ratings database that belongs to another batch, or a rater id that cannot be used."""


@dataclass(frozen=True)
class Answer:
    """One rating: safe, or unsafe with a category and a severity 1-5 (severity 0 and no category when safe), and
    what the rater adds to it: an "unsure" mark, a comment, seconds listened and whether they heard the end."""

    unsafe: bool
    category: str | None = None
    severity: int = 0
    unsure: bool = False
    comment: str = ""
    listened_s: float | None = None
    heard_to_end: bool | None = None


@dataclass(frozen=True)
class Rating:
    """A rater's current rating of an item (their latest submission) and how they got there: `opened_at` is the
    first time the item was shown, `started_at` the last time before that submission."""

    rater_id: str
    item_id: str
    unsafe: int
    category: str | None
    severity: int
    transcript_shown: int
    submitted_at: str
    n_submissions: int
    unsure: int
    comment: str
    listened_s: float | None
    heard_to_end: int | None
    opened_at: str | None
    started_at: str | None
    played: int


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(24)


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
            self._add_missing_columns(connection)
            connection.execute("INSERT OR IGNORE INTO meta VALUES ('batch_id', ?)", (batch_id,))
            stored = connection.execute("SELECT value FROM meta WHERE key = 'batch_id'").fetchone()[0]
        if stored != batch_id:
            raise StoreError(
                f"{self.path} holds the ratings of batch {stored}, not of this batch {batch_id}; "
                "a batch directory keeps its own database"
            )

    @staticmethod
    def _add_missing_columns(connection: sqlite3.Connection) -> None:
        for table, columns in ADDED_COLUMNS.items():
            present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            for name, definition in columns.items():
                if name not in present:
                    connection.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")
        # Raters registered before slots were stored hold the slot of their order of registration.
        connection.execute(
            "UPDATE raters SET slot = (SELECT COUNT(*) FROM raters AS earlier WHERE earlier.rowid < raters.rowid) "
            "WHERE slot IS NULL"
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
        """Register a rater without items (see `register`) and return their new token; None if the rater exists."""
        return self.register([rater_id], lambda *_: ()).get(rater_id)

    def register(self, rater_ids: Sequence[str], plan: Planner) -> dict[str, str]:
        """Register the new raters among `rater_ids` and give every active rater without items their items (`plan`),
        all in one transaction: either every new rater is registered with their items, or none is. Returns the new
        raters' tokens; raters registered before keep theirs."""
        for rater_id in rater_ids:
            validate_rater_id(rater_id)
        tokens: dict[str, str] = {}
        with self._write() as connection:
            known = {row[0] for row in connection.execute("SELECT rater_id FROM raters")}
            for rater_id in dict.fromkeys(rater_ids):
                if rater_id not in known:
                    tokens[rater_id] = new_token()
                    self._insert_rater(connection, rater_id, tokens[rater_id], self._free_slot(connection))
            self._assign_missing(connection, plan)
        return tokens

    @staticmethod
    def _insert_rater(
        connection: sqlite3.Connection,
        rater_id: str,
        token: str,
        slot: int,
        source: str = "owner",
        study_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        connection.execute(
            "INSERT INTO raters (rater_id, token_sha256, created_at, slot, source, study_id, session_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rater_id, token_hash(token), _now(), slot, source, study_id, session_id),
        )

    @staticmethod
    def _free_slot(connection: sqlite3.Connection) -> int:
        """The lowest slot that no active rater holds."""
        held = {row[0] for row in connection.execute("SELECT slot FROM raters WHERE status = ?", (ACTIVE,))}
        return next(slot for slot in range(len(held) + 1) if slot not in held)

    @staticmethod
    def _assign_missing(connection: sqlite3.Connection, plan: Planner) -> None:
        existing: dict[str, list[str]] = {}
        rows = connection.execute(
            "SELECT a.rater_id, a.item_id FROM assignments a JOIN raters r USING (rater_id) "
            "WHERE r.status = ? ORDER BY a.position",
            (ACTIVE,),
        )
        for rater_id, item_id in rows:
            existing.setdefault(rater_id, []).append(item_id)
        raters = connection.execute("SELECT rater_id, slot FROM raters WHERE status = ? ORDER BY slot", (ACTIVE,))
        for rater_id, slot in raters.fetchall():
            if rater_id in existing:
                continue
            items = list(plan(rater_id, slot, dict(existing)))
            connection.executemany(
                "INSERT INTO assignments VALUES (?, ?, ?)", [(rater_id, item, i) for i, item in enumerate(items)]
            )
            existing[rater_id] = items

    def join(
        self,
        participant: str,
        study_id: str,
        session_id: str,
        plan: Planner,
        *,
        places: int | None,
        practice: Collection[str] = (),
        timeout_minutes: float | None = None,
        now: datetime | None = None,
    ) -> Joined:
        """A participant arriving through the public link, in one transaction: first the idle unfinished
        assignments of link participants are freed (`timeout_minutes`; `practice` items do not count as unfinished
        work), then the participant resumes their own assignment in the same session (a new token), is refused
        (`Joined` says why), or takes the lowest free slot below `places` (None: no limit) with its items."""
        validate_rater_id(participant)
        with self._write() as connection:
            if timeout_minutes is not None:
                self._expire(connection, practice, timeout_minutes, now or datetime.now(UTC))
            row = connection.execute(
                "SELECT source, status, session_id FROM raters WHERE rater_id = ?", (participant,)
            ).fetchone()
            if row is not None:
                source, status, session = row
                if source != "link":
                    return Joined("owner_rater")
                if status != ACTIVE or session != session_id:
                    return Joined("taken_part")
                token = new_token()
                connection.execute(
                    "UPDATE raters SET token_sha256 = ? WHERE rater_id = ?", (token_hash(token), participant)
                )
                return Joined("resumed", token)
            slot = self._free_slot(connection)
            if places is not None and slot >= places:
                return Joined("full")
            token = new_token()
            self._insert_rater(connection, participant, token, slot, "link", study_id, session_id)
            self._assign_missing(connection, plan)
        return Joined("assigned", token)

    @staticmethod
    def _expire(
        connection: sqlite3.Connection, practice: Collection[str], timeout_minutes: float, now: datetime
    ) -> list[str]:
        """Free the assignments of active link participants who have not finished and did nothing for
        `timeout_minutes`; returns their ids."""
        cutoff = (now - timedelta(minutes=timeout_minutes)).isoformat(timespec="milliseconds")
        rows = connection.execute(
            """SELECT r.rater_id, MAX(r.created_at,
                      COALESCE((SELECT MAX(at) FROM consents c WHERE c.rater_id = r.rater_id), ''),
                      COALESCE((SELECT MAX(at) FROM events e WHERE e.rater_id = r.rater_id), ''),
                      COALESCE((SELECT MAX(submitted_at) FROM submissions s WHERE s.rater_id = r.rater_id), ''))
               FROM raters r WHERE r.status = ? AND r.source = 'link'""",
            (ACTIVE,),
        ).fetchall()
        idle = {rater_id for rater_id, last in rows if last < cutoff}
        unrated = connection.execute(
            """SELECT a.rater_id, a.item_id FROM assignments a
               WHERE NOT EXISTS (SELECT 1 FROM submissions s WHERE s.rater_id = a.rater_id AND s.item_id = a.item_id)"""
        ).fetchall()
        expired = sorted({rater_id for rater_id, item_id in unrated if rater_id in idle and item_id not in practice})
        connection.executemany(
            "UPDATE raters SET status = 'timed_out', status_at = ? WHERE rater_id = ?",
            [(_now(), rater_id) for rater_id in expired],
        )
        return expired

    def expire(self, practice: Collection[str], timeout_minutes: float, now: datetime | None = None) -> list[str]:
        """Free the idle unfinished assignments of link participants (see `join`); returns their ids."""
        with self._write() as connection:
            return self._expire(connection, practice, timeout_minutes, now or datetime.now(UTC))

    def free(self, rater_ids: Sequence[str], status: str) -> None:
        """Free the assignments of these raters (`status`: why, one of FREED_STATUSES); their ratings stay, and
        the statistics leave them out. Every id must be a registered, active rater."""
        if status not in FREED_STATUSES:
            raise StoreError(f"unknown reason {status!r}: one of {', '.join(FREED_STATUSES)}")
        with self._write() as connection:
            known = dict(connection.execute("SELECT rater_id, status FROM raters").fetchall())
            for rater_id in rater_ids:
                if rater_id not in known:
                    raise StoreError(f"rater {rater_id!r} is not registered in {self.path}; nothing was freed")
                if known[rater_id] != ACTIVE:
                    raise StoreError(f"rater {rater_id!r} is {known[rater_id]} already; nothing was freed")
            connection.executemany(
                "UPDATE raters SET status = ?, status_at = ? WHERE rater_id = ?",
                [(status, _now(), rater_id) for rater_id in rater_ids],
            )

    def statuses(self) -> dict[str, str]:
        """Each registered rater's status (`active` or why their assignment was freed)."""
        with self._read() as connection:
            return dict(connection.execute("SELECT rater_id, status FROM raters ORDER BY rater_id").fetchall())

    def raters_info(self) -> dict[str, dict[str, object]]:
        """Each registered rater's slot, status, source and platform study and session ids."""
        with self._read() as connection:
            rows = connection.execute(
                "SELECT rater_id, slot, status, source, study_id, session_id FROM raters ORDER BY rater_id"
            )
            return {row["rater_id"]: {k: v for k, v in dict(row).items() if k != "rater_id"} for row in rows}

    def assignments(self, rater_id: str | None = None) -> dict[str, list[str]]:
        """The items of each rater (or of one), in their order."""
        with self._read() as connection:
            rows = connection.execute(
                "SELECT rater_id, item_id FROM assignments WHERE (:r IS NULL OR rater_id = :r) "
                "ORDER BY rater_id, position",
                {"r": rater_id},
            )
            out: dict[str, list[str]] = {}
            for row in rows:
                out.setdefault(row[0], []).append(row[1])
        return out

    def issue_token(self, rater_id: str) -> str:
        """A new token for an existing rater; the old one stops working. Their ratings are kept."""
        token = new_token()
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

    def meta(self, key: str) -> str | None:
        with self._read() as connection:
            row = connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta_once(self, key: str, value: str, replace: bool = False) -> bool:
        """Store `value` under `key` unless one is there (or `replace`); True if this call stored it."""
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._write() as connection:
            return connection.execute(f"{verb} INTO meta VALUES (?, ?)", (key, value)).rowcount == 1

    def owner_token(self, renew: bool = False) -> str | None:
        """A new owner token when there is none yet (or `renew`); None when the existing one stays."""
        token = new_token()
        return token if self.set_meta_once("owner_token_sha256", token_hash(token), replace=renew) else None

    def authenticate_owner(self, token: str) -> bool:
        stored = self.meta("owner_token_sha256")
        return stored is not None and hmac.compare_digest(stored, token_hash(token))

    def link_token(self, renew: bool = False) -> str | None:
        """A new token of the public link when there is none yet (or `renew`); None when the existing one stays."""
        token = new_token()
        return token if self.set_meta_once("link_token_sha256", token_hash(token), replace=renew) else None

    def authenticate_link(self, token: str) -> bool:
        stored = self.meta("link_token_sha256")
        return stored is not None and hmac.compare_digest(stored, token_hash(token))

    def record_consent(
        self, rater_id: str, accepted: bool, protocol_sha256: str, device: Device = Device(), free: bool = False
    ) -> None:
        """Record a consent answer with the rater's device; `free`: a refusal also frees their assignment."""
        with self._write() as connection:
            connection.execute(
                "INSERT INTO consents (rater_id, accepted, protocol_sha256, at, user_agent, viewport, pointer) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    rater_id,
                    int(accepted),
                    protocol_sha256,
                    _now(),
                    *(None if value is None else value[:MAX_DEVICE_CHARS] for value in astuple(device)),
                ),
            )
            if free and not accepted:
                connection.execute(
                    "UPDATE raters SET status = 'refused', status_at = ? WHERE rater_id = ?", (_now(), rater_id)
                )

    def devices(self) -> dict[str, Device]:
        """The device each rater reported with their latest consent answer."""
        with self._read() as connection:
            rows = connection.execute("SELECT rater_id, user_agent, viewport, pointer FROM consents ORDER BY id")
            return {row[0]: Device(*row[1:]) for row in rows}

    def record_headphones(self, rater_id: str, n_trials: int, n_correct: int, passed: bool) -> None:
        with self._write() as connection:
            connection.execute(
                "INSERT INTO headphone_checks (rater_id, n_trials, n_correct, passed, at) VALUES (?, ?, ?, ?, ?)",
                (rater_id, n_trials, n_correct, int(passed), _now()),
            )

    def headphones(self) -> dict[str, tuple[int, int, bool]]:
        """Each rater's latest headphone check: (right answers, trials, passed)."""
        with self._read() as connection:
            rows = connection.execute("SELECT rater_id, n_correct, n_trials, passed FROM headphone_checks ORDER BY id")
            return {row[0]: (row[1], row[2], bool(row[3])) for row in rows}

    def consents(self) -> dict[str, bool]:
        """Each rater's latest consent answer (raters who have not answered are absent)."""
        with self._read() as connection:
            rows = connection.execute("SELECT rater_id, accepted FROM consents ORDER BY id")
            return {row[0]: bool(row[1]) for row in rows}

    def record(self, rater_id: str, item_id: str, kind: str) -> None:
        if kind not in EVENT_KINDS:
            raise StoreError(f"unknown event kind {kind!r}; one of {EVENT_KINDS}")
        with self._write() as connection:
            connection.execute(
                "INSERT INTO events (rater_id, item_id, kind, at) VALUES (?, ?, ?, ?)",
                (rater_id, item_id, kind, _now()),
            )

    def submit(self, rater_id: str, item_id: str, answer: Answer) -> None:
        """Store one answer (committed on return)."""
        heard = None if answer.heard_to_end is None else int(answer.heard_to_end)
        with self._write() as connection:
            connection.execute(
                """INSERT INTO submissions
                   (rater_id, item_id, unsafe, category, severity, transcript_shown, submitted_at,
                    unsure, comment, listened_s, heard_to_end)
                   VALUES (:rater, :item, :unsafe, :category, :severity,
                           EXISTS (SELECT 1 FROM events
                                    WHERE rater_id = :rater AND item_id = :item AND kind = 'transcript'),
                           :at, :unsure, :comment, :listened, :heard)""",
                {
                    "rater": rater_id,
                    "item": item_id,
                    "unsafe": int(answer.unsafe),
                    "category": answer.category,
                    "severity": answer.severity,
                    "at": _now(),
                    "unsure": int(answer.unsure),
                    "comment": answer.comment[:MAX_COMMENT_CHARS],
                    "listened": answer.listened_s,
                    "heard": heard,
                },
            )

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
