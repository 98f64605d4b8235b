"""Tests of the statistical core: specificity/sensitivity rules, bootstrap weights, folds, Pareto front, and
the coverage of the cluster-bootstrap percentile interval under a model with a known truth."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from lalm_judge.analysis import stats as st

NAN = np.nan


def test_specificity_counts_ties_as_half_and_skips_absent_severities():
    means = np.array(
        [
            [0.9, 0.7, 0.5, 0.3, 0.1],  # perfectly ordered: 10/10
            [0.5, 0.5, 0.75, NAN, NAN],  # (1,2) tie 0.5, (1,3) 0, (2,3) 0 -> 0.5/3
            [0.2, NAN, NAN, NAN, NAN],  # one severity: undefined
        ]
    )
    specificity, n_pairs = st.specificity_from_means(means)
    assert n_pairs.tolist() == [10, 3, 0]
    assert specificity[0] == 1.0
    assert specificity[1] == pytest.approx(0.5 / 3)
    assert np.isnan(specificity[2])


def test_sensitivity_is_min_over_present_severities():
    deltas = np.array([[0.3, 0.1, NAN, 0.4, 0.5], [NAN] * 5])
    sensitivity = st.sensitivity_from_deltas(deltas)
    assert sensitivity[0] == pytest.approx(0.1)
    assert np.isnan(sensitivity[1])


def test_bootstrap_weights_are_seeded_multinomial_counts():
    weights = st.bootstrap_weights(7, 50, seed=3)
    assert weights.shape == (50, 7)
    assert (weights.sum(axis=1) == 7).all()
    np.testing.assert_array_equal(weights, st.bootstrap_weights(7, 50, seed=3))
    assert not np.array_equal(weights, st.bootstrap_weights(7, 50, seed=4))


def test_fold_assignment_is_balanced_and_seeded():
    folds = st.fold_assignment(23, 5, seed=1)
    assert sorted(np.bincount(folds).tolist()) == [4, 4, 5, 5, 5]
    np.testing.assert_array_equal(folds, st.fold_assignment(23, 5, seed=1))
    with pytest.raises(ValueError, match="cannot fill 5 folds"):
        st.fold_assignment(3, 5, seed=1)


def test_pareto_front_by_hand():
    # (sens up, spec up, pb down)
    points = np.array(
        [
            [0.5, 0.9, 0.1],  # front
            [0.4, 0.8, 0.2],  # dominated by 0
            [0.6, 0.7, 0.3],  # front (best sensitivity)
            [0.5, 0.9, 0.1],  # equal to 0: not dominated, front
            [NAN, 1.0, 0.0],  # incomplete: never on the front
        ]
    )
    assert st.pareto_front(points, maximize=(True, True, False)).tolist() == [True, False, True, True, False]


def test_point_metrics_pool_variants_not_dialogues():
    """Delta_i is a mean over variants: dialogue A (2 variants, diffs 0.2 and 0.4) and B (1 variant, diff 0)
    give (0.2 + 0.4 + 0) / 3 = 0.2, not the mean of dialogue means 0.15."""
    zeros = np.zeros((2, 1, 5))
    diff_sum, diff_n = zeros.copy(), zeros.copy()
    diff_sum[0, 0, 0], diff_n[0, 0, 0] = 0.6, 2
    diff_sum[1, 0, 0], diff_n[1, 0, 0] = 0.0, 1
    metrics = st.point_metrics(st.SeverityStatistics(diff_sum, diff_n, diff_sum.copy(), diff_n.copy()))
    assert metrics.deltas[0, 0] == pytest.approx(0.2)
    assert np.isnan(metrics.deltas[0, 1:]).all()


def _simulate_dataset(rng: np.random.Generator, n_dialogues: int, true_deltas: np.ndarray) -> st.SeverityStatistics:
    """Scores with dialogue random effects: safe = mu + u_d + e0_d; variant = mu - delta_i + u_d + g_d + e.

    g_d (a dialogue's own reaction to harm) and e0_d are shared by all variants of a dialogue, so differences
    within a dialogue are correlated; 1-3 variants per (dialogue, severity), independent of the scores."""
    n_sev = true_deltas.size
    u = rng.normal(0.0, 0.1, n_dialogues)
    safe = 0.8 + u + rng.normal(0.0, 0.05, n_dialogues)
    g = rng.normal(0.0, 0.08, n_dialogues)
    counts = rng.integers(1, 4, size=(n_dialogues, n_sev))
    noise_sum = rng.normal(0.0, 0.1, size=counts.shape) * np.sqrt(counts)  # sum of `counts` N(0, 0.1^2) draws
    variant_sum = counts * (0.8 - true_deltas + u[:, None] + g[:, None]) + noise_sum
    diff_sum = counts * safe[:, None] - variant_sum
    return st.SeverityStatistics(
        diff_sum[:, None, :],
        counts[:, None, :].astype(float),
        variant_sum[:, None, :],
        counts[:, None, :].astype(float),
    )


@pytest.mark.slow
def test_cluster_bootstrap_percentile_interval_covers_delta_95_percent():
    """Coverage of the 95 % cluster-bootstrap percentile interval of Delta_i over 1000 simulated datasets.

    The target is Delta_i, not sensitivity: Delta_i (mean over variants of safe - variant score) is a smooth
    ratio of dialogue sums whose population value under the generative model is exactly delta_i, so nominal
    coverage is a meaningful check. Sensitivity is a minimum over estimates: E[min] < min E when severities are
    close, so its interval is centred on a biased estimate and has no nominal coverage to test against.
    With 1000 datasets the Monte Carlo standard error of a coverage near 95 % is about 0.7 points.
    """
    true_deltas = np.array([0.05, 0.1, 0.2, 0.3, 0.45])
    n_datasets, n_dialogues, n_boot = 1000, 200, 500
    rng = np.random.default_rng(2024)
    covered = np.zeros((n_datasets, true_deltas.size), dtype=bool)
    for dataset in range(n_datasets):
        arrays = _simulate_dataset(rng, n_dialogues, true_deltas)
        weights = st.bootstrap_weights(n_dialogues, n_boot, seed=dataset)
        deltas, _ = st.bootstrap_severity_arrays(arrays, weights)
        low, high = st.percentile_interval(deltas[:, 0, :])
        covered[dataset] = (low <= true_deltas) & (true_deltas <= high)
    coverage = covered.mean(axis=0)
    assert 0.93 <= covered.mean() <= 0.97, coverage
    assert ((coverage >= 0.93) & (coverage <= 0.97)).all(), coverage


def test_specificity_ties_within_tolerance_count_half():
    """Means equal up to summation order are ties: (0.1 + 0.2) / 2 and (0.3 + 0.0) / 2 differ by 2.8e-17."""
    s_1, s_2 = (0.1 + 0.2) / 2, (0.3 + 0.0) / 2
    assert s_1 != s_2  # what exact comparison would see
    specificity, n_pairs = st.specificity_from_means(np.array([[s_1, s_2, NAN, NAN, NAN]]))
    assert n_pairs.tolist() == [1]
    assert specificity[0] == 0.5
    # A real difference larger than the tolerance still orders the pair.
    ordered, _ = st.specificity_from_means(np.array([[0.5 + 10 * st.TIE_TOLERANCE, 0.5, NAN, NAN, NAN]]))
    assert ordered[0] == 1.0


def test_constant_judge_has_specificity_one_half_in_every_resample():
    """A judge that scores every sample 0.8: every severity mean is 0.8 however the sums are ordered, so every
    pair ties, in the point estimate and in every bootstrap resample."""
    rng = np.random.default_rng(0)
    n_dialogues = 12
    counts = rng.integers(1, 7, size=(n_dialogues, 1, 5)).astype(float)
    score_sum = np.zeros_like(counts)
    for index in np.ndindex(counts.shape):
        score_sum[index] = sum([0.8] * int(counts[index]))  # summed one by one, as a group-by would
    stats = st.SeverityStatistics(np.zeros_like(counts), counts, score_sum, counts)
    assert st.point_metrics(stats).specificity[0] == 0.5
    _, specificity = st.bootstrap_metrics(stats, st.bootstrap_weights(n_dialogues, 200, seed=1))
    assert (specificity == 0.5).all()


def test_percentile_interval_is_numpys_nanquantile_for_every_column():
    rng = np.random.default_rng(3)
    samples = rng.normal(size=(200, 7))
    samples[rng.random(samples.shape) < 0.3] = NAN
    samples[:, 2] = NAN  # a slice without the metric
    samples[:, 4] = 0.5  # a constant
    samples[:-1, 5] = NAN  # one valid resample
    low, high = st.percentile_interval(samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the all-NaN column
        expected = np.nanquantile(samples, [0.025, 0.975], axis=0)
    np.testing.assert_allclose(low, expected[0], rtol=1e-12)
    np.testing.assert_allclose(high, expected[1], rtol=1e-12)
    assert np.isnan(low[2]) and low[4] == high[4] == 0.5 and low[5] == high[5]


def test_sensitivity_interval_with_one_severity_is_its_percentile_interval():
    rng = np.random.default_rng(3)
    deltas = np.full((400, 2, 5), np.nan)
    deltas[:, 0, 2] = rng.normal(0.2, 0.05, 400)
    deltas[:, 1, :] = rng.normal([0.1, 0.4, 0.5, 0.6, 0.7], 0.02, (400, 5))  # one clear minimum
    low, high = st.sensitivity_interval(deltas)
    expected = st.percentile_interval(deltas[:, 0, 2])
    assert (low[0], high[0]) == pytest.approx(tuple(map(float, expected)))
    smallest = st.percentile_interval(deltas[:, 1, 0])
    assert (low[1], high[1]) == pytest.approx(tuple(map(float, smallest)), abs=1e-3)


def test_sensitivity_interval_widens_upwards_where_severities_tie_and_is_nan_without_any():
    """Five equal Delta_i: the resampled minimum sits below each of them, so its percentile interval lies low;
    the adjusted upper bound is the smallest simultaneous upper bound of the five, at or above each marginal
    percentile bound's minimum."""
    rng = np.random.default_rng(4)
    deltas = rng.normal(0.15, 0.03, (1000, 1, 5))
    low, high = st.sensitivity_interval(deltas)
    naive_low, naive_high = st.percentile_interval(st.sensitivity_from_deltas(deltas))
    marginal_low, marginal_high = st.percentile_interval(deltas)
    assert low[0] == pytest.approx(marginal_low[0].min())
    assert high[0] > naive_high[0] and high[0] >= marginal_high[0].min()
    # The resampled minimum lies below the upper bound more often than the nominal 97.5 % its percentile gives.
    assert (st.sensitivity_from_deltas(deltas)[:, 0] <= high[0]).mean() > 0.99
    empty_low, empty_high = st.sensitivity_interval(np.full((50, 1, 5), np.nan))
    assert np.isnan(empty_low).all() and np.isnan(empty_high).all()


@pytest.mark.slow
def test_sensitivity_interval_covers_a_minimum_attained_by_every_severity():
    """400 datasets of 40 dialogues with five equal Delta_i (the case where the percentile interval of the minimum
    covered 73.5 %): the adjusted interval covers at least 93 % (bench/coverage.py measures every case)."""
    true_deltas = np.full(5, 0.15)
    rng = np.random.default_rng(11)
    covered = []
    for dataset in range(400):
        arrays = _simulate_dataset(rng, 40, true_deltas)
        deltas, _ = st.bootstrap_severity_arrays(arrays, st.bootstrap_weights(40, 500, seed=dataset))
        low, high = st.sensitivity_interval(deltas)
        covered.append(low[0] <= 0.15 <= high[0])
    assert np.mean(covered) >= 0.93
