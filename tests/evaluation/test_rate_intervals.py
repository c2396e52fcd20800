"""The intervals of accuracy, sensitivity and specificity (METHODS.md sec. 4) against a plain loop over the same
seeded redraws.

Why: ``evaluate_utility`` computes all three rates in one vectorised pass over per-image redraw counts and then files
each column under its own name. Nothing else checks that the sensitivity interval comes from the redrawn positives
and the specificity interval from the redrawn negatives; a swapped or repeated column would print a plausible but
wrong interval. The loop here redraws the test images with ``bootstrap_indices`` (the draws the code documents),
decides each redrawn image at the fixed validation threshold, and takes the BCa interval of the per-redraw rates
(its jackknife by hand too).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.evaluation.bootstrap import bootstrap_indices
from dpmed.evaluation.utility import evaluate_utility

# A separable validation set: its Youden threshold is 0.5 (J = 1 there only), kept fixed for every test redraw.
VAL_Y = np.array([0, 0, 1, 1])
VAL_S = np.array([0.1, 0.3, 0.5, 0.9])
N, R, SEED = 150, 300, 4


def _imbalanced_test_set():
    """About 30% positives, sensitivity near 0.6 and specificity near 0.9 at 0.5: the three rates (and so their
    intervals) lie far apart, so taking one rate's redraws for another cannot go unnoticed."""
    rng = np.random.default_rng(11)
    y = (rng.random(N) < 0.3).astype(int)
    s = np.where(y == 1, rng.uniform(0.2, 0.95, N), rng.uniform(0.0, 0.55, N)).round(2)
    return y, s


def _hand_intervals(y, s, threshold, confidence, bca_by_hand):
    """BCa intervals of accuracy, sensitivity and specificity over the redraws, one redraw at a time."""
    decided = s >= threshold
    stats = {"test_accuracy": lambda i: np.mean(decided[i] == (y[i] == 1)),
             "test_sensitivity": lambda i: decided[i][y[i] == 1].mean() if (y[i] == 1).any() else np.nan,
             "test_specificity": lambda i: (~decided[i][y[i] == 0]).mean() if (y[i] == 0).any() else np.nan}
    idx = bootstrap_indices(len(y), n_resamples=R, seed=SEED)
    return {name: bca_by_hand(stat, [stat(i) for i in idx], np.arange(len(y)), confidence=confidence)
            for name, stat in stats.items()}


@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_accuracy_sensitivity_specificity_intervals_are_bca_of_hand_redraws(confidence, hand_bca):
    """Each rate's interval is the BCa interval of that rate recomputed on each redrawn test set: the
    sensitivity interval from the redrawn positives, the specificity interval from the redrawn negatives."""
    y, s = _imbalanced_test_set()
    row = evaluate_utility(interval="bca",
                           kind="binary", label_names=["neg", "pos"], val_labels=VAL_Y, val_scores=VAL_S,
                           test_labels=y, test_scores=s, n_resamples=R, seed=SEED, confidence=confidence)
    assert row["threshold"] == 0.5
    expected = _hand_intervals(y, s, 0.5, confidence, hand_bca)
    # the data make the three intervals distinct, so a column taken for another changes the result
    lows = sorted(low for low, _ in expected.values())
    assert lows[1] - lows[0] > 0.1 and lows[2] - lows[1] > 0.05
    for name, (low, high) in expected.items():
        assert (row[f"{name}_low"], row[f"{name}_high"]) == pytest.approx((low, high), abs=1e-12), name
    # point values: the whole test set at 0.5
    decided = s >= 0.5
    assert row["test_sensitivity"] == pytest.approx(decided[y == 1].mean())
    assert row["test_specificity"] == pytest.approx((~decided[y == 0]).mean())


def test_sensitivity_interval_skips_redraws_without_positives(hand_bca):
    """A redraw that draws no positive has no sensitivity: it is left out of the interval (not counted as 0 or 1),
    while specificity is defined in every redraw. Two positives among 12, both above the threshold: about 19% of
    redraws miss both, so a sensitivity of 1 wherever defined would read as a lower bound of 0 if they counted."""
    y = np.array([1, 1] + [0] * 10)
    s = np.array([0.9, 0.8] + [0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.6, 0.7, 0.05, 0.15])
    idx = bootstrap_indices(len(y), n_resamples=R, seed=SEED)
    no_positive = ~(idx < 2).any(axis=1)
    assert no_positive.sum() > 20
    with pytest.warns(RuntimeWarning) as record:     # AUROC and sensitivity are both undefined there
        row = evaluate_utility(interval="bca",
                               kind="binary", label_names=["neg", "pos"], val_labels=VAL_Y, val_scores=VAL_S,
                               test_labels=y, test_scores=s, n_resamples=R, seed=SEED)
    assert any(f"test_sensitivity: {no_positive.sum()} of {R}" in str(w.message) for w in record)
    expected = _hand_intervals(y, s, 0.5, 0.95, hand_bca)
    assert expected["test_sensitivity"] == (1.0, 1.0)
    for name in ("test_sensitivity", "test_specificity"):
        assert (row[f"{name}_low"], row[f"{name}_high"]) == pytest.approx(expected[name], abs=1e-12), name
