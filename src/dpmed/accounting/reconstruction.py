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

Ways to compute it, in a registry (``RECONSTRUCTION_METHODS``); this module holds the registry and the public
functions, ``_pld`` the PLDs (worst case and relaxed) and the duality, ``_edgeworth`` the expansion:

* ``pld`` (the bound): from dp_accounting's privacy loss distribution (PLD) of the Poisson-subsampled Gaussian,
  composed T times (pessimistic connect-the-dots discretisation, Doroshenko et al. 2022), through the hockey-stick
  duality gamma = min(1, inf_eps delta(eps) + e^eps kappa) (power = sup{Q(E) : P(E) <= kappa}
  <= Q(E) - e^eps P(E) + e^eps kappa). A pessimistic PLD over-estimates delta at every eps, so the result is an
  upper bound on the exact power, up to the discretisation and a 1e-15 truncation. Beyond PLD's step ceiling
  (2e6 steps, where its grid's time and memory run away) the same duality with RDP's delta(eps): a looser upper
  bound at a cost that does not grow with T, labelled "RDP duality".
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
~1e-15 absolute from dp_accounting's tail truncation, which dominates only for kappa below ~1e-13. Below ~1e-14 it
is not resolved at all: the FFT composition's round-off moves delta by that much either way (the eps accountant's
floor on delta, max(1e-12, 1e-15 T), has the same cause), so a value there is kept at kappa but may lie below the
exact power (q = 1, T = 1000, sigma = 3, kappa = 1e-300: the exact power is 4e-155). Where the two
add/remove directions have close powers it can exceed both by more (T = 1, q = 0.5, sigma = 0.5, kappa = 0.3: 4%):
dp_accounting's PLD takes the larger delta at each eps before the duality, and inf_eps of a maximum is at least the
maximum of the infima; still an upper bound. The Edgeworth
value is within 3% of the PLD for sigma >= 1 at kappa >= 1e-4, and off by 10-20% and more for sigma < 1 with few
steps, or for very small kappa (its far tail is unreliable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from dpmed.accounting import _arguments, _edgeworth, _limits, _pld
from dpmed.accounting.epsilon import rdp_curve
from dpmed.accounting.events import PoissonGaussianEvent

__all__ = ["RECONSTRUCTION_METHODS", "ReconstructionMethod", "reconstruction_method", "MIA_FPRS",
           "NEIGHBOUR_RECONSTRUCTION", "ReconstructionRisk", "default_kappa", "reconstruction_bound",
           "relaxed_reconstruction_bound", "membership_inference_tpr", "reconstruction_risk"]

NEIGHBOUR_RECONSTRUCTION = ("add or remove the target image (Poisson sampling); the larger of the tests "
                            "'without vs with the target' (Hayes et al. 2023) and 'with vs without'")
# The same with the patient as the unit (METHODS.md s.2b): the record is one patient's images, clipped together.
_NEIGHBOUR_PATIENT = NEIGHBOUR_RECONSTRUCTION.replace(
    "the target image (Poisson sampling)", "the target patient with all of their images (Poisson sampling of patients)")
# The false-positive rates at which a privacy card reports the optimal membership-inference TPR.
MIA_FPRS = (0.001, 0.01)


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


def default_kappa(n_train: int) -> float:
    """1 / N: the success of an attacker who guesses uniformly among the N training images (METHODS.md s.7)."""
    n_train = _arguments.count("n_train", n_train, minimum=2, hint="pass the number of training images")
    return 1.0 / n_train


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
                         True, True, _pld.worst_case_pld, "PLD"),
    ReconstructionMethod("edgeworth", "second-order Edgeworth expansion of the composed privacy loss: an "
                                      "approximation", False, True, _edgeworth.worst_case_edgeworth,
                         "Edgeworth expansion"),
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
    every sigma, takes its place. Only two failures are caught: ``_pld.NotComputable``, raised where we detect it up
    front, and OverflowError, which Python's math functions raise when a float result exceeds the double range (what
    dp_accounting's PLD code hits on grids coarser than the ones we detect)."""
    found = _limits.degenerate(sigma, q, steps, kappa)
    if found is None and exact_limits:
        found = _limits.pinned(sigma, q, steps, kappa, relaxed=relaxed)
    if found is not None:
        return found
    try:
        return compute(sigma, q, steps, kappa), label
    except (_pld.NotComputable, OverflowError) as error:
        return (_limits.ceiling(q, steps, kappa),
                f"trivial ceiling (the sigma = 0 power): {label} not computable in double precision ({error})")


def _rdp_power(sigma: float, q: float, steps: int, kappa: float) -> float:
    """The hockey-stick duality of the PLD bound with delta(eps) from RDP (dp_accounting, default orders, add or
    remove): an upper bound too, looser than PLD's, at a cost that does not grow with T. RDP's curve of the
    subsampled Gaussian bounds both add/remove directions (Mironov, Talwar, Zhang 2019), so it bounds the worst
    case, and with it the relaxed case, which never exceeds it (see relaxed_reconstruction_bound). RDP gives
    delta only at eps >= 0; below, delta(eps) <= delta(0) + 1 - e^eps (P(E) - e^eps Q(E) = P(E) - Q(E) +
    (1 - e^eps) Q(E)), where the objective is no smaller than at eps = 0. The curve is the eps accountant's
    (`dpmed.accounting.epsilon.rdp_curve`: orders whose RDP rounds below zero left out, since dp_accounting reads
    each as delta = 0); with no order left, the sigma = 0 ceiling stands."""
    orders, curve = rdp_curve([PoissonGaussianEvent(noise_multiplier=sigma, sample_rate=q, steps=steps)])
    ceiling = _limits.ceiling(q, steps, kappa)
    if not len(orders):
        return ceiling

    def delta(eps: float) -> float:
        value = rdp_privacy_accountant.compute_delta(orders, curve, max(eps, 0.0))[0]
        return value + max(0.0, -math.expm1(eps))

    return _pld.power_from_delta(delta, kappa, ceiling)


# PLD beyond its step ceiling (the eps accountant's, _pld.MAX_STEPS: its grid, time and memory grow with T; a
# mistyped step count ran for minutes) gives way to the RDP duality, as the eps accountant gives way to RDP.
_RDP_LABEL = f"RDP duality (PLD composes at most {_pld.MAX_STEPS:,} steps)"


def _worst_case(sigma: float, q: float, steps: int, kappa: float, method: str = "pld") -> tuple[float, str]:
    info = reconstruction_method(method)
    compute, label = ((_rdp_power, _RDP_LABEL) if info.name == "pld" and steps > _pld.MAX_STEPS
                      else (info.gamma, info.label))
    return _evaluate(compute, label, sigma, q, steps, kappa, exact_limits=info.uses_exact_limits, relaxed=False)


def _relaxed(sigma: float, q: float, steps: int, kappa: float,
             worst: tuple[float, str] | None = None) -> tuple[float, str]:
    """The relaxed bound and how it was obtained, at most the worst case's (``worst``, computed here if not given):
    the relaxed case never exceeds the worst case (relaxed_reconstruction_bound), but its PLD grid is sized from the
    worst case's loss range, and where that is far wider (sigma 1e15, q 1, T 1000, kappa 1e-12) the relaxed value
    came out above the worst case's (1.06e-12 against 1.001e-12): both are upper bounds, so the smaller holds."""
    compute, label = (_rdp_power, _RDP_LABEL) if steps > _pld.MAX_STEPS else (_pld.relaxed_pld, "PLD")
    relaxed, via = _evaluate(compute, label, sigma, q, steps, kappa, exact_limits=True, relaxed=True)
    bound, bound_via = worst if worst is not None else _worst_case(sigma, q, steps, kappa)
    if bound < relaxed:
        return bound, f"the worst case's bound, which the relaxed case never exceeds ({bound_via}; {via} gave more)"
    return relaxed, via


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


def reconstruction_risk(*, noise_multiplier: float, sample_rate: float, steps: int, kappa: float,
                        unit: str = "image", size_epsilon: float = 0.0) -> ReconstructionRisk:
    """Every reconstruction number of METHODS.md s.7 for one DP-SGD run, how each was obtained, and the
    assumptions behind them. ``unit``: what the run's neighbours differ by ("image" or "patient"); the numbers
    are the same, the assumptions say which record the target is.

    ``size_epsilon``: the eps of the count of training units released beside the model (`dpmed.released_size`,
    pure DP). The attacker sees it too, and with or without the target it shifts by one, so every number is
    multiplied by e^size_epsilon and capped at 1: the count's likelihood ratio is at most that, and the best test's
    power is concave in its false-positive rate, so an attacker's power over both is at most e^eps_N times its power
    over the model alone at the same rate. Left out, the bounds were those of a model released without its count."""
    sigma, q, steps, kappa = _check(noise_multiplier, sample_rate, steps, kappa)
    size_epsilon = _arguments.positive("size_epsilon", size_epsilon, allow_zero=True,
                                       hint="the eps of the released count of training units (0: none released)")
    factor = math.exp(size_epsilon)
    if unit not in ("image", "patient"):
        raise ValueError(f"unit must be 'image' or 'patient', got {unit!r}")
    setting = (sigma, q, steps)
    neighbours = NEIGHBOUR_RECONSTRUCTION if unit == "image" else _NEIGHBOUR_PATIENT
    ceiling = min(1.0, factor * _limits.ceiling(q, steps, kappa))
    assumptions = (
        f"informed adversary: knows every training {unit} but the target {unit}, the model and the training "
        f"procedure, and would succeed with prior probability kappa = {kappa:.6g} without the model (1/N, a study's "
        f"kappa, is a uniform guess among N training {unit}s, N as released); Poisson sampling at rate q = {q:g} for "
        f"T = {steps} steps with noise multiplier {sigma:g}; neighbouring relation: {neighbours}; worst case: the "
        f"attacker knows the target's clipped gradient; relaxed: it does not know its sign (Kaissis et al. 2023). "
        f"No reconstruction bound here exceeds {math.ceil(ceiling * 1e4) / 100:g}%, its value with no noise at "
        f"all: the chance that the target {unit} was sampled in some step at all (1 - (1 - q)^T, with kappa"
        f"{' and eps_N' if size_epsilon else ''}); high budgets (eps 1e6 and beyond) sit at it, and any "
        f"protection beyond it rests on empirical attacks, not on these bounds.")
    if size_epsilon:
        assumptions += (f" The training set's size is released beside the model as a count at eps_N = "
                        f"{size_epsilon:g} (pure DP): every number includes it, multiplied by e^eps_N and capped at 1.")
    (worst, worst_via), (edgeworth, edgeworth_via), (gdp, gdp_via) = (
        _worst_case(*setting, kappa, method) for method in ("pld", "edgeworth", "gdp"))
    relaxed, relaxed_via = _relaxed(*setting, kappa, (worst, worst_via))
    tprs = {fpr: _worst_case(*setting, fpr) for fpr in MIA_FPRS}
    worst, edgeworth, relaxed, gdp = (min(1.0, factor * x) for x in (worst, edgeworth, relaxed, gdp))
    return ReconstructionRisk(
        noise_multiplier=sigma, sample_rate=q, steps=steps, kappa=kappa, worst_case=worst,
        worst_case_edgeworth=edgeworth, relaxed=relaxed, gdp=gdp,
        tpr_at_fpr={fpr: min(1.0, factor * tpr) for fpr, (tpr, _) in tprs.items()}, assumptions=assumptions,
        worst_case_via=worst_via, worst_case_edgeworth_via=edgeworth_via, relaxed_via=relaxed_via, gdp_via=gdp_via,
        tpr_at_fpr_via={fpr: via for fpr, (_, via) in tprs.items()})
