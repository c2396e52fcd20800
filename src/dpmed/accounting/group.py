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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from scipy import stats

from dpmed.accounting import _arguments
from dpmed.accounting.epsilon import accountant_info

__all__ = ["NEIGHBOUR_PATIENT", "GroupPrivacy", "group_privacy", "GROUP_CITATION",
           "TIGHT_GROUP_CITATION"]

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


def _tight(noise_multiplier: float, sample_rate: float, steps: int, k: int, delta: float,
           scale: float) -> float | None:
    sensitivities = list(range(k + 1))
    weights = [float(stats.binom.pmf(j, k, sample_rate)) for j in sensitivities]
    event = dp_event.SelfComposedDpEvent(
        dp_event.MixtureOfGaussiansDpEvent(noise_multiplier, sensitivities, weights), steps)
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

    Give ``noise_multiplier``, ``sample_rate`` and ``steps`` (Gaussian noise, Poisson sampling) for the tight value
    too; it is skipped, and ``tight_missing`` says why, when k eps exceeds what the PLD resolves, when delta lies
    below the smallest delta it resolves after ``steps`` steps (max(1e-12, 1e-15 steps): below, its eps is
    double-precision rounding noise), or when ``steps`` exceeds the steps a PLD composes (``_pld.MAX_STEPS``, as
    for the run's eps: its grid, time and memory grow with T, and 1e8 steps ran for minutes). No fallback takes
    its place there: dp_accounting's RDP accountant does not compose the mixture of Gaussians, and the formula
    value still stands."""
    k = _arguments.count("k", k, minimum=1, hint="the number of training images of the patient")
    delta = _arguments.probability("delta", delta, include_one=False, hint="the run's delta")
    eps_k, delta_k = _formula(epsilon, delta, k)
    if k == 1:
        return GroupPrivacy(k=k, formula_epsilon=eps_k, formula_delta=delta_k, tight_epsilon=epsilon)
    tight, missing = None, None
    if noise_multiplier is not None:
        pld = accountant_info("pld")
        if eps_k > _TIGHT_MAX_EPSILON:
            missing = f"k eps = {eps_k:.4g} is above the {_TIGHT_MAX_EPSILON:g} a PLD resolves"
        elif steps > pld.max_steps:
            missing = (f"a PLD composes at most {pld.max_steps:,.0f} steps (its grid, time and memory grow with "
                       f"them), not {steps:,}")
        elif delta < pld.min_delta(steps):
            missing = f"a PLD resolves delta down to {pld.min_delta(steps):.3g} only after {steps:,} steps"
        else:
            tight = _tight(noise_multiplier, sample_rate, steps, k, delta, eps_k)
            if tight is None:
                missing = "the PLD of the mixture of Gaussians could not be computed at this setting"
    return GroupPrivacy(k=k, formula_epsilon=eps_k, formula_delta=delta_k, tight_epsilon=tight,
                        tight_missing=missing)
