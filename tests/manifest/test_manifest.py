import json

import numpy as np
import pytest

from lalm_judge.audio.waveform import read_audio, write_wav
from lalm_judge.manifest.accounting import audio_accounting
from lalm_judge.manifest.samples import Manifest, assemble_waveform, export_sample_audio

SR = 16000


def tone(seconds, freq):
    t = np.arange(int(seconds * SR)) / SR
    return (0.1 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.fixture
def manifest_path(tmp_path):
    durations, clips = [1.0, 0.5, 0.75], []
    for i, seconds in enumerate(durations):
        clips.append(str(tmp_path / f"t{i}.wav"))
        write_wav(clips[-1], tone(seconds, 200 + 100 * i), SR)
    write_wav(tmp_path / "v.wav", tone(0.25, 900), SR)
    turns = [
        {
            "index": i,
            "speaker": "AB"[i % 2],
            "emotion": "happy",
            "clip": c,
            "start": 0,
            "end": 0,
            "texts": {"gt": f"turn {i}", "asr:tiny": f"heard {i}"},
        }
        for i, c in enumerate(clips)
    ]
    variants = [
        {
            "variant_id": "d.t1.hate.s5",
            "turn_index": 1,
            "category": "hate",
            "severity": 5,
            "emotion": "angry",
            "status": "ok",
            "generator": "template",
            "model": None,
            "prompt_version": "v1",
            "clip": str(tmp_path / "v.wav"),
            "texts": {"gt": "unsafe", "asr:tiny": "unsafe heard"},
        },
        {
            "variant_id": "d.t2.hate.s1",
            "turn_index": 2,
            "category": "hate",
            "severity": 1,
            "emotion": None,
            "status": "refusal",
            "generator": "llm",
            "model": "m",
            "prompt_version": "v1",
            "clip": None,
            "texts": None,
        },
    ]
    manifest = {
        "dialogue_id": "d",
        "status": "ok",
        "skip_reason": None,
        "sample_rate": SR,
        "n_turns": 3,
        "gaps_s": [0.25, 0.5],
        "transcript_sources": ["gt", "asr:tiny"],
        "turns": turns,
        "variants": variants,
    }
    path = tmp_path / "d.json"
    path.write_text(json.dumps(manifest))
    return path


def test_samples_replace_exactly_one_turn(manifest_path):
    samples = {s.sample_id: s for s in Manifest.load(manifest_path).samples()}
    assert sorted(samples) == ["d.original", "d.t1.hate.s5"]  # the refusal has no sample
    original, variant = samples["d.original"], samples["d.t1.hate.s5"]
    assert original.severity == 0 and original.turn_index is None
    assert variant.transcript("gt") == [("A", "turn 0"), ("B", "unsafe"), ("A", "turn 2")]
    assert variant.transcript("asr:tiny")[1] == ("B", "unsafe heard")
    assert variant.clips[0] == original.clips[0] and variant.clips[1] != original.clips[1]
    with pytest.raises(KeyError, match="asr:large"):
        variant.transcript("asr:large")


def test_assembled_waveform_keeps_turn_order_and_pauses(manifest_path):
    variant = next(s for s in Manifest.load(manifest_path).samples() if s.severity == 5)
    assembled = assemble_waveform(variant)
    waveform = assembled.waveform
    assert assembled.sample_rate == SR
    assert len(waveform) == int((1.0 + 0.25 + 0.25 + 0.5 + 0.75) * SR)
    assert assembled.turn_bounds == ((0, 16000), (20000, 24000), (32000, 44000))
    assert np.all(waveform[16000:20000] == 0)
    np.testing.assert_allclose(waveform[20000:24000], read_audio(variant.clips[1])[0], atol=1e-4)
    resampled = assemble_waveform(variant, 8000)
    assert resampled.sample_rate == 8000 and abs(len(resampled.waveform) - len(waveform) / 2) <= 1
    assert resampled.turn_bounds == ((0, 8000), (10000, 12000), (16000, 22000))


def test_turn_audio_override_replaces_one_turn_in_memory(manifest_path):
    original = next(Manifest.load(manifest_path).samples())
    silent = np.zeros(SR // 2, dtype=np.float32)
    assembled = assemble_waveform(original, turn_audio={1: silent})
    start, end = assembled.turn_bounds[1]
    assert end - start == len(silent) and np.all(assembled.waveform[start:end] == 0)


def test_export_and_accounting(manifest_path, tmp_path):
    export_sample_audio(str(manifest_path), "d.t1.hate.s5", str(tmp_path / "out.wav"))
    assert read_audio(tmp_path / "out.wav")[0].shape[0] == int(2.75 * SR)
    with pytest.raises(KeyError, match="d.t2.hate.s1"):
        export_sample_audio(str(manifest_path), "d.t2.hate.s1", str(tmp_path / "no.wav"))
    accounting = audio_accounting([str(manifest_path)])
    assert accounting["n_variants"] == 1
    assert accounting["design_audio_s"] == pytest.approx(2.25 + 0.25)
    # the original (2.25 s of turns + 0.75 s of pauses) and the variant (0.5 s turn replaced by 0.25 s)
    assert accounting["naive_full_dialogue_audio_s"] == pytest.approx(3.0 + 2.75)
