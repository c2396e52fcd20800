"""Exact limits and cheap exact tests that pin the reconstruction success gamma without a PLD.

Conventions of :mod:`dpmed.accounting.reconstruction`: per step P = N(0, 1) (the target not in the sum) and
Q = (1 - q) N(0, 1) + q N(mu, 1), mu = 1/sigma (relaxed: Q = (1 - q) N(0, 1) + (q/2) N(mu, 1) + (q/2) N(-mu, 1));
T independent steps; a = (1 - q)^T, the probability that the target is never sampled. gamma is the larger of two
powers at level kappa (the add/remove relation): REMOVE, the test of P^T against Q^T (type-I error under P^T, power
under Q^T: Hayes, Mahloujifar, Balle 2023), and ADD, the test of Q^T against P^T (type-I error under Q^T, power
under P^T). So an upper bound on gamma needs an upper bound in both directions (we take the larger), while the
power of any one level-kappa test, in either direction, is a lower bound on gamma.

Where an upper bound lies within _PIN_TOLERANCE (relative) of such a lower bound, it is returned as the value: this
settles sigma -> 0 (the eps = 1e6 .. 1e15 regime, where a PLD would need absurd grids) and sigma -> inf exactly.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

__all__ = ["accountable_rate", "chi2", "gdp_mu", "ceiling", "pinsker", "degenerate", "pinned", "remove_max_test_power",
           "remove_sum_test_power", "add_max_test_power"]

# When cheap exact bounds sandwich gamma this tightly (relative), return the upper one: far below any PLD error.
_PIN_TOLERANCE = 1e-6
# Phi(c - mu) is 1.0 in doubles once c - mu > 40: beyond mu + 40 every per-step Q-probability below c is ~1.
_FAR_Z = 40.0

# Sampling rates this close to 1 are accounted as 1 (`accountable_rate`).
_RATE_ONE = 1e-9


def accountable_rate(q: float) -> float:
    """The sampling rate handed to dp_accounting: ``q``, or 1 where 1 - q < 1e-9. Why: for such q (1 - q down to
    1e-13 at sigma 0.3, 1e-15 at sigma 0.1-0.3 on a coarser grid) its subsampled Gaussian PLD fails inside
    ``common._log_sub`` ("a must be greater than b"), since log(1 - q) has lost its digits. Rounding up is sound:
    Poisson subsampling's privacy profile grows with q, so every eps, delta or reconstruction bound at rate 1 bounds
    the one at q, and it differs by about 1 - q."""
    return 1.0 if 1.0 - q < _RATE_ONE else q


PINNED_CEILING = "exact limit (pinned): the sigma = 0 power, within 1e-6 (relative) of an exact test's power"
PINNED_NEAR_KAPPA = "exact limit (pinned): kappa + the Pinsker bound, within 1e-6 (relative) of kappa"
NOTHING_RELEASED = "exact: no steps, nothing released (the attacker can only guess)"
NOISE_FREE = "exact: noise-free gradient sums (sigma = 0)"


def chi2(sigma: float, q: float) -> float:
    """chi^2(Q || P) of one worst-case step, q^2 (e^(1/sigma^2) - 1), computed in log space (inf on overflow)."""
    inverse_variance = math.exp(min(-2 * math.log(sigma), 700.0))  # capped where the result is inf anyway
    if inverse_variance == 0:
        return 0.0
    log_expm1 = inverse_variance if inverse_variance > 50 else math.log(math.expm1(inverse_variance))
    log_chi2 = 2 * math.log(q) + log_expm1
    return math.exp(log_chi2) if log_chi2 < 700 else math.inf


def gdp_mu(sigma: float, q: float, steps: int) -> float:
    """mu_T = q sqrt(T) sqrt(e^(1/sigma^2) - 1) = sqrt(T chi^2) (inf on overflow): mu_T^2 bounds the KL divergence
    of the composed pair, and mu_T is the GDP parameter of the central limit theorem."""
    return math.sqrt(steps * chi2(sigma, q))


def ceiling(q: float, steps: int, kappa: float) -> float:
    """The power at sigma = 0, an upper bound for every sigma (worst case and relaxed). Q^T = a P^T + (1 - a) R with
    R invisible to P^T. REMOVE: power 1 - a (1 - kappa). ADD: Q(E) <= kappa forces P(E) <= kappa / a, power
    min(1, kappa / a), which is the larger only when kappa > a / (1 + a)."""
    if q == 1.0:
        return 1.0
    log_never = steps * math.log1p(-q)
    remove = -math.expm1(log_never + math.log1p(-kappa))
    add = math.exp(min(0.0, math.log(kappa) - log_never))
    return max(remove, add)


def pinsker(sigma: float, q: float, steps: int, kappa: float) -> float:
    """kappa + TV <= kappa + mu_T / sqrt(2) (Pinsker with KL <= chi^2): an upper bound in both directions of the
    test (TV is symmetric) and for the relaxed pair (its chi^2 is smaller)."""
    return kappa + gdp_mu(sigma, q, steps) / math.sqrt(2)


def degenerate(sigma: float, q: float, steps: int, kappa: float) -> tuple[float, str] | None:
    """gamma and how it was obtained when nothing is released (T = 0) or the sums are released without noise."""
    if steps == 0:
        return kappa, NOTHING_RELEASED
    if sigma == 0:
        return ceiling(q, steps, kappa), NOISE_FREE  # the attacker sees exactly whether the target was used
    return None


def remove_max_test_power(mu: float, q: float, steps: int, kappa: float, *, folded: bool) -> float:
    """REMOVE: exact power of 'reject P when max_t z_t > c' (``folded``: max_t |z_t|) at level kappa: a lower bound
    on gamma (on the relaxed gamma when folded), tight when mu is large."""
    per_step_level = -math.expm1(math.log1p(-kappa) / steps)  # 1 - (1 - kappa)^(1/T)
    if folded:
        c = -special.ndtri(per_step_level / 2)
        hit = (1 - q) * per_step_level + q * (special.ndtr(mu - c) + special.ndtr(-mu - c))
    else:
        c = -special.ndtri(per_step_level)
        hit = (1 - q) * per_step_level + q * special.ndtr(mu - c)
    return 1.0 if hit >= 1 else -math.expm1(steps * math.log1p(-hit))


def remove_sum_test_power(mu: float, q: float, steps: int, kappa: float) -> float:
    """REMOVE: exact power of 'reject P when sum_t z_t > c' at level kappa: under Q the sum is N(0, T) + mu K with
    K ~ Binomial(T, q). A lower bound on the worst-case gamma, tight when q T mu is large."""
    c = math.sqrt(steps) * -special.ndtri(kappa)
    k = np.arange(steps + 1)
    log_weights = (special.gammaln(steps + 1) - special.gammaln(k + 1) - special.gammaln(steps - k + 1)
                   + special.xlogy(k, q) + special.xlog1py(steps - k, -q))
    return float(np.dot(np.exp(log_weights), special.ndtr((k * mu - c) / math.sqrt(steps))))


def add_max_test_power(mu: float, q: float, steps: int, kappa: float, *, folded: bool) -> float:
    """ADD: exact power of 'reject Q when max_t z_t < c' (``folded``: max_t |z_t| < c) at level kappa, with the
    largest such c: a lower bound on gamma (on the relaxed gamma when folded) that tends to the ADD ceiling
    min(1, kappa / a) as mu -> inf. It pins gamma where that ceiling is 1 (kappa > a, e.g. kappa = 1/N with N of a
    few thousand and 10 epochs), which the REMOVE tests, bounded by 1 - a (1 - kappa), cannot.

    Derivation. Per step, with F(c) = P(z < c) = Phi(c) (folded: P(|z| < c) = 2 Phi(c) - 1),
    Q(z < c) = (1 - q) F(c) + q G(c), G(c) = Phi(c - mu) (folded: the N(+-mu, 1) mass in [-c, c],
    Phi(c - mu) - Phi(-c - mu)). The steps are independent under both hypotheses, so the test has level
    Q(z < c)^T and power F(c)^T. The level grows with c; G <= F (a shifted Gaussian puts less mass below c, or in
    [-c, c]: Anderson's inequality), so c0 with F(c0)^T = kappa has level <= kappa, and the largest c with level
    <= kappa lies between c0 and mu + 40. It is found by bisection on the per-step log level: log space, because
    Phi(c - mu) underflows for the mu of high budgets. At T = 1 this is the likelihood-ratio test of the ADD
    direction (the loss grows with z, or |z|), so the power is the exact ADD gamma there.
    """
    log_level = math.log(kappa) / steps  # per step: Q(z < c) <= kappa^(1/T)
    log_stay = math.log1p(-q) if q < 1 else -math.inf

    def log_f(c: float) -> float:
        if not folded:
            return float(special.log_ndtr(c))
        return math.log(special.erf(c / math.sqrt(2))) if c < 1 else math.log1p(-2 * special.ndtr(-c))

    def log_g(c: float) -> float:
        upper = float(special.log_ndtr(c - mu))
        if not folded:
            return upper
        lower = float(special.log_ndtr(-c - mu))
        return upper + math.log1p(-math.exp(lower - upper)) if lower < upper else -math.inf

    def excess(c: float) -> float:  # log Q(z < c) - log kappa^(1/T), increasing in c
        return float(np.logaddexp(log_stay + log_f(c), math.log(q) + log_g(c))) - log_level

    # c0: F(c0) = kappa^(1/T), from the side of F where the inversion is accurate
    if folded:
        c0 = (math.sqrt(2) * special.erfinv(math.exp(log_level)) if log_level < -1
              else -special.ndtri(-math.expm1(log_level) / 2))
    else:
        c0 = special.ndtri(math.exp(log_level)) if log_level < -1 else -special.ndtri(-math.expm1(log_level))
    c0 = float(c0)
    if not excess(c0) <= 0:  # rounding at the boundary: the test at c0 has power kappa, the trivial bound
        return kappa
    above = max(c0, mu) + _FAR_Z
    if excess(above) <= 0:  # only where mu + 40 rounds to mu (mu > ~1e17): a valid c, with F(c)^T = 1.0
        return math.exp(steps * log_f(above))
    # Bisection to the resolution of doubles (~60 halvings for DP-SGD's mu, ~700 for mu = 1e200) keeps c valid
    # (excess <= 0) at every step, and copes with mu so large that c - mu is coarse.
    c = c0
    while c < (middle := c + (above - c) / 2) < above:
        c, above = (middle, above) if excess(middle) <= 0 else (c, middle)
    return math.exp(steps * log_f(c))


def pinned(sigma: float, q: float, steps: int, kappa: float, *, relaxed: bool) -> tuple[float, str] | None:
    """A certified upper bound on gamma within _PIN_TOLERANCE (relative) of a certified lower bound, and how it was
    obtained, or None. Upper bounds: the sigma = 0 power (both directions) and Pinsker. Lower bounds: kappa and the
    exact tests above, in both directions (folded for the relaxed pair; the sum test is for the worst case only)."""
    top = ceiling(q, steps, kappa)
    near_kappa = pinsker(sigma, q, steps, kappa)
    if near_kappa - kappa <= _PIN_TOLERANCE * kappa:
        return (near_kappa, PINNED_NEAR_KAPPA) if near_kappa < top else (top, PINNED_CEILING)
    mu = 1 / sigma
    if math.isinf(mu):
        return top, PINNED_CEILING  # sigma is subnormal: the maximum tests reach the sigma = 0 power exactly

    def close(lower: float) -> bool:
        return top - lower <= _PIN_TOLERANCE * top

    lower = max(remove_max_test_power(mu, q, steps, kappa, folded=relaxed),
                add_max_test_power(mu, q, steps, kappa, folded=relaxed))
    if not relaxed and not close(lower) and steps <= 1_000_000:
        lower = max(lower, remove_sum_test_power(mu, q, steps, kappa))
    return (top, PINNED_CEILING) if close(lower) else None
