"""Samples built in code, for tests that score without a manifest."""

from __future__ import annotations

from lalm_judge.manifest.samples import Sample


def two_turn_sample(sample_id: str = "d.original") -> Sample:
    """The safe original of a two-turn dialogue 'd' with a ground-truth transcript and no clips (text cells)."""
    return Sample(
        sample_id=sample_id,
        dialogue_id="d",
        category=None,
        severity=0,
        turn_index=None,
        speakers=("A", "B"),
        clips=("", ""),
        gaps_s=(0.4,),
        sample_rate=16000,
        texts={"gt": ("Hi, how was the trip?", "Long, but worth it.")},
    )
