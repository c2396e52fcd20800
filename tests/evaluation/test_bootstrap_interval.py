"""The bootstrap behind every interval dpmed prints: seeded, paired, percentile (METHODS.md sec. 4)."""

from __future__ import annotations


import numpy as np
import pytest

from dpmed.evaluation.bootstrap import (JACKKNIFE_GROUPS, Redraws, bca_interval, bootstrap_indices, bootstrap_redraws,
                                       patient_numbers, percentile_interval)
from dpmed.evaluation.weighted import jackknife_counts
from dpmed.evaluation.utility import evaluate_utility


# ----------------------------------------------------------------------------------------------- bootstrap_indices


def test_indices_shape_dtype_and_range():
    idx = bootstrap_indices(7, n_resamples=50, seed=3)
    assert idx.shape == (50, 7)
    assert np.issubdtype(idx.dtype, np.integer)
    assert idx.min() >= 0 and idx.max() <= 6


def test_indices_same_seed_same_redraws_different_seed_different():
    a = bootstrap_indices(100, n_resamples=20, seed=11)
    b = bootstrap_indices(100, n_resamples=20, seed=11)
    c = bootstrap_indices(100, n_resamples=20, seed=12)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_indices_are_numpy_default_rng_draws_with_replacement():
    """The documented recipe, so another tool can reproduce dpmed's redraws from (n, n_resamples, seed)."""
    expected = np.random.default_rng(5).integers(0, 30, size=(40, 30))
    np.testing.assert_array_equal(bootstrap_indices(30, n_resamples=40, seed=5), expected)
    # with replacement: some redraw repeats an image
    assert any(len(np.unique(row)) < 30 for row in expected)


def test_indices_neither_read_nor_change_global_random_state():
    np.random.seed(0)
    state = np.random.get_state()
    a = bootstrap_indices(50, n_resamples=10, seed=1)
    after = np.random.get_state()
    assert state[0] == after[0] and np.array_equal(state[1], after[1]) and state[2:] == after[2:]
    np.random.seed(999)
    np.testing.assert_array_equal(bootstrap_indices(50, n_resamples=10, seed=1), a)


@pytest.mark.parametrize("seed", [None, 1.5, "0", True])
def test_unseeded_or_odd_seed_is_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        bootstrap_indices(10, seed=seed)


@pytest.mark.parametrize("n, n_resamples, refusal", [(0, 10, r"^n \(the test set's images or patients\) must be"),
                                                     (10, 0, r"^n_resamples must be a positive int"),
                                                     (-1, 10, r"^n \(the test set's images or patients\) must be")])
def test_empty_sizes_are_refused(n, n_resamples, refusal):
    with pytest.raises(ValueError, match=refusal):
        bootstrap_indices(n, n_resamples=n_resamples, seed=0)


def test_redraws_that_cannot_be_read_are_refused_saying_what_is_wrong():
    """Redraws built by hand (not by bootstrap_redraws): a flat array of draws, an unknown unit or a 2-d id table
    would otherwise be read as some other set of redraws, or fail later inside a metric."""
    with pytest.raises(ValueError, match=r"draws must be \[n_resamples, n_units\]"):
        Redraws(draws=np.zeros(3, np.int64), unit_of_image=np.arange(3), unit="image")
    with pytest.raises(ValueError, match="unit must be 'patient' or 'image', got 'eye'"):
        Redraws(draws=np.zeros((2, 3), np.int64), unit_of_image=np.arange(3), unit="eye")
    with pytest.raises(ValueError, match=r"indices must be \[n_resamples, n\], got shape \(4,\)"):
        Redraws.of_images(np.arange(4))
    with pytest.raises(ValueError, match=r"one per image, shape \[n\]; got shape \(2, 2\)"):
        patient_numbers([["a", "b"], ["c", "d"]])


def _two_models(n=80, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.tile([0, 1], n // 2)
    model_a = np.clip(0.3 + 0.4 * labels + rng.normal(0, 0.25, n), 0, 1)
    model_b = np.clip(0.4 + 0.2 * labels + rng.normal(0, 0.25, n), 0, 1)
    return labels, model_a, model_b


def _hand_bca(value, redraws, jackknife, confidence=0.95):
    """Efron & Tibshirani 1993, eqs. 14.10, 14.14, 14.15, written out."""
    from scipy.stats import norm
    z0 = norm.ppf((np.sum(redraws < value) + 0.5 * np.sum(redraws == value)) / redraws.size)
    u = jackknife.mean() - jackknife
    a = np.sum(u**3) / (6 * np.sum(u**2) ** 1.5)
    z = norm.ppf([(1 - confidence) / 2, (1 + confidence) / 2])
    return np.percentile(redraws, 100 * norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))


def test_evaluate_utility_uses_the_seeded_redraws_so_models_are_paired():
    """Two models scored on one test set with one seed see the redraws bootstrap_indices(n, seed) gives, which we
    recompute here by hand: their intervals (and redraw-wise differences) come from the same resampled patients. The
    interval is BCa, its acceleration from the leave-one-out jackknife (80 images: every image its own group)."""
    labels, model_a, model_b = _two_models()
    n, n_resamples, seed = len(labels), 300, 21
    idx = bootstrap_indices(n, n_resamples=n_resamples, seed=seed)
    for scores in (model_a, model_b):
        row = evaluate_utility(interval="bca",
                               kind="binary", label_names=["neg", "pos"], val_labels=labels, val_scores=scores,
                               test_labels=labels, test_scores=scores, n_resamples=n_resamples, seed=seed)
        correct = ((scores >= row["threshold"]) == (labels == 1)).astype(float)
        hand = _hand_bca(correct.mean(), correct[idx].mean(axis=1),
                         np.array([np.delete(correct, i).mean() for i in range(n)]))
        assert row["test_accuracy_low"] == pytest.approx(hand[0], abs=1e-12)
        assert row["test_accuracy_high"] == pytest.approx(hand[1], abs=1e-12)
        assert row["bootstrap_seed"] == seed and row["n_resamples"] == n_resamples


def test_evaluate_utility_is_deterministic_given_seed_and_depends_on_it():
    labels, model_a, _ = _two_models()
    kw = dict(kind="binary", label_names=["neg", "pos"], val_labels=labels, val_scores=model_a,
              test_labels=labels, test_scores=model_a, n_resamples=200)
    assert evaluate_utility(**kw, seed=1) == evaluate_utility(**kw, seed=1)
    assert evaluate_utility(**kw, seed=1)["test_auroc_low"] != evaluate_utility(**kw, seed=2)["test_auroc_low"]


# --------------------------------------------------------------------------------------------- percentile_interval


def test_percentile_interval_of_hand_array():
    samples = np.arange(1.0, 101.0)  # 1..100; linear interpolation: 2.5% at position 2.475 -> 3.475
    assert percentile_interval(samples) == pytest.approx((3.475, 97.525), abs=1e-12)
    assert percentile_interval(samples) == pytest.approx(tuple(np.percentile(samples, [2.5, 97.5])), abs=1e-12)
    assert percentile_interval(samples, confidence=0.9) == pytest.approx((5.95, 95.05), abs=1e-12)


def test_percentile_interval_is_not_a_standard_deviation():
    """A skewed sample: the percentile interval is asymmetric about the mean; mean +/- 1.96 std is not."""
    samples = np.array([0.0] * 90 + [10.0] * 10)
    low, high = percentile_interval(samples)
    assert (low, high) == (0.0, 10.0)
    assert low != pytest.approx(samples.mean() - 1.96 * samples.std())


def test_percentile_interval_ignores_nan_redraws():
    samples = np.arange(1.0, 101.0)
    with_nan = np.concatenate([samples[:50], [np.nan] * 37, samples[50:]])
    assert percentile_interval(with_nan) == percentile_interval(samples)


def test_percentile_interval_all_nan_is_nan():
    low, high = percentile_interval(np.full(10, np.nan))
    assert np.isnan(low) and np.isnan(high)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 95, -0.1])
def test_percentile_interval_refuses_confidence_outside_0_1(confidence):
    with pytest.raises(ValueError, match="confidence"):
        percentile_interval(np.arange(10.0), confidence=confidence)


def test_percentile_interval_wants_one_value_per_redraw():
    with pytest.raises(ValueError, match="n_resamples"):
        percentile_interval(np.zeros((10, 2)))


def test_percentile_interval_of_one_to_a_hundred_is_numpys_linear_quantiles():
    # numpy's default (linear) quantiles of 1..100 at 2.5 % and 97.5 %: 1 + 0.025 * 99 and 1 + 0.975 * 99.
    assert percentile_interval(np.arange(1.0, 101.0)) == pytest.approx((3.475, 97.525))


def test_interval_contains_the_point_estimate_on_a_typical_case():
    labels, model_a, _ = _two_models(n=400, seed=4)
    row = evaluate_utility(kind="binary", label_names=["neg", "pos"], val_labels=labels, val_scores=model_a,
                           test_labels=labels, test_scores=model_a, n_resamples=500, seed=0)
    for name in ("test_auroc", "test_accuracy", "test_sensitivity", "test_specificity"):
        assert row[f"{name}_low"] < row[name] < row[f"{name}_high"], name


# ---------------------------------------------------------------------------------------------------- bca_interval


@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_bca_interval_is_scipys_bca_on_the_same_redraws(confidence):
    """scipy.stats.bootstrap(method='BCa') draws rng.integers(0, n, (R, n)) from its rng, as bootstrap_indices does,
    and takes the leave-one-out jackknife: on the mean of a skewed sample both must give the same interval, and it
    must differ from the percentile one (the skew moves it)."""
    from scipy.stats import bootstrap
    x = np.random.default_rng(3).exponential(size=60)
    idx = bootstrap_indices(60, n_resamples=2000, seed=7)
    theirs = bootstrap((x,), np.mean, method="BCa", n_resamples=2000, confidence_level=confidence,
                       rng=np.random.default_rng(7)).confidence_interval
    jackknife = np.array([np.delete(x, i).mean() for i in range(x.size)])
    ours = bca_interval(x.mean(), x[idx].mean(axis=1), jackknife, confidence=confidence)
    assert ours == pytest.approx((theirs.low, theirs.high), rel=1e-12)
    assert ours[1] > percentile_interval(x[idx].mean(axis=1), confidence=confidence)[1] + 0.01


def test_bca_interval_counts_redraws_tied_with_the_value_half_as_scipy_does():
    """A rate redraws to its own value often (341 of 2000 here): scipy.stats.bootstrap counts those ties one half in
    z0, where Efron & Tibshirani's eq. 14.14 counts only redraws strictly below; the two conventions give different
    bounds here, and dpmed's must be scipy's."""
    from scipy.stats import bootstrap
    x = (np.random.default_rng(1).random(40) < 0.85).astype(float)
    idx = bootstrap_indices(40, n_resamples=2000, seed=7)
    redraws = x[idx].mean(axis=1)
    assert (redraws == x.mean()).sum() > 300
    theirs = bootstrap((x,), np.mean, method="BCa", n_resamples=2000, rng=np.random.default_rng(7)).confidence_interval
    jackknife = np.array([np.delete(x, i).mean() for i in range(x.size)])
    assert bca_interval(x.mean(), redraws, jackknife) == pytest.approx((theirs.low, theirs.high), rel=1e-12)
    assert bca_interval(x.mean() + 1e-9, redraws, jackknife) != bca_interval(x.mean() - 1e-9, redraws, jackknife)


def test_bca_interval_without_bias_or_acceleration_is_the_percentile_interval():
    """Redraws symmetric about the value (z0 = 0) and a symmetric jackknife (a = 0): nothing to correct."""
    samples = np.arange(-50.0, 51.0)
    assert bca_interval(0.0, samples, np.array([-1.0, 0.0, 1.0])) == pytest.approx(percentile_interval(samples))


def test_bca_interval_leaves_out_nan_and_falls_back_where_undefined():
    samples = np.arange(-50.0, 51.0)
    with_nan = np.concatenate([samples, [np.nan] * 9])
    jack = np.array([-1.0, 0.0, 3.0, np.nan])
    assert bca_interval(2.0, with_nan, jack) == bca_interval(2.0, samples, jack[:3])
    assert np.isnan(bca_interval(0.0, np.full(5, np.nan), jack)).all()
    assert bca_interval(np.nan, samples, jack) == percentile_interval(samples)
    low, high = bca_interval(100.0, samples, jack)            # every redraw below the value: z0 finite, not inf
    assert np.isfinite(low) and np.isfinite(high)


def test_jackknife_leaves_out_each_patient_once_with_all_of_their_images():
    """Above JACKKNIFE_GROUPS patients the jackknife leaves out groups of patients, each patient in exactly one row
    and all of its images together; below it, each patient alone."""
    ids = np.repeat([f"p{k}" for k in range(3 * JACKKNIFE_GROUPS)], 2)[: 5 * JACKKNIFE_GROUPS]
    redraws = bootstrap_redraws(ids.size, patient_ids=ids, n_resamples=3, seed=0)
    rows = np.concatenate([c for _r, c in jackknife_counts(redraws)])
    assert rows.shape == (JACKKNIFE_GROUPS, ids.size) and set(np.unique(rows)) == {0.0, 1.0}
    left_out = rows == 0
    assert (left_out.sum(axis=0) == 1).all()                    # every image left out in exactly one row
    for pid in np.unique(ids):
        assert len({tuple(left_out[:, ids == pid].T[i]) for i in range((ids == pid).sum())}) == 1
    small = bootstrap_redraws(6, patient_ids=["a", "a", "b", "c", "c", "c"], n_resamples=3, seed=0)
    np.testing.assert_array_equal(np.concatenate([c for _r, c in jackknife_counts(small)]),
                                  [[0, 0, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0]])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_bca_interval_stays_ordered_where_the_acceleration_meets_an_extreme_bias(sign):
    """Efron & Tibshirani's level Phi(z0 + (z0 + z) / (1 - a (z0 + z))) rises with z only while 1 - a (z0 + z) > 0;
    |a| reaches nearly 1/6 where one unit decides the jackknife, and z0 reaches Phi^-1(1 - 1 / (2 R)) where every
    redraw lies on one side of the value, so at 99.9% (or 95% with 100,000 redraws) the denominator turns negative.
    Its limit there is the last redraw on that side: the interval must stay ordered and widen with the confidence."""
    samples = sign * np.linspace(0.0, 1.0, 1000)
    jackknife = np.r_[np.zeros(199), -sign]                      # a = sign * 0.165, near its bound of 1/6
    value = sign * 2.0                                           # beyond every redraw: z0 at its clip, same sign as a
    narrow = bca_interval(value, samples, jackknife, confidence=0.99)
    wide = bca_interval(value, samples, jackknife, confidence=0.999)
    assert wide[0] <= wide[1]
    assert wide[0] <= narrow[0] and narrow[1] <= wide[1]
    assert (wide[1] if sign > 0 else wide[0]) == (samples.max() if sign > 0 else samples.min())
    many = sign * np.linspace(0.0, 1.0, 100_000)
    low, high = bca_interval(value, many, jackknife, confidence=0.95)
    assert low <= high
