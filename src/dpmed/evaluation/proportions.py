"""The exact interval of a binomial proportion (Clopper and Pearson 1934): how sure a measured rate is, e.g. the
reconstruction attack's success rate (`dpmed.attack.success`) and, in the report, its chance rate."""

from __future__ import annotations

from scipy.stats import beta

__all__ = ["clopper_pearson"]


def clopper_pearson(successes: int, trials: int, *, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided ``level`` interval of a binomial proportion: Beta quantiles, with
    [0, ...] at 0 successes and [..., 1] at ``trials`` successes."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    alpha = 1.0 - level
    lo = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return lo, hi
