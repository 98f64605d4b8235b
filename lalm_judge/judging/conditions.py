"""Judge-time conditions: what a cell's condition does to a sample before its requests are built.

A condition is one more dimension of the judge cell, applied in the judge job where requests are built
(`lalm_judge.judging.job`): for every sample the job assembles the dialogue audio once, then calls each
condition's transform once, and every cell of that condition cuts its long-audio windows from the result. A
transform receives the sample and its `DialogueAudio` (None for text cells, which get no audio) with the sample
rate, and returns the sample and audio the requests are built from: an audio control (time-reversed turn,
added noise, silence) changes the waveform and keeps the turn windows; a control that changes what is said
(an injected turn) returns a sample with other texts and audio with other windows. The score row keeps the
original sample's ids. Transforms must be deterministic: the request cache keys requests by their exact
inputs, so a condition that leaves a cell's inputs unchanged (an audio control in a text cell) shares the
clean cell's cached answers, and any other change is a new request.

`clean` is the transform here (`lalm_judge.core.vocabulary.CONDITIONS`). The controls (masked, noise, silence,
the TTS control, the injection) score samples of their own, e.g. the original with one turn masked per target
turn, so they are not per-sample transforms: `lalm_judge.judging.controls.ShardConditions` gives their samples
and the audio loader that changes the target turn, and the job scores them with this identity.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lalm_judge.judging.windows import Window
from lalm_judge.manifest.samples import Sample

# The assembled waveform of a sample and its turn windows (`cell.dialogue_audio`).
DialogueAudio = tuple[np.ndarray, list[Window]]
ConditionTransform = Callable[[Sample, DialogueAudio | None, int], tuple[Sample, DialogueAudio | None]]


def clean(sample: Sample, audio: DialogueAudio | None, sample_rate: int) -> tuple[Sample, DialogueAudio | None]:
    """The sample as recorded."""
    return sample, audio


CONDITION_TRANSFORMS: dict[str, ConditionTransform] = {"clean": clean}
