"""Checks of a corpus audio file that need only its header and size: that it holds the frames its header promises
and lasts long enough to be a turn. They run when the corpus is listed, before any job, so they read a few bytes
of each file, never its samples (ingest decodes the samples and rejects empty or non-finite ones:
`waveform.read_audio`)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import soundfile as sf

# A turn's audio lasts at least this long: shorter clips hold no word (a one-sample clip used to pass unnoticed).
MIN_AUDIO_MS = 100
# The data chunk size a streaming writer leaves when it cannot seek back to fill it in: the length is unknown.
_UNKNOWN_SIZE = (0, 0xFFFFFFFF)


def _wav_frames(path: Path) -> tuple[int, int, int] | None:
    """(frames the header promises, frames the file holds, sample rate) of a RIFF/WAVE file; None when the file is
    not a plain RIFF WAVE (RF64, another container) or its header is not complete enough to say."""
    size = path.stat().st_size
    with open(path, "rb") as stream:
        head = stream.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        position, rate, block_align = 12, None, None
        while position + 8 <= size:
            stream.seek(position)
            chunk_id, chunk_size = struct.unpack("<4sI", stream.read(8))
            if chunk_id == b"fmt ":
                fmt = stream.read(16)
                if len(fmt) < 16:
                    return None
                _, _, rate, _, block_align, _ = struct.unpack("<HHIIHH", fmt)
            elif chunk_id == b"data":
                if not rate or not block_align or chunk_size in _UNKNOWN_SIZE:
                    return None
                held = (size - position - 8) // block_align
                return chunk_size // block_align, held, rate
            position += 8 + chunk_size + (chunk_size & 1)
    return None


def audio_file_problem(path: str | os.PathLike) -> str | None:
    """Why the file cannot be a turn's audio (missing, not audio, cut short, too short), or None."""
    path = Path(path)
    if not path.is_file():
        return "does not exist" if not path.exists() else "is not a file"
    try:
        frames = _wav_frames(path)
        if frames is None:
            info = sf.info(str(path))
            frames = (info.frames, info.frames, info.samplerate)
    except (OSError, RuntimeError, struct.error) as err:  # soundfile raises LibsndfileError, a RuntimeError
        return f"is not a readable audio file ({err})"
    promised, held, rate = frames
    if held < promised:
        return (
            f"holds {held} frames but its header promises {promised} ({held / rate:.2f} s of {promised / rate:.2f} s): "
            "the file was cut short (an interrupted copy or download?); copy it again"
        )
    if held * 1000 < MIN_AUDIO_MS * rate:
        return (
            f"lasts {1000 * held / rate:.1f} ms ({held} frames at {rate} Hz); a turn's audio lasts at least "
            f"{MIN_AUDIO_MS} ms"
        )
    return None
