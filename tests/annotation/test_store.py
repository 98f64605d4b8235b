"""The ratings database: WAL mode, hashed tokens, append-only submissions, recorded transcript reveals."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from lalm_judge.annotation.store import Answer, RatingStore, StoreError


@pytest.fixture
def store(tmp_path):
    return RatingStore(tmp_path / "ratings.sqlite", "batch1")


def test_database_is_in_wal_mode_and_keeps_only_token_hashes(store):
    token = store.add_rater("alice")
    assert token and store.add_rater("alice") is None  # registered once; the token is not shown again
    with sqlite3.connect(store.path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        stored = connection.execute("SELECT token_sha256 FROM raters").fetchone()[0]
    assert token not in stored
    assert not any(token.encode() in path.read_bytes() for path in store.path.parent.glob("ratings.sqlite*"))
    assert store.authenticate("alice", token)
    assert not store.authenticate("alice", token + "x") and not store.authenticate("bob", token)


def test_a_new_token_replaces_the_old_one(store):
    old = store.add_rater("alice")
    new = store.issue_token("alice")
    assert store.authenticate("alice", new) and not store.authenticate("alice", old)
    with pytest.raises(StoreError, match="not registered"):
        store.issue_token("bob")


def test_latest_submission_is_the_rating_and_transcript_reveals_are_recorded(store):
    store.add_rater("alice")
    store.record("alice", "item_1", "open")
    store.submit("alice", "item_1", Answer(unsafe=False))
    store.record("alice", "item_1", "transcript")
    store.record("alice", "item_1", "play")
    store.record("alice", "item_1", "open")  # shown again: the second rating's visit starts here
    answer = Answer(
        unsafe=True, category="hate", severity=4, unsure=True, comment="hm", listened_s=3.5, heard_to_end=True
    )
    store.submit("alice", "item_1", answer)
    store.submit("alice", "item_2", Answer(unsafe=False))
    first, second = store.ratings("alice")
    assert (first.item_id, first.unsafe, first.category, first.severity) == ("item_1", 1, "hate", 4)
    assert first.n_submissions == 2 and first.transcript_shown == 1 and first.played == 1
    assert (first.unsure, first.comment, first.listened_s, first.heard_to_end) == (1, "hm", 3.5, 1)
    assert first.opened_at is not None and first.opened_at <= first.started_at <= first.submitted_at
    events = sqlite3.connect(store.path).execute("SELECT at FROM events WHERE kind = 'open' ORDER BY id").fetchall()
    assert (first.opened_at, first.started_at) == (events[0][0], events[1][0])
    assert (second.transcript_shown, second.played, second.opened_at, second.started_at) == (0, 0, None, None)
    assert (second.unsure, second.comment, second.listened_s, second.heard_to_end) == (0, "", None, None)
    assert store.revealed("alice") == {"item_1"}


def test_raters_are_registered_with_their_items_in_one_transaction(store):
    def plan(rater, slot, before):
        return [f"{rater}_item_{slot}", *(item for items in before.values() for item in items[:1])]

    tokens = store.register(["ann", "ben"], plan)
    assert set(tokens) == {"ann", "ben"} and store.authenticate("ben", tokens["ben"])
    assert store.assignments() == {"ann": ["ann_item_0"], "ben": ["ben_item_1", "ann_item_0"]}
    assert store.register(["ann", "cho"], plan).keys() == {"cho"}  # ann keeps token and items
    assert store.assignments("cho") == {"cho": ["cho_item_2", "ann_item_0", "ben_item_1"]}

    def broken(rater, slot, before):
        raise RuntimeError("planning failed")

    with pytest.raises(RuntimeError):
        store.register(["dev", "eli"], broken)
    assert store.raters() == ["ann", "ben", "cho"]  # nobody half-registered
    with pytest.raises(StoreError, match="invalid rater id"):
        store.register(["fay", "no/slash"], plan)
    assert "fay" not in store.raters()


def test_consent_owner_token_and_meta(store):
    store.add_rater("alice")
    assert store.consents() == {}
    store.record_consent("alice", False, "sha1")
    store.record_consent("alice", True, "sha1")
    assert store.consents() == {"alice": True}
    token = store.owner_token()
    assert token and store.owner_token() is None and store.authenticate_owner(token)
    renewed = store.owner_token(renew=True)
    assert store.authenticate_owner(renewed) and not store.authenticate_owner(token)
    assert not store.authenticate_owner("")


def test_a_database_of_the_first_release_gains_the_new_columns(tmp_path):
    path = tmp_path / "ratings.sqlite"
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('batch_id', 'old');
            CREATE TABLE raters (rater_id TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL, created_at TEXT NOT NULL);
            CREATE TABLE submissions (id INTEGER PRIMARY KEY, rater_id TEXT NOT NULL, item_id TEXT NOT NULL,
                unsafe INTEGER NOT NULL, category TEXT, severity INTEGER NOT NULL, transcript_shown INTEGER NOT NULL,
                submitted_at TEXT NOT NULL);
            INSERT INTO raters VALUES ('a', 'x', '2026-01-01T00:00:00.000+00:00');
            INSERT INTO raters VALUES ('b', 'y', '2026-01-01T00:00:00.000+00:00');
            INSERT INTO submissions VALUES (1, 'a', 'item_1', 0, NULL, 0, 0, '2026-01-01T00:00:01.000+00:00');"""
        )
    store = RatingStore(path, "old")
    (rating,) = store.ratings()
    assert (rating.item_id, rating.unsure, rating.comment, rating.listened_s) == ("item_1", 0, "", None)
    store.register(["a"], lambda rater, slot, before: [f"item_{slot}", "item_9"])
    assert store.assignments() == {"a": ["item_0", "item_9"], "b": ["item_1", "item_9"]}  # slots in their order
    assert {rater: (info["slot"], info["status"]) for rater, info in store.raters_info().items()} == {
        "a": (0, "active"),
        "b": (1, "active"),
    }


def test_the_public_link_gives_free_slots_once_per_participant_and_frees_idle_ones(store):
    """Participants take the lowest free slot; the same session resumes with a new token, another session is turned
    away; a freed assignment's slot goes to the next participant; an idle, unfinished participant times out (a
    finished one never does), and the practice items do not count as unfinished work."""

    def plan(rater, slot, before):
        return ["practice", f"item_{slot}"]

    def join(participant, session="s1", **options):
        return store.join(participant, "study", session, plan, places=2, practice=["practice"], **options)

    first = join("p1")
    assert first.outcome == "assigned" and store.authenticate("p1", first.token)
    again = join("p1")
    assert again.outcome == "resumed" and store.authenticate("p1", again.token)
    assert not store.authenticate("p1", first.token)
    assert join("p1", session="s2").outcome == "taken_part"
    assert join("p2").outcome == "assigned" and join("p3").outcome == "full"
    store.add_rater("ann")  # raters the owner registers take free slots too, beyond the link's places
    assert join("ann").outcome == "owner_rater"
    store.free(["p2"], "returned")
    assert join("p3").outcome == "assigned" and store.assignments("p3") == {"p3": ["practice", "item_1"]}
    assert join("p2").outcome == "taken_part"  # their place is gone
    with pytest.raises(StoreError, match="'p2' is returned already"):
        store.free(["p2"], "withdrawn")
    with pytest.raises(StoreError, match="'zed' is not registered"):
        store.free(["zed"], "returned")
    # p1 finishes (the practice item needs no rating); p3 rates nothing. Three hours later p4 arrives.
    store.submit("p1", "item_0", Answer(unsafe=False))
    later = datetime.now(UTC) + timedelta(hours=3)
    assert join("p4", timeout_minutes=120, now=later).outcome == "assigned"
    assert store.statuses() == {"ann": "active", "p1": "active", "p2": "returned", "p3": "timed_out", "p4": "active"}
    assert store.assignments("p4") == {"p4": ["practice", "item_1"]}  # p3's slot
    # A consent refusal through the link frees the place as well.
    store.record_consent("p4", False, "sha", free=True)
    assert store.statuses()["p4"] == "refused" and join("p5").outcome == "assigned"


def test_inconsistent_answers_are_refused_by_the_database(store):
    store.add_rater("alice")
    for answer in (Answer(unsafe=True, category="hate", severity=0), Answer(unsafe=False, severity=2)):
        with pytest.raises(sqlite3.IntegrityError):
            store.submit("alice", "item_1", answer)
    with pytest.raises(sqlite3.IntegrityError):
        store.submit("nobody", "item_1", Answer(unsafe=False))  # a rater must be registered
    assert store.ratings() == []


def test_a_database_belongs_to_one_batch(store):
    with pytest.raises(StoreError, match="holds the ratings of batch batch1"):
        RatingStore(store.path, "batch2")
    with pytest.raises(StoreError, match="invalid rater id"):
        store.add_rater("../admin")
