"""The controls at judge time: the samples a judge job scores under each condition of its cells, and their audio.

`ShardConditions` holds what a judge job of one shard needs for its control cells: the shard's manifests, the
ASR of the target turns under each condition (`lalm_judge.manifest.conditions.transcribe_conditions`, listed in
the shard index), the `controls` settings and the seed. Per condition it gives the samples
(`lalm_judge.manifest.conditions.condition_samples`, with their transcripts under the condition) and an audio
loader that assembles each sample's dialogue with its target turn as the condition makes it, from the same
function, settings and seed as the ASR of that turn, so the judge hears what was transcribed. Babble is made of
the original turns of the shard's other dialogues.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lalm_judge.audio.controls import ControlSettings
from lalm_judge.core.vocabulary import BABBLE, Condition
from lalm_judge.judging.cell import AudioLoader
from lalm_judge.judging.windows import turn_windows
from lalm_judge.manifest.build import read_condition_asr_index, read_shard_index
from lalm_judge.manifest.conditions import (
    ConditionSample,
    babble_pool,
    condition_samples,
    condition_waveform,
    read_condition_transcripts,
)
from lalm_judge.manifest.samples import Manifest, Sample


@dataclass
class ShardConditions:
    manifests: Sequence[Manifest]
    settings: ControlSettings
    seed: int
    # (ASR model, dialogue) -> condition ASR table (`manifest.build.read_condition_asr_index`).
    transcript_tables: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # The dialogues the controls are scored on (`controls.dialogues`); None = every dialogue of the shard.
    dialogues: Collection[str] | None = None
    # The control conditions of the judge's cells (anything but 'clean').
    control_conditions: Collection[str] = ()
    _pools: dict[str, list[np.ndarray]] = field(default_factory=dict, init=False, repr=False)

    def conditions(self) -> list[str]:
        """The control conditions these inputs serve, validated."""
        return [Condition(c) for c in self.control_conditions]

    def transcripts(self, condition: str) -> dict[str, dict[str, str]]:
        """ASR source -> sample id -> transcript of its target turn under `condition` (every dialogue's table)."""
        out: dict[str, dict[str, str]] = {}
        for (asr, _), path in sorted(self.transcript_tables.items()):
            for source, texts in read_condition_transcripts({asr: path}, condition).items():
                out.setdefault(source, {}).update(texts)
        return out

    def samples(self, condition: str) -> list[ConditionSample]:
        """The samples of the shard's control dialogues under `condition`, manifest by manifest."""
        transcripts = self.transcripts(condition)
        manifests = [m for m in self.manifests if self.dialogues is None or m.dialogue_id in self.dialogues]
        return [item for manifest in manifests for item in condition_samples(manifest, condition, transcripts)]

    def babble_pool(self, dialogue_id: str) -> list[np.ndarray]:
        """The original turns of the shard's other dialogues (`manifest.conditions.babble_pool`, once per dialogue)."""
        if dialogue_id not in self._pools:
            self._pools[dialogue_id] = babble_pool(self.manifests, dialogue_id)
        return self._pools[dialogue_id]

    def audio_loader(self, condition: str, items: Sequence[ConditionSample]) -> AudioLoader:
        """An AudioLoader for the samples of `items` (`samples(condition)`): each sample's dialogue with its target
        turn under the condition, at the requested rate, with its turn windows."""
        by_id = {item.sample.sample_id: item for item in items}
        babble = Condition(condition).kind == BABBLE

        def load(sample: Sample, sample_rate: int):
            item = by_id[sample.sample_id]
            pool = self.babble_pool(sample.dialogue_id) if babble else ()
            assembled = condition_waveform(item, sample_rate, self.settings, self.seed, pool)
            return assembled.waveform, turn_windows(assembled.turn_bounds)

        return load


def shard_conditions(
    shard_index: str,
    control_conditions: Sequence[str],
    controls: Mapping[str, Any],
    dialogues: Collection[str] | None,
    seed: int,
) -> ShardConditions | None:
    """The control inputs of a judge job from its shard index (manifests, condition ASR tables) and the
    `controls` settings; None for a judge without control conditions."""
    if not control_conditions:
        return None
    return ShardConditions(
        [Manifest.load(path) for path in read_shard_index(shard_index)],
        ControlSettings.from_config(controls),
        seed=seed,
        transcript_tables=read_condition_asr_index(shard_index),
        dialogues=dialogues,
        control_conditions=control_conditions,
    )
