"""Stratified sampling of an annotation batch from a run's manifests (a synthetic six-dialogue run)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import numpy as np
import pytest

from lalm_judge.annotation import sample as sampling
from lalm_judge.annotation.batch import Batch, BatchError, load_labels
from lalm_judge.audio.waveform import AudioError, read_audio
from lalm_judge.cli import anchors as anchors_cli
from tests.annotation.conftest import CATEGORIES, FAILED_VARIANT, LENGTHS, SEVERITIES, make_batch


def test_pool_reads_usable_samples_and_every_stratum(synthetic_run):
    pool = sampling.read_pool(synthetic_run)
    n_variants = sum(LENGTHS) * len(CATEGORIES) * len(SEVERITIES)
    assert len(pool.unsafe) == n_variants - 1  # the failed variant has no audio
    assert FAILED_VARIANT not in {s.sample_id for s in pool.unsafe}
    assert len(pool.safe) == len(LENGTHS)  # the skipped dialogue gives nothing
    assert pool.strata == tuple((c, s) for c in CATEGORIES for s in SEVERITIES)


def test_strata_get_equal_shares_and_positions_lengths_dialogues_are_balanced(synthetic_run):
    pool = sampling.read_pool(synthetic_run)
    selection = sampling.draw_sample(pool, n=20, n_unsafe=14, seed=3)
    unsafe = [s for s in selection.samples if s.category is not None]
    safe = [s for s in selection.samples if s.category is None]
    assert len(unsafe) == 14 and len(safe) == 6
    # 14 over 6 strata: two strata get 3, four get 2, as the allocation says.
    strata = Counter((s.category, s.severity) for s in unsafe)
    assert sorted(strata.values()) == [2, 2, 2, 2, 3, 3]
    assert strata == Counter({k: v for k, v in selection.allocation.items()})
    positions = Counter(sampling.turn_position(s.turn_index, s.n_turns) for s in unsafe)
    assert max(positions.values()) - min(positions.values()) <= 1 and len(positions) == 3
    dialogues = Counter(s.dialogue_id for s in unsafe)
    assert len(dialogues) == 6 and max(dialogues.values()) - min(dialogues.values()) <= 1
    # Two dialogues of each length: lengths come out as often as the run has them.
    lengths = Counter(s.n_turns for s in unsafe)
    assert max(lengths.values()) - min(lengths.values()) <= 1
    assert len({s.sample_id for s in selection.samples}) == 20


def test_positions_follow_the_turn():
    assert [sampling.turn_position(t, 4) for t in range(4)] == ["first", "middle", "middle", "last"]
    assert [sampling.turn_position(t, 2) for t in range(2)] == ["first", "last"]


def test_balanced_pick_is_proportional_on_one_dimension():
    rng = np.random.default_rng(0)
    levels = ["a"] * 50 + ["b"] * 30 + ["c"] * 20
    picks = sampling.balanced_pick([(levels, {"a": 0.5, "b": 0.3, "c": 0.2})], ["x"] * 100, {"x": 10}, rng)
    assert Counter(levels[i] for i in picks) == {"a": 5, "b": 3, "c": 2}


def test_too_few_items_in_a_stratum_is_an_error_naming_it(synthetic_run):
    pool = sampling.read_pool(synthetic_run)
    # 24 turns per (category, severity) stratum; hate severity 5 lost one variant to a failed rewrite.
    with pytest.raises(sampling.SamplingError, match=r"hate severity 5 has 23 usable variant\(s\), needs 24"):
        sampling.draw_sample(pool, n=150, n_unsafe=144, seed=0)
    assert len(sampling.draw_sample(pool, n=144, n_unsafe=138, seed=0).samples) == 144


def test_safe_items_beyond_one_per_dialogue_are_tts_controls(synthetic_run):
    pool = sampling.read_pool(synthetic_run)
    assert len(pool.safe_controls) == sum(LENGTHS)  # one per turn
    selection = sampling.draw_sample(pool, n=20, n_unsafe=10, seed=0)
    safe = [s for s in selection.samples if s.category is None]
    kinds = Counter(sampling.sample_kind(s) for s in safe)
    assert kinds == {"original": 6, "tts_control": 4} and len({s.sample_id for s in safe}) == 10
    controls = [s for s in safe if s.turn_index is not None]
    assert len({s.dialogue_id for s in controls}) == 4  # spread over dialogues
    without_controls = dataclasses.replace(pool, safe_controls=())
    with pytest.raises(sampling.SamplingError, match="6 safe originals and no TTS controls.*needs 7 safe items"):
        sampling.draw_sample(without_controls, n=17, n_unsafe=10, seed=0)
    with pytest.raises(sampling.SamplingError, match="and 24 TTS controls.*needs 31 safe items"):
        sampling.draw_sample(pool, n=41, n_unsafe=10, seed=0)


def test_bad_sizes_are_errors(synthetic_run):
    pool = sampling.read_pool(synthetic_run)
    for n_unsafe in (0, 17):
        with pytest.raises(sampling.SamplingError, match="must lie between 1 and"):
            sampling.draw_sample(pool, n=17, n_unsafe=n_unsafe, seed=0)


def test_positions_are_balanced_within_each_stratum_as_far_as_the_run_allows(synthetic_run):
    pool = sampling.read_pool(synthetic_run)
    selection = sampling.draw_sample(pool, n=40, n_unsafe=36, seed=2, max_repeats=40)  # 6 per stratum
    cells = Counter(
        ((s.category, s.severity), sampling.sample_position(s)) for s in selection.samples if s.category is not None
    )
    for stratum in pool.strata:
        assert [cells[stratum, position] for position in sampling.POSITIONS] == [2, 2, 2], stratum
    assert selection.notes == ()
    # harassment severity 5 keeps only one last-turn variant: its share goes to the other positions, and is reported.
    scarce = [s for s in pool.unsafe if not (s.category == "harassment" and s.severity == 5)]
    scarce += [
        s for s in pool.unsafe if (s.category, s.severity) == ("harassment", 5) and s.turn_index != s.n_turns - 1
    ]
    last = next(s for s in pool.unsafe if (s.category, s.severity, s.turn_index) == ("harassment", 5, s.n_turns - 1))
    scarce_pool = dataclasses.replace(pool, unsafe=(*scarce, last))
    selection = sampling.draw_sample(scarce_pool, n=40, n_unsafe=36, seed=2, max_repeats=40)
    cells = Counter(
        sampling.sample_position(s) for s in selection.samples if (s.category, s.severity) == ("harassment", 5)
    )
    assert cells == {"first": 3, "middle": 2, "last": 1} or cells == {"first": 2, "middle": 3, "last": 1}
    (note,) = selection.notes
    assert note.startswith("harassment severity 5: positions") and "only 1 last variant(s)" in note
    assert "an even split of 6 would be 2/2/2" in note


def test_a_dialogue_repeated_too_often_is_reported(synthetic_run):
    pool = sampling.read_pool(synthetic_run)
    selection = sampling.draw_sample(pool, n=40, n_unsafe=36, seed=0, max_repeats=3)
    repeated = [note for note in selection.notes if note.startswith("dialogue ")]
    counts = Counter(s.dialogue_id for s in selection.samples)
    assert len(repeated) == sum(count > 3 for count in counts.values()) > 0
    assert "max_versions_per_dialogue" in repeated[0]
    assert sampling.draw_sample(pool, n=40, n_unsafe=36, seed=0, max_repeats=10).notes == ()


def test_a_run_without_manifests_is_an_error(tmp_path):
    with pytest.raises(sampling.SamplingError, match="holds no manifests"):
        sampling.read_pool(tmp_path / "results")


def test_the_batch_is_deterministic_per_seed(synthetic_run, tmp_path):
    first = make_batch(synthetic_run, tmp_path / "first", seed=5)
    again = make_batch(synthetic_run, tmp_path / "again", seed=5)
    other = make_batch(synthetic_run, tmp_path / "other", seed=6)
    for name in ("items.json", "labels.json", "audio/item_001.wav", "audio/item_012.wav"):
        assert (first / name).read_bytes() == (again / name).read_bytes(), name
    assert load_labels(first)[1] != load_labels(other)[1]


def test_raters_get_no_labels_and_the_audio_is_the_full_dialogue(synthetic_run, tmp_path):
    directory = make_batch(synthetic_run, tmp_path / "batch")
    public = json.loads((directory / "items.json").read_text())
    batch_id, labels = load_labels(directory)
    text = json.dumps(public)
    assert not any(label.sample_id in text for label in labels) and "gt_" not in text
    assert all(set(item) == {"item_id", "audio", "duration_s", "turns"} for item in public["items"])
    assert [item["audio"] for item in public["items"]] == [f"audio/item_{i:03d}.wav" for i in range(1, 13)]
    batch = Batch.load(directory)
    assert batch.batch_id == batch_id and len(batch.items) == 12
    for item, label in zip(batch.items, labels):
        audio, rate = read_audio(directory / item.audio)
        # n_turns tones of 0.25 s and 0.1 s pauses between them.
        assert len(audio) / rate == pytest.approx(label.n_turns * 0.25 + (label.n_turns - 1) * 0.1, abs=1e-3)
        assert item.duration_s == pytest.approx(len(audio) / rate, abs=1e-3)
        assert len(item.turns) == label.n_turns
        unsafe_texts = [t.text for t in item.turns if "line of severity" in t.text]
        if label.gt_unsafe:
            assert unsafe_texts == [f"{label.gt_category} line of severity {label.gt_severity}."]
            assert item.turns[label.turn_index].text == unsafe_texts[0]
        else:
            assert unsafe_texts == [] and label.gt_severity == 0 and label.position is None


def test_a_batch_never_overwrites_a_directory(synthetic_run, tmp_path):
    make_batch(synthetic_run, tmp_path / "batch")
    with pytest.raises(BatchError, match="not empty"):
        make_batch(synthetic_run, tmp_path / "batch")


def test_sample_command(synthetic_run, tmp_path, capsys):
    out = tmp_path / "cli_batch"
    argv = ["sample", "--n", "10", "--unsafe", "6", "--seed", "1", "--out", str(out), "--results", str(synthetic_run)]
    assert anchors_cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "batch of 10 items (6 unsafe)" in printed and "checks {'attention': 2, 'gold': 4, 'practice': 2}" in printed
    design = json.loads((out / "labels.json").read_text())["design"]
    assert design["n"] == 10 and sum(a["n"] for a in design["allocation"]) == 6
    assert (out / "study.yaml").is_file() and "edit" in printed
    assert anchors_cli.main([*argv[:-4], "--out", str(tmp_path / "x"), "--results", str(tmp_path / "none")]) == 2
    assert "holds no manifests" in capsys.readouterr().err


def test_a_failed_batch_leaves_nothing_behind(synthetic_run, tmp_path):
    pool = sampling.read_pool(synthetic_run)
    selection = sampling.draw_sample(pool, n=12, n_unsafe=8, seed=0)
    missing = pool.root / selection.samples[-1].clips[0]
    missing.unlink()
    with pytest.raises(AudioError, match=str(missing)):
        sampling.write_batch(pool, selection, tmp_path / "batch", seed=0, results=str(synthetic_run))
    assert list(tmp_path.iterdir()) == [tmp_path / "run"]
