"""The Edgeworth expansion of the worst-case reconstruction game: an approximation of gamma, not a bound, kept as an
independent cross-check of the PLD value (:mod:`dpmed.accounting.reconstruction` states the game).

A second-order Edgeworth expansion of the T-fold sum of per-step privacy losses under P and under Q (the approach
of Zheng et al. 2020, "Sharp composition bounds for Gaussian DP via Edgeworth expansion", used by Kaissis et al.
2023): the cumulants of one step's loss by quadrature, scaled by T, standardise the sum; the level-kappa threshold
under P then gives the power under Q.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import integrate, optimize, special

from dpmed.accounting import _limits
from dpmed.accounting._pld import TAIL_Z, NotComputable, step_loss

__all__ = ["worst_case_edgeworth"]


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
            lo, hi = centre - TAIL_Z, centre + TAIL_Z
            points = [kink] if kink is not None and lo < kink < hi else None
            value, _ = integrate.quad(lambda z: math.exp(-(z - centre) ** 2 / 2) * g(z), lo, hi, points=points,
                                      epsabs=epsabs * math.sqrt(2 * math.pi), epsrel=1e-10, limit=400)
            total += weight * value / math.sqrt(2 * math.pi)
        return total

    def loss(z: float) -> float:
        return step_loss(mu, q, z, relaxed=False)

    def cumulants(components: list[tuple[float, float]]) -> tuple[float, ...]:
        # absolute tolerances scaled by the size of L: its mean (a KL divergence) is a small difference of large
        # terms when sigma is large, and the third central moment is exactly 0 when q = 1
        size = math.sqrt(expect(lambda z: loss(z) ** 2, components, 0.0))
        mean = expect(loss, components, 1e-10 * size)
        m2 = expect(lambda z: (loss(z) - mean) ** 2, components, 0.0)
        m3 = expect(lambda z: (loss(z) - mean) ** 3, components, 1e-10 * m2 ** 1.5)
        m4 = expect(lambda z: (loss(z) - mean) ** 4, components, 1e-10 * m2 ** 2)
        return mean, m2, m3, m4 - 3 * m2 * m2

    return cumulants([(1.0, 0.0)]), cumulants([(1 - q, 0.0), (q, mu)])


def _edgeworth_survival(x: np.ndarray | float, skew: float, excess_kurtosis: float) -> np.ndarray:
    """P(S > x) for a standardised sum by the second-order Edgeworth expansion (Hermite polynomials He_k):
    1 - Phi(x) + phi(x) [skew/6 He2(x) + kurt/24 He3(x) + skew^2/72 He5(x)]."""
    x = np.asarray(x, dtype=float)
    he2, he3, he5 = x ** 2 - 1, x ** 3 - 3 * x, x ** 5 - 10 * x ** 3 + 15 * x
    density = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return special.ndtr(-x) + density * (skew / 6 * he2 + excess_kurtosis / 24 * he3 + skew ** 2 / 72 * he5)


def worst_case_edgeworth(sigma: float, q: float, steps: int, kappa: float) -> float:
    under_p, under_q = _loss_cumulants(1 / sigma, q)

    def standardised(cumulants: tuple[float, ...]) -> tuple[float, float, float, float]:
        # The quadrature resolves the mean to ~1e-10 of the loss's size: a variance below (1e-8 mean)^2 is round-off
        # (e.g. mu > ~50: under P, e^(mu z - mu^2/2) underflows and the loss is constant in double precision).
        if not ((1e-8 * cumulants[0]) ** 2 < cumulants[1] and (steps * cumulants[1]) ** 2 < math.inf):
            raise NotComputable(f"the per-step loss variance {cumulants[1]:.3g} is not resolved next to its mean "
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
