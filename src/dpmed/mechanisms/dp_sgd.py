"""dp_sgd: DP-SGD (Abadi et al. 2016): Poisson sampling, per-unit clipping, noise on the clipped sum (METHODS.md s.2).

Its arm in the study file, the plan of one run (every value the accountant and training rest on, computed before
training: q, T, delta, the certifying accountant, sigma calibrated so that eps never exceeds the target), the card
its ledger supports, and its reconstruction-risk record (METHODS.md s.7). The step itself is `dpmed.training`'s.

The unit of privacy is a patient with all of their images by default (user-level DP-SGD, McMahan et al. 2018:
patients Poisson-sampled at q = B / N_patients, each sampled patient's gradients summed and clipped together, the
accountant unchanged with N = N_patients; METHODS.md s.2b), or one image. With the image as the unit the card also
states what the eps implies for the patient with the most images (`accounting.group_privacy`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from dpmed import accounting
from dpmed.accounting import Ledger
from dpmed.errors import ConfigError, PrivacyError
from dpmed.mechanisms.base import (ArmBase, GroupGuarantee, MechanismInfo, PlanContext, PrivacyCard, Strict, Sweep,
                                   exactly_one, positive_finite, refuse_vacuous_delta, training_steps)
from dpmed.mechanisms.cards import COVERAGE, SECURE_RANDOMNESS, label_not_dp, label_randomness

__all__ = ["DpSgdArm", "DpSgdPlan", "ReconstructionRecord", "AttackConfig", "INFO"]


class AttackConfig(Strict):
    """The realistic threat model of 004_6210268d59b6f8e5.txt (Ziller et al. 2024) as an actual attack: the imprint
    reconstruction attack (Fowl et al. 2022; `dpmed.attack`) on ``batches`` steps of this arm (its C, sigma and
    expected batch size, dpmed's own DP-SGD step, fresh noise), ``structure`` ``sparse`` (the stronger under noise)
    or ``cumulative`` (the paper's); a reconstruction succeeds above the ``threshold_quantile`` of what plausible
    public images reach. The attacked batches are held-out test images standing in for training images (same
    mechanism, same distribution), so the reported rate is no statistic of the training set."""

    batches: int = Field(default=4, ge=1)
    structure: Literal["sparse", "cumulative"] = "sparse"
    threshold_quantile: float = Field(default=0.99, gt=0, lt=1)


class DpSgdArm(ArmBase):
    """DP-SGD (Abadi et al. 2016): Poisson sampling, per-example clipping, noise on the clipped sum.

    The noise multiplier is calibrated from (target_epsilon, delta, sample_rate, steps) so that the accountant's eps
    never exceeds the target. ``noise_multiplier`` instead of ``target_epsilon`` is a reproduction mode: the noise
    is taken as given and its eps reported. delta defaults to min(1e-5, 1 / (10 N)).

    noise: ``gaussian`` (L2 clipping, the default) or ``laplace`` (L1 clipping, Laplace noise, noise_multiplier =
    b / C1; 001_d0483fd35863b74c.txt's "Laplacian" rows). sampling: ``poisson`` (what every accountant assumes) or
    ``shuffle``, a reproduction mode whose eps is labelled as not holding for the run.
    accountant: pld (default), rdp, rdp-classic (published figures' conversion), pure (Laplace only). PLD resolves
    eps up to 500; higher Gaussian budgets are certified by RDP and the run records so.

    privacy_unit: ``patient`` (default): neighbouring datasets differ by one patient with all of their images;
    patients are Poisson-sampled and each one's gradients summed over their images and clipped together
    (user-level DP-SGD, McMahan et al. 2018), and batch_size counts patients. ``image``: one image is the unit (the
    source documents' setting); the privacy card then also states what that implies for the patient with the most
    images. Where a dataset publishes no patient ids, each image is its own patient and the two coincide.
    max_images_per_patient: train on at most this many images of each patient (chosen by the study seed); bounds
    what image-level DP implies for a patient, and the per-patient work of a step.
    attack: run the imprint reconstruction attack on this arm's step (:class:`AttackConfig`); its success rate is
    reported beside the worst-case and relaxed bounds.
    """

    auditable = True
    mechanism: Literal["dp_sgd"]
    target_epsilon: Sweep | None = None
    noise_multiplier: Sweep | None = None
    delta: float | None = Field(default=None, gt=0, lt=1)
    max_grad_norm: Sweep = Field(default_factory=lambda: [1.0])
    noise: Literal["gaussian", "laplace"] = "gaussian"
    accountant: Literal["pld", "rdp", "rdp-classic", "pure"] = "pld"
    sampling: Literal["poisson", "shuffle"] = "poisson"
    privacy_unit: Literal["patient", "image"] = "patient"
    max_images_per_patient: int | None = Field(default=None, ge=1)
    attack: AttackConfig | None = None

    @field_validator("target_epsilon", "noise_multiplier")
    @classmethod
    def _positive_or_unset(cls, v: list[float] | None) -> list[float] | None:
        return None if v is None else positive_finite(v)

    @field_validator("max_grad_norm")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        return positive_finite(v)

    @model_validator(mode="after")
    def _consistent(self) -> "DpSgdArm":
        exactly_one(self, ("target_epsilon", "noise_multiplier"),
                    "a budget to calibrate the noise to, or the noise itself for a reproduction")
        supported = {"gaussian": ("pld", "rdp", "rdp-classic"), "laplace": ("pld", "pure")}[self.noise]
        if self.accountant not in supported:
            raise ValueError(f"accountant {self.accountant!r} does not analyse {self.noise} noise; use one of "
                             f"{', '.join(supported)}")
        return self


class DpSgdPlan(Strict):
    """One DP-SGD run as the accountant was told and training follows it exactly.

    sample_rate q, steps T, noise_multiplier sigma (given, or calibrated to target_epsilon), max_grad_norm C; noise
    and sampling as in the arm; unit: patient or image, n_units N of them (q = B / N), n_train the images trained
    on. expected_batch_size: the divisor of the noisy sum, q N fixed at planning: under add/remove the size of the
    private set is itself private, so training must not recompute it from the data it is handed (canaries or a
    neighbouring set would change it); None only for direct callers that plan and train on one set."""

    mechanism: Literal["dp_sgd"] = "dp_sgd"
    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    noise: Literal["gaussian", "laplace"] = "gaussian"
    sampling: Literal["poisson", "shuffle"] = "poisson"
    unit: Literal["patient", "image"] = "image"
    expected_batch_size: float | None = None
    n_units: int = 0
    n_train: int = 0
    delta: float = 1e-5
    accountant: str = "pld"
    accountant_note: str | None = None
    target_epsilon: float | None = None
    noise_given: bool = True
    patients_known: bool = True
    max_images_per_patient: int | None = None
    patient_guarantee: GroupGuarantee | None = None
    attack: AttackConfig | None = None


def _patient_guarantee(plan: DpSgdPlan, k: int, n_multi: int, cache: dict) -> GroupGuarantee:
    """Group privacy of an image-level run for its patient with the most images (k), cached per setting."""
    key = ("group", plan.noise_multiplier, plan.sample_rate, plan.steps, plan.delta, plan.accountant, plan.noise, k)
    if key not in cache:
        eps = accounting.dp_sgd_epsilon(noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
                                        steps=plan.steps, delta=plan.delta, accountant=plan.accountant,
                                        noise=plan.noise)
        tight = plan.noise == "gaussian" and plan.sampling == "poisson"
        cache[key] = eps, accounting.group_privacy(epsilon=eps, delta=plan.delta, k=k, **(dict(
            noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate, steps=plan.steps) if tight else {}))
    eps, group = cache[key]
    formula = (f"({group.formula_epsilon:.4g}, {group.formula_delta:.3g})-DP" if group.formula_delta < 1
               else f"eps {group.formula_epsilon:.4g} with delta >= 1 (vacuous)")
    text = (f"the image is the unit: {n_multi} training patients have several images, up to k = {k}; for that "
            f"patient the group-privacy formula (k eps, k e^((k-1) eps) delta) applied to the run's eps = {eps:.4g} "
            f"at delta = {plan.delta:.3g} ({plan.accountant.upper()} accountant) gives {formula} "
            f"({accounting.GROUP_CITATION})")
    if group.tight_epsilon is not None:
        text += (f"; DP-SGD's tight group value is eps = {group.tight_epsilon:.4g} at delta = {plan.delta:.3g} "
                 f"({accounting.TIGHT_GROUP_CITATION})")
    return GroupGuarantee(k=k, n_multi=n_multi, formula_epsilon=group.formula_epsilon,
                          formula_delta=group.formula_delta, tight_epsilon=group.tight_epsilon, statement=text)


def _plan(arm: DpSgdArm, swept: dict, context: PlanContext) -> DpSgdPlan:
    """q = B / N and T over the N units (``training.steps``, or epochs * round(N / B), or ``epochs: auto``'s
    max(10 epochs, 500 steps); `base.training_steps`); delta; the certifying accountant; sigma."""
    counts = context.images_per_patient
    if arm.max_images_per_patient is not None:
        counts = np.minimum(counts, arm.max_images_per_patient)
    # Without patient ids the patient cannot be the unit: every image would pass for a patient of its own, and the
    # card would promise "one patient" for what protects one image. The unit is then the image, and the card says why.
    unit = arm.privacy_unit if context.patients_known else "image"
    n_units = int(len(counts) if unit == "patient" else counts.sum())
    target = swept.get("target_epsilon")
    # delta 0.9 at N = 40 calibrated sigma = 0.0003 and printed "eps 0": noiseless training read as private
    whole = "publishing each patient with their images whole" if unit == "patient" else "publishing each image whole"
    refuse_vacuous_delta(f"arm {arm.name!r}: delta", arm.delta, n_units, whole=whole,
                         counted=f"the {n_units} training {unit}s the accountant counts (privacy_unit: {unit})")
    if context.batch_size > n_units:
        raise ConfigError(f"arm {arm.name!r}: training.batch_size {context.batch_size} exceeds the {n_units} training "
                          f"{unit}s (DP-SGD's expected batch counts {unit}s: privacy_unit is {unit}); lower "
                          "training.batch_size")
    try:
        q, steps_per_epoch = accounting.dp_sgd_schedule(n_units, batch_size=context.batch_size, epochs=1)
        steps = training_steps(steps_per_epoch, epochs=context.epochs, steps=context.steps)
        delta = arm.delta or accounting.default_delta(n_units)
        accountant, note = accounting.effective_accountant(arm.accountant, target_epsilon=target, noise=arm.noise)
        given = swept.get("noise_multiplier")
        if target is None and given is not None and given > 0 and arm.noise == "gaussian":
            # given noise: the accountant that can certify it (PLD resolves eps up to 500, RDP beyond), as for targets
            rough = accounting.dp_sgd_epsilon(noise_multiplier=given, sample_rate=q, steps=steps, delta=delta,
                                              accountant="rdp")
            accountant, note = accounting.effective_accountant(arm.accountant, target_epsilon=rough, noise=arm.noise)
    except ValueError as exc:
        raise ConfigError(f"arm {arm.name!r}: {exc}" + (" (batch_size counts patients: privacy_unit is patient)"
                                                        if unit == "patient" else "")) from None
    sigma = swept.get("noise_multiplier")
    if sigma is None:
        key = (target, delta, q, steps, accountant, arm.noise)
        if key not in context.cache:
            try:
                context.cache[key] = accounting.noise_multiplier_for(
                    target_epsilon=target, delta=delta, sample_rate=q, steps=steps, accountant=accountant,
                    noise=arm.noise)
            except ValueError as exc:
                raise PrivacyError(f"arm {arm.name!r}, target_epsilon {target:g}: {exc}") from None
        sigma = context.cache[key]
    plan = DpSgdPlan(noise_multiplier=sigma, max_grad_norm=swept["max_grad_norm"], sample_rate=q, steps=steps,
                     noise=arm.noise, sampling=arm.sampling, unit=unit, expected_batch_size=q * n_units,
                     n_units=n_units, n_train=int(counts.sum()), delta=delta, accountant=accountant,
                     accountant_note=note, target_epsilon=target, noise_given=swept.get("noise_multiplier") is not None,
                     patients_known=context.patients_known, max_images_per_patient=arm.max_images_per_patient,
                     attack=arm.attack)
    k = int(counts.max())
    if plan.unit == "image" and k > 1:
        plan = plan.model_copy(update={"patient_guarantee": _patient_guarantee(plan, k, int((counts > 1).sum()),
                                                                               context.cache)})
    return plan


def _card(plan: DpSgdPlan, ledger: Ledger, randomness_mode: str) -> PrivacyCard:
    shuffled = ledger.has_shuffled_batches       # no accountant covers it: only a labelled Poisson counterpart
    eps = accounting.ledger_epsilon(accounting.poisson_counterpart(ledger) if shuffled else ledger, delta=plan.delta,
                                    accountant=plan.accountant)
    neighbours = accounting.NEIGHBOUR_PATIENT if plan.unit == "patient" else accounting.NEIGHBOUR_DP_SGD
    params = (f"{plan.unit}s: N = {plan.n_units}, q = {plan.sample_rate:.4g}, T = {ledger.dp_sgd_steps}, "
              f"sigma = {plan.noise_multiplier:.4g}, C = {plan.max_grad_norm:g}"
              + (", Laplace noise, L1 clipping" if plan.noise == "laplace" else ""))
    fields = dict(
        mechanism="dp_sgd", scope="central DP of the trained model", delta=plan.delta,
        target_epsilon=plan.target_epsilon, accountant=plan.accountant,
        accountant_description=accounting.describe_accountant(plan.accountant), accountant_note=plan.accountant_note,
        unit=plan.unit, n_units=plan.n_units, neighbour_relation=neighbours, sampling=plan.sampling, noise=plan.noise,
        clipping="L1" if plan.noise == "laplace" else "L2", sample_rate=plan.sample_rate, steps=ledger.dp_sgd_steps,
        noise_multiplier=plan.noise_multiplier, noise_given=plan.noise_given, max_grad_norm=plan.max_grad_norm,
        covers=COVERAGE, randomness=SECURE_RANDOMNESS, patient_guarantee=plan.patient_guarantee,
        unit_note=None if plan.patients_known else (
            "the dataset publishes no patient ids, so the unit is one image: a patient with several images is "
            "protected only as a group of them (group privacy), and how many such patients there are is unknown"))
    statement = (f"eps = {eps:.4g} at delta = {plan.delta:.3g} ({plan.accountant.upper()} accountant; unit: one "
                 f"{plan.unit}; neighbours: {neighbours}; {params})")
    card = PrivacyCard(**fields, is_dp=True, epsilon=eps, statement=statement)
    if shuffled:
        # The accountants assume Poisson sampling; for shuffled fixed-size batches their eps is not a valid bound.
        card = label_not_dp(
            card, f"NOT DP (reproduction mode): shuffled fixed-size batches, but the {plan.accountant.upper()} "
            "accountant assumes Poisson sampling, so its eps does not hold for this run",
            epsilon=None, epsilon_if_poisson=eps,
            neighbour_relation=neighbours.replace("(Poisson sampling", "(accounted as if Poisson sampling")[:-1]
            + "; the run shuffled fixed-size batches)")
    return label_randomness(card, randomness_mode)


class ReconstructionRecord(Strict):
    """Reconstruction and membership-inference bounds of a DP-SGD run (METHODS.md s.7; `accounting.reconstruction_risk`)
    with prior kappa = 1/N over its N units, how each was obtained, and the assumptions they rest on."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    kappa: float
    worst_case: float
    worst_case_edgeworth: float
    relaxed: float
    gdp: float
    tpr_at_fpr: dict[str, float]
    assumptions: str
    worst_case_via: str
    worst_case_edgeworth_via: str
    relaxed_via: str
    gdp_via: str
    tpr_at_fpr_via: dict[str, str]
    unit: Literal["patient", "image"]


def _reconstruction(plan: DpSgdPlan) -> ReconstructionRecord | None:
    """Only for Gaussian noise with Poisson sampling, the setting the bounds are proved for."""
    if plan.noise != "gaussian" or plan.sampling != "poisson":
        return None
    risk = accounting.reconstruction_risk(noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
                                          steps=plan.steps, kappa=accounting.default_kappa(plan.n_units),
                                          unit=plan.unit)
    return ReconstructionRecord(**risk.to_dict(), unit=plan.unit)


INFO = MechanismInfo(name="dp_sgd", arm=DpSgdArm, plan=DpSgdPlan,
                     sweep_keys={"target_epsilon": "eps", "noise_multiplier": "sigma", "max_grad_norm": "C"},
                     make_plan=_plan, card=_card, reconstruction=_reconstruction,
                     description="DP-SGD: Poisson sampling, per-patient (or per-image) clipping, noise on the sum")
