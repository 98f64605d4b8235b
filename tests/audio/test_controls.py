import numpy as np
import pytest

from lalm_judge.audio.controls import (
    ControlError,
    ControlSettings,
    add_at_snr,
    babble,
    reverse_windows,
    snr_db,
    transform_turn,
)

SR = 16000
SETTINGS = ControlSettings()


def speech_like(seconds: float, seed: int = 0, dtype=np.float32) -> np.ndarray:
    """A tone with a rising pitch and a syllable-rate envelope (a stand-in for a spoken turn)."""
    t = np.arange(int(seconds * SR)) / SR
    envelope = 0.5 * (1 + np.sin(2 * np.pi * 4 * t))
    rng = np.random.default_rng(seed)
    audio = 0.2 * envelope * np.sin(2 * np.pi * (150 + 40 * t) * t) + 0.001 * rng.standard_normal(t.size)
    return audio.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
@pytest.mark.parametrize("n_samples", [1, 2559, 2560, 2561, 16000, 40001])
def test_masking_keeps_length_and_dtype_and_is_its_own_inverse(n_samples, dtype):
    audio = (np.random.default_rng(n_samples).standard_normal(n_samples) * 1000).astype(dtype)
    masked = reverse_windows(audio, SR, 0.16)
    assert masked.shape == audio.shape and masked.dtype == audio.dtype
    assert np.array_equal(reverse_windows(masked, SR, 0.16), audio)


def test_every_window_is_reversed_including_the_last_shorter_one():
    audio = np.arange(2 * 2560 + 7, dtype=np.float32)
    masked = reverse_windows(audio, SR, 0.16)  # 160 ms at 16 kHz = 2560 samples
    assert np.array_equal(masked[:2560], audio[:2560][::-1])
    assert np.array_equal(masked[2560:5120], audio[2560:5120][::-1])
    assert np.array_equal(masked[5120:], audio[5120:][::-1])
    assert sorted(masked) == sorted(audio)  # a permutation: the energy of the turn is unchanged


def test_the_window_is_configurable():
    audio = np.arange(10, dtype=np.float32)
    assert reverse_windows(audio, 10, 0.4).tolist() == [3, 2, 1, 0, 7, 6, 5, 4, 9, 8]
    with pytest.raises(ControlError, match="shorter than one sample"):
        reverse_windows(audio, 10, 0.01)


@pytest.mark.parametrize("snr", [20, 10, 5, 0])
@pytest.mark.parametrize("condition_kind", ["noise", "babble"])
def test_noise_reaches_the_target_snr_on_the_turn(condition_kind, snr):
    turn = speech_like(2.3)
    pool = [speech_like(1.1, seed=s) * (s + 1) for s in range(3)]
    noisy = transform_turn(
        f"{condition_kind}_{snr}", turn, SR, SETTINGS, seed=0, sample_id="d.t1.hate.s1", babble_pool=pool
    )
    assert noisy.shape == turn.shape and noisy.dtype == turn.dtype
    measured = snr_db(turn, noisy.astype(np.float64) - turn)
    assert abs(measured - snr) < 0.1


def test_noise_is_deterministic_per_seed_sample_and_condition():
    turn = speech_like(1.0)

    def noisy(seed=0, sample="d.t1.hate.s1", condition="noise_10"):
        return transform_turn(condition, turn, SR, SETTINGS, seed=seed, sample_id=sample)

    assert np.array_equal(noisy(), noisy())
    assert not np.array_equal(noisy(), noisy(seed=1))
    assert not np.array_equal(noisy(), noisy(sample="d.t1.hate.s2"))
    pool = [speech_like(0.7, seed=3)]
    first = transform_turn("babble_5", turn, SR, SETTINGS, seed=0, sample_id="d.original", babble_pool=pool)
    again = transform_turn("babble_5", turn, SR, SETTINGS, seed=0, sample_id="d.original", babble_pool=pool)
    assert np.array_equal(first, again)


def test_babble_is_built_from_the_pool_turns():
    pool = [np.ones(100), 2 * np.ones(50)]
    mixture = babble(pool, 1000, talkers=3, rng=np.random.default_rng(0))
    assert mixture.shape == (1000,)
    # Each clip is scaled to unit power, so every sample is a sum of three +-1 values.
    assert np.allclose(mixture, 3.0)
    with pytest.raises(ControlError, match="no non-silent clip"):
        babble([np.zeros(10)], 100, talkers=2, rng=np.random.default_rng(0))


def test_a_silent_turn_has_no_snr():
    with pytest.raises(ControlError, match="noise_10 on d.original: cannot set an SNR on a silent turn"):
        transform_turn("noise_10", np.zeros(100, np.float32), SR, SETTINGS, seed=0, sample_id="d.original")
    with pytest.raises(ControlError, match="noise of 4 samples for a signal of 3"):
        add_at_snr(np.ones(3), np.ones(4), 10)


def test_silence_replaces_the_turn_with_zeros_of_equal_length():
    turn = speech_like(1.3)
    silent = transform_turn("silence", turn, SR, SETTINGS, seed=0, sample_id="d.t0.hate.s1")
    assert silent.shape == turn.shape and silent.dtype == turn.dtype and not silent.any()


def test_injection_appends_the_sentence_after_a_pause():
    turn, sentence = speech_like(1.0), speech_like(0.5, seed=9)
    injected = transform_turn(
        "injection", turn, SR, SETTINGS, seed=0, sample_id="d.t0.hate.s1", injection_clip=sentence
    )
    pause = round(SETTINGS.injection_pause_s * SR)
    assert len(injected) == len(turn) + pause + len(sentence)
    assert np.array_equal(injected[: len(turn)], turn) and np.array_equal(injected[-len(sentence) :], sentence)
    assert not injected[len(turn) : len(turn) + pause].any()
    with pytest.raises(ControlError, match="no injection clip"):
        transform_turn("injection", turn, SR, SETTINGS, seed=0, sample_id="d.t0.hate.s1")


def test_conditions_without_a_waveform_transform_are_errors():
    with pytest.raises(ControlError, match="does not transform"):
        transform_turn("tts_control", speech_like(0.1), SR, SETTINGS, seed=0, sample_id="d.t0.tts_control")


def test_the_settings_defaults_are_those_of_the_config_schema():
    from pathlib import Path

    from lalm_judge.workflow.config import load_config

    config = load_config(Path(__file__).parents[2] / "config.yaml")
    assert ControlSettings.from_config(config["controls"]) == ControlSettings()
