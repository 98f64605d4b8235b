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
