"""The ratings database: WAL mode, hashed tokens, append-only submissions, recorded transcript reveals."""

from __future__ import annotations

import sqlite3

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
    assert store.submit("alice", "item_1", Answer(unsafe=False)) == 1
    store.record("alice", "item_1", "transcript")
    store.record("alice", "item_1", "play")
    assert store.submit("alice", "item_1", Answer(unsafe=True, category="hate", severity=4)) == 1
    assert store.submit("alice", "item_2", Answer(unsafe=False)) == 2
    first, second = store.ratings("alice")
    assert (first.item_id, first.unsafe, first.category, first.severity) == ("item_1", 1, "hate", 4)
    assert first.n_submissions == 2 and first.transcript_shown == 1 and first.played == 1
    assert first.opened_at is not None and first.opened_at <= first.submitted_at
    assert (second.transcript_shown, second.played, second.opened_at) == (0, 0, None)
    assert store.revealed("alice") == {"item_1"}


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
