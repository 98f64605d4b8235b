"""Where the tests find the real DeepDialogue samples: `../shared/data/deepdialogue` beside the repository, or the
folder named by LALM_JUDGE_DEEPDIALOGUE. They are third-party data (CC BY-NC-SA 4.0) and never copied here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


def deepdialogue_dir() -> Path | None:
    shared = REPOSITORY.parent / "shared" / "data" / "deepdialogue"
    if shared.is_dir():
        return shared
    env = os.environ.get("LALM_JUDGE_DEEPDIALOGUE")
    return Path(env) if env and Path(env).is_dir() else None


DEEPDIALOGUE = deepdialogue_dir()
needs_deepdialogue = pytest.mark.skipif(
    DEEPDIALOGUE is None,
    reason="DeepDialogue samples not found: expected ../shared/data/deepdialogue beside the repository "
    "or a folder named by LALM_JUDGE_DEEPDIALOGUE",
)


def write_ravdess(root: Path, actors=(1, 2, 3, 4), seconds: float = 0.05, skip: tuple[str, ...] = ()) -> Path:
    """A small folder laid out like RAVDESS's Audio_Speech_Actors_01-24.zip, written by the test (RAVDESS itself is
    third-party data and never copied here): `Actor_NN/03-01-EE-II-SS-RR-NN.wav` for every emotion, intensity (no
    strong neutral, as in RAVDESS), statement and repetition, each a short tone whose pitch encodes the file; beside
    them a song file and an audio-visual-coded file of the same actor, which are not speech references. `skip`: file
    names left out (an incomplete actor)."""
    import numpy as np
    import soundfile as sf

    rate = 16000
    t = np.arange(int(seconds * rate)) / rate
    for actor in actors:
        folder = root / f"Actor_{actor:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        names = [f"01-01-03-02-01-01-{actor:02d}.wav", f"03-02-03-02-01-01-{actor:02d}.wav"]
        for emotion in range(1, 9):
            for intensity in (1,) if emotion == 1 else (1, 2):
                for statement in (1, 2):
                    for repetition in (1, 2):
                        names.append(
                            f"03-01-{emotion:02d}-{intensity:02d}-{statement:02d}-{repetition:02d}-{actor:02d}.wav"
                        )
        for i, name in enumerate(n for n in names if n not in skip):
            sf.write(folder / name, 0.1 * np.sin(2 * np.pi * (200 + i) * t), rate)
    return root
