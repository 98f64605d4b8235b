import json

import numpy as np
import pytest
import soundfile as sf

from lalm_judge.training.records import audio_cut, describe_counts, read_dataset, stage_records
from lalm_judge.training.settings import DatasetSource, StageSettings, TrainingError
from tests.training.conftest import SAMPLE_RATE


def source(data, name="semantic"):
    return DatasetSource(name=name, records=(str(data[name]),), audio_root=str(data["audio_root"]))


def rewrite(path, change):
    records = json.loads(path.read_text())
    change(records[1])
    path.write_text(json.dumps(records))


def test_records_are_read_with_their_audio_resolved(training_data):
    records = read_dataset(source(training_data))
    assert [r.label for r in records] == ["1", "2", "Tie", "1"]
    assert records[0].user.count("<audio>") == 2
    assert all(path.startswith(str(training_data["audio_root"])) for path in records[0].audios)
    assert describe_counts(records) == {"semantic": {"1": 2, "2": 1, "Tie": 1}}


def test_a_non_empty_input_joins_the_user_turn(training_data):
    rewrite(training_data["semantic"], lambda r: r.update(input="Keep it short."))
    assert read_dataset(source(training_data))[1].user.endswith("\n\nKeep it short.")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.update(output="Response 1 is better."), "its first line must be exactly 1, 2 or Tie"),
        (lambda r: r.update(output=""), "needs its output: the label"),
        (lambda r: r.update(audios=r["audios"][:1]), "2 <audio> placeholders for 1 audios"),
        (lambda r: r.update(audios=["gone.wav", r["audios"][1]]), "gone.wav does not exist"),
        (lambda r: r.update(audios=["../semantic.json", r["audios"][1]]), "leaves the audio root"),
        (lambda r: r.update(audios=["out/semantic-0-1.wav", r["audios"][1]]), "through a symbolic link, outside"),
        (lambda r: r.pop("instruction"), "non-empty string 'instruction'"),
    ],
)
def test_a_bad_record_is_named_with_its_file_and_index(training_data, change, message):
    outside = training_data["audio_root"].parent / "elsewhere"
    outside.mkdir()
    (outside / "semantic-0-1.wav").write_bytes((training_data["audio_root"] / "semantic-0-1.wav").read_bytes())
    (training_data["audio_root"] / "out").symlink_to(outside, target_is_directory=True)
    rewrite(training_data["semantic"], change)
    with pytest.raises(TrainingError, match=message) as error:
        read_dataset(source(training_data))
    assert f"{training_data['semantic']} record 1" in str(error.value)


def test_a_stage_draws_its_share_of_each_dataset_deterministically(training_data):

    datasets = {name: read_dataset(source(training_data, name)) for name in ("semantic", "acoustic")}
    stage = StageSettings(name="acoustic", mix={"acoustic": 1, "semantic": 0.5}, hyperparameters=None)
    chosen = stage_records(stage, datasets, seed=0)
    assert chosen == stage_records(stage, datasets, seed=0)
    assert describe_counts(chosen)["acoustic"] == {"1": 1, "2": 1}
    semantic = [r for r in chosen if r.dataset == "semantic"]
    assert len(semantic) == 2
    # Kept in source order.
    assert semantic == sorted(semantic, key=datasets["semantic"].index)
    draws = {
        tuple(r.source for r in stage_records(stage, datasets, seed=s) if r.dataset == "semantic") for s in range(8)
    }
    assert len(draws) > 1


def test_clips_over_the_limit_are_counted(training_data):
    long_clip = training_data["audio_root"] / "semantic-0-1.wav"
    sf.write(long_clip, np.zeros(3 * SAMPLE_RATE, dtype=np.float32), SAMPLE_RATE)
    cut = audio_cut(read_dataset(source(training_data)), limit_s=2.0)
    assert (cut.n_clips, cut.n_cut, cut.longest_s) == (8, 1, 3.0)
