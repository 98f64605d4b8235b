"""Turn segmentation of a whole-dialogue recording: where one turn ends and the next begins.

Pure functions: a waveform, its sample rate, the known turn texts and ASR word timestamps go in; one
`TurnSpan` per turn comes out. Nothing is read, written or transcribed here.

Method
1. Alignment: the ASR words and the concatenated turn texts, both normalized (`asr.normalize_text`),
   are aligned by a word-level edit-distance DP (monotonic). For the boundary after turn i, the last
   recognized word of turn i and the first of turn i+1 delimit a search window (widened by
   `search_margin_s`, never past the middle of those words, since Whisper word times are approximate).
2. Snapping: the cut is placed at the lowest point of the smoothed frame energy inside that window,
   i.e. in the middle of the pause between the turns.
3. Confidence of an aligned boundary: the fraction of the `context_words` reference words on each side
   of it (2 x context_words in all, fewer for shorter turns) that the ASR recognized exactly; halved
   when no frame inside the window is silent (the cut then goes through speech).
4. Fallback: boundaries under `min_confidence` are re-placed by silence detection. Between the
   neighbouring confident boundaries (or the file ends), the m longest pauses are taken, in time order,
   for the m unconfident boundaries there (with no confident boundary at all: the N-1 longest pauses
   of the file). Their confidence is how clearly the chosen pauses stand out: 1 - (longest pause not
   chosen / shortest pause chosen), clipped to [0, 1]. With too few pauses the aligned estimate stays.
5. Each turn's span is its segment between two cuts, trimmed of leading and trailing silence (with
   `trim_pad_s` kept), so that `start`/`end` are the speech extent and the gaps are the real pauses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lalm_judge.audio.asr import Word, normalize_text

ASR_ALIGNMENT = "asr_alignment"
SILENCE = "silence"
_FRAME_S = 0.01
# Edit costs: a substitution is cheaper than a deletion plus an insertion, yet among equally short edit
# paths the one with more exact matches wins (3 substitutions cost more than deletion+match+insertion).
_SUB, _INDEL = 3, 2


@dataclass(frozen=True)
class SegmentationSettings:
    min_confidence: float = 0.5
    context_words: int = 3
    search_margin_s: float = 0.25
    # Moving-average length of the energy curve: longer than a stop closure, shorter than a turn pause.
    smooth_s: float = 0.1
    # A frame is silent when its energy is this many dB below the loud (95th percentile) frames.
    silence_db: float = 35.0
    min_pause_s: float = 0.15
    # Kept around the speech at a trimmed turn edge: Whisper drops a final stop consonant without it.
    trim_pad_s: float = 0.15


@dataclass(frozen=True)
class Boundary:
    """The cut between turn i and turn i+1, in seconds of the recording."""

    time: float
    method: str
    confidence: float


@dataclass(frozen=True)
class TurnSpan:
    start: float
    end: float
    method: str
    confidence: float


@dataclass(frozen=True)
class _Energy:
    """Frame energy in dB (one value per 10 ms frame), smoothed for finding pauses and raw for trimming
    turn edges precisely, and the silence threshold."""

    db: np.ndarray
    raw_db: np.ndarray
    silent_below: float

    @classmethod
    def of(cls, audio: np.ndarray, sample_rate: int, settings: SegmentationSettings) -> _Energy:
        hop = max(1, round(_FRAME_S * sample_rate))
        n = max(1, len(audio) // hop)
        padded = np.zeros(n * hop, dtype=np.float64)
        padded[: min(len(audio), n * hop)] = audio[: n * hop]
        power = np.mean(padded.reshape(n, hop) ** 2, axis=1)
        width = max(1, round(settings.smooth_s / _FRAME_S))
        smoothed = np.convolve(power, np.ones(width) / width, mode="same")
        db = 10 * np.log10(smoothed + 1e-12)
        return cls(db, 10 * np.log10(power + 1e-12), float(np.percentile(db, 95)) - settings.silence_db)

    @property
    def duration(self) -> float:
        return len(self.db) * _FRAME_S

    def frame(self, seconds: float) -> int:
        return int(np.clip(round(seconds / _FRAME_S), 0, len(self.db) - 1))

    def quietest(self, lo_s: float, hi_s: float) -> tuple[float, bool]:
        """Time of the lowest energy in [lo_s, hi_s] (centre of the quietest stretch) and whether it is silent."""
        lo, hi = self.frame(lo_s), self.frame(hi_s)
        if hi < lo:
            lo, hi = hi, lo
        window = self.db[lo : hi + 1]
        near_min = window <= window.min() + 0.5
        # Several near-equal minima (digital silence): take the middle of the run holding the first one.
        first = int(np.argmax(near_min))
        run = int(np.argmin(near_min[first:])) if not near_min[first:].all() else len(window) - first
        best = lo + first + (run - 1) // 2
        return best * _FRAME_S, bool(self.db[best] < self.silent_below)

    def pauses(self, min_pause_s: float) -> list[tuple[float, float]]:
        """(start, end) of interior silent runs of at least `min_pause_s` (leading/trailing silence excluded)."""
        silent = self.db < self.silent_below
        edges = np.flatnonzero(np.diff(np.concatenate(([0], silent.astype(np.int8), [0]))))
        runs = []
        for begin, end in zip(edges[::2], edges[1::2]):
            if begin == 0 or end == len(silent):
                continue
            if (end - begin) * _FRAME_S >= min_pause_s:
                runs.append((begin * _FRAME_S, end * _FRAME_S))
        return runs


def _tokens(text: str) -> list[str]:
    return normalize_text(text).split()


def align_words(reference: Sequence[str], hypothesis: Sequence[str]) -> list[int | None]:
    """Monotonic edit-distance alignment; for each reference token the index of the hypothesis token
    aligned to it (exact match or substitution), or None when it was deleted."""
    n, m = len(reference), len(hypothesis)
    cost = np.zeros((n + 1, m + 1), dtype=np.int64)
    cost[:, 0] = np.arange(n + 1) * _INDEL
    cost[0, :] = np.arange(m + 1) * _INDEL
    for i in range(1, n + 1):
        ref = reference[i - 1]
        row, prev = cost[i], cost[i - 1]
        for j in range(1, m + 1):
            row[j] = min(prev[j - 1] + _SUB * (ref != hypothesis[j - 1]), prev[j] + _INDEL, row[j - 1] + _INDEL)
    aligned: list[int | None] = [None] * n
    i, j = n, m
    while i > 0 and j > 0:
        if cost[i, j] == cost[i - 1, j - 1] + _SUB * (reference[i - 1] != hypothesis[j - 1]):
            aligned[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif cost[i, j] == cost[i - 1, j] + _INDEL:
            i -= 1
        else:
            j -= 1
    return aligned


def _aligned_boundaries(
    turn_texts: Sequence[str], words: Sequence[Word], energy: _Energy, settings: SegmentationSettings
) -> list[Boundary]:
    ref_tokens, ref_turn = [], []
    for turn, text in enumerate(turn_texts):
        tokens = _tokens(text)
        ref_tokens += tokens
        ref_turn += [turn] * len(tokens)
    hyp_tokens, hyp_word = [], []
    for index, word in enumerate(words):
        for token in _tokens(word.text):
            hyp_tokens.append(token)
            hyp_word.append(index)
    aligned = align_words(ref_tokens, hyp_tokens)
    exact = [h is not None and hyp_tokens[h] == r for r, h in zip(ref_tokens, aligned)]
    ref_turn_arr = np.asarray(ref_turn)

    boundaries = []
    for turn in range(len(turn_texts) - 1):
        left = np.flatnonzero(ref_turn_arr == turn)
        right = np.flatnonzero(ref_turn_arr == turn + 1)
        k = settings.context_words
        context = list(left[-k:]) + list(right[:k])
        matched = sum(exact[i] for i in context) / len(context) if context else 0.0
        left_hits = [aligned[i] for i in left if aligned[i] is not None]
        right_hits = [aligned[i] for i in right if aligned[i] is not None]
        if not left_hits or not right_hits or right_hits[0] <= left_hits[-1]:
            # Unplaceable: guess from the share of the text spoken so far; silence detection replaces it.
            share = (left[-1] + 1) / len(ref_tokens) if len(left) else (turn + 1) / len(turn_texts)
            boundaries.append(Boundary(share * energy.duration, ASR_ALIGNMENT, 0.0))
            continue
        last, first = words[hyp_word[left_hits[-1]]], words[hyp_word[right_hits[0]]]
        lo = max((last.start + last.end) / 2, last.end - settings.search_margin_s)
        hi = min((first.start + first.end) / 2, first.start + settings.search_margin_s)
        if hi <= lo:
            lo, hi = (last.start + last.end) / 2, (first.start + first.end) / 2
        time, silent = energy.quietest(lo, hi)
        boundaries.append(Boundary(time, ASR_ALIGNMENT, matched if silent else matched / 2))
    return boundaries


def _silence_fallback(
    boundaries: list[Boundary], energy: _Energy, duration: float, settings: SegmentationSettings
) -> list[Boundary]:
    pauses = energy.pauses(settings.min_pause_s)
    result = list(boundaries)
    anchors = [i for i, b in enumerate(boundaries) if b.confidence >= settings.min_confidence]
    stretches, previous = [], -1
    for anchor in [*anchors, len(boundaries)]:
        if anchor - previous > 1:
            stretches.append(list(range(previous + 1, anchor)))
        previous = anchor
    for weak in stretches:
        lo = boundaries[weak[0] - 1].time if weak[0] > 0 else 0.0
        hi = boundaries[weak[-1] + 1].time if weak[-1] + 1 < len(boundaries) else duration
        inside = [p for p in pauses if lo < (p[0] + p[1]) / 2 < hi]
        if len(inside) < len(weak):
            continue
        by_length = sorted(inside, key=lambda p: p[1] - p[0], reverse=True)
        chosen, rest = by_length[: len(weak)], by_length[len(weak) :]
        shortest = min(p[1] - p[0] for p in chosen)
        longest_rest = max((p[1] - p[0] for p in rest), default=0.0)
        confidence = float(np.clip(1 - longest_rest / shortest, 0.0, 1.0))
        for index, (start, end) in zip(weak, sorted(chosen)):
            result[index] = Boundary(energy.quietest(start, end)[0], SILENCE, confidence)
    return result


def find_boundaries(
    audio: np.ndarray,
    sample_rate: int,
    turn_texts: Sequence[str],
    words: Sequence[Word],
    settings: SegmentationSettings | None = None,
) -> list[Boundary]:
    """The N-1 cuts between N turns, in time order (see the module docstring for the method)."""
    settings = settings or SegmentationSettings()
    if len(turn_texts) < 2:
        return []
    energy = _Energy.of(audio, sample_rate, settings)
    boundaries = _aligned_boundaries(turn_texts, words, energy, settings)
    if any(b.confidence < settings.min_confidence for b in boundaries):
        boundaries = _silence_fallback(boundaries, energy, len(audio) / sample_rate, settings)
    # Keep cuts in time order even where two windows overlap (a one-word turn).
    ordered, floor = [], 0.0
    for boundary in boundaries:
        floor = max(floor, boundary.time)
        ordered.append(Boundary(floor, boundary.method, boundary.confidence))
    return ordered


def _trim(energy: _Energy, start: float, end: float, pad_s: float) -> tuple[float, float]:
    lo, hi = energy.frame(start), energy.frame(end)
    active = np.flatnonzero(energy.raw_db[lo:hi] >= energy.silent_below)
    if len(active) == 0:
        return start, end
    return max(start, (lo + active[0]) * _FRAME_S - pad_s), min(end, (lo + active[-1] + 1) * _FRAME_S + pad_s)


def spans_from_boundaries(
    audio: np.ndarray, sample_rate: int, boundaries: Sequence[Boundary], settings: SegmentationSettings | None = None
) -> list[TurnSpan]:
    """One span per turn between consecutive cuts, trimmed to its speech. A turn's method is 'silence' if
    either of its cuts came from silence detection; its confidence is the lower of its two cuts'."""
    settings = settings or SegmentationSettings()
    energy = _Energy.of(audio, sample_rate, settings)
    duration = len(audio) / sample_rate
    edges = [Boundary(0.0, ASR_ALIGNMENT, 1.0), *boundaries, Boundary(duration, ASR_ALIGNMENT, 1.0)]
    spans = []
    for before, after in zip(edges, edges[1:]):
        start, end = _trim(energy, before.time, after.time, settings.trim_pad_s)
        method = SILENCE if SILENCE in (before.method, after.method) else ASR_ALIGNMENT
        spans.append(
            TurnSpan(round(start, 3), round(end, 3), method, round(min(before.confidence, after.confidence), 3))
        )
    return spans


def segment_turns(
    audio: np.ndarray,
    sample_rate: int,
    turn_texts: Sequence[str],
    words: Sequence[Word],
    settings: SegmentationSettings | None = None,
) -> list[TurnSpan]:
    """Spans of the N turns of a whole-dialogue recording, from the turn texts and ASR word timestamps."""
    boundaries = find_boundaries(audio, sample_rate, turn_texts, words, settings)
    return spans_from_boundaries(audio, sample_rate, boundaries, settings)
