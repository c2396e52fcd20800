"""The privacy loss distributions (PLDs) dpmed builds: one step of the Poisson-subsampled Gaussian (the PLD
accountant's and the reconstruction game's), the game's relaxed PLD, and the hockey-stick duality that reads the
attacker's success gamma off them (:mod:`dpmed.accounting.reconstruction` states the game and the methods).

* one step of DP-SGD (:func:`subsampled_gaussian_pld`): dp_accounting's pessimistic connect-the-dots PMF
  (Doroshenko et al. 2022) of its ``GaussianPrivacyLoss``, on its own loss range and grid, with the hockey-stick
  curve evaluated on the whole grid at once. Why not ``from_gaussian_mechanism`` itself: it inverts the privacy loss
  in a Python loop, one grid point at a time, which is most of an eps's cost at small q and large T (benchmarks/
  RESULTS.md, "The PLD grids' cost"); the test suite checks that both build the same PMF;
* worst case: that PLD composed T times;
* relaxed (Kaissis et al. 2023; the attacker does not know the sign of the target's gradient): per step
  Q = (1 - q) N(0, 1) + (q/2) N(mu, 1) + (q/2) N(-mu, 1), whose exact per-step hockey-stick curves have closed
  forms; dp_accounting's connect-the-dots discretisation of those curves, composed T times.

Both read gamma = min(1, inf_eps delta(eps) + e^eps kappa) off the composed PLD (:func:`power_from_delta`): a
pessimistic PLD over-estimates delta at every eps, so gamma is an upper bound on the exact power.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import optimize, special

from dp_accounting.pld import pld_pmf, privacy_loss_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpmed.accounting import _limits

__all__ = ["NotComputable", "MAX_STEPS", "TAIL_Z", "power_from_delta", "step_loss", "interval",
           "subsampled_gaussian_pld", "composed_pld", "worst_case_pld", "relaxed_pld"]

# Restricting e^eps to >= _MIN_SCALE * kappa raises the infimum by at most _MIN_SCALE * kappa (the derivative of
# delta(eps) + e^eps kappa in e^eps lies in [kappa - 1, kappa]): below 1e-4 relative, and upward (safe).
_MIN_SCALE = 1e-4
_EPS_GRID_POINTS = 16
# The PLD grid h. At the reference setting the pessimistic excess of gamma grew like ~0.1 T h^2 (relative: h = 1e-2
# +0.45%, 3e-3 +0.04%, 1e-3 +0.004%), so h = sqrt(1e-3 / T) keeps it near 1e-4. h also stays below 1/400 of the
# range of one step's loss (tiny for large sigma), and is coarsened where the composed losses would need more than
# ~_PLD_MAX_POINTS grid points (small sigma), trading accuracy (upward) for time. The span below is a loose
# over-estimate (dp_accounting truncates its tails and keeps ~1e5 points where the span asks for 1e8), so a cap of
# 4e6 coarsened h far beyond what memory needs at large T and small q: +4.5% at sigma 0.6, q 1e-3, T 2e5 and +23%
# at sigma 1, q 1e-4, T 2e6. At 1e8 those are +0.01% and +0.16%, and the grids kept stay cheap in time and memory
# (measured in benchmarks/RESULTS.md, section "The PLD grids' cost").
_PLD_RELATIVE_EXCESS = 1e-3
_PLD_MAX_INTERVAL = 1e-2
_PLD_RESOLUTION = 400
_PLD_MAX_POINTS = 1e8
# connect-the-dots divides differences of deltas (round-off ~1e-16) by e^h - 1: on finer grids the masses are
# round-off (at sigma 1e14, T 1000: h 6e-16, and the composed PMF's FFT overflowed to a bound of 1 where the exact
# power is kappa). A coarser h is pessimistic, and at this floor costs at most a factor e^(T h) on the bound.
_PLD_MIN_INTERVAL = 1e-12
# A ceiling on the steps, the eps accountant's and the reconstruction bounds'. The grid interval above shrinks as
# 1/sqrt(T) and the composed PLD spans a range that does not shrink, so its points, memory and time grow with T, and
# a mistyped 1e9 steps ran for minutes towards an exhausted memory (measured per T: benchmarks/RESULTS.md, "The PLD
# grids' cost"). Beyond this many steps RDP, whose cost does not grow with T, certifies instead, predictably.
MAX_STEPS = 2_000_000
# dp_accounting's connect-the-dots discretisation divides by e^h - 1: beyond this h it overflows.
_PLD_MAX_COMPUTABLE_INTERVAL = math.log(sys.float_info.max)
# Per-step statistics beyond 12 standard deviations carry < 1e-32 of mass (relaxed PLD and Edgeworth quadrature).
TAIL_Z = 12.0
# A composed loss this far beyond the eps window moves delta on it by less than e^-40 (see relaxed_pld).
_CAP_MARGIN = 40.0


class NotComputable(ArithmeticError):
    """A computation whose intermediate values leave the range of double precision (the reconstruction module then
    puts the sigma = 0 power in its place)."""


# --- the hockey-stick duality ----------------------------------------------------------------------------------------

def power_from_delta(delta: Callable[[float], float], kappa: float, ceiling: float) -> float:
    """min(ceiling, inf_eps delta(eps) + e^eps kappa) over eps in [log(kappa * _MIN_SCALE), log(1/kappa)], and at
    least kappa (the attacker can guess): a composed PLD's delta carries FFT round-off of either sign (to ~1e-14),
    which took the infimum below zero (-6e-15 at q 1, T 1000, sigma 3, kappa 1e-300).

    In s = e^eps, delta is convex (a supremum of affine functions, also for a discrete PLD), so the objective is
    unimodal in eps: a grid brackets the minimum and a bounded Brent search refines it. Beyond log(1/kappa) the
    objective exceeds 1. Scalar calls of dp_accounting's ``get_delta_for_epsilon`` are vectorised over the PMF; its
    array form loops in Python over every grid loss, which is slower for grids this fine.
    """
    log_kappa = math.log(kappa)

    def objective(eps: float) -> float:
        return float(delta(eps)) + math.exp(eps + log_kappa)  # e^eps alone overflows for subnormal kappa

    grid = np.linspace(log_kappa + math.log(_MIN_SCALE), -log_kappa, _EPS_GRID_POINTS)
    values = np.array([objective(e) for e in grid])
    best = int(np.argmin(values))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    refined = optimize.minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
    return max(kappa, min(ceiling, float(values[best]), float(refined.fun)))


def step_loss(mu: float, q: float, z: float, *, relaxed: bool) -> float:
    """The per-step privacy loss at z: log(1 - q + q e^(mu z - mu^2/2)), or the relaxed
    log(1 - q + q e^(-mu^2/2) cosh(mu z)); log1p/expm1 keep it accurate when it is tiny (sigma large)."""
    if relaxed:
        a = abs(z)
        x = mu * a - mu * mu / 2 + math.log1p(math.exp(-2 * mu * a)) - math.log(2)  # log(e^(-mu^2/2) cosh(mu z))
    else:
        x = mu * z - mu * mu / 2
    if q == 1:
        return x
    if x < 30:
        return math.log1p(q * math.expm1(x))
    return float(np.logaddexp(math.log1p(-q), math.log(q) + x))


def interval(sigma: float, q: float, steps: int) -> float:
    """The PLD grid h for T steps (see _PLD_RELATIVE_EXCESS); NotComputable where e^h overflows (tiny sigma)."""
    mu = 1 / sigma
    if not math.isfinite(mu * mu):
        raise NotComputable(f"1 / sigma^2 overflows at sigma = {sigma:.3g}")
    per_step = (step_loss(mu, q, mu + TAIL_Z, relaxed=False)
                - step_loss(mu, q, -TAIL_Z, relaxed=False))
    accurate = min(math.sqrt(_PLD_RELATIVE_EXCESS / steps), _PLD_MAX_INTERVAL, per_step / _PLD_RESOLUTION)
    # A rough size of the range of the composed loss: the steps that include the target (up to a 1e-15 binomial
    # tail) times the range of one step's loss, plus T times its mean (KL <= q mu^2/2 by convexity, and <= chi^2),
    # plus 40 standard deviations of the bulk.
    included = min(steps, q * steps + 9 * math.sqrt(q * (1 - q) * steps) + 10)
    chi2 = _limits.chi2(sigma, q)
    shift = min(chi2, q * mu * mu / 2)
    spread = min(math.sqrt(chi2), math.sqrt(q) * mu * (1 + mu / 2))
    span = included * per_step + steps * shift + 40 * math.sqrt(steps) * spread
    h = max(accurate, span / _PLD_MAX_POINTS, _PLD_MIN_INTERVAL)
    if not h <= _PLD_MAX_COMPUTABLE_INTERVAL:
        raise NotComputable(f"its loss grid would need an interval of {h:.3g} nats, and e^{h:.3g} overflows")
    return h


# --- one step of DP-SGD: the Poisson-subsampled Gaussian ------------------------------------------------------------

def subsampled_gaussian_pld(sigma: float, q: float, h: float) -> pld_lib.PrivacyLossDistribution:
    """One step's PLD at noise multiplier ``sigma`` (sensitivity 1), Poisson rate ``q`` (pass
    ``_limits.accountable_rate(q)``) and grid ``h``, for adding or removing one example: what
    ``pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=h, sampling_prob=q)`` builds (the same
    losses, grid, tails and pessimistic connect-the-dots rounding), built in array arithmetic."""
    adjacency = privacy_loss_mechanism.AdjacencyType
    remove = _gaussian_pmf(sigma, q, h, adjacency.REMOVE)
    if q == 1.0:
        return pld_lib.PrivacyLossDistribution(remove)
    return pld_lib.PrivacyLossDistribution(remove, _gaussian_pmf(sigma, q, h, adjacency.ADD))


def _gaussian_pmf(sigma: float, q: float, h: float, adjacency) -> pld_pmf.PLDPmf:
    """The continuous connect-the-dots branch of dp_accounting's ``_create_pld_pmf_from_monotone_privacy_loss``,
    with :func:`_gaussian_delta` in place of the loss's ``get_delta_for_epsilon``."""
    loss = privacy_loss_mechanism.GaussianPrivacyLoss(sigma, sensitivity=1.0, sampling_prob=q, adjacency_type=adjacency)
    bounds = loss.connect_dots_bounds()
    lower = math.floor(bounds.epsilon_lower / h)
    upper = math.ceil(bounds.epsilon_upper / h)
    deltas = _gaussian_delta(loss, sigma, np.arange(lower, upper + 1) * h)
    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(h, lower, upper, deltas)


def _gaussian_delta(loss, sigma: float, eps: np.ndarray) -> np.ndarray:
    """The hockey-stick divergence delta(eps) of ``loss`` at every eps: ``GaussianPrivacyLoss.get_delta_for_epsilon``
    with its inverse privacy loss in closed form over the array. The loss falls in the output x, so {loss >= eps} is
    {x <= x(eps)} and delta = mu_upper(x <= x(eps)) - e^eps mu_lower(x <= x(eps)). Without subsampling
    x(l) = -1/2 - l sigma^2 (REMOVE; ADD adds the sensitivity 1); with rate q, l is first mapped to
    log(1 + (e^{+-eps} - 1) / q) (REMOVE +, ADD -: the privacy loss before subsampling)."""
    add, q = loss.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD, loss.sampling_prob
    delta = np.zeros_like(eps)
    if q == 1.0:
        inverted = np.ones_like(eps, dtype=bool)
        unsampled = eps
    else:
        limit = -math.log1p(-q) if add else math.log1p(-q)
        # ADD: delta is 0 at eps >= -log(1 - q); REMOVE: 1 - e^eps at eps <= log(1 - q)
        inverted = eps < limit if add else eps > limit
        if not add:
            delta[~inverted] = -np.expm1(eps[~inverted])
        signed = -eps[inverted] if add else eps[inverted]
        # log((1/q) e^signed + 1 - 1/q) = d + log(1 - e^(log(1/q - 1) - d)), d = signed + log(1/q); at the limit it
        # tends to -inf (x to +-inf), which dp_accounting also returns within math.isclose of the limit
        d = signed + np.log(1 / q)
        ratio = np.exp(np.log(1 / q - 1) - d)
        at_limit = (ratio >= 1.0) | (np.abs(eps[inverted] - limit) <= 1e-9 * np.maximum(np.abs(eps[inverted]),
                                                                                           abs(limit)))
        with np.errstate(divide="ignore", invalid="ignore"):
            before = np.where(signed == 0, np.log(1 / q + (1 - 1 / q)), d + np.log1p(-ratio))
        unsampled = np.where(at_limit, -np.inf, before)
        unsampled = -unsampled if add else unsampled
    x = (-0.5 - unsampled * sigma ** 2) + (1.0 if add else 0.0)
    delta[inverted] = loss.mu_upper_cdf(x) - np.exp(eps[inverted] + loss.mu_lower_log_cdf(x))
    return np.clip(delta, 0.0, 1.0)


# --- worst case: that PLD composed T times ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def composed_pld(sigma: float, q: float, steps: int) -> pld_lib.PrivacyLossDistribution:
    """Cached: reconstruction_risk reads the same composed PLD at kappa and at each false-positive rate."""
    return subsampled_gaussian_pld(sigma, _limits.accountable_rate(q), interval(sigma, q, steps)).self_compose(steps)


def worst_case_pld(sigma: float, q: float, steps: int, kappa: float) -> float:
    return power_from_delta(composed_pld(sigma, q, steps).get_delta_for_epsilon, kappa,
                             _limits.ceiling(q, steps, kappa))


# --- relaxed: connect-the-dots PLD from the exact per-step hockey-stick curve ----------------------------------------

@dataclass(frozen=True)
class _RelaxedStep:
    """One step of the relaxed game: P = N(0,1), Q = (1-q) N(0,1) + (q/2) N(mu,1) + (q/2) N(-mu,1).

    The loss L(z) grows with |z| from L(0) = ``loss_min`` >= log(1-q), so {L > eps} = {|z| > a(eps)} and both
    hockey-stick curves have closed forms:
    REMOVE (upper Q, lower P): delta(eps) = Q(|z| > a(eps)) - e^eps P(|z| > a(eps));
    ADD (upper P, lower Q, loss -L): delta(eps) = P(|z| < a(-eps)) - e^eps Q(|z| < a(-eps)).
    The e^eps P and e^eps Q terms are formed in log space: they are at most 1, while e^eps alone may overflow.
    """

    mu: float
    q: float

    @property
    def loss_min(self) -> float:
        # log(1 - q + q e^(-mu^2/2)); log1p(-q (1 - e^(-mu^2/2))) is log(0), a domain error, at q = 1 once
        # e^(-mu^2/2) rounds to 0 (sigma 0.1 and below)
        if self.q == 1:
            return -self.mu ** 2 / 2
        return float(np.logaddexp(math.log1p(-self.q), math.log(self.q) - self.mu ** 2 / 2))

    def threshold(self, eps: np.ndarray) -> np.ndarray:
        """a(eps) >= 0 with L(a) = eps; 0 where eps <= loss_min."""
        with np.errstate(invalid="ignore", divide="ignore"):  # only where eps <= loss_min, replaced by 0 below
            # log y with y = cosh(mu a) = (e^eps - (1 - q)) e^(mu^2/2) / q
            log_excess = np.where(eps > 0, eps + np.log1p(-(1 - self.q) * np.exp(-np.abs(eps))),
                                  np.log(np.expm1(np.minimum(eps, 0)) + self.q))
            log_y = np.maximum(log_excess + self.mu ** 2 / 2 - math.log(self.q), 0.0)
            arccosh = log_y + np.log1p(np.sqrt(-np.expm1(-2 * log_y)))
        return np.where(eps > self.loss_min, arccosh / self.mu, 0.0)

    def _log_outside(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P(|z| > a) and log Q(|z| > a)."""
        log_p = math.log(2) + special.log_ndtr(-a)
        log_tails = np.logaddexp(special.log_ndtr(self.mu - a), special.log_ndtr(-self.mu - a))
        log_q = np.logaddexp(math.log1p(-self.q) + log_p if self.q < 1 else -np.inf, math.log(self.q) + log_tails)
        return log_p, log_q

    def delta_remove(self, eps: np.ndarray) -> np.ndarray:
        log_p, log_q = self._log_outside(self.threshold(eps))
        return np.clip(np.exp(log_q) - np.exp(eps + log_p), 0.0, 1.0)

    def delta_add(self, eps: np.ndarray) -> np.ndarray:
        a = self.threshold(-eps)
        p_inside = special.erf(a / math.sqrt(2))
        q_inside = (1 - self.q) * p_inside + self.q * (special.ndtr(a - self.mu) - special.ndtr(-a - self.mu))
        with np.errstate(divide="ignore"):  # log 0 = -inf where the set is empty
            delta = p_inside - np.exp(eps + np.log(q_inside))
        return np.clip(np.where(-eps > self.loss_min, delta, 0.0), 0.0, 1.0)


def _connect_dots(delta: Callable[[np.ndarray], np.ndarray], low: float, high: float, h: float) -> pld_pmf.PLDPmf:
    """dp_accounting's pessimistic connect-the-dots PMF (Doroshenko et al. 2022, Alg. 1) on the losses
    [low, high]: mass below ``low`` is moved up to it, mass above ``high`` to +inf (both pessimistic)."""
    lo = math.floor(low / h)
    hi = max(math.ceil(high / h), lo + 1)
    deltas = np.minimum.accumulate(delta(np.arange(lo, hi + 1) * h))
    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(h, lo, hi, deltas)


def relaxed_pld(sigma: float, q: float, steps: int, kappa: float) -> float:
    step = _RelaxedStep(mu=1 / sigma, q=q)
    h = interval(sigma, q, steps)
    loss_top = step_loss(step.mu, q, step.mu + TAIL_Z, relaxed=True)  # Q(|z| > mu + 12) < 1e-32
    eps_low, eps_high = math.log(kappa) + math.log(_MIN_SCALE), -math.log(kappa)
    # REMOVE: the other steps' losses are >= loss_min, so a step loss above eps_high - (T-1) loss_min + margin puts
    # the composed loss above every eps we evaluate by the margin: moving it to +inf changes delta by < e^-40.
    remove_top = min(loss_top, eps_high - (steps - 1) * min(step.loss_min, 0.0) + _CAP_MARGIN)
    remove = _connect_dots(step.delta_remove, step.loss_min, remove_top, h)
    # ADD: losses are <= -loss_min; one below eps_low - (T-1)(-loss_min) - margin keeps the sum below every eps,
    # where moving it up to that floor changes nothing.
    add_bottom = max(-loss_top, eps_low - (steps - 1) * max(-step.loss_min, 0.0) - _CAP_MARGIN)
    add = _connect_dots(step.delta_add, add_bottom, -step.loss_min, h)
    pld = pld_lib.PrivacyLossDistribution(remove.self_compose(steps), add.self_compose(steps))
    return power_from_delta(pld.get_delta_for_epsilon, kappa, _limits.ceiling(q, steps, kappa))
