"""The transcript cache of the condition ASR jobs (`lalm_judge.audio.transcription.TranscriptCache`)."""

import logging

import numpy as np

from lalm_judge.audio import transcription
from lalm_judge.audio.transcription import TranscriptCache, transcript_key

OPTIONS = {"model": "bundled:tiny.en", "device": "cpu", "compute_type": "int8", "beam_size": 1, "cpu_threads": 1}
AUDIO = np.linspace(-0.5, 0.5, 1600, dtype=np.float32)


def test_the_key_follows_the_waveform_and_the_settings_that_change_text():
    key = transcript_key(OPTIONS, AUDIO, 16000)
    assert transcript_key({**OPTIONS, "cpu_threads": 8, "gpu": 1}, AUDIO, 16000) == key
    assert transcript_key({**OPTIONS, "beam_size": 5}, AUDIO, 16000) != key
    assert transcript_key(OPTIONS, AUDIO, 8000) != key
    changed = AUDIO.copy()
    changed[800] += 1e-6
    assert transcript_key(OPTIONS, changed, 16000) != key


def test_entries_survive_a_new_process_and_are_written_as_they_accumulate(tmp_path, monkeypatch):
    monkeypatch.setattr(transcription, "CACHE_FLUSH_EVERY", 2)
    path = tmp_path / "asr" / "d.parquet"
    cache = TranscriptCache(path)
    cache.add("a", "hello")
    assert not path.exists()
    cache.add("b", "world")  # the second entry writes both: a job killed now keeps them
    assert TranscriptCache(path).get("b") == "world"
    cache.add("c", "again")
    cache.flush()
    reopened = TranscriptCache(path)
    assert (reopened.get("a"), reopened.get("c"), reopened.get("x")) == ("hello", "again", None)


def test_an_unreadable_cache_is_moved_aside_with_a_warning(tmp_path, caplog):
    path = tmp_path / "d.parquet"
    path.write_bytes(b"not a parquet file")
    with caplog.at_level(logging.WARNING):
        cache = TranscriptCache(path)
    assert cache.get("a") is None and not path.exists()
    aside = list(tmp_path.glob("d.parquet.corrupt-*"))
    assert len(aside) == 1 and str(aside[0]) in caplog.text
    cache.add("a", "hello")
    cache.flush()
    assert TranscriptCache(path).get("a") == "hello"


def test_no_path_caches_in_memory_only(tmp_path):
    cache = TranscriptCache(None)
    cache.add("a", "hello")
    cache.flush()
    assert cache.get("a") == "hello" and not list(tmp_path.iterdir())
