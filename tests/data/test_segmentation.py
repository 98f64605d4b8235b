"""Turn segmentation on speech with known boundaries: Piper and espeak-ng turns joined with known pauses,
transcribed by the bundled Whisper tiny.en, cut by `lalm_judge.data.segmentation`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from lalm_judge.audio import tts
from lalm_judge.audio.asr import Word, load_asr
from lalm_judge.audio.waveform import concatenate_turns, resample
from lalm_judge.data.segmentation import (
    ASR_ALIGNMENT,
    SILENCE,
    SegmentationSettings,
    align_words,
    find_boundaries,
    segment_turns,
)

SR = 16000
TOLERANCE_S = 0.15
PAD_S = SegmentationSettings().trim_pad_s  # spans keep this much silence around the speech
VOICES = (tts.Voice("piper", {}), tts.Voice("espeak", {"voice": "en-us+f3"}))
# The second turn has two sentences with a long pause between them (longer than any pause between turns),
# as in the XTTS recordings of DeepDialogue: silence alone would cut there.
TURNS = (
    ("Good morning! Did you sleep well last night?",),
    ("Not really.", "The neighbours had a loud party until two in the morning."),
    ("Oh no, that sounds exhausting. Maybe you should talk to them today.",),
    ("I will, right after my coffee.",),
)
GAPS_S = (0.35, 0.5, 0.3)
LONG_INNER_PAUSE_S = 0.9


@dataclass
class Recording:
    audio: np.ndarray
    texts: list[str]
    speech: list[tuple[float, float]]  # true speech extent of every turn, seconds

    def gap(self, boundary: int) -> tuple[float, float]:
        return self.speech[boundary][1], self.speech[boundary + 1][0]


def _speech_extent(clip: np.ndarray) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(clip) > 0.02 * np.abs(clip).max())
    return loud[0] / SR, (loud[-1] + 1) / SR


def _join(turn_sentences, gaps_s, inner_pause_s: float) -> Recording:
    clips = []
    for i, sentences in enumerate(turn_sentences):
        voice = VOICES[i % 2]
        parts = [resample(*tts.synthesize(voice, tts.SynthesisRequest(s)), SR) for s in sentences]
        clips.append(concatenate_turns(parts, [inner_pause_s] * (len(parts) - 1), SR))
    audio = concatenate_turns(clips, list(gaps_s), SR)
    offsets = np.cumsum([0.0] + [len(c) / SR + g for c, g in zip(clips, gaps_s)])
    speech = [(o + a, o + b) for o, (a, b) in zip(offsets, map(_speech_extent, clips))]
    return Recording(audio, [" ".join(s) for s in turn_sentences], speech)


@pytest.fixture(scope="module")
def recording() -> Recording:
    return _join(TURNS, GAPS_S, LONG_INNER_PAUSE_S)


@pytest.fixture(scope="module")
def words(recording) -> list[Word]:
    asr = load_asr("bundled:tiny.en", cpu_threads=2)
    return asr.transcribe(recording.audio, SR, word_timestamps=True).words


def test_align_words_handles_substitution_deletion_and_insertion():
    reference = ["the", "cat", "sat", "on", "the", "mat"]
    hypothesis = ["a", "cat", "sat", "the", "big", "mat"]
    aligned = align_words(reference, hypothesis)
    assert aligned == [0, 1, 2, None, 3, 5]


def test_align_words_is_monotonic_on_unrelated_text():
    aligned = align_words(["one", "two", "three", "four"], ["alpha", "beta"])
    hits = [a for a in aligned if a is not None]
    assert hits == sorted(hits) and len(set(hits)) == len(hits)


def test_aligned_boundaries_fall_in_the_true_pauses(recording, words):
    spans = segment_turns(recording.audio, SR, recording.texts, words)
    assert len(spans) == len(TURNS)
    for i, span in enumerate(spans):
        true_start, true_end = recording.speech[i]
        assert true_start - PAD_S - TOLERANCE_S <= span.start <= true_start + TOLERANCE_S, (i, span, true_start)
        assert true_end - TOLERANCE_S <= span.end <= true_end + PAD_S + TOLERANCE_S, (i, span, true_end)
        assert span.method == ASR_ALIGNMENT
        assert 0.5 <= span.confidence <= 1.0


def test_cuts_lie_inside_the_pause_between_turns(recording, words):
    for b, boundary in enumerate(find_boundaries(recording.audio, SR, recording.texts, words)):
        gap_start, gap_end = recording.gap(b)
        assert gap_start - TOLERANCE_S <= boundary.time <= gap_end + TOLERANCE_S, (b, boundary, (gap_start, gap_end))


def test_without_words_silence_fallback_takes_the_longest_pauses():
    """No ASR words at all: the N-1 longest pauses become the cuts, here the real turn gaps."""
    rec = _join(TURNS, (1.2, 1.4, 1.3), inner_pause_s=0.3)
    boundaries = find_boundaries(rec.audio, SR, rec.texts, [])
    assert [b.method for b in boundaries] == [SILENCE] * 3
    for b, boundary in enumerate(boundaries):
        gap_start, gap_end = rec.gap(b)
        assert gap_start <= boundary.time <= gap_end
        assert boundary.confidence > 0.5  # the turn gaps are far longer than any pause inside a turn


def test_silence_fallback_is_wrong_where_alignment_is_right(recording, words):
    """The long pause inside turn 1 outlasts every turn gap: pauses alone misplace a cut, the alignment does not."""
    from_silence = find_boundaries(recording.audio, SR, recording.texts, [])
    inner_pause_hit = [not (recording.gap(b)[0] <= x.time <= recording.gap(b)[1]) for b, x in enumerate(from_silence)]
    assert any(inner_pause_hit)
    assert max(x.confidence for x in from_silence) < 0.5
    aligned = find_boundaries(recording.audio, SR, recording.texts, words)
    assert all(x.method == ASR_ALIGNMENT for x in aligned)


def test_low_confidence_boundary_falls_back_to_silence(recording, words):
    """Words of another text align badly: every boundary is re-placed by silence detection."""
    unrelated = [Word(f"zz{i}", w.start, w.end, w.probability) for i, w in enumerate(words)]
    boundaries = find_boundaries(recording.audio, SR, recording.texts, unrelated)
    assert [b.method for b in boundaries] == [SILENCE] * 3


def test_cut_snaps_to_the_silence_even_when_word_times_are_off():
    """Noise bursts with hand-made word times that overlap the pause by 0.1 s: the cut is still in the pause."""
    rng = np.random.default_rng(0)
    burst = (0.3 * rng.standard_normal(SR)).astype(np.float32)
    audio = concatenate_turns([burst, burst], [0.4], SR)  # pause 1.0-1.4 s
    words = [Word("hello", 0.0, 1.1, 1.0), Word("there", 1.3, 2.4, 1.0)]
    settings = SegmentationSettings(search_margin_s=0.3)
    (boundary,) = find_boundaries(audio, SR, ["hello", "there"], words, settings)
    assert 1.0 <= boundary.time <= 1.4
    assert boundary.confidence == 1.0 and boundary.method == ASR_ALIGNMENT
    first, second = segment_turns(audio, SR, ["hello", "there"], words, settings)
    assert first.end == pytest.approx(1.0 + PAD_S, abs=0.03) and second.start == pytest.approx(1.4 - PAD_S, abs=0.03)


def test_single_turn_has_no_boundary():
    audio = np.ones(SR, dtype=np.float32) * 0.1
    assert find_boundaries(audio, SR, ["just one turn"], []) == []
    (span,) = segment_turns(audio, SR, ["just one turn"], [])
    assert span.start == 0.0 and span.end == pytest.approx(1.0, abs=0.01)
