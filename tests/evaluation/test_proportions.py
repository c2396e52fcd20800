"""The exact binomial interval (Clopper and Pearson 1934) against scipy's own, and the counts it refuses."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from dpmed.evaluation.proportions import clopper_pearson


@pytest.mark.parametrize("successes, trials, level", [(0, 1, 0.95), (1, 1, 0.95), (3, 24, 0.95), (12, 24, 0.5),
                                                      (23, 24, 0.99), (0, 30, 0.9)])
def test_the_interval_is_scipy_s_exact_binomial_interval(successes, trials, level):
    expected = binomtest(successes, trials).proportion_ci(confidence_level=level, method="exact")
    assert clopper_pearson(successes, trials, level=level) == pytest.approx((expected.low, expected.high), abs=1e-12)


@pytest.mark.parametrize("successes, trials", [(0, 0), (3, 0), (-1, 5), (6, 5)])
def test_counts_that_are_no_proportion_are_refused(successes, trials):
    """No trials, or successes outside 0..trials: the bounds would be nan Beta quantiles, or for 0 of 0 the whole
    [0, 1], printed as if something had been measured."""
    with pytest.raises(ValueError, match=f"got {successes} of {trials}"):
        clopper_pearson(successes, trials)
