"""Reconstruction risk of DP-SGD: how likely an informed attacker is to rebuild one training image.

Reconstruction robustness (Balle, Cherubin, Hayes 2022, "Reconstructing training data with informed adversaries";
Hayes, Mahloujifar, Balle 2023, "Bounding training data reconstruction in DP-SGD"): an attacker who knows every
training image but the target, the training algorithm and its randomness except the noise, and who would succeed
with prior probability ``kappa`` without seeing the model (``kappa = 1/N``: guessing uniformly among N candidates),
succeeds after seeing the model with probability at most

    gamma = 1 - f(kappa),

where f is the trade-off curve (Dong, Roth, Su 2022) of the T released noisy gradient sums. Per step, with
mu = 1 / sigma, the attacker compares P = N(0, 1) (the target not in the sum) with the Poisson mixture
Q = (1 - q) N(0, 1) + q N(mu, 1) (the target included with probability q, its clipped gradient pointing along the
worst direction). gamma is the power at type-I error kappa of the likelihood-ratio test of P^T against Q^T, so
1 - gamma is the smallest type-II error any attacker can reach, and ``gamma >= kappa`` always (guessing).

Ways to compute it, in a registry (``RECONSTRUCTION_METHODS``):

* ``pld`` (the bound): from dp_accounting's privacy loss distribution (PLD) of the Poisson-subsampled Gaussian,
  composed T times (pessimistic connect-the-dots discretisation, Doroshenko et al. 2022), through the hockey-stick
  duality gamma = min(1, inf_eps delta(eps) + e^eps kappa) (power = sup{Q(E) : P(E) <= kappa}
  <= Q(E) - e^eps P(E) + e^eps kappa). A pessimistic PLD over-estimates delta at every eps, so the result is an
  upper bound on the exact power, up to the discretisation and a 1e-15 truncation.
* ``edgeworth``: a second-order Edgeworth expansion of the T-fold sum of per-step privacy losses under P and under Q
  (the approach of Zheng et al. 2020, "Sharp composition bounds for Gaussian DP via Edgeworth expansion", used by
  Kaissis et al. 2023). An approximation, not a bound: an independent cross-check of the PLD value.
* ``gdp``: the central limit theorem of Gaussian DP (Dong, Roth, Su 2022; Bu et al. 2020), mu_T =
  q sqrt(T) sqrt(e^(1/sigma^2) - 1), gamma = Phi(Phi^-1(kappa) + mu_T). A sanity value only: it is neither an upper
  nor a lower bound and is poor outside its regime (large T, small q, moderate sigma).

Neighbouring relation. The reconstruction game compares the model trained without the target (P) with the model
trained with it (Q): that is dp_accounting's REMOVE direction (``mu_upper`` = the mixture), the direction
Hayes, Mahloujifar and Balle bound. dp_accounting's PLD for ``ADD_OR_REMOVE_ONE`` keeps both directions and
reports the larger delta at each eps, and so do we: our gamma is the larger of the power of the test of P against Q
(the paper's) and of Q against P, the same add/remove relation our eps uses. At the reference setting of
METHODS.md s.7 (q = 0.2525, T = 300, sigma = 3.1852, kappa = 1/8111) the REMOVE direction is the larger one
(1.214%; ADD: 1.048%), so our value is the paper's 1.21%.

Relaxed threat model (Kaissis et al. 2023, "Bounding data reconstruction attacks with the hypothesis testing
interpretation of differential privacy"; Ziller et al. 2024, "Reconciling privacy and accuracy in AI for medical
imaging"): the attacker does not know the sign of the target's gradient, so per step
Q = (1 - q) N(0, 1) + (q/2) N(mu, 1) + (q/2) N(-mu, 1), log-likelihood ratio log(1 - q + q e^(-mu^2/2) cosh(mu z)).
Computed with dp_accounting's connect-the-dots discretisation from its exact per-step hockey-stick curve.

High budgets, and the shortcuts (in ``_limits``). No sigma does better for the attacker than sigma = 0, where the
gradient sum shows exactly whether the target was sampled (probability 1 - a, a = (1-q)^T): gamma_inf =
1 - a (1 - kappa), or, in the other add/remove direction, min(1, kappa / a), the larger when kappa > a / (1 + a)
(with kappa = 1/N and 10 epochs: a ~ e^-10, so gamma_inf = 1). And gamma <= kappa + mu_T / sqrt(2) (Pinsker). When
one of these upper bounds is within 1e-6 (relative) of a lower bound (kappa, or the exact power of a test on the
maximum or the sum of the per-step statistics, in either direction), that upper bound is returned without a PLD:
this keeps sigma -> 0 (eps = 1e6 .. 1e15) fast and free of overflow, and sigma -> inf exact.

Where a computation cannot be carried out in double precision (a PLD whose grid interval h makes e^h overflow,
an Edgeworth expansion of a loss whose variance is lost to round-off), its place is taken by the sigma = 0 power,
an upper bound at every sigma, and the record says so. Each value carries how it was obtained (``*_via`` fields of
:class:`ReconstructionRisk`): the method's label ("PLD", "Edgeworth expansion", "GDP/CLT"), "exact: ..." or
"exact limit (pinned): ...", or "trivial ceiling (the sigma = 0 power): PLD not computable in double precision
(why)".

Accuracy. The PLD value exceeds the exact power by < 1e-3 relative in our checks (typically ~1e-4), and by at most
~1e-15 absolute from dp_accounting's tail truncation, which dominates only for kappa below ~1e-13. Where the two
add/remove directions have close powers it can exceed both by more (T = 1, q = 0.5, sigma = 0.5, kappa = 0.3: 4%):
dp_accounting's PLD takes the larger delta at each eps before the duality, and inf_eps of a maximum is at least the
maximum of the infima; still an upper bound. The Edgeworth
value is within 3% of the PLD for sigma >= 1 at kappa >= 1e-4, and off by 10-20% and more for sigma < 1 with few
steps, or for very small kappa (its far tail is unreliable).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np
from scipy import integrate, optimize, special

from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpmed.accounting import _arguments, _limits

__all__ = ["RECONSTRUCTION_METHODS", "ReconstructionMethod", "reconstruction_method", "MIA_FPRS",
           "NEIGHBOUR_RECONSTRUCTION", "ReconstructionRisk", "default_kappa", "reconstruction_bound",
           "relaxed_reconstruction_bound", "membership_inference_tpr", "reconstruction_risk"]

NEIGHBOUR_RECONSTRUCTION = ("add or remove the target image (Poisson sampling); the larger of the tests "
                            "'without vs with the target' (Hayes et al. 2023) and 'with vs without'")
# The false-positive rates at which a privacy card reports the optimal membership-inference TPR.
MIA_FPRS = (0.001, 0.01)

# Restricting e^eps to >= _MIN_SCALE * kappa raises the infimum by at most _MIN_SCALE * kappa (the derivative of
# delta(eps) + e^eps kappa in e^eps lies in [kappa - 1, kappa]): below 1e-4 relative, and upward (safe).
_MIN_SCALE = 1e-4
_EPS_GRID_POINTS = 16
# The PLD grid h. At the reference setting the pessimistic excess of gamma grew like ~0.1 T h^2 (relative: h = 1e-2
# +0.45%, 3e-3 +0.04%, 1e-3 +0.004%), so h = sqrt(1e-3 / T) keeps it near 1e-4. h also stays below 1/400 of the
# range of one step's loss (tiny for large sigma), and is coarsened where the composed losses would need more than
# ~_PLD_MAX_POINTS grid points (small sigma), trading accuracy (upward) for time.
_PLD_RELATIVE_EXCESS = 1e-3
_PLD_MAX_INTERVAL = 1e-2
_PLD_RESOLUTION = 400
_PLD_MAX_POINTS = 4e6
# dp_accounting's connect-the-dots discretisation divides by e^h - 1: beyond this h it overflows.
_PLD_MAX_COMPUTABLE_INTERVAL = math.log(sys.float_info.max)
# Per-step statistics beyond 12 standard deviations carry < 1e-32 of mass (relaxed PLD and Edgeworth quadrature).
_TAIL_Z = 12.0
# A composed loss this far beyond the eps window moves delta on it by less than e^-40 (see _relaxed_pld).
_CAP_MARGIN = 40.0


def _check(noise_multiplier: object, sample_rate: object, steps: object, kappa: object,
           kappa_name: str = "kappa") -> tuple[float, float, int, float]:
    sigma = _arguments.positive("noise_multiplier", noise_multiplier, allow_zero=True,
                                hint="it is the noise std divided by the clipping norm (0: non-private run)")
    q = _arguments.probability("sample_rate", sample_rate, include_one=True,
                               hint="use the Poisson rate q = expected batch size / N")
    steps = _arguments.count("steps", steps, minimum=0, hint="count optimiser steps")
    hint = ("the attacker's prior success probability; kappa = 1/N is a uniform guess among the N training images"
            if kappa_name == "kappa" else "the membership-inference false-positive rate, e.g. 0.001")
    kappa = _arguments.probability(kappa_name, kappa, include_one=False, hint=hint)
    return sigma, q, steps, kappa


class _NotComputable(ArithmeticError):
    """A computation whose intermediate values leave the range of double precision (see _evaluate)."""


def default_kappa(n_train: int) -> float:
    """1 / N: the success of an attacker who guesses uniformly among the N training images (METHODS.md s.7)."""
    n_train = _arguments.count("n_train", n_train, minimum=2, hint="pass the number of training images")
    return 1.0 / n_train


# --- the hockey-stick duality ----------------------------------------------------------------------------------------

def _power_from_delta(delta: Callable[[float], float], kappa: float, ceiling: float) -> float:
    """min(ceiling, inf_eps delta(eps) + e^eps kappa) over eps in [log(kappa * _MIN_SCALE), log(1/kappa)].

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
    return min(ceiling, float(values[best]), float(refined.fun))


def _step_loss(mu: float, q: float, z: float, *, relaxed: bool) -> float:
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


def _interval(sigma: float, q: float, steps: int) -> float:
    """The PLD grid h for T steps (see _PLD_RELATIVE_EXCESS); _NotComputable where e^h overflows (tiny sigma)."""
    mu = 1 / sigma
    if not math.isfinite(mu * mu):
        raise _NotComputable(f"1 / sigma^2 overflows at sigma = {sigma:.3g}")
    per_step = (_step_loss(mu, q, mu + _TAIL_Z, relaxed=False)
                - _step_loss(mu, q, -_TAIL_Z, relaxed=False))
    accurate = min(math.sqrt(_PLD_RELATIVE_EXCESS / steps), _PLD_MAX_INTERVAL, per_step / _PLD_RESOLUTION)
    # A rough size of the range of the composed loss: the steps that include the target (up to a 1e-15 binomial
    # tail) times the range of one step's loss, plus T times its mean (KL <= q mu^2/2 by convexity, and <= chi^2),
    # plus 40 standard deviations of the bulk.
    included = min(steps, q * steps + 9 * math.sqrt(q * (1 - q) * steps) + 10)
    chi2 = _limits.chi2(sigma, q)
    shift = min(chi2, q * mu * mu / 2)
    spread = min(math.sqrt(chi2), math.sqrt(q) * mu * (1 + mu / 2))
    span = included * per_step + steps * shift + 40 * math.sqrt(steps) * spread
    h = max(accurate, span / _PLD_MAX_POINTS)
    if not h <= _PLD_MAX_COMPUTABLE_INTERVAL:
        raise _NotComputable(f"its loss grid would need an interval of {h:.3g} nats, and e^{h:.3g} overflows")
    return h


# --- worst case: dp_accounting's PLD of the Poisson-subsampled Gaussian ----------------------------------------------

@functools.lru_cache(maxsize=2)
def _composed_pld(sigma: float, q: float, steps: int) -> pld_lib.PrivacyLossDistribution:
    """Cached: reconstruction_risk reads the same composed PLD at kappa and at each false-positive rate."""
    pld = pld_lib.from_gaussian_mechanism(sigma, sensitivity=1.0, sampling_prob=q,
                                          value_discretization_interval=_interval(sigma, q, steps))
    return pld.self_compose(steps)


def _worst_case_pld(sigma: float, q: float, steps: int, kappa: float) -> float:
    return _power_from_delta(_composed_pld(sigma, q, steps).get_delta_for_epsilon, kappa,
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
        return math.log1p(-self.q * -math.expm1(-self.mu ** 2 / 2))

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


def _relaxed_pld(sigma: float, q: float, steps: int, kappa: float) -> float:
    step = _RelaxedStep(mu=1 / sigma, q=q)
    h = _interval(sigma, q, steps)
    loss_top = _step_loss(step.mu, q, step.mu + _TAIL_Z, relaxed=True)  # Q(|z| > mu + 12) < 1e-32
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
    return _power_from_delta(pld.get_delta_for_epsilon, kappa, _limits.ceiling(q, steps, kappa))


# --- Edgeworth expansion (worst case) --------------------------------------------------------------------------------

def _loss_cumulants(mu: float, q: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """First four cumulants of the per-step loss L(z) = log(1 - q + q e^(mu z - mu^2/2)) under P (z ~ N(0,1)) and
    under Q (z ~ (1-q) N(0,1) + q N(mu,1)), by adaptive quadrature over +-12 sd of each Gaussian component, split
    at the kink of L (where its two terms are equal)."""
    kink = mu / 2 + (math.log1p(-q) - math.log(q)) / mu if q < 1 else None

    def expect(g: Callable[[float], float], components: list[tuple[float, float]], epsabs: float) -> float:
        total = 0.0
        for weight, centre in components:
            if weight == 0:
                continue
            lo, hi = centre - _TAIL_Z, centre + _TAIL_Z
            points = [kink] if kink is not None and lo < kink < hi else None
            value, _ = integrate.quad(lambda z: math.exp(-(z - centre) ** 2 / 2) * g(z), lo, hi, points=points,
                                      epsabs=epsabs * math.sqrt(2 * math.pi), epsrel=1e-10, limit=400)
            total += weight * value / math.sqrt(2 * math.pi)
        return total

    def loss(z: float) -> float:
        return _step_loss(mu, q, z, relaxed=False)

    def cumulants(components: list[tuple[float, float]]) -> tuple[float, ...]:
        # absolute tolerances scaled by the size of L: its mean (a KL divergence) is a small difference of large
        # terms when sigma is large, and the third central moment is exactly 0 when q = 1
        size = math.sqrt(expect(lambda z: loss(z) ** 2, components, 0.0))
        mean = expect(loss, components, 1e-10 * size)
        m2 = expect(lambda z: (loss(z) - mean) ** 2, components, 0.0)
        m3, m4 = (expect(lambda z, k=k: (loss(z) - mean) ** k, components, 1e-10 * m2 ** (k / 2)) for k in (3, 4))
        return mean, m2, m3, m4 - 3 * m2 * m2

    return cumulants([(1.0, 0.0)]), cumulants([(1 - q, 0.0), (q, mu)])


def _edgeworth_survival(x: np.ndarray | float, skew: float, excess_kurtosis: float) -> np.ndarray:
    """P(S > x) for a standardised sum by the second-order Edgeworth expansion (Hermite polynomials He_k):
    1 - Phi(x) + phi(x) [skew/6 He2(x) + kurt/24 He3(x) + skew^2/72 He5(x)]."""
    x = np.asarray(x, dtype=float)
    he2, he3, he5 = x ** 2 - 1, x ** 3 - 3 * x, x ** 5 - 10 * x ** 3 + 15 * x
    density = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return special.ndtr(-x) + density * (skew / 6 * he2 + excess_kurtosis / 24 * he3 + skew ** 2 / 72 * he5)


def _worst_case_edgeworth(sigma: float, q: float, steps: int, kappa: float) -> float:
    under_p, under_q = _loss_cumulants(1 / sigma, q)

    def standardised(cumulants: tuple[float, ...]) -> tuple[float, float, float, float]:
        # The quadrature resolves the mean to ~1e-10 of the loss's size: a variance below (1e-8 mean)^2 is round-off
        # (e.g. mu > ~50: under P, e^(mu z - mu^2/2) underflows and the loss is constant in double precision).
        if not ((1e-8 * cumulants[0]) ** 2 < cumulants[1] and (steps * cumulants[1]) ** 2 < math.inf):
            raise _NotComputable(f"the per-step loss variance {cumulants[1]:.3g} is not resolved next to its mean "
                                 f"{cumulants[0]:.3g}")
        mean, var, k3, k4 = (steps * c for c in cumulants)
        return mean, math.sqrt(var), k3 / var ** 1.5, k4 / var ** 2

    mean_p, sd_p, skew_p, kurt_p = standardised(under_p)
    mean_q, sd_q, skew_q, kurt_q = standardised(under_q)
    # The threshold t with P(L_sum > t) = kappa. The expansion need not be monotone in the far tail: take the
    # downward crossing nearest to the Gaussian quantile.
    gaussian = -special.ndtri(kappa)
    xs = np.linspace(gaussian - 6, gaussian + 6, 2401)
    excess = _edgeworth_survival(xs, skew_p, kurt_p) - kappa
    crossings = np.nonzero((excess[:-1] >= 0) & (excess[1:] < 0))[0]
    if crossings.size:
        i = crossings[np.argmin(np.abs(xs[crossings] - gaussian))]
        x = optimize.brentq(lambda v: float(_edgeworth_survival(v, skew_p, kurt_p)) - kappa, xs[i], xs[i + 1],
                            xtol=1e-12)
    else:
        x = gaussian
    gamma = float(_edgeworth_survival((mean_p + x * sd_p - mean_q) / sd_q, skew_q, kurt_q))
    # the exact power lies in [kappa, the sigma = 0 power]; clipping the approximation there only moves it closer
    return min(max(gamma, kappa), _limits.ceiling(q, steps, kappa))


# --- GDP / CLT -------------------------------------------------------------------------------------------------------

def _gdp(sigma: float, q: float, steps: int, kappa: float) -> float:
    mu_t = _limits.gdp_mu(sigma, q, steps)
    return 1.0 if mu_t > 50 else float(special.ndtr(special.ndtri(kappa) + mu_t))  # Phi(40) is 1.0 in doubles


# --- the registry and the public functions ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ReconstructionMethod:
    """One way to compute the worst-case gamma: its name, the text a privacy card prints next to its value, whether
    it is an upper bound on the exact power (else an approximation), whether it defers to the exact limits where
    they pin gamma (see the module docstring), its computation ``gamma(sigma, q, steps, kappa)`` for sigma > 0
    and steps > 0, and the short label that says a value came from that computation."""

    name: str
    description: str
    is_upper_bound: bool
    uses_exact_limits: bool
    gamma: Callable[[float, float, int, float], float]
    label: str


_REGISTRY = {m.name: m for m in (
    ReconstructionMethod("pld", "PLD (dp_accounting, pessimistic connect-the-dots, add/remove): an upper bound",
                         True, True, _worst_case_pld, "PLD"),
    ReconstructionMethod("edgeworth", "second-order Edgeworth expansion of the composed privacy loss: an "
                                      "approximation", False, True, _worst_case_edgeworth, "Edgeworth expansion"),
    ReconstructionMethod("gdp", "Gaussian-DP central limit theorem, mu = q sqrt(T) sqrt(e^(1/sigma^2) - 1): a "
                                "sanity value only", False, False, _gdp, "GDP/CLT"),
)}
RECONSTRUCTION_METHODS = tuple(_REGISTRY)


def reconstruction_method(name: str) -> ReconstructionMethod:
    """The registry entry of method ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"method must be one of {', '.join(RECONSTRUCTION_METHODS)}, got {name!r}")
    return _REGISTRY[name]


def _evaluate(compute: Callable[[float, float, int, float], float], label: str, sigma: float, q: float, steps: int,
              kappa: float, *, exact_limits: bool, relaxed: bool) -> tuple[float, str]:
    """gamma and how it was obtained: the degenerate cases, then (``exact_limits``) the pinned limits, then
    ``compute``. Where ``compute`` cannot be carried out in double precision, the sigma = 0 power, an upper bound at
    every sigma, takes its place. Only two failures are caught: _NotComputable, raised where we detect it up front,
    and OverflowError, which Python's math functions raise when a float result exceeds the double range (what
    dp_accounting's PLD code hits on grids coarser than the ones we detect)."""
    found = _limits.degenerate(sigma, q, steps, kappa)
    if found is None and exact_limits:
        found = _limits.pinned(sigma, q, steps, kappa, relaxed=relaxed)
    if found is not None:
        return found
    try:
        return compute(sigma, q, steps, kappa), label
    except (_NotComputable, OverflowError) as error:
        return (_limits.ceiling(q, steps, kappa),
                f"trivial ceiling (the sigma = 0 power): {label} not computable in double precision ({error})")


def _worst_case(sigma: float, q: float, steps: int, kappa: float, method: str = "pld") -> tuple[float, str]:
    info = reconstruction_method(method)
    return _evaluate(info.gamma, info.label, sigma, q, steps, kappa, exact_limits=info.uses_exact_limits,
                     relaxed=False)


def _relaxed(sigma: float, q: float, steps: int, kappa: float) -> tuple[float, str]:
    return _evaluate(_relaxed_pld, "PLD", sigma, q, steps, kappa, exact_limits=True, relaxed=True)


def reconstruction_bound(*, noise_multiplier: float, sample_rate: float, steps: int, kappa: float,
                         method: str = "pld") -> float:
    """Worst-case reconstruction success gamma = 1 - f(kappa) of DP-SGD (Hayes, Mahloujifar, Balle 2023).

    ``kappa`` is the attacker's prior success (``default_kappa(n_train)`` = 1/N). ``method`` picks the computation
    (see the module docstring): ``pld`` is the upper bound to report, ``edgeworth`` an independent approximation,
    ``gdp`` a sanity value only. ``steps = 0`` gives kappa (nothing released); ``noise_multiplier = 0`` gives the
    exact power when the gradient sum is released without noise: 1 - (1-q)^T (1 - kappa), 1 when q = 1 (and, in
    the other add/remove direction, min(1, kappa / (1-q)^T) if that is larger). :func:`reconstruction_risk` also
    says how each value was obtained.
    """
    sigma, q, steps, kappa = _check(noise_multiplier, sample_rate, steps, kappa)
    reconstruction_method(method)  # an unknown method is an error before anything else
    return _worst_case(sigma, q, steps, kappa, method)[0]


def relaxed_reconstruction_bound(*, noise_multiplier: float, sample_rate: float, steps: int, kappa: float) -> float:
    """Reconstruction success when the attacker does not know the sign of the target's gradient (Kaissis et al.
    2023; the "relaxed" threat model of Ziller et al. 2024): the power at level kappa of the test of N(0,1)^T
    against ((1-q) N(0,1) + (q/2) N(mu,1) + (q/2) N(-mu,1))^T, mu = 1/sigma.

    An upper bound (pessimistic connect-the-dots PLD, both add/remove directions, as for the worst case). It never
    exceeds the worst case: per step the relaxed pair is a mixture of the worst-case pair and its mirror image, and
    mixing cannot lower a trade-off curve; composition preserves the order. Degenerate cases as
    :func:`reconstruction_bound`.
    """
    sigma, q, steps, kappa = _check(noise_multiplier, sample_rate, steps, kappa)
    return _relaxed(sigma, q, steps, kappa)[0]


def membership_inference_tpr(*, noise_multiplier: float, sample_rate: float, steps: int, fpr: float) -> float:
    """The highest true-positive rate any membership-inference attack on the target reaches at false-positive rate
    ``fpr``: 1 - f(fpr) on the same trade-off curve as :func:`reconstruction_bound` (the informed, worst-case
    attacker; PLD upper bound)."""
    sigma, q, steps, fpr = _check(noise_multiplier, sample_rate, steps, fpr, kappa_name="fpr")
    return _worst_case(sigma, q, steps, fpr)[0]


@dataclass(frozen=True)
class ReconstructionRisk:
    """The reconstruction and membership-inference risk of one DP-SGD run, with the assumptions it rests on.

    ``worst_case`` is the bound to report (PLD, or an exact limit where one pins it); ``worst_case_edgeworth`` and
    ``gdp`` are cross-checks (the second a sanity value only); ``relaxed`` assumes the attacker does not know the
    sign of the target's gradient; ``tpr_at_fpr`` maps each false-positive rate in MIA_FPRS to the optimal attack's
    true-positive rate. Each ``*_via`` field says how the value of the same name was obtained (a method's label such
    as "PLD", "exact: ...", "exact limit (pinned): ...", or "trivial ceiling (the sigma = 0 power): ... not
    computable in double precision (why)"; see the module docstring), for a privacy card to print next to it.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int
    kappa: float
    worst_case: float
    worst_case_edgeworth: float
    relaxed: float
    gdp: float
    tpr_at_fpr: Mapping[float, float]
    assumptions: str
    worst_case_via: str
    worst_case_edgeworth_via: str
    relaxed_via: str
    gdp_via: str
    tpr_at_fpr_via: Mapping[float, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "tpr_at_fpr", MappingProxyType(dict(self.tpr_at_fpr)))
        object.__setattr__(self, "tpr_at_fpr_via", MappingProxyType(dict(self.tpr_at_fpr_via)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (false-positive rates become string keys, as JSON requires)."""
        return {"noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate, "steps": self.steps,
                "kappa": self.kappa, "worst_case": self.worst_case,
                "worst_case_edgeworth": self.worst_case_edgeworth, "relaxed": self.relaxed, "gdp": self.gdp,
                "tpr_at_fpr": {repr(fpr): tpr for fpr, tpr in self.tpr_at_fpr.items()},
                "assumptions": self.assumptions, "worst_case_via": self.worst_case_via,
                "worst_case_edgeworth_via": self.worst_case_edgeworth_via, "relaxed_via": self.relaxed_via,
                "gdp_via": self.gdp_via,
                "tpr_at_fpr_via": {repr(fpr): via for fpr, via in self.tpr_at_fpr_via.items()}}


def reconstruction_risk(*, noise_multiplier: float, sample_rate: float, steps: int,
                        kappa: float) -> ReconstructionRisk:
    """Every reconstruction number of METHODS.md s.7 for one DP-SGD run, how each was obtained, and the
    assumptions behind them."""
    sigma, q, steps, kappa = _check(noise_multiplier, sample_rate, steps, kappa)
    setting = (sigma, q, steps)
    assumptions = (
        f"informed adversary: knows every training image but the target, the model and the training procedure, "
        f"and would succeed with prior probability kappa = {kappa:.6g} without the model (kappa = 1/N: a uniform "
        f"guess); Poisson sampling at rate q = {q:g} for T = {steps} steps with noise multiplier {sigma:g}; "
        f"neighbouring relation: {NEIGHBOUR_RECONSTRUCTION}; worst case: the attacker knows the target's clipped "
        f"gradient; relaxed: it does not know its sign (Kaissis et al. 2023). The bounds reach ~100% long before "
        f"eps = 1e6; claims of protection beyond that rest on empirical attacks, not on these bounds.")
    (worst, worst_via), (edgeworth, edgeworth_via), (gdp, gdp_via) = (
        _worst_case(*setting, kappa, method) for method in ("pld", "edgeworth", "gdp"))
    relaxed, relaxed_via = _relaxed(*setting, kappa)
    tprs = {fpr: _worst_case(*setting, fpr) for fpr in MIA_FPRS}
    return ReconstructionRisk(
        noise_multiplier=sigma, sample_rate=q, steps=steps, kappa=kappa, worst_case=worst,
        worst_case_edgeworth=edgeworth, relaxed=relaxed, gdp=gdp,
        tpr_at_fpr={fpr: tpr for fpr, (tpr, _) in tprs.items()}, assumptions=assumptions, worst_case_via=worst_via,
        worst_case_edgeworth_via=edgeworth_via, relaxed_via=relaxed_via, gdp_via=gdp_via,
        tpr_at_fpr_via={fpr: via for fpr, (_, via) in tprs.items()})
