"""The exact binomial interval (Clopper and Pearson 1934) against its Beta quantiles, and the counts it refuses."""

from __future__ import annotations

import pytest
from scipy.stats import beta

from dpmed.evaluation.proportions import clopper_pearson


@pytest.mark.parametrize("successes, trials, level", [(0, 1, 0.95), (1, 1, 0.95), (3, 24, 0.95), (12, 24, 0.5),
                                                      (23, 24, 0.99), (0, 30, 0.9)])
def test_the_interval_is_the_beta_quantiles_of_clopper_and_pearson(successes, trials, level):
    """The bounds are the (1 - level) / 2 quantile of Beta(k, n - k + 1) and the (1 + level) / 2 quantile of
    Beta(k + 1, n - k), closed at 0 and 1 where k is 0 or n."""
    tail = (1 - level) / 2
    low = 0.0 if successes == 0 else beta.ppf(tail, successes, trials - successes + 1)
    high = 1.0 if successes == trials else beta.ppf(1 - tail, successes + 1, trials - successes)
    assert clopper_pearson(successes, trials, level=level) == pytest.approx((low, high), abs=1e-12)


@pytest.mark.parametrize("successes, trials", [(0, 0), (3, 0), (-1, 5), (6, 5)])
def test_counts_that_are_no_proportion_are_refused(successes, trials):
    """No trials, or successes outside 0..trials: the bounds would be nan Beta quantiles, or for 0 of 0 the whole
    [0, 1], printed as if something had been measured."""
    with pytest.raises(ValueError, match=f"got {successes} of {trials}"):
        clopper_pearson(successes, trials)
