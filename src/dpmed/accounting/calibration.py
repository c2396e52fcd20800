"""Noise calibration: the smallest noise multiplier whose eps meets a target, never above it.

METHODS.md s.2: sigma is derived from (target_epsilon, delta, q, T), and the calibrated sigma never overshoots the
target. Every sigma returned here has been evaluated by the very computation behind :func:`dp_sgd_epsilon`, with
the accountant that will report the run's eps, and found at or below the target; a slightly smaller sigma (by the
factor 1 + rtol) was found above it.

eps(sigma) falls as a near power law (eps ~ 1/sigma at small eps, ~ 1/sigma^2 at large eps), so the search runs
in x = log(sigma) on log(eps): nothing overflows from sigma ~ 1e-8 (eps ~ 1e15) to sigma ~ 1e6, and secant steps
in these coordinates are nearly exact. A cheap RDP estimate locates the answer first, so the accountant itself
(a PLD call costs far more than the estimate: benchmarks/RESULTS.md, section "The PLD grids' cost") is called a
handful of times. Bisection guards against slow progress.

Not dp_accounting's ``calibrate_dp_mechanism`` (0.6): it root-finds inside a bracket, searched from sigma 0 up
(``LowerEndpointAndGuess(0, 1)``) where the caller gives none, on one fixed PLD grid (its accountant factory takes
no sigma) that is not the grid :func:`dp_sgd_epsilon` reports with. At q 128/5218, T 2039, delta 1e-5, eps 1 it took
0.9 s (8 PLD calls) given the bracket [2, 8], against 0.4 s here, and given [0.01, 100] (grid 1e-4) it had not
finished after 10 minutes: the PLD of a tiny sigma is huge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from dpmed.accounting import _arguments
from dpmed.accounting.epsilon import (accountant_info, arithmetic_failed, dp_sgd_event, estimate_epsilon,
                                      inclusion_probability, refuse_unresolved)

__all__ = ["noise_multiplier_for"]

_LOG_SIGMA_RANGE = (math.log(1e-12), math.log(1e12))
_ESTIMATE_TOLERANCE = math.log(1.05)  # the RDP estimate only has to land near the answer
_MAX_EVALUATIONS = 200


def noise_multiplier_for(*, target_epsilon: float, delta: float, sample_rate: float, steps: int,
                         accountant: str = "pld", noise: str = "gaussian", rtol: float = 1e-3) -> float:
    """The smallest noise multiplier sigma (within relative tolerance ``rtol``) whose eps(delta) after ``steps``
    Poisson-sampled steps at rate ``sample_rate`` is at most ``target_epsilon``.

    Guarantee: ``dp_sgd_epsilon(noise_multiplier=sigma, ...) <= target_epsilon`` for the returned sigma, and the
    eps of sigma / (1 + rtol) was found above the target. Raises ValueError when no sigma in [1e-12, 1e12] meets
    the target, when the accountant does not analyse ``noise`` (the message names those that do), when the target
    or delta is beyond what the accountant resolves (PLD: eps up to 500, delta down to
    max(1e-12, 1e-15 steps); use 'rdp' there), or when the search ends at the edge of what the accountant resolves
    with an eps far below the target (an accountant's inf is "cannot resolve", not "above the target").
    ``noise="laplace"`` calibrates b / C1 of Laplace DP-SGD (L1 clipping) the same way.
    """
    target = _arguments.positive("target_epsilon", target_epsilon, hint="pass the eps budget of the whole run")
    info = accountant_info(accountant, noise)
    if target > info.max_epsilon:
        raise ValueError(f"target_epsilon = {target:g} is above what accountant={accountant!r} resolves "
                         f"({info.max_epsilon:g}); use accountant='rdp' for such budgets")
    delta = _arguments.probability("delta", delta, include_one=False, hint="use default_delta(n_train)")
    sample_rate = _arguments.probability("sample_rate", sample_rate, include_one=True,
                                         hint="use the Poisson rate q = expected batch size / N")
    steps = _arguments.count("steps", steps, minimum=1, hint="with no steps nothing is released and no noise is needed")
    rtol = _arguments.real("rtol", rtol)
    if not 0 < rtol < 0.5:
        raise ValueError(f"rtol must be in (0, 0.5), got {rtol!r}; 1e-3 is plenty")
    refuse_unresolved(accountant, delta, steps, noise=noise)

    def event(sigma: float):
        return dp_sgd_event(noise=noise, noise_multiplier=sigma, sample_rate=sample_rate, steps=steps)

    drawn = inclusion_probability([event(1.0)])
    if delta >= drawn:
        raise ValueError(f"delta = {delta:g} is at least the chance ({drawn:.3g}) that an example is drawn into any of "
                         f"the {steps} batches at sample_rate {sample_rate:g}: at such a delta every noise multiplier, "
                         "however small, gives eps = 0, so none is calibrated; use a delta far below 1/N "
                         "(default_delta(n_train))")

    def estimate(sigma: float) -> float:
        try:
            return estimate_epsilon([event(sigma)], delta=delta)
        except ArithmeticError as exc:
            raise arithmetic_failed("rdp", [event(sigma)], delta, exc) from None

    def exact(sigma: float) -> float:  # what dp_sgd_epsilon computes, with inf where the accountant cannot resolve
        return info.epsilon([event(sigma)], delta)

    try:
        rough_lo, rough_hi = _bracket(estimate, target=target, x0=0.0, slope=-1.0, tol=_ESTIMATE_TOLERANCE)
        x0, slope = _secant_root(rough_lo, rough_hi, target), _slope(rough_lo, rough_hi)
    except _OutOfRange as exc:
        if not exc.above:
            raise ValueError(str(exc)) from None
        # The estimate is a loose upper bound: RDP at orders up to 256 stays above about log(1/delta) / 255 however
        # large sigma is (0.08 at delta 1e-12), where the accountant itself goes lower. It only seeds the search,
        # so the search starts without it; where the accountant cannot meet the target either, it says so.
        x0, slope = 0.0, -1.0
    try:
        lo, hi = _bracket(exact, target=target, x0=x0, slope=slope, tol=math.log1p(rtol))
    except _OutOfRange as exc:
        if exc.above and accountant != "pld" and noise == "gaussian":
            raise ValueError(f"{exc.finding}: that is {accountant.upper()}'s floor at delta = {delta:g}, which more "
                             "noise does not lower (its conversion from the largest Renyi order it computes); use "
                             "accountant 'pld', which goes lower, or a larger target_epsilon or delta") from None
        raise ValueError(str(exc)) from None
    if lo.eps == math.inf and hi.eps < target / 2:
        # eps moves by a factor of about (1 + rtol)^2 over the bracket, so this is the accountant's edge, not the
        # target: e.g. PLD's grid gives up (inf) below some sigma at which eps is already 0 (at delta >= 1/N)
        raise ValueError(f"target_epsilon = {target:g}: noise calibration stopped where accountant {accountant!r} "
                         f"stops resolving eps, not at the target: it resolves no eps at noise_multiplier "
                         f"{lo.sigma:.6g} and gives {hi.eps:.3g}, far below the target, at {hi.sigma:.6g}; check "
                         "delta (at or above 1/N no eps means anything) or use accountant 'rdp'")
    return hi.sigma


@dataclass(frozen=True)
class _Point:
    x: float  # log(sigma)
    sigma: float  # exp(x), exactly the value that was evaluated
    eps: float

    @property
    def log_eps(self) -> float:
        return math.log(self.eps) if 0 < self.eps < math.inf else math.nan


class _OutOfRange(ValueError):
    """The search reached the end of the sigma range [1e-12, 1e12] with eps still on one side of the target:
    ``above`` (eps above the target even at the largest sigma) or below it even at the smallest. Internal: the
    caller either searches on or raises it as the plain ValueError that noise_multiplier_for documents."""

    def __init__(self, finding: str, *, above: bool) -> None:
        super().__init__(f"{finding}; check target_epsilon, delta, sample_rate and steps")
        self.finding, self.above = finding, above


def _slope(a: _Point, b: _Point) -> float:
    """d log(eps) / d log(sigma) between two points; nan where undefined or not decreasing."""
    slope = (b.log_eps - a.log_eps) / (b.x - a.x)
    return slope if slope < 0 else math.nan


def _secant_root(lo: _Point, hi: _Point, target: float) -> float:
    """Where the line through lo and hi in (log sigma, log eps) meets log(target); the midpoint if undefined."""
    slope = _slope(lo, hi)
    if math.isnan(slope):
        return (lo.x + hi.x) / 2
    return lo.x + (math.log(target) - lo.log_eps) / slope


def _bracket(eps_at: Callable[[float], float], *, target: float, x0: float, slope: float,
             tol: float) -> tuple[_Point, _Point]:
    """Points lo < hi in log(sigma) with eps(lo) > target >= eps(hi) and hi.x - lo.x <= tol.

    Starts at x0 with a guess of d log(eps) / d log(sigma). While one side is unknown, it steps outward by the
    Newton step plus a margin (at least tol * 4^k after k steps, so any distance takes few evaluations); then it
    probes just beside the secant root, on the side not updated last, so an accurate root closes the bracket in
    one or two evaluations; bisection takes over when the bracket does not halve within two evaluations.
    """
    lo = hi = previous = None
    outward, widths, x = 0, [], x0
    for _ in range(_MAX_EVALUATIONS):
        sigma = math.exp(x)
        point = _Point(x, sigma, eps_at(sigma))
        if math.isnan(point.eps):  # a nan would compare as "not above target": refuse rather than risk overshoot
            raise ValueError(f"the accountant returned nan at noise_multiplier = {sigma:g}; try the other accountant")
        if point.eps > target:
            lo = point
        else:
            hi = point
        if lo is not None and hi is not None:
            width = hi.x - lo.x
            if width <= tol:
                return lo, hi
            widths.append(width)
            if len(widths) >= 3 and width > widths[-3] / 2:
                x = (lo.x + hi.x) / 2
            else:
                side = -1.0 if point is hi else 1.0
                margin = min(0.45 * tol, width / 3)
                x = min(max(_secant_root(lo, hi, target) + side * 0.45 * tol, lo.x + margin), hi.x - margin)
            continue
        # One side known: step outward (up when eps is too large, down otherwise).
        if previous is not None and not math.isnan(_slope(previous, point)):
            slope = _slope(previous, point)
        newton = abs((point.log_eps - math.log(target)) / slope)
        step = max(newton + 0.45 * tol if math.isfinite(newton) else 0.0, tol * 4.0 ** outward)
        x = min(max(point.x + (step if point is lo else -step), _LOG_SIGMA_RANGE[0]), _LOG_SIGMA_RANGE[1])
        if x == point.x:
            problem = ("no noise multiplier up to 1e12 meets it" if point is lo else
                       "every noise multiplier down to 1e-12 meets it: the budget protects nothing")
            raise _OutOfRange(f"target_epsilon = {target:g}: {problem} (eps = {point.eps:g} at sigma = "
                              f"{point.sigma:g})", above=point is lo)
        previous, outward = point, outward + 1
    raise ValueError(f"noise calibration did not converge in {_MAX_EVALUATIONS} evaluations "
                     f"(target_epsilon = {target:g}); please report this with the arguments used")
