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


def _ratios(rng: np.random.Generator, n_dialogues: int, true_deltas: np.ndarray, n_boot: int, seed: int):
    arrays = _simulate_dataset(rng, n_dialogues, true_deltas)
    return st.studentized_deltas(arrays, st.bootstrap_weights(n_dialogues, n_boot, seed=seed))


def test_studentized_ratio_matches_its_definition_on_the_data_and_in_each_resample():
    """R = sum a / sum b, se^2 = sum (a - R b)^2 / (sum b)^2 * n / (n - 1), and the same on each resample with the
    dialogues weighted by their counts (a dialogue drawn twice counts twice, in n too)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.2, 0.1, (9, 2)), rng.integers(1, 4, (9, 2)).astype(float)
    b[3, 1] = 0.0  # a dialogue without the value does not count in its n
    a[3, 1] = 0.0
    weights = st.bootstrap_weights(9, 30, seed=2)
    ratios = st.studentized_ratios(a, b, weights)
    for column in range(2):
        keep = b[:, column] > 0
        value = a[keep, column].sum() / b[keep, column].sum()
        n = keep.sum()
        se = np.sqrt(
            ((a[keep, column] - value * b[keep, column]) ** 2).sum() / b[keep, column].sum() ** 2 * n / (n - 1)
        )
        assert (ratios.value[column], ratios.se[column]) == pytest.approx((value, se))
        for row, w in enumerate(weights):
            r = (w * a[:, column]).sum() / (w * b[:, column]).sum()
            m = (w * keep).sum()
            s_r = np.sqrt(
                (w * (a[:, column] - r * b[:, column]) ** 2).sum() / (w * b[:, column]).sum() ** 2 * m / (m - 1)
            )
            assert ratios.studentized[row, column] == pytest.approx((r - value) / s_r, rel=1e-9)


def test_bootstrap_t_p_values_invert_the_interval_and_constant_data_give_zero_width():
    rng = np.random.default_rng(5)
    ratios = st.studentized_ratios(rng.normal(0.05, 0.1, (15, 3)), np.ones((15, 3)), st.bootstrap_weights(15, 400, 1))
    for level in (0.9, 0.95):
        low, high = st.studentized_interval(ratios, level)
        excludes = (low > 0) | (high < 0)
        assert ((st.p_two_sided(ratios) < 1 - level) == excludes).all()
    # TOST at margin m: p < a exactly when the 1 - 2a interval lies inside (-m, m).
    low, high = st.studentized_interval(ratios, 0.9)
    for margin in (0.05, 0.1, 0.2):
        assert ((st.p_equivalent(ratios, margin) < 0.05) == ((low > -margin) & (high < margin))).all()
    constant = st.studentized_ratios(np.full((6, 1), 0.2), np.ones((6, 1)), st.bootstrap_weights(6, 50, 0))
    assert st.studentized_interval(constant) == (pytest.approx([0.2]), pytest.approx([0.2]))
    assert st.p_two_sided(constant)[0] == 0.0 and st.p_equivalent(constant, 0.3)[0] == 0.0
    assert st.p_equivalent(constant, 0.1)[0] == 1.0  # 0.2 exactly, outside +-0.1


def test_a_resample_carried_by_one_dialogue_has_no_studentized_value():
    weights = np.array([[2.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    ratios = st.studentized_ratios(np.array([[0.3], [0.1]]), np.ones((2, 1)), weights)
    assert np.isnan(ratios.studentized[[0, 2], 0]).all() and ratios.studentized[1, 0] == pytest.approx(0.0, abs=1e-9)


def test_sensitivity_interval_with_one_severity_is_its_studentized_interval():
    rng = np.random.default_rng(3)
    single = _ratios(rng, 30, np.array([0.2, 0.3, 0.4, 0.5, 0.6]), 400, seed=1)
    # Keep severity 3 alone in slice 0.
    value, se = single.value.copy(), single.se.copy()
    value[0, [0, 1, 3, 4]], se[0, [0, 1, 3, 4]] = np.nan, np.nan
    studentized = single.studentized.copy()
    studentized[:, 0, [0, 1, 3, 4]] = np.nan
    alone = st.StudentizedRatios(value, se, single.resampled, studentized)
    low, high = st.sensitivity_interval(alone)
    expected = st.studentized_interval(alone)
    assert (low[0], high[0]) == pytest.approx((expected[0][0, 2], expected[1][0, 2]))


def test_sensitivity_interval_is_the_minimums_studentized_interval_where_one_severity_is_clearly_smallest():
    rng = np.random.default_rng(3)
    ratios = _ratios(rng, 40, np.array([0.05, 0.3, 0.45, 0.6, 0.7]), 500, seed=2)
    low, high = st.sensitivity_interval(ratios)
    marginal_low, marginal_high = st.studentized_interval(ratios)
    assert (low[0], high[0]) == pytest.approx((marginal_low[0, 0], marginal_high[0, 0]))


def test_where_severities_tie_both_bounds_move_up_from_the_smallest_marginal_ones():
    """Five equal Delta_i: the smallest estimate lies below the common value, so the interval of the minimum is
    shifted up against the smallest marginal bounds (a lower bound that could almost never miss, and an upper bound
    that missed too often), and nothing is defined without any severity."""
    rng = np.random.default_rng(4)
    ratios = _ratios(rng, 40, np.full(5, 0.15), 500, seed=3)
    low, high = st.sensitivity_interval(ratios)
    marginal_low, marginal_high = st.studentized_interval(ratios)
    assert low[0] > np.nanmin(marginal_low[0]) and high[0] >= np.nanmin(marginal_high[0])
    empty = st.StudentizedRatios(np.full((1, 5), np.nan), np.full((1, 5), np.nan), *(np.full((50, 1, 5), np.nan),) * 2)
    empty_low, empty_high = st.sensitivity_interval(empty)
    assert np.isnan(empty_low).all() and np.isnan(empty_high).all()


@pytest.mark.slow
def test_sensitivity_interval_misses_on_each_side_about_as_often_where_every_severity_attains_the_minimum():
    """400 datasets of 40 dialogues with five equal Delta_i (the case where the percentile interval of the minimum
    covered 73.5 % and the previous construction's lower bound almost never missed): each bound misses the truth
    in 0.5-5 % of the datasets (bench/coverage.py measures every case at 1000 tables)."""
    true_deltas = np.full(5, 0.15)
    rng = np.random.default_rng(11)
    below, above = 0, 0
    for dataset in range(400):
        low, high = st.sensitivity_interval(_ratios(rng, 40, true_deltas, 500, seed=dataset))
        below += bool(low[0] > 0.15)
        above += bool(high[0] < 0.15)
    assert 2 <= below <= 20 and above <= 20, (below, above)


def test_the_sign_flip_test_is_exact_over_every_pattern_of_few_dialogues():
    """Three dialogues: the 8 sign patterns are all used, and p is the share of them whose studentized ratio is at
    least as far from 0 as the data's, computed here pattern by pattern."""
    a, b = np.array([[0.3], [0.1], [0.2]]), np.array([[1.0], [2.0], [1.0]])
    signs = st.sign_flips(3, 100, seed=0)
    assert signs.shape == (8, 3) and len({tuple(row) for row in signs}) == 8

    def t(values: np.ndarray) -> float:
        ratio = values.sum() / b.sum()
        se = np.sqrt(((values - ratio * b[:, 0]) ** 2).sum() / b.sum() ** 2 * 3 / 2)
        return ratio / se

    observed = t(a[:, 0])
    flipped = np.array([t(row * a[:, 0]) for row in signs])
    two_sided, greater = st.sign_flip_p_values(a, b, signs)
    assert two_sided[0] == pytest.approx((np.abs(flipped) >= abs(observed) - 1e-9).mean())
    assert greater[0] == pytest.approx((flipped >= observed - 1e-9).mean())
    assert two_sided[0] == pytest.approx(2 / 8)  # only the data and its mirror image are as extreme
    # Many dialogues: random patterns, at least MIN_SIGN_FLIPS, seeded, and (1 + count) / (1 + P).
    many = st.sign_flips(40, 100, seed=3)
    assert many.shape == (st.MIN_SIGN_FLIPS, 40)
    np.testing.assert_array_equal(many, st.sign_flips(40, 100, seed=3))
