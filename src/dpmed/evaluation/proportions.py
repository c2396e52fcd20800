"""The exact interval of a binomial proportion (Clopper and Pearson 1934): how sure a measured rate is, e.g. the
reconstruction attack's success rate (`dpmed.attack.success`) and, in the report, its chance rate."""

from __future__ import annotations

from scipy.stats import binomtest

__all__ = ["clopper_pearson"]


def clopper_pearson(successes: int, trials: int, *, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided ``level`` interval of a binomial proportion, scipy's: Beta quantiles,
    with [0, ...] at 0 successes and [..., 1] at ``trials`` successes. Checked here first, so that a bad count is
    named as successes of trials rather than by scipy's k and n."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    interval = binomtest(successes, trials).proportion_ci(confidence_level=level, method="exact")
    return float(interval.low), float(interval.high)
