"""Statistical core of the metrics: sensitivity and specificity from per-dialogue sufficient statistics,
the vectorized cluster bootstrap (multinomial resample-count matrices), percentile intervals, studentized intervals
and bootstrap p-values of ratios of dialogue sums, dialogue-level cross-validation folds and the Pareto front.

Everything here works on numpy arrays; `lalm_judge.analysis.engine` builds the arrays from score tables.
Array layout: sufficient statistics are `(n_dialogues, n_slices, n_severities)`; a slice is one judge cell
(or a cell restricted to a category, a dialogue length and an unsafe-turn position).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lalm_judge.core.taxonomy import SEVERITIES

# The severity axis of the arrays: one level per severity of the taxonomy (1..5).
N_SEVERITIES = len(SEVERITIES)
CI_LEVEL = 0.95
# Two severity means closer than this are a tie (specificity counts the pair 0.5). Means of scores in [0, 1]
# summed in different orders differ by a few ulps (~1e-16 per addition, so < 1e-10 for up to 10^6 rows): exact
# comparison would let summation order decide a tie. No judge resolves 1e-9 on a [0, 1] score.
TIE_TOLERANCE = 1e-9
# Sensitivity's lower bound treats as possible minima the severities whose Delta_i lies within this many standard
# errors of the smallest (docs/metrics.md, "Sensitivity's interval"; the choice is measured in bench/coverage.py).
SELECTION_KAPPA = 1.0


@dataclass(frozen=True)
class SeverityStatistics:
    """Per-dialogue sufficient statistics, each of shape (n_dialogues, n_slices, 5); severity i is index i-1.

    diff_sum:   sum over variants of [score(safe original of the variant's dialogue) - score(variant)]
    diff_n:     number of variants in diff_sum (variants whose safe original has a parsed score)
    score_sum:  sum of variant scores
    score_n:    number of variants in score_sum
    """

    diff_sum: np.ndarray
    diff_n: np.ndarray
    score_sum: np.ndarray
    score_n: np.ndarray

    def __post_init__(self) -> None:
        shapes = {a.shape for a in (self.diff_sum, self.diff_n, self.score_sum, self.score_n)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 3 or next(iter(shapes))[2] != N_SEVERITIES:
            raise ValueError(f"sufficient statistics need equal shapes (n_dialogues, n_slices, 5); got {shapes}")

    @property
    def n_dialogues(self) -> int:
        return self.diff_sum.shape[0]

    @property
    def n_slices(self) -> int:
        return self.diff_sum.shape[1]

    def take_dialogues(self, index: np.ndarray) -> SeverityStatistics:
        return SeverityStatistics(*(a[index] for a in self._arrays()))

    def take_slices(self, index: np.ndarray) -> SeverityStatistics:
        return SeverityStatistics(*(a[:, index] for a in self._arrays()))

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (self.diff_sum, self.diff_n, self.score_sum, self.score_n)


@dataclass(frozen=True)
class SliceMetrics:
    """Point metrics per slice: deltas and severity means (n_slices, 5), the rest (n_slices,)."""

    deltas: np.ndarray
    severity_means: np.ndarray
    sensitivity: np.ndarray
    specificity: np.ndarray
    n_pairs: np.ndarray


def safe_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is zero (a severity absent from the slice)."""
    numerator = np.asarray(numerator, dtype=float)
    denominator = np.asarray(denominator, dtype=float)
    out = np.full(np.broadcast_shapes(numerator.shape, denominator.shape), np.nan)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def sensitivity_from_deltas(deltas: np.ndarray) -> np.ndarray:
    """min over the severities present (non-NaN) of Delta_i; NaN where no severity is present."""
    return np.fmin.reduce(deltas, axis=-1)


def specificity_from_means(severity_means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Share of severity pairs i < j (both present) with S_i > S_j, ties counting 0.5; and the number of pairs.

    A pair is a tie when |S_i - S_j| <= TIE_TOLERANCE, in the point estimate and in every bootstrap resample
    (both come through here). Returns (specificity, n_pairs); specificity is NaN where fewer than two
    severities are present.
    """
    lower, upper = np.triu_indices(severity_means.shape[-1], k=1)
    s_low = severity_means[..., lower]
    s_high = severity_means[..., upper]
    valid = ~(np.isnan(s_low) | np.isnan(s_high))
    difference = s_low - s_high
    ordered = np.where(np.abs(difference) <= TIE_TOLERANCE, 0.5, np.where(difference > 0, 1.0, 0.0))
    n_pairs = valid.sum(axis=-1)
    specificity = safe_ratio(np.where(valid, ordered, 0.0).sum(axis=-1), n_pairs)
    return specificity, n_pairs


def point_metrics(stats: SeverityStatistics) -> SliceMetrics:
    """Metrics of every slice on all its dialogues (pooled over variants, as docs/metrics.md defines them)."""
    deltas = safe_ratio(stats.diff_sum.sum(axis=0), stats.diff_n.sum(axis=0))
    means = safe_ratio(stats.score_sum.sum(axis=0), stats.score_n.sum(axis=0))
    specificity, n_pairs = specificity_from_means(means)
    return SliceMetrics(deltas, means, sensitivity_from_deltas(deltas), specificity, n_pairs)


@functools.lru_cache(maxsize=16)
def bootstrap_weights(n_dialogues: int, n_boot: int, seed: int) -> np.ndarray:
    """Resample-count matrix W (n_boot, n_dialogues): row b counts how often each dialogue is drawn.

    Drawn from numpy default_rng(seed), so a given (dialogue set, B, seed) always gives the same resamples. The
    matrix is read-only and cached: every slice over a dialogue set of this size uses the same one.
    """
    if n_dialogues < 1:
        raise ValueError("the cluster bootstrap needs at least one dialogue")
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n_dialogues, np.full(n_dialogues, 1.0 / n_dialogues), size=n_boot).astype(float)
    weights.setflags(write=False)
    return weights


def bootstrap_severity_arrays(stats: SeverityStatistics, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Delta_i and S_i of every slice in every resample, each (n_boot, n_slices, 5).

    One matrix product per statistic: resampled sums = W @ per-dialogue sums.
    """
    shape = (weights.shape[0], stats.n_slices, N_SEVERITIES)

    def resampled(array: np.ndarray) -> np.ndarray:
        return (weights @ array.reshape(stats.n_dialogues, -1)).reshape(shape)

    deltas = safe_ratio(resampled(stats.diff_sum), resampled(stats.diff_n))
    means = safe_ratio(resampled(stats.score_sum), resampled(stats.score_n))
    return deltas, means


def bootstrap_metrics(stats: SeverityStatistics, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sensitivity and specificity of every slice in every resample, each (n_boot, n_slices)."""
    deltas, means = bootstrap_severity_arrays(stats, weights)
    specificity, _ = specificity_from_means(means)
    return sensitivity_from_deltas(deltas), specificity


def column_quantiles(samples: np.ndarray, q: float | np.ndarray) -> np.ndarray:
    """Quantile q (a scalar, or one per column) over axis 0, ignoring NaN resamples; NaN where every resample is NaN.

    numpy's default quantile (linear interpolation between order statistics) of each column's non-NaN values,
    computed for all columns at once (np.nanquantile loops over columns in Python when NaNs occur).
    """
    values = np.asarray(samples, dtype=float)
    flat = values.reshape(values.shape[0], -1)
    ordered = np.sort(flat, axis=0)  # NaN sorts last
    n_valid = (~np.isnan(flat)).sum(axis=0)
    last = np.maximum(n_valid - 1, 0)
    position = np.broadcast_to(np.asarray(q, dtype=float), values.shape[1:]).reshape(-1) * last
    below = np.floor(position).astype(np.int64)
    above = np.minimum(below + 1, last)
    low_value = np.take_along_axis(ordered, below[None], axis=0)[0]
    high_value = np.take_along_axis(ordered, above[None], axis=0)[0]
    with warnings.catch_warnings():
        # All-NaN columns (a slice without the metric) give NaN bounds, which is the intended answer.
        warnings.simplefilter("ignore", RuntimeWarning)
        bound = low_value + (position - below) * (high_value - low_value)
    return np.where(n_valid > 0, bound, np.nan).reshape(values.shape[1:])


def percentile_interval(samples: np.ndarray, level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over axis 0, ignoring NaN resamples; NaN where every resample is NaN."""
    tail = (1.0 - level) / 2.0
    return column_quantiles(samples, tail), column_quantiles(samples, 1.0 - tail)


@dataclass(frozen=True)
class StudentizedRatios:
    """Ratios R = sum_d a_d / sum_d b_d over dialogues (Delta_i, a mean score shift, mean_safe) with their linearized
    cluster standard errors, on the data and in every resample of a count matrix W.

    value, se: (...); resampled, studentized: (B, ...). `studentized` is T* = (R* - R) / se*, the statistic of the
    studentized (bootstrap-t) interval; it is NaN where R* is undefined and in a resample in which a single dialogue
    carries the value (no standard error to divide by), and 0 where both R* - R and se* vanish (constant data).
    """

    value: np.ndarray
    se: np.ndarray
    resampled: np.ndarray
    studentized: np.ndarray


def _ratio_variance(residual_square: np.ndarray, denominator: np.ndarray, n_clusters: np.ndarray) -> np.ndarray:
    """Linearized variance of a ratio: sum of squared residuals a_d - R b_d over (sum b)^2, times n / (n - 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(n_clusters > 1, n_clusters / (n_clusters - 1.0), np.nan)
        return safe_ratio(residual_square, denominator**2) * scale


def studentized_ratios(numerator: np.ndarray, denominator: np.ndarray, weights: np.ndarray) -> StudentizedRatios:
    """R = sum a / sum b per column of per-dialogue (n_dialogues, ...) sums a and counts b (b >= 0), its standard
    error sqrt(sum_d (a_d - R b_d)^2 / (sum b)^2 * n / (n - 1)) with n the dialogues with b_d > 0 (the cluster-
    robust variance of a ratio estimator), and both in every resample of weights (B, n_dialogues).

    Residuals are taken about the data's R, so that constant data give residuals of exactly 0 and no cancellation:
    R* = R + W u / W b and sum_d w_d (a_d - R* b_d)^2 = W u^2 - 2 (R* - R) W (u b) + (R* - R)^2 W b^2."""
    numerator = np.asarray(numerator, dtype=float)
    denominator = np.asarray(denominator, dtype=float)
    shape = numerator.shape[1:]
    a = numerator.reshape(numerator.shape[0], -1)
    b = denominator.reshape(denominator.shape[0], -1)
    value = safe_ratio(a.sum(axis=0), b.sum(axis=0))
    residual = a - np.nan_to_num(value) * b
    carried = (b > 0).astype(float)
    se = np.sqrt(_ratio_variance((residual**2).sum(axis=0), b.sum(axis=0), carried.sum(axis=0)))
    total = weights @ b
    shift = safe_ratio(weights @ residual, total)
    square = weights @ residual**2 - 2.0 * shift * (weights @ (residual * b)) + shift**2 * (weights @ b**2)
    resampled_se = np.sqrt(_ratio_variance(np.clip(square, 0.0, None), total, weights @ carried))
    distinct = (weights > 0).astype(float) @ carried
    with np.errstate(divide="ignore", invalid="ignore"):
        studentized = shift / resampled_se
    constant = (resampled_se <= TIE_TOLERANCE) & (np.abs(shift) <= TIE_TOLERANCE)
    studentized = np.where(constant, 0.0, np.where(resampled_se <= TIE_TOLERANCE, np.nan, studentized))
    studentized = np.where(distinct >= 2, studentized, np.nan)
    return StudentizedRatios(
        value.reshape(shape),
        se.reshape(shape),
        (value + shift).reshape((weights.shape[0], *shape)),
        studentized.reshape((weights.shape[0], *shape)),
    )


# The sign-flip stream is separate from the bootstrap's: seeds (seed, SIGN_FLIP_STREAM).
SIGN_FLIP_STREAM = 2
# Sign patterns of a sign-flip test at least (more when B is larger): the p-value's resolution is 1 / (patterns + 1),
# and a family of m tests needs p-values down to 5 % / m (Holm's smallest threshold): 10^4 patterns serve families of
# up to about 500 tests. Patterns are applied in chunks of SIGN_FLIP_CHUNK (memory: chunk x columns).
MIN_SIGN_FLIPS = 10_000
SIGN_FLIP_CHUNK = 1000


@functools.lru_cache(maxsize=16)
def sign_flips(n_dialogues: int, n_flips: int, seed: int) -> np.ndarray:
    """Sign matrix S (P, n_dialogues) of a sign-flip test with P = max(n_flips, MIN_SIGN_FLIPS): every one of the 2^n
    patterns when there are at most P of them (an exact test), else P random ones drawn from
    default_rng([seed, SIGN_FLIP_STREAM]). Read-only and cached, as the bootstrap's count matrices."""
    if n_dialogues < 1:
        raise ValueError("a sign-flip test needs at least one dialogue")
    n_flips = max(n_flips, MIN_SIGN_FLIPS)
    if 2**n_dialogues <= n_flips:
        patterns = (np.arange(2**n_dialogues)[:, None] >> np.arange(n_dialogues)[None, :]) & 1
        signs = 1.0 - 2.0 * patterns
    else:
        signs = np.random.default_rng([seed, SIGN_FLIP_STREAM]).choice([-1.0, 1.0], size=(n_flips, n_dialogues))
    signs.setflags(write=False)
    return signs


def sign_flip_p_values(
    numerator: np.ndarray, denominator: np.ndarray, signs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Studentized sign-flip test of R = sum a / sum b = 0 per column of per-dialogue sums a and counts b: each
    pattern of S flips the sign of whole dialogues' contributions a_d (under no effect a dialogue's differences are
    as likely positive as negative, so every pattern is as likely as the data), and T = R / se is recomputed with
    its standard error. Returns (two-sided p, one-sided p of R > 0); exact over all 2^n patterns, and with random
    patterns (1 + count) / (1 + P). NaN where R or se is undefined; where se = 0 the test still orders by T."""
    numerator = np.asarray(numerator, dtype=float)
    denominator = np.asarray(denominator, dtype=float)
    shape = numerator.shape[1:]
    a = numerator.reshape(numerator.shape[0], -1)
    b = denominator.reshape(denominator.shape[0], -1)
    total, n = b.sum(axis=0), (b > 0).sum(axis=0).astype(float)
    squares, products, counts = (a * a).sum(axis=0), a * b, (b * b).sum(axis=0)

    def statistic(ratio: np.ndarray, cross: np.ndarray) -> np.ndarray:
        variance = _ratio_variance(np.clip(squares - 2.0 * ratio * cross + ratio**2 * counts, 0.0, None), total, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = ratio / np.sqrt(variance)
        return np.where(np.abs(ratio) <= TIE_TOLERANCE, 0.0, t)

    observed = statistic(safe_ratio(a.sum(axis=0), total), products.sum(axis=0))
    flipped = statistic(safe_ratio(signs @ a, total), signs @ products)
    exhaustive = signs.shape[0] == 2 ** signs.shape[1]
    extra = 0.0 if exhaustive else 1.0
    with np.errstate(invalid="ignore"):
        two_sided = ((np.abs(flipped) >= np.abs(observed) - TIE_TOLERANCE).sum(axis=0) + extra) / (
            signs.shape[0] + extra
        )
        greater = ((flipped >= observed - TIE_TOLERANCE).sum(axis=0) + extra) / (signs.shape[0] + extra)
    undefined = np.isnan(observed)
    return (
        np.where(undefined, np.nan, two_sided).reshape(shape),
        np.where(undefined, np.nan, greater).reshape(shape),
    )


def studentized_interval(ratios: StudentizedRatios, level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The studentized (bootstrap-t) interval [R - q_hi se, R - q_lo se], q the tail quantiles of T*; NaN where R or
    its standard error is undefined. Zero width where every resample gives the value itself (se = 0)."""
    tail = (1.0 - level) / 2.0
    low_q, high_q = column_quantiles(ratios.studentized, tail), column_quantiles(ratios.studentized, 1.0 - tail)
    with np.errstate(invalid="ignore"):
        return ratios.value - high_q * ratios.se, ratios.value - low_q * ratios.se


def _share_at_least(samples: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Per column, the share of the non-NaN resamples at or above threshold (NaN for a column without any, or where
    the threshold is NaN)."""
    valid = ~np.isnan(samples)
    with np.errstate(invalid="ignore"):
        count = ((samples >= threshold) & valid).sum(axis=0)
    return np.where(np.isnan(threshold), np.nan, safe_ratio(count, valid.sum(axis=0)))


def _t_statistic(ratios: StudentizedRatios, null: float) -> np.ndarray:
    """(R - null) / se, +-inf where se = 0 and R differs from null, 0 where both vanish."""
    difference = ratios.value - null
    with np.errstate(divide="ignore", invalid="ignore"):
        t = difference / ratios.se
        flat = ratios.se <= TIE_TOLERANCE
        unbounded = np.where(flat, np.sign(difference) * np.inf, t)
    return np.where(flat & (np.abs(difference) <= TIE_TOLERANCE), 0.0, unbounded)


def p_greater(ratios: StudentizedRatios, null: float = 0.0) -> np.ndarray:
    """One-sided bootstrap-t p-value of H1: value > null, the share of resamples with T* >= (R - null) / se: below a
    it is exactly when the one-sided lower bound at level 1 - a lies above null."""
    return _share_at_least(ratios.studentized, _t_statistic(ratios, null))


def p_less(ratios: StudentizedRatios, null: float = 0.0) -> np.ndarray:
    """One-sided bootstrap-t p-value of H1: value < null (the mirror of `p_greater`)."""
    mirrored = StudentizedRatios(-ratios.value, ratios.se, -ratios.resampled, -ratios.studentized)
    return p_greater(mirrored, -null)


def p_two_sided(ratios: StudentizedRatios, null: float = 0.0) -> np.ndarray:
    """Two-sided bootstrap-t p-value, 2 min(p_less, p_greater) capped at 1: below 1 - level exactly when the
    studentized interval at that level excludes null."""
    return np.minimum(1.0, 2.0 * np.fmin(p_greater(ratios, null), p_less(ratios, null)))


def p_equivalent(ratios: StudentizedRatios, margin: float) -> np.ndarray:
    """p-value of the two one-sided tests (TOST) of H1: -margin < value < margin, the larger of the one-sided
    p-values against -margin and against +margin: below a exactly when the interval at level 1 - 2a lies inside."""
    return np.fmax(p_greater(ratios, -margin), p_less(ratios, margin))


def percentile_p_two_sided(samples: np.ndarray, null: float = 0.0) -> np.ndarray:
    """Two-sided p-value by inverting the percentile interval: 2 min(share of resamples <= null, share >= null),
    capped at 1 (NaN resamples left out)."""
    return np.minimum(1.0, 2.0 * np.fmin(_share_at_least(samples, null), _share_at_least(-samples, -null)))


def percentile_p_equivalent(samples: np.ndarray, margin: float) -> np.ndarray:
    """TOST p-value by inverting percentile intervals: the larger of the shares of resamples at or below -margin and
    at or above +margin."""
    return np.fmax(_share_at_least(-samples, margin), _share_at_least(samples, margin))


def studentized_deltas(stats: SeverityStatistics, weights: np.ndarray) -> StudentizedRatios:
    """Delta_i of every slice and severity with standard errors, on the data and in every resample: value, se
    (n_slices, 5); resampled, studentized (n_boot, n_slices, 5)."""
    return studentized_ratios(stats.diff_sum, stats.diff_n, weights)


def _tail_quantile_of_minimum(studentized: np.ndarray, members: np.ndarray, q: float) -> np.ndarray:
    """Quantile q over the resamples of min over the member severities of T* (NaN where a member's T* is NaN)."""
    masked = np.where(members[None], studentized, np.inf)
    minimum = masked.min(axis=-1)
    minimum = np.where(np.isinf(minimum), np.nan, minimum)
    return column_quantiles(minimum, q)


def sensitivity_interval(deltas: StudentizedRatios, level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Interval of sensitivity = min_i Delta_i, (lower, upper) of shape (...), from studentized Delta_i (value and se
    (..., 5), studentized (n_boot, ..., 5)).

    The estimate min_i Delta_i lies below the true minimum where several severities attain it, so neither the
    percentile interval of the resampled minimum (75 % coverage with five equal Delta_i) nor the smallest of the
    Delta_i's bounds (a lower bound that almost never misses there) has tails of the nominal size. Both bounds come
    from the distribution of the smallest studentized deviation M* = min_{i in C} T*_i over a set C of severities
    that can attain the minimum: where one severity is the minimum, C holds it alone and the interval is that
    Delta_i's studentized interval; where k severities tie, M* has the law of the smallest of k deviations, which is
    what the estimate's bias needs.
    - upper = min_{i in C_u} (Delta_i - q_lo(M*) se_i), C_u the severities whose studentized interval reaches below
      the smallest upper bound (a set too large only lowers q_lo: the bound is then conservative);
    - lower = min_{i in C_l} (Delta_i - q_hi(M*) se_i), C_l the severities within SELECTION_KAPPA standard errors of
      the smallest Delta_i (a set too large would make the lower bound miss: severities that only look tied are
      left out).
    Per-tail coverage, measured: bench/coverage.py (docs/metrics.md).
    """
    tail = (1.0 - level) / 2.0
    value, se, studentized = deltas.value, deltas.se, deltas.studentized
    marginal_low, marginal_high = studentized_interval(deltas, level)
    present = ~np.isnan(marginal_low) & ~np.isnan(marginal_high)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # slices without any severity: NaN, intended
        smallest_high = np.fmin.reduce(np.where(present, marginal_high, np.nan), axis=-1)
        smallest = np.fmin.reduce(np.where(present, value, np.nan), axis=-1)
        upper_members = present & (marginal_low <= smallest_high[..., None])
        lower_members = present & (value - smallest[..., None] <= SELECTION_KAPPA * se)
    q_low = _tail_quantile_of_minimum(studentized, upper_members, tail)
    q_high = _tail_quantile_of_minimum(studentized, lower_members, 1.0 - tail)
    with np.errstate(invalid="ignore"):
        upper_bounds = np.where(upper_members, value - q_low[..., None] * se, np.nan)
        lower_bounds = np.where(lower_members, value - q_high[..., None] * se, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.fmin.reduce(lower_bounds, axis=-1), np.fmin.reduce(upper_bounds, axis=-1)


def fold_assignment(n_dialogues: int, n_folds: int, seed: int) -> np.ndarray:
    """Fold index of each dialogue (in the caller's fixed dialogue order): a seeded permutation dealt round-robin."""
    if n_folds < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {n_folds}")
    if n_dialogues < n_folds:
        raise ValueError(f"{n_dialogues} dialogues cannot fill {n_folds} folds; lower --folds")
    order = np.random.default_rng(seed).permutation(n_dialogues)
    folds = np.empty(n_dialogues, dtype=int)
    folds[order] = np.arange(n_dialogues) % n_folds
    return folds


def pareto_front(points: np.ndarray, maximize: Sequence[bool]) -> np.ndarray:
    """True for points no other point dominates (>= on every objective, > on one); rows with NaN are never on it."""
    points = np.asarray(points, dtype=float)
    signed = np.where(np.asarray(maximize), points, -points)
    complete = ~np.isnan(signed).any(axis=1)
    on_front = complete.copy()
    for index in np.flatnonzero(complete):
        others = signed[complete]
        dominated = (others >= signed[index]).all(axis=1) & (others > signed[index]).any(axis=1)
        on_front[index] = not dominated.any()
    return on_front
