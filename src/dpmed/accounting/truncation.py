"""What a noise sampler whose values are bounded costs a DP claim: the delta it adds, and where it voids the claim.

Every accountant assumes exact Gaussian or Laplace noise, whose tails never end. A floating-point sampler's do: its
uniforms have finitely many bits, so its draws never exceed some bound B (in units of the noise's std, or of the
Laplace scale b). The bound itself is a fact about the sampler (`dpmed.randomness`); this module turns it into
privacy numbers, pure math on that bound.

DP-SGD (add/remove one unit). In a step that samples the unit, its clipped gradient g shifts the noised sum. Where a
coordinate's noise lands within |g_j| of the bound, the output is one the run without the unit can never produce:
its privacy loss is infinite however large eps is, so the (eps, delta) claim must pay the probability of such
outputs in delta (Mironov 2012 made the same point about the support of floating-point Laplace noise). Everywhere
else both runs' densities are the exact ones, each truncated, and the accountant's analysis stands up to the
truncation's renormalisation (1 - 2 Q(B) per coordinate and step, 2 Q(B) = 4e-34); removing the unit
makes outputs the smaller run cannot produce only at q = 1, where the same mass bounds them. So the implemented
run is (eps, delta + T q S)-DP, S the largest mass of such outputs in one sampled step over every gradient the
clipping allows (:func:`bounded_noise_delta`). With noise multiplier sigma, S is about Q(B - 1/sigma), Q the
Gaussian tail: below a thousandth of delta at the sigmas of eps up to several hundred (Q(12) is 2e-33; float64
rounds it away from delta = 1e-5 up to eps of a few tens), and the whole claim at the tiny sigmas of the high-budget
regime (004_6210268d59b6f8e5.txt's eps of 1e6 and more), where one unit moves a coordinate by more than the sampler's
every draw.

Local DP on pixels, clipped to [0, R] (``pixel_laplace``, ``pixel_gaussian``). Clipping keeps every output reachable
from every input as long as the noise can span R; beyond that a pixel at 0 is never released as R, which a pixel at R
is half the time. Before that, the mass at the clipped ends is what the exact tails would put there less the missing
tail, and the claim's ratio at the ends grows by that share (:func:`laplace_end_excess`,
:func:`gaussian_end_shortfall`).

What this does not cover, stated as residual risks where dpmed states its randomness: the sampler's values lie on a
grid, so between its largest draws there are gaps of the kind Mironov's attack reads; the bounds here treat the
sampler's law as the exact one up to its bound.
"""

from __future__ import annotations

import math

from scipy.stats import binom, norm

from dpmed.accounting import _arguments

__all__ = ["bounded_noise_delta", "laplace_end_excess", "gaussian_end_shortfall", "NEGLIGIBLE_SHARE"]

# Local DP: a clipped end's excess (Laplace, as a share of eps_pixel) or shortfall (Gaussian, of its mass) below this
# share is left out, as float64's rounding of eps is; above it the closed form is not the run's, and it is not DP.
NEGLIGIBLE_SHARE = 1e-9

# Gradients are spread over at most this many coordinates in the bound over gradient shapes: more than any model
# dpmed trains has parameters (the term it enters is below 1e-25 at every sigma).
_MAX_COORDINATES = 1e12
_SMALL_SHIFT = 0.2    # std: below it a coordinate's excess is bounded by its density at the bound (see below)


def _gaussian_excess(shift: float, bound: float) -> float:
    """P(bound - shift < Z <= bound), Z standard normal: the mass a shift of ``shift`` std moves past the bound."""
    return max(0.0, float(norm.sf(bound - shift) - norm.sf(bound)))


def _laplace_excess(shift: float, bound: float) -> float:
    """The same for a Laplace of scale 1: P(bound - shift < Z <= bound)."""
    def tail(t: float) -> float:
        return 0.5 * math.exp(-t) if t >= 0 else 1.0 - 0.5 * math.exp(t)
    return max(0.0, tail(bound - shift) - tail(bound))


def _gaussian_step_mass(shift: float, bound: float) -> float:
    """The largest mass of outputs beyond the other run's support in one step that samples the unit(s): a sum of
    clipped gradients of L2 norm ``shift`` std (1 / sigma for one unit) moves coordinate j by a_j std, with sum
    a_j^2 <= A^2, A = ``shift``.

    With f(a) = P(B - a < Z <= B) <= phi(B - a) / (B - a) (Mills' ratio), f(a) / a^2 increases wherever
    a (B - a) >= 2, so there the excesses are superadditive in a^2: the coordinates shifted by at least t = 0.2 std
    add up to at most f(A), one coordinate taking the whole norm. Each coordinate shifted by less adds at most
    a_j phi(B - t), and those add up to at most phi(B - t) A sqrt(D), D the coordinates (Cauchy-Schwarz). Where
    A (B - A) < 2 the shift reaches the bound itself: 1 (the claim is void)."""
    spread = float(norm.pdf(bound - _SMALL_SHIFT)) * shift * math.sqrt(_MAX_COORDINATES)
    if shift * (bound - shift) < 2.0:
        return 1.0 if shift > _SMALL_SHIFT else min(1.0, spread)
    return min(1.0, _gaussian_excess(shift, bound) + spread)


def _laplace_step_mass(shift: float, bound: float) -> float:
    """The same for Laplace noise with L1 clipping: a shift of a_j scales per coordinate, sum a_j <= A; the excess
    is convex and 0 at 0 up to the bound, so one coordinate taking the whole shift is the worst."""
    return 1.0 if shift >= bound else min(1.0, _laplace_excess(shift, bound))


def bounded_noise_delta(*, noise: str, noise_multiplier: float, sample_rate: float, steps: int,
                        bound: float, group: int = 1) -> float:
    """The delta a DP-SGD run pays for noise whose draws never exceed ``bound`` (std units for Gaussian noise, scale
    units for Laplace): min(1, T sum_j P(j of the group sampled) S(j / sigma)), S the largest mass, in one step, of
    outputs that the run without them cannot produce (module docstring), for a shift of j clipped gradients. The run
    is then (eps, delta + this)-DP, eps the accountant's value for exact noise at delta.

    ``group``: the units whose joint privacy is asked, k (1: the run's own unit; k: the images of one patient where
    the image is the unit, j ~ Binomial(k, q) of them sampled in a step, their clipped gradients adding up to j C)."""
    sigma = _arguments.positive("noise_multiplier", noise_multiplier, hint="the noise std over the clipping norm")
    q = _arguments.probability("sample_rate", sample_rate, include_one=True, hint="the Poisson rate")
    steps = _arguments.count("steps", steps, minimum=0, hint="the optimiser steps")
    bound = _arguments.positive("bound", bound, hint="the sampler's largest draw in units of its std or scale")
    group = _arguments.count("group", group, minimum=1, hint="the units whose joint privacy is asked")
    masses = {"gaussian": _gaussian_step_mass, "laplace": _laplace_step_mass}
    if noise not in masses:
        raise ValueError(f"noise must be 'gaussian' or 'laplace', got {noise!r}")
    step = sum(float(binom.pmf(j, group, q)) * masses[noise](j / sigma, bound) for j in range(1, group + 1))
    return min(1.0, steps * min(1.0, step))


def laplace_end_excess(*, ratio: float, bound: float) -> float:
    """How much a clipped Laplace pixel's privacy loss exceeds R / b when its noise never exceeds ``bound`` b:
    -log(1 - e^(R/b - bound)) (inf where R / b >= bound). ``ratio``: R / b.

    A pixel at R is released as R with probability 1/2; one at 0 with P(Z >= R) less the missing tail beyond the
    bound, e^(-R/b)/2 - e^(-bound)/2; the ratio of the two exceeds e^(R/b) by the factor 1 / (1 - e^(R/b - bound))."""
    ratio = _arguments.positive("ratio", ratio, hint="R / b")
    if ratio >= bound:
        return math.inf
    return -math.log1p(-math.exp(ratio - bound))


def gaussian_end_shortfall(*, ratio: float, bound: float) -> float:
    """The share of a clipped Gaussian pixel's end mass that a sampler bounded at ``bound`` std does not draw:
    Q(bound) / Q(R / s) (1 where R / s >= bound: a pixel at 0 is never released as R). ``ratio``: R / s."""
    ratio = _arguments.positive("ratio", ratio, hint="R / s")
    if ratio >= bound:
        return 1.0
    return min(1.0, float(norm.sf(bound) / norm.sf(ratio)))
