import numpy as np
import pytest

from lalm_judge.audio.controls import ControlSettings, snr_db
from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.tables import CONDITION_ASR
from lalm_judge.judging.controls import ShardConditions
from lalm_judge.manifest.conditions import babble_pool, condition_waveform, target_turn_audio
from lalm_judge.manifest.samples import Manifest, assemble_waveform
from tests.manifest.test_conditions import SR, tone, write_manifest

SETTINGS = ControlSettings()


@pytest.fixture
def shard(tmp_path):
    manifests = []
    for k, dialogue_id in enumerate(["a", "b"]):
        root = tmp_path / dialogue_id
        root.mkdir()
        clips = []
        for i in range(3):
            clips.append(root / f"t{i}.wav")
            write_wav(clips[-1], tone(0.4 + 0.1 * i, 200 + 50 * i + 300 * k), SR)
        variants = {(1, 1): root / "v.wav"}
        write_wav(variants[(1, 1)], tone(0.6, 900), SR)
        manifests.append(Manifest.load(write_manifest(root, clips, variants, dialogue_id=dialogue_id)))
    table = tmp_path / "masked_a.parquet"
    CONDITION_ASR.frame(
        [{"sample_id": "a.t1.hate.s1", "turn_index": 1, "text": "garbled", "condition": "masked"}]
    ).write_parquet(table)
    return ShardConditions(manifests, SETTINGS, seed=3, transcript_tables={("tiny", "a"): str(table)})


def test_the_samples_of_a_condition_carry_its_transcripts(shard):
    items = shard.samples("masked")
    assert [i.sample.sample_id for i in items] == ["a.t1.original", "a.t1.hate.s1", "b.t1.original", "b.t1.hate.s1"]
    assert items[1].sample.transcript("asr:tiny")[1] == ("B", "garbled")
    assert shard.transcripts("noise_10") == {}


@pytest.mark.parametrize("condition", ["masked", "noise_5", "babble_0", "silence"])
def test_the_judge_hears_the_target_turn_the_asr_stage_transcribed(shard, condition):
    items = shard.samples(condition)
    load = shard.audio_loader(condition, items)
    item = items[1]  # a.t1.hate.s1
    heard, windows = load(item.sample, SR)
    pool = babble_pool(shard.manifests, "a") if condition.startswith("babble") else ()
    # What the ASR stage transcribes: the target turn alone, from the same function, settings and seed.
    transcribed = target_turn_audio(item, SETTINGS, 3, pool)[1]
    start, end = windows[1].start, windows[1].end
    assert np.array_equal(heard[start:end], transcribed)
    assert np.array_equal(heard, condition_waveform(item, SR, SETTINGS, 3, pool).waveform)
    clean = assemble_waveform(item.sample).waveform
    assert np.array_equal(heard[:start], clean[:start]) and np.array_equal(heard[end:], clean[end:])
    if condition == "babble_0":
        assert abs(snr_db(clean[start:end], heard[start:end].astype(np.float64) - clean[start:end])) < 0.1


def test_babble_is_made_of_the_other_dialogues_of_the_shard(shard):
    pool = shard.babble_pool("a")
    assert len(pool) == 3 and all(len(c) for c in pool)
    assert [len(c) for c in pool] == [len(c) for c in babble_pool(shard.manifests, "a")]
    assert shard.babble_pool("a") is pool  # read once per dialogue


def test_only_the_control_dialogues_are_scored_under_a_condition(shard):
    shard.dialogues = {"b"}
    assert [i.sample.sample_id for i in shard.samples("silence")] == ["b.t1.original", "b.t1.hate.s1"]
    assert len(shard.babble_pool("b")) == 3  # babble still comes from every other dialogue of the shard
