"""eps(delta) of DP-SGD: Poisson-subsampled Gaussian events composed by Google's dp_accounting.

Two accountants, both dp_accounting's (nothing is re-derived here), in a registry of frozen info objects:

* ``pld`` (default): the privacy loss distribution of the Poisson-subsampled Gaussian, discretised with the
  pessimistic "connect the dots" method (Doroshenko et al. 2022) and composed by FFT (Koskela et al. 2020). The
  pessimistic PLD is an upper bound on the true eps; it exceeds it only by a small discretisation error. It
  resolves eps up to 500 (double-precision limits of dp_accounting's eps(delta) inversion; see below).
* ``rdp``: Renyi DP of the subsampled Gaussian (Mironov 2017; Mironov, Talwar, Zhang 2019) at dp_accounting's
  default orders, converted to (eps, delta) with the improved bound of Balle et al. 2020 ("Hypothesis testing
  interpretations and Renyi DP", Prop. 12; the conversion Opacus uses). Looser than PLD.

The same noise gives different eps under each, so every eps must be reported with its accountant (METHODS.md s.3).
Reference (q = 128/5218, sigma = 5.002, T = 2039, delta = 1e-4): PLD 0.689, RDP 0.770.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from dpmed.accounting import _arguments
from dpmed.accounting.events import LaplaceImageEvent, PoissonGaussianEvent
from dpmed.accounting.ledger import Ledger

__all__ = ["ACCOUNTANTS", "AccountantInfo", "NEIGHBOUR_DP_SGD", "accountant_info", "describe_accountant",
           "dp_sgd_epsilon", "ledger_epsilon", "default_delta", "estimate_epsilon"]

NEIGHBOUR_DP_SGD = "add or remove one training image (Poisson sampling)"
_NEIGHBOURS = NeighboringRelation.ADD_OR_REMOVE_ONE  # the relation NEIGHBOUR_DP_SGD names

# The PLD grid (dp_accounting's value_discretization_interval, h). With T composed steps the pessimistic eps
# exceeded the fine-grid eps by at most about T * h^2 in our measurements (q = 128/5218, sigma = 5.002, T = 2039:
# h = 1e-3 adds 0.0025 to 0.687; q = 0.004, sigma = 1.1, T = 1e5: h = 1e-3 adds 0.03 to 6.73), so
# h = sqrt(1e-4 * eps / T) keeps that excess near 1e-4 relative, far below a calibration tolerance of 1e-3.
# eps is taken from a cheap RDP estimate (an upper bound, up to 40x loose at large eps and small q). The FFT's
# cost grows with eps / h, so h is never below eps / 1e6; dp_accounting evaluates expm1(h), so h stays <= 50.
# Measured cost (2-core CPU) at the reference setting: h = 1.9e-4, about 50 ms per eps.
_PLD_RELATIVE_EXCESS = 1e-4
_PLD_GRID_POINTS = 1e6
_PLD_MIN_INTERVAL = 1e-6
_PLD_MAX_INTERVAL = 50.0
# dp_accounting's PLD inverts delta(eps) with sums of e^-loss in double precision; when losses above ~709 carry
# more than delta of mass that ratio overflows and it returns inf for some settings and not others (e.g.
# q = sigma = 0.609375, T = 950, delta = 1e-5: true eps ~ 725). That cannot happen far below eps ~ 700, so PLD
# reports eps up to 500 and refuses beyond, predictably; RDP (no such limit) serves higher budgets.
_PLD_MAX_EPSILON = 500.0
# A few RDP orders: an upper bound on eps, within 1% of the default orders' below eps ~ 100 (up to 1.4x looser
# far above), at a tenth of the cost.
_ESTIMATE_ORDERS = (1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256)


def _as_dp_event(events: Sequence[PoissonGaussianEvent]) -> dp_event.DpEvent:
    return dp_event.ComposedDpEvent([
        dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(e.sample_rate, dp_event.GaussianDpEvent(e.noise_multiplier)), e.steps)
        for e in events])


def _rdp_epsilon(events: Sequence[PoissonGaussianEvent], delta: float, orders: Sequence[float] | None = None) -> float:
    accountant = rdp_privacy_accountant.RdpAccountant(orders=orders, neighboring_relation=_NEIGHBOURS)
    accountant.compose(_as_dp_event(events))
    return float(accountant.get_epsilon(delta))


def estimate_epsilon(events: Sequence[PoissonGaussianEvent], *, delta: float) -> float:
    """A quick, loose eps (RDP at a few orders) that sizes the PLD grid and starts noise calibration.

    Not for reporting: use :func:`dp_sgd_epsilon` or :func:`ledger_epsilon`. ``events`` must have sigma > 0.
    """
    return _rdp_epsilon(events, delta, _ESTIMATE_ORDERS)


def _pld_epsilon(events: Sequence[PoissonGaussianEvent], delta: float) -> float:
    scale = estimate_epsilon(events, delta=delta)
    coarsest = scale / _PLD_GRID_POINTS
    if not coarsest <= _PLD_MAX_INTERVAL:
        return math.inf  # RDP estimate above 5e7: eps is far beyond _PLD_MAX_EPSILON
    steps = sum(e.steps for e in events)
    interval = min(max(math.sqrt(_PLD_RELATIVE_EXCESS * scale / steps), coarsest, _PLD_MIN_INTERVAL),
                   _PLD_MAX_INTERVAL)
    accountant = pld_privacy_accountant.PLDAccountant(_NEIGHBOURS, value_discretization_interval=interval)
    accountant.compose(_as_dp_event(events))
    with np.errstate(over="ignore"):  # the overflow above eps ~ 700 is handled: such eps are refused below
        eps = float(accountant.get_epsilon(delta))
    return eps if eps <= _PLD_MAX_EPSILON else math.inf


@dataclass(frozen=True)
class AccountantInfo:
    """One accountant: its name in configs, the description printed in privacy cards, the largest eps it resolves,
    and its computation ``epsilon(events, delta)`` for events with steps > 0 and noise_multiplier > 0, which
    returns inf when it cannot certify an eps of at most ``max_epsilon``."""

    name: str
    description: str
    max_epsilon: float
    epsilon: Callable[[Sequence[PoissonGaussianEvent], float], float]


_REGISTRY = {info.name: info for info in (
    AccountantInfo("pld", "PLD (dp_accounting, pessimistic estimate: an upper bound on eps)", _PLD_MAX_EPSILON,
                   _pld_epsilon),
    AccountantInfo("rdp", "RDP (dp_accounting, default orders 1.1-1024, improved conversion of Balle et al. 2020 "
                          "as in Opacus)", math.inf, _rdp_epsilon),
)}
ACCOUNTANTS = tuple(_REGISTRY)


def accountant_info(name: str) -> AccountantInfo:
    """The registry entry of accountant ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {name!r}")
    return _REGISTRY[name]


def describe_accountant(name: str) -> str:
    """The text a privacy card prints next to an eps computed by accountant ``name``."""
    return accountant_info(name).description


def _epsilon(events: Sequence[PoissonGaussianEvent], *, delta: float, accountant: str) -> float:
    info = accountant_info(accountant)
    delta = _arguments.probability("delta", delta, include_one=False,
                                   hint="use default_delta(n_train) = min(1e-5, 1/(10 n)) unless you have a reason")
    released = [e for e in events if e.steps > 0]
    if not released:
        return 0.0
    if any(e.noise_multiplier == 0 for e in released):
        return math.inf  # no noise: the gradient sum is released exactly
    eps = info.epsilon(released, delta)
    if math.isnan(eps):
        raise ValueError(f"accountant {accountant!r} returned nan for {released}; try the other accountant")
    if eps == math.inf:  # sigma > 0, so inf means the accountant could not resolve eps, not that it is infinite
        limit = f"{info.max_epsilon:g} (its limit; accountant='rdp' has none)" if info.max_epsilon < math.inf else "inf"
        raise ValueError(f"accountant {accountant!r} cannot certify an eps below {limit} for {released} at "
                         f"delta = {delta:g}; an RDP estimate is eps ~ {estimate_epsilon(released, delta=delta):.3g}")
    return eps


def dp_sgd_epsilon(*, noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                   accountant: str = "pld") -> float:
    """eps(delta) of ``steps`` DP-SGD steps (Abadi et al. 2016) under add/remove-one neighbours.

    noise_multiplier 0 gives inf (a non-private run); steps 0 gives 0.
    """
    event = PoissonGaussianEvent(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps)
    return _epsilon([event], delta=delta, accountant=accountant)


def ledger_epsilon(ledger: Ledger, *, delta: float, accountant: str = "pld") -> float:
    """eps(delta) of all DP-SGD events of ``ledger``, composed in one accountant.

    Local DP image releases are refused: they hold for a different neighbour relation (any two images) and do not
    compose with DP-SGD's add/remove-one eps.
    """
    if not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a dpmed.accounting.Ledger, got {type(ledger).__name__}")
    if any(isinstance(e, LaplaceImageEvent) for e in ledger.events):
        raise ValueError("the ledger holds a LaplaceImageEvent: local DP on released images is a separate "
                         "guarantee (any two images are neighbours); report it with laplace_image_epsilon(event)")
    return _epsilon(ledger.events, delta=delta, accountant=accountant)


def default_delta(n_train: int) -> float:
    """min(1e-5, 1 / (10 n)) (METHODS.md s.2).

    delta must stay well below 1/n: publishing each record whole with probability delta is (0, delta)-DP and leaks
    delta * n records in expectation.
    """
    n_train = _arguments.count("n_train", n_train, minimum=1, hint="pass the number of training images")
    return min(1e-5, 1.0 / (10 * n_train))
