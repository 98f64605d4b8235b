"""Long-audio policies: what a judge with an audio limit (`max_audio_s`) is sent of a longer dialogue.

- `chunk`: the dialogue is split at turn boundaries into windows of at most `max_audio_s` (a single turn
  longer than that is cut into pieces); each window is scored (with the transcript of its turns in the
  audio_text modality) -> action 'chunked:<n windows>'; `lalm_judge.judging.cell` combines the windows;
- `truncate`: only the first `max_audio_s` seconds are sent (the transcript stays whole) -> 'truncated';
- `skip`: nothing is sent -> 'skipped' (the row's status is `skipped_long_audio`).
Audio within the limit, or the text modality, -> 'none'. The action is recorded in every score row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lalm_judge.core.vocabulary import LONG_AUDIO_POLICIES


@dataclass(frozen=True)
class Window:
    """A span [start, end) of a waveform (in samples) and the turns it covers."""

    turn_indices: tuple[int, ...]
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class AudioPlan:
    """What the long-audio policy does with one sample: its action label and the windows to score."""

    action: str
    windows: tuple[Window, ...]

    @property
    def chunked(self) -> bool:
        return self.action.startswith("chunked")


def turn_windows(turn_bounds: Sequence[tuple[int, int]]) -> list[Window]:
    """One window per turn from its (start, end) sample offsets."""
    return [Window((i,), start, end) for i, (start, end) in enumerate(turn_bounds)]


def chunk_windows(segments: Sequence[Window], max_samples: int) -> tuple[Window, ...]:
    """Group consecutive segments (turns) into windows spanning at most `max_samples`; cut longer segments."""
    windows: list[Window] = []
    group: list[Window] = []

    def close_group() -> None:
        if group:
            turns = tuple(i for segment in group for i in segment.turn_indices)
            windows.append(Window(turns, group[0].start, group[-1].end))
            group.clear()

    for segment in segments:
        if segment.length > max_samples:
            close_group()
            windows.extend(
                Window(segment.turn_indices, start, min(start + max_samples, segment.end))
                for start in range(segment.start, segment.end, max_samples)
            )
            continue
        if group and segment.end - group[0].start > max_samples:
            close_group()
        group.append(segment)
    close_group()
    return tuple(windows)


def plan_long_audio(
    segments: Sequence[Window], n_samples: int, sample_rate: int, max_audio_s: float | None, policy: str
) -> AudioPlan:
    """Apply a long-audio policy to a waveform of `n_samples` whose turns are `segments`."""
    if policy not in LONG_AUDIO_POLICIES:
        raise ValueError(f"unknown long_audio policy {policy!r}; use one of {LONG_AUDIO_POLICIES}")
    everything = Window(tuple(i for s in segments for i in s.turn_indices), 0, n_samples)
    max_samples = None if max_audio_s is None else int(round(max_audio_s * sample_rate))
    if max_samples is None or n_samples <= max_samples:
        return AudioPlan("none", (everything,))
    if policy == "chunk":
        windows = chunk_windows(segments, max_samples)
        return AudioPlan(f"chunked:{len(windows)}", windows)
    if policy == "truncate":
        return AudioPlan("truncated", (Window(everything.turn_indices, 0, max_samples),))
    return AudioPlan("skipped", ())
