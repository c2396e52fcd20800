"""eps of local DP on images: the Laplace mechanism applied to every pixel value (METHODS.md s.1).

Adding iid Laplace(b) noise to a value in [0, R] is (R / b)-DP for that value (Dwork, McSherry, Nissim, Smith 2006:
the L1 sensitivity is R). Two *images* may differ in all d = H * W * C values, so the L1 sensitivity of the whole
image is d * R and the release is (d * R / b)-DP with respect to any two images: 150,528 for a 224x224x3 image
at b = 1, R = 1. That per-image number is the honest one; the per-pixel eps protects only one value at a time.
These are pure (delta = 0) guarantees and do not compose with DP-SGD's eps (a different neighbour relation).

Gaussian pixel noise N(0, s^2) is the Gaussian mechanism with L2 sensitivity sqrt(d) R: its exact (eps, delta)
curve is the analytic Gaussian of Balle & Wang 2018 (Thm. 8), delta(eps) = Phi(mu/2 - eps/mu) - e^eps
Phi(-mu/2 - eps/mu) with mu = sqrt(d) R / s. We evaluate it in log space rather than through dp_accounting's PLD,
because image-level eps of Gaussian pixel noise is routinely far above 500, where the PLD's double-precision
inversion overflows (see epsilon.py); the tests check both agree where the PLD works.

Each local-DP run of a study (each seed, each swept value) releases a new, independently noised copy of every
training image, and whoever holds several of its models holds several releases of each image. Those releases compose
under the same relation "any two images are neighbours": :func:`compose_image_events` adds them up into one
per-image guarantee (Laplace: basic composition; Gaussian: one Gaussian mechanism; mixed: basic composition).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Sequence

from scipy import special

from dpmed.accounting import _arguments
from dpmed.accounting.events import NEIGHBOUR_LDP_IMAGE, GaussianImageEvent, ImageEvent, LaplaceImageEvent

__all__ = ["NEIGHBOUR_LDP_IMAGE", "laplace_pixel_epsilon", "laplace_image_epsilon", "laplace_scale_for_image",
           "gaussian_epsilon", "gaussian_image_epsilon", "gaussian_std_for_image", "ImageComposition",
           "compose_image_events", "LAPLACE_COMPOSITION", "GAUSSIAN_COMPOSITION", "MIXED_COMPOSITION"]


def laplace_pixel_epsilon(*, scale: float, value_range: float) -> float:
    """eps = R / b of one pixel value in [0, R] released with Laplace(b) noise."""
    scale = _arguments.positive("scale", scale, hint="the Laplace scale b must be positive")
    value_range = _arguments.positive("value_range", value_range, hint="values lie in [0, R]; R = 1 for [0, 1]")
    return value_range / scale


def laplace_image_epsilon(event: LaplaceImageEvent) -> float:
    """eps = d * R / b of one image released with iid Laplace(b) noise on each of its d values."""
    if not isinstance(event, LaplaceImageEvent):
        raise TypeError(f"event must be a LaplaceImageEvent, got {event!r}")
    return event.dimension * event.value_range / event.scale


def laplace_scale_for_image(*, epsilon_image: float, dimension: int, value_range: float) -> float:
    """The Laplace scale b = d R / eps_image that makes a whole image of d values eps_image-DP."""
    epsilon_image = _arguments.positive("epsilon_image", epsilon_image, hint="pass the per-image eps (> 0)")
    dimension = _arguments.count("dimension", dimension, minimum=1, hint="pass d = H * W * C")
    value_range = _arguments.positive("value_range", value_range, hint="values lie in [0, R]; R = 1 for [0, 1]")
    return dimension * value_range / epsilon_image


# Relative rounding error allowed per term of delta(eps): a few units in the last place of ndtr, log_ndtr and exp
# (scipy's are accurate to about 2), with room to spare
_ROUNDING = 16 * sys.float_info.epsilon


def _gaussian_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian mechanism with sensitivity / std = mu (Balle & Wang 2018, Thm. 8), log-space,
    rounded up by the float error of its two terms: at small mu they agree to many digits (to 7 at mu = 1e-6), and
    their rounding alone put delta up to 1e-8 below the truth, so that eps came out below the smallest that holds.
    The second term's error grows with the size of its exponent, eps + log Phi(b), a sum of two large terms."""
    a, b = mu / 2 - eps / mu, -mu / 2 - eps / mu
    first, log_tail = float(special.ndtr(a)), float(special.log_ndtr(b))
    second = math.exp(eps + log_tail) if eps + log_tail > -745 else 0.0
    error = _ROUNDING * (first + second * (1 + abs(eps) + abs(log_tail)))
    return max(0.0, first - second + error)


def gaussian_epsilon(*, mu: float, delta: float) -> float:
    """eps(delta) of one Gaussian mechanism whose sensitivity is ``mu`` noise standard deviations.

    delta(eps) falls in eps, so eps is found by bisection to 1e-12 relative and rounded *up* (never understated).
    """
    mu = _arguments.positive("mu", mu, hint="mu = L2 sensitivity / noise std")
    delta = _arguments.probability("delta", delta, include_one=False, hint="pass the delta of the guarantee")
    if _gaussian_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, max(1.0, mu * mu / 2 + mu * (math.sqrt(2 * math.log(1 / delta)) + 1))
    while _gaussian_delta(hi, mu) > delta:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if _gaussian_delta(mid, mu) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def gaussian_image_epsilon(event: GaussianImageEvent, *, delta: float) -> float:
    """eps(delta) of one image released with iid N(0, s^2) noise on each of its d values in [0, R], for the
    relation "any two images are neighbours" (L2 sensitivity sqrt(d) R)."""
    if not isinstance(event, GaussianImageEvent):
        raise TypeError(f"event must be a GaussianImageEvent, got {event!r}")
    return gaussian_epsilon(mu=math.sqrt(event.dimension) * event.value_range / event.std, delta=delta)


def gaussian_std_for_image(*, epsilon_image: float, delta: float, dimension: int, value_range: float) -> float:
    """The smallest noise std s (to 1e-9 relative) whose image-level eps(delta) is at most ``epsilon_image``."""
    target = _arguments.positive("epsilon_image", epsilon_image, hint="pass the per-image eps (> 0)")
    dimension = _arguments.count("dimension", dimension, minimum=1, hint="pass d = H * W * C")
    value_range = _arguments.positive("value_range", value_range, hint="values lie in [0, R]; R = 1 for [0, 1]")
    sensitivity = math.sqrt(dimension) * value_range
    lo, hi = 1e-300, 1.0  # in mu: eps(lo) <= target, eps(hi) > target once grown
    while gaussian_epsilon(mu=hi, delta=delta) <= target:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if gaussian_epsilon(mu=mid, delta=delta) <= target:
            lo = mid
        else:
            hi = mid
    return sensitivity / lo


# How compose_image_events composed, and the theorem it rests on
LAPLACE_COMPOSITION = ("basic composition of the Laplace mechanism", "Dwork & Roth 2014, Thm 3.16")
GAUSSIAN_COMPOSITION = ("the Gaussian runs composed into one Gaussian mechanism, mu = sqrt(sum mu_i^2), and its "
                        "analytic Gaussian eps", "Dong, Roth & Su 2019, Gaussian DP, Cor. 3.3; Balle & Wang 2018")
MIXED_COMPOSITION = ("basic composition of the Laplace runs' eps and the Gaussian runs' (eps, delta), those composed "
                     "first into one Gaussian mechanism", "Dwork & Roth 2014, Thm 3.16; Dong, Roth & Su 2019, Cor. 3.3")


@dataclass(frozen=True)
class ImageComposition:
    """Several local-DP releases of the same image, composed into one per-image (eps, delta) guarantee for the
    relation ``neighbour_relation`` ("any two images"). ``method`` says how, ``citation`` the theorem it rests on;
    ``mu`` is the composed Gaussian mechanism's sensitivity / std where every release was Gaussian, else None."""

    epsilon: float
    delta: float
    releases: int
    method: str
    citation: str
    mu: float | None = None
    neighbour_relation: str = NEIGHBOUR_LDP_IMAGE


def compose_image_events(events: Sequence[ImageEvent], *, deltas: Sequence[float] | None = None) -> ImageComposition:
    """One per-image guarantee for ``events``: independent local-DP releases of the same image (one per run that
    noised the training images anew), which compose under the same relation "any two images are neighbours".

    ``deltas[i]`` is the delta at which release i's own guarantee is stated (its run's delta): 0 for a Laplace
    release (pure DP; ``deltas`` may be left out when every release is Laplace), in (0, 1) for a Gaussian one.

    * all Laplace: pure DP, eps = sum of eps_image (basic composition, Dwork & Roth 2014, Thm 3.16), delta = 0;
      pure eps add up exactly, no tighter pure-DP bound exists.
    * all Gaussian: the composition of Gaussian mechanisms with mu_i = sqrt(d_i) R_i / s_i is exactly the Gaussian
      mechanism with mu = sqrt(sum mu_i^2) (Dong, Roth & Su 2019, Cor. 3.3), so eps is that mechanism's analytic
      Gaussian eps at the largest delta of the runs (a delta each image is already released under): far below the
      sum of the runs' eps.
    * mixed: basic composition (eps and delta add up): the Laplace releases' eps, plus the (eps, delta) of the
      Gaussian releases composed as above. Composing the Gaussian ones first is exact and keeps one Laplace run from
      turning the Gaussian runs' total into the (much larger) sum of their eps; with one Gaussian release it is
      that release's own (eps_i, delta_i).
    """
    events = tuple(events)
    if not events:
        raise ValueError("events must hold at least one LaplaceImageEvent or GaussianImageEvent; a study without "
                         "local-DP runs has nothing to compose")
    for event in events:
        if not isinstance(event, (LaplaceImageEvent, GaussianImageEvent)):
            raise TypeError(f"events must be LaplaceImageEvent or GaussianImageEvent, got {event!r}")
    if deltas is None:
        deltas = [0.0] * len(events)
    deltas = tuple(deltas)
    if len(deltas) != len(events):
        raise ValueError(f"deltas must hold one delta per event: got {len(deltas)} for {len(events)} events")
    checked = []
    for i, (event, delta) in enumerate(zip(events, deltas)):
        if isinstance(event, LaplaceImageEvent):
            delta = _arguments.positive(f"deltas[{i}]", delta, allow_zero=True)
            if delta != 0:
                raise ValueError(f"deltas[{i}] must be 0 for a LaplaceImageEvent (the Laplace mechanism is pure DP), "
                                 f"got {delta!r}")
        else:
            delta = _arguments.probability(f"deltas[{i}]", delta, include_one=False,
                                           hint="pass the delta the Gaussian run's guarantee is stated at")
        checked.append(delta)
    laplace = math.fsum(laplace_image_epsilon(e) for e in events if isinstance(e, LaplaceImageEvent))
    gaussian = [(e, d) for e, d in zip(events, checked) if isinstance(e, GaussianImageEvent)]
    if not gaussian:
        return ImageComposition(epsilon=laplace, delta=0.0, releases=len(events), method=LAPLACE_COMPOSITION[0],
                                citation=LAPLACE_COMPOSITION[1])
    mu = math.hypot(*(math.sqrt(e.dimension) * e.value_range / e.std for e, _ in gaussian))   # one: mu_1 exactly
    delta = max(d for _, d in gaussian)
    eps = gaussian_epsilon(mu=mu, delta=delta)
    if len(gaussian) == len(events):
        return ImageComposition(epsilon=eps, delta=delta, releases=len(events), method=GAUSSIAN_COMPOSITION[0],
                                citation=GAUSSIAN_COMPOSITION[1], mu=mu)
    return ImageComposition(epsilon=laplace + eps, delta=delta, releases=len(events), method=MIXED_COMPOSITION[0],
                            citation=MIXED_COMPOSITION[1])
