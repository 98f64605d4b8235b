"""Judge-time conditions: every condition the config accepts has a transform, and `clean` changes nothing."""

import numpy as np

from lalm_judge.core.vocabulary import CONDITIONS
from lalm_judge.judging.conditions import CONDITION_TRANSFORMS
from lalm_judge.judging.windows import Window
from lalm_judge.manifest.samples import Sample


def test_every_accepted_condition_has_a_transform():
    assert tuple(CONDITION_TRANSFORMS) == CONDITIONS


def test_clean_returns_the_sample_and_its_audio_unchanged():
    sample = Sample("d.original", "d", None, 0, None, ("A",), ("a.wav",), (), 16000, {"gt": ("hi",)})
    audio = (np.ones(10, np.float32), [Window((0,), 0, 10)])
    assert CONDITION_TRANSFORMS["clean"](sample, audio, 16000) == (sample, audio)
    assert CONDITION_TRANSFORMS["clean"](sample, None, 16000) == (sample, None)
