"""dp_sgd: DP-SGD (Abadi et al. 2016): Poisson sampling, per-unit clipping, noise on the clipped sum (METHODS.md s.2).

Its arm in the study file, the plan of one run (every value the accountant and training rest on, computed before
training: q, T, delta, the certifying accountant, sigma calibrated so that eps never exceeds the target), the card
its ledger supports, and its reconstruction-risk record (METHODS.md s.7). The step itself is `dpmed.training`'s.

The unit of privacy is a patient with all of their images by default (user-level DP-SGD, McMahan et al. 2018:
patients Poisson-sampled at q = B / N_patients, each sampled patient's gradients summed and clipped together, the
accountant unchanged with N = N_patients; METHODS.md s.2b), or one image. With the image as the unit the card also
states what the eps implies for a patient with several images (`accounting.group_privacy`).

Under add/remove neighbours the number N of training units is itself private: q = B / N, T from N, the default delta
and the expected batch are functions of it, and a file that holds one of them exactly tells the two datasets apart.
So a study plans from a DP count of the units (`dpmed.released_size`, ``context.released_sizes``), and each run's eps
adds that count's eps (``size_epsilon``) by basic composition; its noise is calibrated to the target less it.
"""

from __future__ import annotations

import math
from typing import Literal, Mapping

import numpy as np
from pydantic import Field, field_validator, model_validator

from dpmed import accounting
from dpmed.accounting import Ledger
from dpmed.errors import ConfigError, PrivacyError
from dpmed.mechanisms.base import (ArmBase, GroupGuarantee, MechanismInfo, PlanContext, PrivacyCard,
                                   ReconstructionRecord, Strict, Sweep, exactly_one, positive_finite,
                                   refuse_vacuous_delta, training_steps, unit_words)
from dpmed.mechanisms.cards import COVERAGE, SECURE_RANDOMNESS, label_not_dp, label_randomness
from dpmed.numbers import delta_share_text, delta_text, epsilon_text
from dpmed.randomness import DRAW_BOUND, DRAW_BOUNDS

__all__ = ["DpSgdArm", "DpSgdPlan", "AttackConfig", "INFO", "size_key", "patient_guarantee"]


# The attacked batches' ceiling: 10**30 passed planning and looped for ever after the arm had trained. Each batch is
# drawn anew from the test images (they may recur across batches), so the test split sets no ceiling of its own.
_MOST_ATTACKED_BATCHES = 10_000


class AttackConfig(Strict):
    """The realistic threat model of 004_6210268d59b6f8e5.txt (Ziller et al. 2024) as an actual attack: the imprint
    reconstruction attack (Fowl et al. 2022; `dpmed.attack`) on ``batches`` steps of this arm (its C, sigma and
    expected batch size, dpmed's own DP-SGD step, fresh noise; from the seed in a reproducible study), ``structure``
    ``sparse`` (the stronger under noise) or ``cumulative`` (the paper's); a reconstruction succeeds above the
    ``threshold_quantile`` of what plausible public images reach. The attacked batches are held-out test images
    standing in for training images (same mechanism, same distribution), so the reported rate is no statistic of the
    training set. ``batches``: at most 10,000 (:data:`_MOST_ATTACKED_BATCHES`)."""

    batches: int = Field(default=4, ge=1)
    structure: Literal["sparse", "cumulative"] = "sparse"
    threshold_quantile: float = Field(default=0.99, gt=0, lt=1)

    @field_validator("batches")
    @classmethod
    def _few_enough(cls, v: int) -> int:
        if v > _MOST_ATTACKED_BATCHES:
            raise ValueError(f"must be at most {_MOST_ATTACKED_BATCHES}, got {v}: each batch is one attacked step, run "
                             f"after the arm has trained, and at {_MOST_ATTACKED_BATCHES} batches of even one image "
                             "the rate's 95% interval already lies within about one percentage point of it; write 100 "
                             "or less (default 4)")
        return v


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
    max_images_per_patient: train on at most this many images of each patient (chosen per patient by a keyed hash of
    each image, one key for the whole study, `dpmed.data.cap_images_per_patient`); bounds what image-level DP implies
    for a patient, and the per-patient work of a step.
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
        accounting.check_accountant_noise(self.accountant, self.noise)   # imports no dp_accounting (`dpmed status`)
        return self


class DpSgdPlan(Strict):
    """One DP-SGD run as the accountant was told and training follows it exactly.

    sample_rate q, steps T, noise_multiplier sigma (given, or calibrated to target_epsilon less size_epsilon),
    max_grad_norm C; noise and sampling as in the arm; unit: patient or image. n_units: the N that q = B / N, T and
    delta were planned from: in a study the DP count of the units, released at size_epsilon (0: N was handed to
    the planner as public, by a direct caller). expected_batch_size: the divisor of the noisy sum, q N fixed at
    planning: under add/remove the size of the private set is itself private, so training must not recompute it from
    the data it is handed (canaries or a neighbouring set would change it); None only for direct callers that plan
    and train on one set. released_units: the DP count where it fell below the expected batch B, so that N is B
    and q = 1 (every unit in every step); the card states it and the reconstruction bound's baseline reads it, not
    B (a larger N would make the baseline, and the bound, look smaller); None otherwise."""

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
    released_units: int | None = None
    size_epsilon: float = 0.0
    delta: float = 1e-5
    accountant: str = "pld"
    accountant_note: str | None = None
    target_epsilon: float | None = None
    noise_given: bool = True
    patients_known: bool = True
    max_images_per_patient: int | None = None
    # "study": every capped run keeps the same images, chosen by one public key (`dpmed.run`), so that the study's
    # capped runs are add/remove of one capped set and compose (`dpmed.budget`); None: no cap, or a record of a
    # version that keyed the choice by each run's seed (a set of its own per seed, not reused now).
    image_cap_key: Literal["study"] | None = None
    patient_guarantee: GroupGuarantee | None = None
    attack: AttackConfig | None = None

    @property
    def released_count(self) -> int:
        """The count of training units as released: N, or the count that fell below the batch where N is B."""
        return self.n_units if self.released_units is None else self.released_units

    def sampler_share(self, group: int = 1) -> float:
        """The delta this run pays because its noise sampler's draws are bounded (`accounting.truncation`), for one
        unit or for ``group`` of them together (a patient's images where the image is the unit). 1 without noise."""
        if not self.noise_multiplier > 0:
            return 1.0
        return accounting.bounded_noise_delta(noise=self.noise, noise_multiplier=self.noise_multiplier,
                                              sample_rate=self.sample_rate, steps=self.steps,
                                              bound=DRAW_BOUND[self.noise], group=group)

    @property
    def sampler_delta(self) -> float:
        """The unit's share: its card claims delta plus this, and where this exceeds delta the claim is void."""
        return self.sampler_share()

    @property
    def sampler_voids(self) -> bool:
        """Whether the sampler's share exceeds delta itself: then no (eps, delta) claim holds for the run."""
        return self.sampler_delta > self.delta

    @property
    def claimed_delta(self) -> float:
        """The delta the card states: delta plus the sampler's share (a void run's card keeps delta, labelled). The
        pure accountant's bound holds at delta 0 (Balle et al. 2018), so its card states the sampler's share alone:
        delta is then only how much of it the run tolerates."""
        if self.sampler_voids:
            return self.delta
        return (0.0 if self.accountant == "pure" else self.delta) + self.sampler_delta

    @property
    def size_key(self) -> str:
        """Which count of the training set the plan rests on (`released_size`): one count per key and study."""
        return size_key(self.unit, self.max_images_per_patient)


def size_key(unit: str, max_images_per_patient: int | None) -> str:
    """The count an arm's plan needs: its units, capped images being another count than all images."""
    if unit == "image" and max_images_per_patient is not None:
        return f"images, at most {max_images_per_patient} per patient"
    return f"{unit}s"


def _cap(arm: DpSgdArm, context: PlanContext) -> int | None:
    """The arm's max_images_per_patient where the data name patients; None without patient ids, where every image is
    its own patient and a cap of k >= 1 keeps them all (a card "capped at k per patient" would promise patients what
    protects one image)."""
    return arm.max_images_per_patient if context.patients_known else None


def _counts(arm: DpSgdArm, context: PlanContext) -> tuple[Literal["patient", "image"], np.ndarray, int]:
    """(the arm's unit, images per training patient after its cap, the exact number of its training units)."""
    counts = context.images_per_patient
    cap = _cap(arm, context)
    if cap is not None:
        counts = np.minimum(counts, cap)
    # Without patient ids the patient cannot be the unit: every image would pass for a patient of its own, and the
    # card would promise "one patient" for what protects one image. The unit is then the image, and the card says why.
    unit: Literal["patient", "image"] = arm.privacy_unit if context.patients_known else "image"
    return unit, counts, int(len(counts) if unit == "patient" else counts.sum())


def _size(arm: DpSgdArm, context: PlanContext) -> tuple[str, int]:
    """(count key, exact count) of the training units the arm plans from: what the study releases as a DP count."""
    unit, _, n_units = _counts(arm, context)
    return size_key(unit, _cap(arm, context)), n_units


def patient_guarantee(plan: DpSgdPlan, k: int, cache: dict, *,
                      why: str = "at most k = {k} training images (max_images_per_patient)") -> GroupGuarantee:
    """Group privacy of an image-level run for a patient with k images (``why``: where k comes from), cached per
    setting. The released size counts each of the patient's images, so it adds k size_epsilon to either value."""
    key = ("group", plan.noise_multiplier, plan.sample_rate, plan.steps, plan.delta, plan.accountant, plan.noise,
           plan.sampling, k)
    if key not in cache:
        eps = accounting.dp_sgd_epsilon(noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
                                        steps=plan.steps, delta=plan.delta, accountant=plan.accountant,
                                        noise=plan.noise)
        mixture = plan.noise == "gaussian" and plan.sampling == "poisson"     # what the tight value analyses
        cache[key] = eps, (accounting.group_privacy(
            epsilon=eps, delta=plan.delta, k=k, noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
            steps=plan.steps) if mixture else accounting.group_privacy(epsilon=eps, delta=plan.delta, k=k))
    training, tight_group = cache[key]
    eps = training + plan.size_epsilon
    delta = plan.claimed_delta                       # the run's claim, as its card states it
    group = accounting.group_privacy(epsilon=eps, delta=delta, k=k)
    tight = None if tight_group.tight_epsilon is None else tight_group.tight_epsilon + k * plan.size_epsilon
    formula = (f"({epsilon_text(group.formula_epsilon)}, {delta_text(group.formula_delta)})-DP"
               if not group.formula_is_vacuous
               else f"eps {epsilon_text(group.formula_epsilon)} with delta >= 1 (vacuous)")
    size = " plus the released size" if plan.size_epsilon else ""
    text = (f"the image is the unit: a patient has {why.format(k=k)}; for such a patient the group-privacy formula "
            f"(k eps, k e^((k-1) eps) delta) applied to the run's eps = {epsilon_text(eps)} at delta = "
            f"{delta_text(delta)} ({plan.accountant.upper()} accountant{size}) gives {formula} "
            f"({accounting.GROUP_CITATION})")
    if tight is not None:
        # k images' clipped gradients add up to k C: they outrun the bounded sampler sooner than one image does
        group_sampler = plan.sampler_share(group=k)
        if group_sampler > plan.delta:
            text += (f"; DP-SGD's tight group value (eps = {epsilon_text(tight)} for exact noise; "
                     f"{accounting.TIGHT_GROUP_CITATION}) does not hold as run: the patient's k images together can "
                     f"move a coordinate past every draw of the noise sampler ({DRAW_BOUNDS['gaussian']}; probability "
                     f"up to {group_sampler:.2g} over the run)")
            tight = None
        else:
            text += (f"; DP-SGD's tight group value is eps = {epsilon_text(tight)} at delta = "
                     f"{delta_text(plan.delta + group_sampler)} ({accounting.TIGHT_GROUP_CITATION}"
                     + (", plus k times the released size's eps)" if plan.size_epsilon else ")"))
    elif tight_group.tight_missing is not None:
        text += (f"; DP-SGD's tight group value ({accounting.TIGHT_GROUP_CITATION}) is not stated: "
                 f"{tight_group.tight_missing}")
    return GroupGuarantee(k=k, formula_epsilon=group.formula_epsilon, formula_delta=group.formula_delta,
                          tight_epsilon=tight, statement=text)


def _plan(arm: DpSgdArm, swept: Mapping[str, float], context: PlanContext) -> DpSgdPlan:
    """q = B / N and T over the N units (``training.steps``, or epochs * round(N / B), or ``epochs: auto``'s
    max(10 epochs, 500 steps); `base.training_steps`); delta; the certifying accountant; sigma."""
    unit, _, exact = _counts(arm, context)
    target = swept.get("target_epsilon")
    size_epsilon = 0.0 if context.released_sizes is None else context.size_epsilon
    # The count the plan reads: the released DP count, or the exact one where the study takes it as public. The
    # refusals below read it too, never a private exact count: whether a study runs at all is seen by whoever holds
    # its files, so a refusal at the exact count would tell a dataset from its neighbour at the threshold.
    released = (exact if context.released_sizes is None
                else context.released_sizes[size_key(unit, _cap(arm, context))])
    units = (f"the DP count {released} of the training {unit}s" if size_epsilon
             else f"the {released} training {unit}s")
    detail = f"privacy_unit: {unit}" + (f"; the count is the exact one plus noise of standard deviation "
                                        f"{2 ** 0.5 / size_epsilon:.0f} (size_epsilon {size_epsilon:g})"
                                        if size_epsilon else "")
    # delta 0.9 at N = 40 calibrated sigma = 0.0003 and printed "eps 0": noiseless training read as private
    whole = "publishing each patient with their images whole" if unit == "patient" else "publishing each image whole"
    refuse_vacuous_delta(f"arm {arm.name!r}: delta", arm.delta, released, whole=whole,
                         counted=f"{units} the accountant counts ({detail})")
    if context.batch_size > released and not size_epsilon:
        raise ConfigError(f"arm {arm.name!r}: training.batch_size {context.batch_size} exceeds {units} ({detail}; "
                          f"DP-SGD's expected batch counts {unit}s); lower training.batch_size")
    # The plan's N: the released count, at least the expected batch (a count drawn below it would ask for q > 1; the
    # study then warns that every unit is in every step, `dpmed.study`)
    n_units = max(released, context.batch_size)
    if target is not None and target <= size_epsilon:
        raise ConfigError(f"arm {arm.name!r}: target_epsilon {target:g} leaves nothing for training once the study's "
                          f"size_epsilon {size_epsilon:g} is spent on the training set's size; raise target_epsilon or "
                          "lower size_epsilon")
    try:
        q, steps_per_epoch = accounting.dp_sgd_schedule(n_units, batch_size=context.batch_size, epochs=1)
        steps = training_steps(steps_per_epoch, epochs=context.epochs, steps=context.steps)
        delta = arm.delta or accounting.default_delta(n_units)
        accountant, note = accounting.effective_accountant(arm.accountant, target_epsilon=target, noise=arm.noise,
                                                           delta=delta, steps=steps)
        given = swept.get("noise_multiplier")
        if target is None and given is not None and given > 0 and note is None:
            # given noise: the accountant that can certify it (PLD resolves eps up to 500; RDP beyond for Gaussian
            # noise, the pure bound for Laplace noise, whose eps grows with T, not with about sqrt(T) as PLD's: a
            # pure bound above 500 says nothing of PLD's), as for targets. Not where the call above fell back
            # already (delta or steps beyond PLD): PLD refuses then whatever the eps, and the note names that cause
            if arm.noise == "gaussian":
                rough = accounting.dp_sgd_epsilon(noise_multiplier=given, sample_rate=q, steps=steps, delta=delta,
                                                  accountant="rdp")
            else:
                try:
                    rough = accounting.dp_sgd_epsilon(noise_multiplier=given, sample_rate=q, steps=steps,
                                                      delta=delta, accountant=arm.accountant, noise="laplace")
                except ValueError:   # beyond what the arm's accountant certifies
                    rough = math.inf
            accountant, note = accounting.effective_accountant(arm.accountant, target_epsilon=rough, noise=arm.noise,
                                                               delta=delta, steps=steps)
    except ValueError as exc:
        raise ConfigError(f"arm {arm.name!r}: {exc}" + (" (batch_size counts patients: privacy_unit is patient)"
                                                        if unit == "patient" else "")) from None
    if target is None:   # the arm gives the noise itself (`DpSgdArm` takes exactly one of the two)
        sigma = swept["noise_multiplier"]
    else:
        key = (target - size_epsilon, delta, q, steps, accountant, arm.noise)
        if key not in context.cache:
            try:
                context.cache[key] = accounting.noise_multiplier_for(
                    target_epsilon=target - size_epsilon, delta=delta, sample_rate=q, steps=steps,
                    accountant=accountant, noise=arm.noise)
            except ValueError as exc:
                raise PrivacyError(f"arm {arm.name!r}, target_epsilon {target:g}: {exc}") from None
        sigma = context.cache[key]
    plan = DpSgdPlan(noise_multiplier=sigma, max_grad_norm=swept["max_grad_norm"], sample_rate=q, steps=steps,
                     noise=arm.noise, sampling=arm.sampling, unit=unit, expected_batch_size=q * n_units,
                     n_units=n_units, released_units=released if released < n_units else None,
                     size_epsilon=size_epsilon, delta=delta, accountant=accountant,
                     accountant_note=note, target_epsilon=target, noise_given=swept.get("noise_multiplier") is not None,
                     patients_known=context.patients_known, max_images_per_patient=_cap(arm, context),
                     image_cap_key="study" if _cap(arm, context) is not None else None, attack=arm.attack)
    # The image-unit guarantee for a patient is stated for the declared cap: the most images any one patient has is
    # a statistic of the training set (`dpmed.study` tells it to the user's terminal and private log only).
    k = _cap(arm, context)
    if plan.unit == "image" and k is not None:    # k = 1: the run's own guarantee
        plan = plan.model_copy(update={"patient_guarantee": patient_guarantee(plan, k, context.cache)})
    return plan


def _unit_note(plan: DpSgdPlan) -> str | None:
    """What a card says about patients beyond its eps: where an image-unit card states no patient guarantee, or where
    a patient-unit model trained on capped data (its eps holds for the data as supplied, since a patient's capped
    images are a function of that patient alone; the note says what the model saw). None otherwise."""
    if plan.unit == "patient" and plan.max_images_per_patient is not None:
        return (f"the model trained on at most {plan.max_images_per_patient} images of each patient "
                "(max_images_per_patient, chosen per patient by a keyed hash of each image); the eps is of adding or "
                "removing one patient with all of their images, so it holds for the dataset as supplied")
    if not plan.patients_known:
        return ("no patient ids are known for these images (the dataset, as read, names none), so the unit is one "
                "image: a patient with several images is protected only as a group of them (group privacy), and how "
                "many such patients there are is unknown")
    if plan.unit == "image" and plan.patient_guarantee is None:
        # The most images any one patient has is a statistic of the training set: told to the user only (`dpmed.study`)
        return ("the unit is one image although the dataset records patients: a patient with k images is protected "
                "only as a group of k, at about (k eps, k e^((k-1) eps) delta) (group privacy), for a k this card does "
                "not state, since the most images of one patient is a statistic of the training set; set "
                "max_images_per_patient, or privacy_unit: patient, to have the patient's guarantee stated")
    return None


def _card(plan: DpSgdPlan, ledger: Ledger, randomness_mode: str) -> PrivacyCard:
    shuffled = ledger.has_shuffled_batches       # no accountant covers it: only a labelled Poisson counterpart
    training = accounting.ledger_epsilon(accounting.poisson_counterpart(ledger) if shuffled else ledger,
                                         delta=plan.delta, accountant=plan.accountant)
    eps = training + plan.size_epsilon
    neighbours = accounting.NEIGHBOUR_PATIENT if plan.unit == "patient" else accounting.NEIGHBOUR_DP_SGD
    cap = plan.max_images_per_patient
    if plan.unit == "image" and cap is not None:     # `unit_words`: the eps is of add/remove in the capped set
        neighbours = neighbours.replace("one training image", f"one {unit_words(plan.unit, cap)}")
    size = (f"N = {plan.n_units}, a count released at eps {plan.size_epsilon:g} (discrete Laplace)"
            if plan.size_epsilon else f"N = {plan.n_units}, taken as public")
    if plan.released_units is not None:
        size = (f"N = {plan.n_units}, the expected batch: the count released at eps {plan.size_epsilon:g} (discrete "
                f"Laplace), {plan.released_units}, is below it, so every {plan.unit} is in every step")
    params = (f"{plan.unit}s: {size}, q = {plan.sample_rate:.4g}, T = {ledger.dp_sgd_steps}, "
              f"sigma = {plan.noise_multiplier:.4g}, C = {plan.max_grad_norm:g}"
              + (", Laplace noise, L1 clipping" if plan.noise == "laplace" else ""))
    parts = (f"training {epsilon_text(training)} by the {plan.accountant.upper()} accountant + "
             f"{plan.size_epsilon:g} for the released size, added (basic composition)" if plan.size_epsilon
             else f"{plan.accountant.upper()} accountant")
    # The sampler's draws are bounded: the claim pays for that in delta (within float64's rounding of delta up to eps
    # of a few tens, below a thousandth of it up to several hundred), and is void where it would pay more than delta.
    # The share is named wherever the delta shown is not the one asked for (`delta_share_text`)
    sampler, void, delta = plan.sampler_delta, plan.sampler_voids, plan.claimed_delta
    pure = plan.accountant == "pure" and not void
    paid = "; pure DP but for the noise sampler's bounded draws, which that delta pays for" if pure else ""
    share = ("" if void or pure else
             delta_share_text(plan.delta, sampler, "the noise sampler's bounded draws"))
    statement = (f"eps = {epsilon_text(eps)} at delta = {delta_text(delta)} ({share}{parts}{paid}; unit: one "
                 f"{plan.unit}; neighbours: {neighbours}; {params})")
    card = PrivacyCard(
        mechanism="dp_sgd", scope="central DP of the trained model", delta=delta, sampler_delta=sampler,
        sampler_voids=void, is_dp=True, epsilon=eps, statement=statement,
        target_epsilon=plan.target_epsilon, accountant=plan.accountant,
        accountant_description=accounting.describe_accountant(plan.accountant), accountant_note=plan.accountant_note,
        unit=plan.unit, capped_at=cap if plan.unit == "image" else None, n_units=plan.n_units,
        released_units=plan.released_units,
        size_epsilon=plan.size_epsilon, neighbour_relation=neighbours,
        sampling=plan.sampling, noise=plan.noise,
        clipping="L1" if plan.noise == "laplace" else "L2", sample_rate=plan.sample_rate, steps=ledger.dp_sgd_steps,
        noise_multiplier=plan.noise_multiplier, noise_given=plan.noise_given, max_grad_norm=plan.max_grad_norm,
        covers=COVERAGE, randomness=SECURE_RANDOMNESS, patient_guarantee=plan.patient_guarantee,
        unit_note=_unit_note(plan))
    if void:
        card = label_not_dp(
            card, f"NOT DP as run: the noise sampler's draws are bounded ({DRAW_BOUNDS[plan.noise]}), and at "
            f"sigma = {plan.noise_multiplier:.3g} one "
            f"{plan.unit}'s clipped gradient can move a coordinate past every draw of the run without it (probability "
            f"up to {sampler:.2g} over the run, above delta = {delta_text(plan.delta)}); the accountant's eps holds "
            "only for exact noise, which no floating-point sampler draws at this noise level", sampler_voids=True)
    if shuffled:
        # The accountants assume Poisson sampling; for shuffled fixed-size batches their eps is not a valid bound.
        card = label_not_dp(
            card, f"NOT DP (reproduction mode): shuffled fixed-size batches, but the {plan.accountant.upper()} "
            "accountant assumes Poisson sampling, so its eps does not hold for this run",
            epsilon=None, epsilon_if_poisson=eps,
            neighbour_relation=neighbours.replace("(Poisson sampling", "(accounted as if Poisson sampling")[:-1]
            + "; the run shuffled fixed-size batches)")
    return label_randomness(card, randomness_mode)


def _baseline_units(plan: DpSgdPlan) -> int:
    """The N of the baseline kappa = 1 / N: the released count, also where it fell below the batch (at least 2: a
    count drawn at 1 or below is a set too small to say more of than a coin flip)."""
    return max(2, plan.released_units) if plan.released_units is not None else plan.n_units


def _reconstruction(plan: DpSgdPlan) -> ReconstructionRecord | None:
    """Only for Gaussian noise with Poisson sampling, the setting the bounds are proved for."""
    if plan.noise != "gaussian" or plan.sampling != "poisson":
        return None
    risk = accounting.reconstruction_risk(noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
                                          steps=plan.steps, kappa=accounting.default_kappa(_baseline_units(plan)),
                                          unit=plan.unit, size_epsilon=plan.size_epsilon)
    return ReconstructionRecord(**risk.to_dict(), unit=plan.unit)


INFO = MechanismInfo(name="dp_sgd", arm=DpSgdArm, plan=DpSgdPlan,
                     sweep_keys={"target_epsilon": "eps", "noise_multiplier": "sigma", "max_grad_norm": "C"},
                     make_plan=_plan, card=_card, reconstruction=_reconstruction, size=_size,
                     description="DP-SGD: Poisson sampling, per-patient (or per-image) clipping, noise on the sum")
