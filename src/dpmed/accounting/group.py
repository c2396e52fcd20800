"""What image-level DP-SGD implies for a patient with k images, and the patient as the unit of privacy.

DP-SGD with the image as the unit (neighbours: add or remove one image) protects a patient who has k training images
only as a *group* of k records. Two statements, both printed where the image is the unit (METHODS.md s.2b):

* the **group-privacy formula** (Dwork and Roth 2014, Lemma 2.2, and its approximate-DP form, Vadhan 2017,
  Lemma 2.2): an (eps, delta)-DP mechanism is (k eps, k e^((k-1) eps) delta)-DP for groups of k. General, and
  vacuous (delta_k >= 1) as soon as k eps is more than a few;
* the **tight value** for DP-SGD (Ganesh 2024, "Tight group-level DP guarantees for DP-SGD with sampling via mixture
  of Gaussians mechanisms", arXiv:2401.10294): with Poisson sampling each of the patient's k images joins a step
  independently with probability q, so the patient adds J ~ Binomial(k, q) clipped gradients; the worst case (all
  aligned) is the mixture-of-Gaussians mechanism with sensitivities 0..k and binomial weights, which dp_accounting's
  PLD accountant composes (``MixtureOfGaussiansDpEvent``). An upper bound on the patient's eps at the same delta, up
  to the PLD's pessimistic discretisation.

With the patient as the unit (user-level DP-SGD, McMahan et al. 2018), each sampled patient's gradients are summed
and clipped together: the mechanism is the ordinary Poisson-subsampled Gaussian over N_patients units, and the
accountant needs no change (``NEIGHBOUR_PATIENT``).

Both kinds of run trained on the same patients compose for add/remove one patient (:func:`patient_epsilon`): a
patient-unit run's steps as they are, an image-unit run's steps as the mixture of Gaussians of the patient's at most
k images (its ``max_images_per_patient``), all in one PLD accountant. Only a PLD composes them: dp_accounting's RDP
accountant has no analysis of ``MixtureOfGaussiansDpEvent``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from scipy import stats

from dpmed.accounting import _arguments
from dpmed.accounting.epsilon import _as_dp_event, accountant_info, estimate_epsilon
from dpmed.accounting.events import DpSgdEvent, PoissonGaussianEvent

__all__ = ["NEIGHBOUR_PATIENT", "GroupPrivacy", "group_privacy", "GROUP_CITATION",
           "TIGHT_GROUP_CITATION", "ImageGroup", "patient_epsilon"]

NEIGHBOUR_PATIENT = "add or remove one training patient with all of their images (Poisson sampling of patients)"
GROUP_CITATION = "Dwork and Roth 2014, Lemma 2.2; Vadhan 2017, Lemma 2.2 (approximate DP)"
TIGHT_GROUP_CITATION = ("Ganesh 2024, arXiv:2401.10294: PLD of the mixture of Gaussians with sensitivities 0..k "
                        "and Binomial(k, q) weights")

# The tight value is computed only where the PLD resolves it (beyond, the formula is all there is; both are huge).
_TIGHT_MAX_EPSILON = 500.0


@dataclass(frozen=True)
class GroupPrivacy:
    """What an image-level (epsilon, delta) run implies for a patient with ``k`` training images.

    formula_epsilon / formula_delta: the group-privacy formula (k eps, k e^((k-1) eps) delta); formula_delta is
    capped at 1 (vacuous). tight_epsilon: the patient's eps at the run's own delta by the mixture-of-Gaussians PLD,
    or None where it was not computed (Laplace noise, shuffled batches, or beyond what the PLD resolves).
    tight_missing: why DP-SGD's tight value was asked for (DP-SGD parameters given) and is not stated; else None."""

    k: int
    formula_epsilon: float
    formula_delta: float
    tight_epsilon: float | None
    tight_missing: str | None = None

    @property
    def formula_is_vacuous(self) -> bool:
        return self.formula_delta >= 1.0


def _formula(epsilon: float, delta: float, k: int) -> tuple[float, float]:
    log_delta = math.log(k) + (k - 1) * epsilon + math.log(delta) if delta > 0 else -math.inf
    return k * epsilon, 1.0 if log_delta >= 0 else math.exp(log_delta)


def _mixture(noise_multiplier: float, sample_rate: float, k: int) -> dp_event.MixtureOfGaussiansDpEvent:
    """One step as a patient with k images sees it: J ~ Binomial(k, q) of them sampled, their clipped gradients
    aligned (the worst case), so the sum moves by J C."""
    sensitivities = list(range(k + 1))
    weights = [float(stats.binom.pmf(j, k, sample_rate)) for j in sensitivities]
    return dp_event.MixtureOfGaussiansDpEvent(noise_multiplier, sensitivities, weights)


def _tight(noise_multiplier: float, sample_rate: float, steps: int, k: int, delta: float,
           scale: float) -> float | None:
    event = dp_event.SelfComposedDpEvent(_mixture(noise_multiplier, sample_rate, k), steps)
    # a pessimistic grid: any interval gives an upper bound; this one keeps the excess to a few percent of k eps
    interval = max(1e-3, min(1.0, scale / 1000))
    accountant = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                      value_discretization_interval=interval)
    try:
        accountant.compose(event)
        eps = float(accountant.get_epsilon(delta))
    except (OverflowError, FloatingPointError, ValueError, TypeError):
        # TypeError: dp_accounting 0.6.0's mixture-of-Gaussians PLD binary-searches its lower truncation point in
        # [z - max sensitivity, z], and where the tail mass is not bracketed there (it depends on sigma, q and k
        # to the last bits) the search returns None, which it then adds to an int. The formula value still stands.
        return None
    return eps if math.isfinite(eps) and eps <= _TIGHT_MAX_EPSILON else None


def group_privacy(*, epsilon: float, delta: float, k: int, noise_multiplier: float | None = None,
                  sample_rate: float | None = None, steps: int | None = None) -> GroupPrivacy:
    """The guarantee of an image-level (``epsilon``, ``delta``) DP-SGD run for a patient with ``k`` images.

    Give ``noise_multiplier``, ``sample_rate`` and ``steps`` (Gaussian noise, Poisson sampling; all three or none)
    for the tight value too; it is skipped, and ``tight_missing`` says why, when k eps exceeds what the PLD
    resolves, when delta lies below the smallest delta it resolves after ``steps`` steps (max(1e-12, 1e-15 steps):
    below, its eps is double-precision rounding noise), or when ``steps`` exceeds the steps a PLD composes
    (``_pld.MAX_STEPS``, as for the run's eps: its grid, time and memory grow with T, and 1e8 steps ran for
    minutes). No fallback takes its place there: dp_accounting's RDP accountant does not compose the mixture of
    Gaussians, and the formula value still stands."""
    k = _arguments.count("k", k, minimum=1, hint="the number of training images of the patient")
    delta = _arguments.probability("delta", delta, include_one=False, hint="the run's delta")
    # checked as the run's own steps are: an impossible one is refused, not "a value the PLD cannot compute"
    if noise_multiplier is not None and sample_rate is not None and steps is not None:
        run: PoissonGaussianEvent | None = PoissonGaussianEvent(noise_multiplier=noise_multiplier,
                                                                sample_rate=sample_rate, steps=steps)
    elif noise_multiplier is None and sample_rate is None and steps is None:
        run = None
    else:
        given = {"noise_multiplier": noise_multiplier, "sample_rate": sample_rate, "steps": steps}
        raise ValueError(f"the tight group value needs the run's whole DP-SGD schedule: give "
                         f"{' and '.join(n for n, v in given.items() if v is None)} too, or none of "
                         f"{', '.join(given)} for the formula alone")
    eps_k, delta_k = _formula(epsilon, delta, k)
    if k == 1:
        return GroupPrivacy(k=k, formula_epsilon=eps_k, formula_delta=delta_k, tight_epsilon=epsilon)
    tight, missing = None, None
    if run is not None:
        pld, steps = accountant_info("pld"), run.steps
        if eps_k > _TIGHT_MAX_EPSILON:
            missing = f"k eps = {eps_k:.4g} is above the {_TIGHT_MAX_EPSILON:g} a PLD resolves"
        elif steps > pld.max_steps:
            missing = (f"a PLD composes at most {pld.max_steps:,.0f} steps (its grid, time and memory grow with "
                       f"them), not {steps:,}")
        elif delta < pld.min_delta(steps):
            missing = f"a PLD resolves delta down to {pld.min_delta(steps):.3g} only after {steps:,} steps"
        else:
            tight = _tight(run.noise_multiplier, run.sample_rate, steps, k, delta, eps_k)
            if tight is None:
                missing = "the PLD of the mixture of Gaussians could not be computed at this setting"
    return GroupPrivacy(k=k, formula_epsilon=eps_k, formula_delta=delta_k, tight_epsilon=tight,
                        tight_missing=missing)


@dataclass(frozen=True)
class ImageGroup:
    """``event``'s steps of a run with the image as the unit, as a patient with at most ``k`` training images in it
    (the run's max_images_per_patient) sees them: a group of k images, each sampled on its own."""

    k: int
    event: PoissonGaussianEvent

    def __post_init__(self) -> None:
        k = _arguments.count("k", self.k, minimum=1, hint="the run's max_images_per_patient")
        if not isinstance(self.event, PoissonGaussianEvent):
            raise TypeError(f"an ImageGroup holds Poisson-sampled Gaussian steps (the mixture of Gaussians has no "
                            f"Laplace counterpart here), got {self.event!r}")
        object.__setattr__(self, "k", k)


# The grid of the composed PLD: pessimistic at any interval; sqrt(1e-3 eps / T) keeps the excess near 1e-3 of eps
# (epsilon.py measured it at about T h^2), and 1e-3 at the finest bounds the cost of building each mixture's PMF,
# which dp_accounting inverts one grid point at a time (about 3 s at k = 3, sigma = 1).
_COMPOSED_RELATIVE_EXCESS = 1e-3
_COMPOSED_MIN_INTERVAL = 1e-3


def patient_epsilon(patient_events: Sequence[DpSgdEvent], image_groups: Sequence[ImageGroup], *,
                    delta: float) -> float:
    """eps(delta) for add/remove one patient with all of their images, of runs with the patient as the unit
    (``patient_events``: Poisson-subsampled Gaussian or Laplace steps) and runs with the image as the unit whose
    patients each have at most k images in them (``image_groups``: the mixture of Gaussians of sensitivities 0..k
    with Binomial(k, q) weights, ``TIGHT_GROUP_CITATION``), composed in one dp_accounting PLD accountant
    (pessimistic: an upper bound). inf where a step has no noise.

    ValueError, saying why, where the PLD cannot resolve it: more than ``_pld.MAX_STEPS`` steps in all, delta below
    the smallest it resolves after them, eps above 500, or dp_accounting failing at the setting. There is no
    fallback: its RDP accountant does not compose the mixture of Gaussians."""
    delta = _arguments.probability("delta", delta, include_one=False, hint="the study's delta")
    patient_events = [e for e in patient_events if e.steps > 0]
    # seeds of one setting: one mixture PMF, composed over all of their steps
    merged: Counter[tuple[float, float, int]] = Counter()
    for group in image_groups:
        e = group.event
        if e.steps > 0:
            merged[(e.noise_multiplier, e.sample_rate, group.k)] += e.steps
    if not patient_events and not merged:
        return 0.0
    if any(e.noise_multiplier == 0 for e in patient_events) or any(sigma == 0 for sigma, _, _ in merged):
        return math.inf
    pld = accountant_info("pld")
    steps = sum(e.steps for e in patient_events) + sum(merged.values())
    if steps > pld.max_steps:
        raise ValueError(f"a PLD composes at most {pld.max_steps:,.0f} steps (its grid, time and memory grow with "
                         f"them), not {steps:,}, and dp_accounting's RDP accountant has no analysis of the mixture "
                         "of Gaussians; account for fewer steps")
    if delta < pld.min_delta(steps):
        raise ValueError(f"a PLD resolves delta down to {pld.min_delta(steps):.3g} only after {steps:,} steps, not "
                         f"{delta:g}; use a delta of at least {pld.min_delta(steps):.3g}")
    # the scale of eps, for the grid: the patient-unit runs' RDP estimate plus each group's k times its run's
    scale = (estimate_epsilon(patient_events, delta=delta) if patient_events else 0.0) + sum(
        k * estimate_epsilon([PoissonGaussianEvent(sigma, q, t)], delta=delta) for (sigma, q, k), t in merged.items())
    interval = max(_COMPOSED_MIN_INTERVAL, min(1.0, math.sqrt(_COMPOSED_RELATIVE_EXCESS * scale / steps)))
    events = [_as_dp_event(patient_events)] if patient_events else []
    events += [dp_event.SelfComposedDpEvent(_mixture(sigma, q, k), t) for (sigma, q, k), t in merged.items()]
    accountant = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                      value_discretization_interval=interval)
    try:
        accountant.compose(dp_event.ComposedDpEvent(events))
        with np.errstate(over="ignore"):      # overflows above eps ~ 700 are refused below
            eps = float(accountant.get_epsilon(delta))
    except (OverflowError, FloatingPointError, ValueError, TypeError) as exc:
        # TypeError: dp_accounting 0.6.0's mixture PLD can fail its own truncation search (see _tight)
        raise ValueError(f"dp_accounting's PLD of the mixture of Gaussians could not be computed at this setting "
                         f"({type(exc).__name__}: {exc})") from None
    if not eps <= _TIGHT_MAX_EPSILON:
        raise ValueError(f"the composition's eps lies above the {_TIGHT_MAX_EPSILON:g} a PLD resolves; compose "
                         "runs of smaller eps")
    return eps
