"""eps(delta) of DP-SGD: Poisson-subsampled Gaussian (or Laplace) events composed by Google's dp_accounting.

The accountants, in a registry of frozen info objects:

* ``pld`` (default): the privacy loss distribution of the Poisson-subsampled Gaussian, discretised with the
  pessimistic "connect the dots" method (Doroshenko et al. 2022) and composed by FFT (Koskela et al. 2020). The
  pessimistic PLD is an upper bound on the true eps; it exceeds it only by a small discretisation error. It
  resolves eps up to 500 (double-precision limits of dp_accounting's eps(delta) inversion; see below), delta down
  to max(1e-12, 1e-15 T), and up to 2e6 steps. One step's PMF is built by `dpmed.accounting._pld` (dp_accounting's
  own, evaluated over the grid at once); the composition and eps(delta) are dp_accounting's.
* ``rdp``: Renyi DP of the subsampled Gaussian (Mironov 2017; Mironov, Talwar, Zhang 2019) at dp_accounting's
  default orders, converted to (eps, delta) with the improved bound of Balle et al. 2020 ("Hypothesis testing
  interpretations and Renyi DP", Prop. 12; the conversion Opacus uses). Looser than PLD.

* ``rdp-classic``: the same RDP curve converted with the classic bound eps = min_a RDP(a) + log(1/delta)/(a - 1)
  (Mironov 2017, Prop. 3), which most published DP-SGD figures used; for reproducing them only. It is a valid
  but loose upper bound.
* ``pure``: Laplace-noise DP-SGD only. Each step is (log(1 + q (e^(1/b) - 1)))-DP (amplification by Poisson
  subsampling of a pure-DP mechanism, Balle, Barthe, Gaboardi 2018), and T steps add up: a delta = 0 bound.

The same noise gives different eps under each, so every eps must be reported with its accountant (METHODS.md s.3).
Reference (q = 128/5218, sigma = 5.002, T = 2039, delta = 1e-4): PLD 0.687, RDP 0.770, classic RDP 0.994.
Gaussian events are supported by pld, rdp and rdp-classic; Laplace events by pld and pure (dp_accounting has no RDP
of the subsampled Laplace mechanism).
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from dpmed.accounting import _arguments
from dpmed.accounting._arguments import ANALYSED_NOISES
from dpmed.accounting._limits import accountable_rate
from dpmed.accounting._pld import MAX_STEPS as _PLD_MAX_STEPS, subsampled_gaussian_pld
from dpmed.accounting.events import DpSgdEvent, PoissonGaussianEvent, PoissonLaplaceEvent, ShuffledBatchesEvent
from dpmed.accounting.ledger import Ledger

__all__ = ["ACCOUNTANTS", "NOISES", "AccountantInfo", "NEIGHBOUR_DP_SGD", "accountant_info", "describe_accountant",
           "dp_sgd_epsilon", "ledger_epsilon", "default_delta", "dp_sgd_schedule", "estimate_epsilon", "dp_sgd_event",
           "effective_accountant", "refuse_unresolved", "shuffled_event", "poisson_counterpart",
           "inclusion_probability", "fallback_accountant", "rdp_curve"]

NEIGHBOUR_DP_SGD = "add or remove one training image (Poisson sampling)"
_NEIGHBOURS = NeighboringRelation.ADD_OR_REMOVE_ONE  # the relation NEIGHBOUR_DP_SGD names

# The PLD grid (dp_accounting's value_discretization_interval, h). With T composed steps the pessimistic eps
# exceeded the fine-grid eps by at most about T * h^2 in our measurements (q = 128/5218, sigma = 5.002, T = 2039:
# h = 1e-3 adds 0.0025 to 0.687; q = 0.004, sigma = 1.1, T = 1e5: h = 1e-3 adds 0.03 to 6.73), so
# h = sqrt(1e-4 * eps / T) keeps that excess near 1e-4 relative, far below a calibration tolerance of 1e-3.
# eps is taken from a cheap RDP estimate (an upper bound, up to 40x loose at large eps and small q). The FFT's
# cost grows with eps / h, so h is never below eps / 1e6; dp_accounting evaluates expm1(h), so h stays <= 50.
# What one eps costs on this grid at the reference setting: benchmarks/RESULTS.md, section "The PLD grids' cost".
_PLD_RELATIVE_EXCESS = 1e-4
_PLD_FEW_STEPS_INTERVAL = 5e-4
_PLD_GRID_POINTS = 1e6
_PLD_MIN_INTERVAL = 1e-6
_PLD_MAX_INTERVAL = 50.0
# dp_accounting's PLD inverts delta(eps) with sums of e^-loss in double precision; when losses above ~709 carry
# more than delta of mass that ratio overflows and it returns inf for some settings and not others (e.g.
# q = sigma = 0.609375, T = 950, delta = 1e-5: true eps ~ 725). That cannot happen far below eps ~ 700, so PLD
# reports eps up to 500 and refuses beyond, predictably; RDP (no such limit) serves higher budgets.
_PLD_MAX_EPSILON = 500.0
# dp_accounting's PLD also has a floor on delta. Each composition moves up to 1e-15 of probability to an infinite
# loss (``tail_mass_truncation``), so at delta ~ 1e-15 it certifies no eps at all (inf); and it composes T steps by
# raising an FFT to the power T in double precision, which multiplies each coefficient's rounding error by about T,
# so every composed probability carries an error of order T * 1e-16. delta(eps) sums these over the loss grid, and
# below about T * 1e-16 the eps it returns is noise, in either direction: three grids disagree by several percent,
# some values above RDP's bound, which PLD always beats (benchmarks/RESULTS.md, "What PLD resolves"). So PLD serves
# delta >= max(1e-12, 1e-15 T) and refuses below, predictably; RDP (no such floor) serves smaller delta.
_PLD_MIN_DELTA = 1e-12
_PLD_STEPS_PER_MIN_DELTA = 1e15   # the floor grows by 1e-15 per step
# A few RDP orders: an upper bound on eps, within 1% of the default orders' below eps ~ 100 (up to 1.4x looser
# far above), at a tenth of the cost.
_ESTIMATE_ORDERS = (1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256)


# The two noises of DP-SGD and the event class that describes each.
_NOISE_EVENTS: dict[str, type] = {"gaussian": PoissonGaussianEvent, "laplace": PoissonLaplaceEvent}
NOISES = tuple(_NOISE_EVENTS)


def _check_noise(noise: str) -> None:
    """ValueError naming the noises there are, before a lookup in _NOISE_EVENTS or an accountant's list."""
    if noise not in _NOISE_EVENTS:
        raise ValueError(f"noise must be one of {', '.join(NOISES)}, got {noise!r}")


def dp_sgd_event(*, noise: str, noise_multiplier: float, sample_rate: float, steps: int) -> DpSgdEvent:
    """The event of ``steps`` DP-SGD steps with ``noise`` ("gaussian": L2 clip, N(0, (sigma C)^2) noise;
    "laplace": L1 clip, Laplace(b) noise with noise_multiplier = b / C1)."""
    _check_noise(noise)
    return _NOISE_EVENTS[noise](noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps)


def shuffled_event(*, noise: str, noise_multiplier: float, sample_rate: float, steps: int) -> ShuffledBatchesEvent:
    """The event of ``steps`` DP-SGD steps on shuffled fixed-size batches: recorded, and refused by every
    accountant."""
    return ShuffledBatchesEvent(noise=noise, noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps)


def poisson_counterpart(ledger: Ledger) -> Ledger:
    """The ledger with every shuffled-batch entry replaced by Poisson sampling at the same rate: what the run's eps
    *would* be had it sampled as the accountants assume. A hypothetical for labelled display only; it does not hold
    for the run."""
    out = Ledger()
    for e in ledger.events:
        out = out.record(dp_sgd_event(noise=e.noise, noise_multiplier=e.noise_multiplier, sample_rate=e.sample_rate,
                                      steps=e.steps) if isinstance(e, ShuffledBatchesEvent) else e)
    return out


def _as_dp_event(events: Sequence[DpSgdEvent]) -> dp_event.DpEvent:
    def mechanism(e: DpSgdEvent) -> dp_event.DpEvent:
        if isinstance(e, PoissonLaplaceEvent):
            return dp_event.LaplaceDpEvent(e.noise_multiplier)
        return dp_event.GaussianDpEvent(e.noise_multiplier)
    return dp_event.ComposedDpEvent([
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(accountable_rate(e.sample_rate), mechanism(e)),
                                     e.steps)
        for e in events])


def _only_gaussian(events: Sequence[DpSgdEvent], accountant: str) -> None:
    if any(isinstance(e, PoissonLaplaceEvent) for e in events):
        raise ValueError(f"accountant {accountant!r} has no analysis of Poisson-subsampled Laplace noise "
                         "(dp_accounting implements none); use accountant='pld' or 'pure' for Laplace DP-SGD")


def _rdp_accountant(events: Sequence[DpSgdEvent], orders: Sequence[float] | None,
                    accountant: str) -> rdp_privacy_accountant.RdpAccountant:
    _only_gaussian(events, accountant)
    rdp = rdp_privacy_accountant.RdpAccountant(orders=orders, neighboring_relation=_NEIGHBOURS)
    # At a sigma whose square underflows, dp_accounting divides by zero: numpy warns and the order's RDP is inf,
    # which every reader of the curve already takes as "not resolved" (eps inf, said in words by `_epsilon`).
    with _root_logging_left_alone(), np.errstate(divide="ignore", over="ignore"):
        rdp.compose(_as_dp_event(events))
    return rdp


@contextlib.contextmanager
def _root_logging_left_alone() -> Iterator[None]:
    """While dp_accounting computes RDP: where the root logger has no handler, one that drops records. absl's
    ``logging.warning``, which dp_accounting calls when an RDP order does not converge (that order is then left out,
    and the bound still holds), calls ``logging.basicConfig()`` first where the root has no handler: a program that
    configures its logging later found it configured already, and every such warning printed."""
    if logging.root.handlers:
        yield
        return
    quiet = logging.NullHandler()
    logging.root.addHandler(quiet)
    try:
        yield
    finally:
        logging.root.removeHandler(quiet)


def rdp_curve(events: Sequence[DpSgdEvent], orders: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP) of Gaussian ``events`` under add/remove-one neighbours, without the orders whose RDP is no number.

    At extreme noise (sigma ~ 1e7 at q 0.01) the subsampled Gaussian's RDP, a difference of nearly equal terms,
    comes out below 0 at some orders: rounding error, not a value. dp_accounting reads such an order as eps = 0 (and
    delta = 0) for the whole curve ("Negative Renyi divergence ... Returning an epsilon of zero"), a bound that is
    false where one step alone moves the output by more than delta in total variation (q (2 Phi(1 / (2 sigma)) - 1)
    at T = 1). Those orders are left out; both eps (`_rdp_epsilon`) and the reconstruction bounds beyond PLD's steps
    (`dpmed.accounting.reconstruction`) read the curve from here."""
    rdp = _rdp_accountant(events, orders, "rdp")
    curve, kept = np.asarray(rdp._rdp, dtype=float), np.asarray(rdp._orders, dtype=float)
    resolved = curve >= 0
    return kept[resolved], curve[resolved]


def _rdp_epsilon(events: Sequence[DpSgdEvent], delta: float, orders: Sequence[float] | None = None) -> float:
    """dp_accounting's improved conversion (Balle et al. 2020, Prop. 12) on the orders whose RDP is a number
    (`rdp_curve`); with none, eps is not resolved (inf)."""
    kept, curve = rdp_curve(events, orders)
    if not len(kept):
        return math.inf
    return float(rdp_privacy_accountant.compute_epsilon(kept, curve, delta)[0])


def _rdp_classic_epsilon(events: Sequence[DpSgdEvent], delta: float) -> float:
    """eps = min_a RDP(a) + log(1/delta) / (a - 1) (Mironov 2017, Prop. 3) on dp_accounting's RDP curve.

    dp_accounting converts only with the improved bound, so the curve is read from the accountant's ``_orders``
    and ``_rdp`` (private attributes; tests pin the reference value 0.994 so a change there is caught).
    """
    rdp = _rdp_accountant(events, None, "rdp-classic")
    orders, curve = np.asarray(rdp._orders, dtype=float), np.asarray(rdp._rdp, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        eps = curve + math.log(1 / delta) / (orders - 1)
    eps = eps[np.isfinite(eps)]
    return float(eps.min()) if eps.size else math.inf


def _pure_epsilon(events: Sequence[DpSgdEvent], delta: float) -> float:
    """Sum over steps of log(1 + q (e^(1/b) - 1)): Laplace DP-SGD as pure DP (delta plays no role)."""
    if any(isinstance(e, PoissonGaussianEvent) for e in events):
        raise ValueError("accountant 'pure' applies to Laplace noise only; the Gaussian mechanism is never pure DP "
                         "(use 'pld' or 'rdp')")
    total = 0.0
    for e in events:
        per_step = 1.0 / e.noise_multiplier
        # log(1 + q (e^x - 1)) without overflow: = x + log(q + (1 - q) e^-x) for large x
        step = (math.log1p(e.sample_rate * math.expm1(per_step)) if per_step < 30
                else per_step + math.log(e.sample_rate + (1 - e.sample_rate) * math.exp(-per_step)))
        total += e.steps * step
    return total


def inclusion_probability(events: Sequence[DpSgdEvent]) -> float:
    """1 - prod (1 - q)^T: the chance that one example is drawn into at least one Poisson batch of ``events``.

    Whatever the noise, the outputs with and without the example are identically distributed when it is never
    drawn, so their total variation distance, which is delta at eps = 0, is at most this chance (add/remove
    neighbours, the coupling of Balle, Barthe and Gaboardi 2018): at a delta at least this large every noise,
    however small, gives eps = 0."""
    if any(accountable_rate(e.sample_rate) == 1.0 for e in events):
        return 1.0                                               # drawn at every step (1 also bounds a 0-step event)
    log_never = sum(e.steps * math.log1p(-accountable_rate(e.sample_rate)) for e in events)
    return -math.expm1(log_never)


def estimate_epsilon(events: Sequence[DpSgdEvent], *, delta: float) -> float:
    """A quick, loose upper bound on eps that sizes the PLD grid and starts noise calibration: RDP at a few
    orders for Gaussian noise, the pure-DP bound for Laplace noise (mixed ledgers: their sum); 0, exactly, at a
    delta no smaller than :func:`inclusion_probability`.

    Not for reporting: use :func:`dp_sgd_epsilon` or :func:`ledger_epsilon`. ``events`` must have noise > 0.
    """
    if delta >= inclusion_probability(events):
        return 0.0
    gaussian = [e for e in events if isinstance(e, PoissonGaussianEvent)]
    laplace = [e for e in events if isinstance(e, PoissonLaplaceEvent)]
    return ((_rdp_epsilon(gaussian, delta, _ESTIMATE_ORDERS) if gaussian else 0.0)
            + (_pure_epsilon(laplace, delta) if laplace else 0.0))


def _pld_epsilon(events: Sequence[DpSgdEvent], delta: float) -> float:
    scale = estimate_epsilon(events, delta=delta)
    if scale == 0.0:
        # an upper bound of 0 (a delta so large that it covers the whole difference) is the answer; PLD's grid,
        # sized relative to eps, would be at its finest here (millions of points and minutes for the same 0), or,
        # at tiny noise, at its coarsest (seconds per call, for a calibration that tries many)
        return 0.0
    coarsest = scale / _PLD_GRID_POINTS
    if not coarsest <= _PLD_MAX_INTERVAL:
        return math.inf  # RDP estimate above 5e7: eps is far beyond _PLD_MAX_EPSILON
    steps = sum(e.steps for e in events)
    # Few steps: the excess is then up to about half an interval, so the interval also stays below 5e-4 of eps.
    interval = min(max(min(math.sqrt(_PLD_RELATIVE_EXCESS * scale / steps), _PLD_FEW_STEPS_INTERVAL * scale),
                       coarsest, _PLD_MIN_INTERVAL), _PLD_MAX_INTERVAL)
    # what dp_accounting's PLDAccountant(_NEIGHBOURS, interval) composes for _as_dp_event(events), with the
    # Gaussian steps built by _pld.subsampled_gaussian_pld (the same PMF, without a Python loop over the grid)
    pld = pld_lib.identity(value_discretization_interval=interval)
    for e in events:
        q = accountable_rate(e.sample_rate)
        step = (pld_lib.from_laplace_mechanism(e.noise_multiplier, value_discretization_interval=interval,
                                               sampling_prob=q)
                if isinstance(e, PoissonLaplaceEvent) else subsampled_gaussian_pld(e.noise_multiplier, q, interval))
        pld = pld.compose(step.self_compose(e.steps))
    with np.errstate(over="ignore"):  # the overflow above eps ~ 700 is handled: such eps are refused below
        eps = float(pld.get_epsilon_for_delta(delta))
    return eps if eps <= _PLD_MAX_EPSILON else math.inf


def _pld_min_delta(steps: int) -> float:
    """The smallest delta PLD resolves after ``steps`` composed steps (see _PLD_MIN_DELTA)."""
    return max(_PLD_MIN_DELTA, steps / _PLD_STEPS_PER_MIN_DELTA)   # divided: 1e4 steps give 1e-11 exactly


def _no_min_delta(steps: int) -> float:
    return 0.0


@dataclass(frozen=True)
class AccountantInfo:
    """One accountant: its name in configs, the description printed in privacy cards, the largest eps it resolves,
    the noises it analyses, its computation ``compute(events, delta)`` for events with steps > 0 and
    noise_multiplier > 0, which returns inf when it cannot certify an eps of at most ``max_epsilon``,
    ``min_delta(steps)``, the smallest delta it resolves after that many steps (0: any), and ``max_steps``, the
    most steps it composes."""

    name: str
    description: str
    max_epsilon: float
    noises: tuple[str, ...]
    compute: Callable[[Sequence[DpSgdEvent], float], float]
    min_delta: Callable[[int], float] = _no_min_delta
    max_steps: float = math.inf

    def epsilon(self, events: Sequence[DpSgdEvent], delta: float) -> float:
        """``compute(events, delta)``, where dp_accounting's own arithmetic fails at extreme values (noise_multiplier
        1e-200 or 1e200 divides by zero or overflows) a ValueError in words, which every caller turns into a
        message naming its key or flag."""
        try:
            return self.compute(events, delta)
        except ArithmeticError as exc:
            raise arithmetic_failed(self.name, events, delta, exc) from None


_REGISTRY = {info.name: info for info in (
    AccountantInfo("pld", "PLD (dp_accounting, pessimistic estimate: an upper bound on eps)", _PLD_MAX_EPSILON,
                   ANALYSED_NOISES["pld"], _pld_epsilon, _pld_min_delta, _PLD_MAX_STEPS),
    AccountantInfo("rdp", "RDP (dp_accounting, default orders 1.1-1024, improved conversion of Balle et al. 2020 "
                          "as in Opacus)", math.inf, ANALYSED_NOISES["rdp"], _rdp_epsilon),
    AccountantInfo("rdp-classic", "RDP (dp_accounting, default orders) with the classic conversion of Mironov 2017 "
                                  "(looser; for reproducing published figures)", math.inf,
                   ANALYSED_NOISES["rdp-classic"], _rdp_classic_epsilon),
    AccountantInfo("pure", "pure DP: Poisson-subsampled Laplace per step (Balle et al. 2018), summed over steps "
                           "(delta = 0)", math.inf, ANALYSED_NOISES["pure"], _pure_epsilon),
)}
ACCOUNTANTS = tuple(_REGISTRY)


def accountant_info(name: str, noise: str | None = None) -> AccountantInfo:
    """The registry entry of accountant ``name``; given ``noise``, a ValueError where it does not analyse that noise,
    naming the accountants that do."""
    if name not in _REGISTRY:
        raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {name!r}")
    if noise is not None:
        _check_noise(noise)
        _arguments.check_accountant_noise(name, noise)
    return _REGISTRY[name]


def describe_accountant(name: str) -> str:
    """The text a privacy card prints next to an eps computed by accountant ``name``."""
    return accountant_info(name).description


def effective_accountant(accountant: str, *, target_epsilon: float | None, noise: str = "gaussian",
                         delta: float | None = None, steps: int | None = None) -> tuple[str, str | None]:
    """The accountant that will certify a run asked to use ``accountant`` at ``target_epsilon`` (and, where given,
    ``delta`` after ``steps`` steps), and why if it differs: PLD resolves eps only up to 500 (see
    _PLD_MAX_EPSILON), so higher Gaussian budgets (the 1e6-1e15 regime of 004_6210268d59b6f8e5.txt) fall back to
    RDP, and the run records that RDP produced its number; likewise PLD resolves delta only down to
    max(1e-12, 1e-15 T) (see _PLD_MIN_DELTA) and composes at most 2e6 steps (see _PLD_MAX_STEPS). Laplace noise
    falls back to the pure bound, which needs no delta."""
    info = accountant_info(accountant, noise)
    fallback = _FALLBACK[noise]
    if target_epsilon is not None and target_epsilon > info.max_epsilon:
        return fallback, (f"{accountant.upper()} cannot resolve eps above {info.max_epsilon:g} in double precision; "
                          f"{fallback} certified this budget instead")
    if delta is not None and steps is not None and delta < info.min_delta(steps):
        return fallback, (f"{accountant.upper()} cannot resolve delta below {info.min_delta(steps):.3g} after "
                          f"{steps} steps ({_DELTA_FLOOR_WHY}); {fallback} certified this budget instead")
    if steps is not None and steps > info.max_steps:
        return fallback, (f"{accountant.upper()} composes at most {info.max_steps:,.0f} steps ({_MAX_STEPS_WHY}); "
                          f"{fallback} certified these {steps:,} instead")
    return accountant, None


_DELTA_FLOOR_WHY = ("dp_accounting composes its privacy loss distribution by FFT in double precision, with a "
                    "rounding error that grows with the steps, and moves up to 1e-15 of probability to an infinite "
                    "loss at each composition")
_MAX_STEPS_WHY = "its grid, and with it its memory and time, grows with the steps"
# what certifies where PLD cannot, by noise: RDP for Gaussian noise, the pure bound for Laplace noise
_FALLBACK = {"gaussian": "rdp", "laplace": "pure"}


def fallback_accountant(noises: Iterable[str]) -> str | None:
    """The accountant that certifies where PLD cannot, for a ledger of runs with these ``noises``: RDP for Gaussian
    noise alone, the pure bound for Laplace noise alone; None for both (neither analyses the other's noise)."""
    kinds = set(noises)
    return _FALLBACK[kinds.pop()] if len(kinds) == 1 else None


def refuse_unresolved(accountant: str, delta: float, steps: int, *, noise: str) -> None:
    """ValueError, naming the cause and the fix, when ``accountant`` cannot resolve ``delta`` after ``steps``
    steps: more steps than it composes (PLD: 2e6, see _PLD_MAX_STEPS; it would run for minutes towards an exhausted
    memory), or a delta below the smallest it resolves (PLD: max(1e-12, 1e-15 T), see _PLD_MIN_DELTA), where its
    eps is rounding noise, or inf at delta ~ 1e-15, which is no statement about the run's eps."""
    info = accountant_info(accountant)
    fallback = _FALLBACK.get(noise)   # none for a ledger of both noises
    if steps > info.max_steps:
        use = f"use accountant {fallback!r}, whose cost does not grow with the steps" if fallback else \
            "account for fewer steps"
        raise ValueError(f"accountant {accountant!r} composes at most {info.max_steps:,.0f} steps, not {steps:,} "
                         f"({_MAX_STEPS_WHY}); {use}")
    floor = info.min_delta(steps)
    if delta < floor:
        use = f"use accountant {fallback!r}, which has no such floor, or " if fallback else "use "
        raise ValueError(f"accountant {accountant!r} cannot resolve delta = {delta:g} after {steps} steps: it "
                         f"resolves delta down to {floor:.3g} ({_DELTA_FLOOR_WHY}); {use}a delta of at least "
                         f"{floor:.3g}")


def _epsilon(events: Sequence[DpSgdEvent], *, delta: float, accountant: str) -> float:
    info = accountant_info(accountant)
    delta = _arguments.probability("delta", delta, include_one=False,
                                   hint="use default_delta(n_train) = min(1e-5, 1/(10 n)) unless you have a reason")
    released = [e for e in events if e.steps > 0]
    if not released:
        return 0.0
    if any(e.noise_multiplier == 0 for e in released):
        return math.inf  # no noise: the gradient sum is released exactly
    noises = {"laplace" if isinstance(e, PoissonLaplaceEvent) else "gaussian" for e in released}
    for noise in sorted(noises):
        accountant_info(accountant, noise)         # refused up front, naming the accountants that analyse it
    fallback = fallback_accountant(noises)      # the way out where this accountant cannot resolve eps
    noise = noises.pop() if len(noises) == 1 else "mixed"
    refuse_unresolved(accountant, delta, sum(e.steps for e in released), noise=noise)
    eps = info.epsilon(released, delta)
    if math.isnan(eps):
        raise ValueError(f"accountant {accountant!r} returned nan for {_described(released)}; try the other "
                         "accountant")
    if eps == math.inf:  # sigma > 0, so inf means the accountant could not resolve eps, not that it is infinite
        # the way out and the estimate follow the noise: RDP does not analyse Laplace noise, the pure bound does
        limit = (f"{info.max_epsilon:g}, the largest accountant {accountant!r} certifies"
                 + (f" (accountant={fallback!r} has no such limit)" if fallback else "")
                 if info.max_epsilon < math.inf else f"what accountant {accountant!r} can certify")
        estimate = {"gaussian": "an RDP estimate", "laplace": "the pure-DP bound"}.get(noise, "an estimate")
        raise ValueError(f"the eps of {_described(released)} at delta = {delta:g} lies above {limit}; {estimate} "
                         f"is eps ~ {estimate_epsilon(released, delta=delta):.3g}")
    return eps


def arithmetic_failed(accountant: str, events: Sequence, delta: float, exc: ArithmeticError) -> ValueError:
    """An accountant's arithmetic failing at extreme values, as the ValueError `AccountantInfo.epsilon` raises."""
    return ValueError(f"accountant {accountant!r} cannot compute eps for {_described(events)} at delta = {delta:g}: "
                      f"its arithmetic fails at values this extreme ({type(exc).__name__}: {exc})")


def _described(events: Sequence) -> str:
    """Events in words for a message (their reprs name classes and fields, not what was run). The plural by hand:
    accounting imports nothing else of dpmed, `numbers.count_text` included."""
    return "; ".join(f"{e.steps} step{'' if e.steps == 1 else 's'} at noise_multiplier {e.noise_multiplier:g}, "
                     f"sample_rate {e.sample_rate:g}" for e in events)


def dp_sgd_epsilon(*, noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                   accountant: str = "pld", noise: str = "gaussian") -> float:
    """eps(delta) of ``steps`` DP-SGD steps (Abadi et al. 2016) under add/remove-one neighbours.

    noise_multiplier 0 gives inf (a non-private run); steps 0 gives 0. ``noise="laplace"``: L1 clipping and
    Laplace noise, noise_multiplier = b / C1.
    """
    event = dp_sgd_event(noise=noise, noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps)
    return _epsilon([event], delta=delta, accountant=accountant)


def ledger_epsilon(ledger: Ledger, *, delta: float, accountant: str = "pld") -> float:
    """eps(delta) of all DP-SGD events of ``ledger``, composed in one accountant.

    Local DP image releases are refused: they hold for a different neighbour relation (any two images) and do not
    compose with DP-SGD's add/remove-one eps.
    """
    if not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a dpmed.accounting.Ledger, got {type(ledger).__name__}")
    if ledger.has_shuffled_batches:
        raise ValueError("the ledger holds steps on shuffled fixed-size batches (sampling: shuffle): every accountant "
                         "here assumes Poisson sampling, and none covers them; poisson_counterpart(ledger) gives the "
                         "eps a Poisson run would have had, which does not hold for this one")
    if len(ledger.dp_sgd_events) != len(ledger.events):
        raise ValueError("the ledger holds a local DP image release: that is a separate guarantee (any two images "
                         "are neighbours); report it with laplace_image_epsilon or gaussian_image_epsilon")
    return _epsilon(ledger.dp_sgd_events, delta=delta, accountant=accountant)


def dp_sgd_schedule(n_train: int, *, batch_size: int, epochs: int) -> tuple[float, int]:
    """(sample_rate q, steps T) for ``epochs`` passes with expected batch ``batch_size``: q = B / N, and
    T = epochs * round(N / B), so that each example is sampled about ``epochs`` times (METHODS.md s.2)."""
    n_train = _arguments.count("n_train", n_train, minimum=1, hint="pass the number of training images")
    batch_size = _arguments.count("batch_size", batch_size, minimum=1, hint="pass the expected Poisson batch size")
    epochs = _arguments.count("epochs", epochs, minimum=1, hint="pass the number of passes over the data")
    if batch_size > n_train:
        raise ValueError(f"batch_size {batch_size} exceeds the {n_train} training images; lower training.batch_size")
    return batch_size / n_train, epochs * max(1, round(n_train / batch_size))


def default_delta(n_train: int) -> float:
    """min(1e-5, 1 / (10 n)) (METHODS.md s.2).

    delta must stay well below 1/n: publishing each record whole with probability delta is (0, delta)-DP and leaks
    delta * n records in expectation.
    """
    n_train = _arguments.count("n_train", n_train, minimum=1, hint="pass the number of training images")
    return min(1e-5, 1.0 / (10 * n_train))
