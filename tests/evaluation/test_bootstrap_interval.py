"""The bootstrap behind every interval dpmed prints: seeded, paired, percentile (METHODS.md sec. 4)."""

from __future__ import annotations


import numpy as np
import pytest

from dpmed.evaluation.bootstrap import Redraws, bootstrap_indices, patient_numbers, percentile_interval
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


def test_evaluate_utility_uses_the_seeded_redraws_so_models_are_paired():
    """Two models scored on one test set with one seed see the redraws bootstrap_indices(n, seed) gives, which we
    recompute here by hand: their intervals (and redraw-wise differences) come from the same resampled patients."""
    labels, model_a, model_b = _two_models()
    n, n_resamples, seed = len(labels), 300, 21
    idx = bootstrap_indices(n, n_resamples=n_resamples, seed=seed)
    for scores in (model_a, model_b):
        row = evaluate_utility(kind="binary", label_names=["neg", "pos"], val_labels=labels, val_scores=scores,
                               test_labels=labels, test_scores=scores, n_resamples=n_resamples, seed=seed)
        correct = (scores >= row["threshold"]) == (labels == 1)
        hand = np.percentile(correct[idx].mean(axis=1), [2.5, 97.5])
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
