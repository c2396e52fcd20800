"""What every privacy mechanism of a study declares, as types: its arm in the study file, its per-run plan, the
privacy card that its ledger of events supports, and the reconstruction-risk record its plan supports.

A mechanism is one registry entry (:class:`MechanismInfo`, listed in `dpmed.mechanisms.registry`), and everything
downstream (the study schema's union of arms, run planning, the card, the study budget) reads the entry rather than
branching on names. Adding a mechanism is its module (arm, plan, card, and the array transform for local DP) plus
one entry.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Callable, ClassVar, Generic, Literal, Mapping, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from dpmed.accounting import Ledger
from dpmed.accounting.events import ImageEvent
from dpmed.errors import ConfigError
from dpmed.names import CANARY_KINDS
from dpmed.numbers import count_text
from dpmed.numbers import delta_text, epsilon_text
from dpmed.randomness import NOT_DP_REPRODUCIBLE

__all__ = ["Strict", "Sweep", "positive_finite", "computable_scale", "exactly_one", "AuditConfig", "ArmBase",
           "PlanContext", "GroupGuarantee", "PrivacyCard", "ReconstructionRecord", "MechanismInfo", "ImageMechanism",
           "SLUG", "training_steps", "length_text", "AUTO_EPOCHS", "AUTO_MIN_STEPS", "refuse_vacuous_delta",
           "unit_words"]

# names that name folders (arms, studies): a run's folder adds its swept values and seed to its arm's name, and a
# name over 255 bytes failed that run only, after the study had trained the others
SLUG = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

# ``training.epochs: auto`` (the default): at least AUTO_EPOCHS passes over the data and at least AUTO_MIN_STEPS
# optimiser steps. A fixed epoch count under-trains small sets (5 epochs of 500 images at batch 64 are 40 steps) and
# a fixed step count under-trains large ones; this is 500 steps (64 epochs) at 500 images and 780 steps (10 epochs)
# at 5000. DP-SGD wants many steps at a fixed eps (De et al. 2022), which the floor gives small sets.
AUTO_EPOCHS = 10
AUTO_MIN_STEPS = 500


def length_text(*, epochs: int | str, steps: int | None) -> str:
    """A training length as a reader is told it: "300 steps", "4 epochs", or what ``epochs: auto`` means (it read
    "auto epochs" where this module's rule alone says what auto trains)."""
    if steps is not None:
        return count_text(steps, "step")
    if epochs == "auto":
        return f"auto: at least {AUTO_EPOCHS} epochs and {AUTO_MIN_STEPS} steps"
    return count_text(int(epochs), "epoch")


def training_steps(steps_per_epoch: int, *, epochs: int | str, steps: int | None) -> int:
    """The optimiser steps T of a run: ``steps`` when given (``training.steps``); else ``epochs`` passes of
    ``steps_per_epoch`` each; ``epochs: auto``: max(AUTO_EPOCHS passes, AUTO_MIN_STEPS steps). DP-SGD plans T with
    it (steps_per_epoch = round(N / B) over its units), the loop of the other arms likewise (ceil(N / B))."""
    if steps is not None:
        return int(steps)
    if epochs == "auto":
        return max(AUTO_EPOCHS * steps_per_epoch, AUTO_MIN_STEPS)
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer or 'auto', got {epochs!r}")
    return epochs * steps_per_epoch


class Strict(BaseModel):
    """Frozen, and unknown keys or wrong types are errors (a typo in a study file costs seconds, not hours)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _as_list(value: object) -> object:
    """Let a sweepable key hold one value or a list of values."""
    return value if isinstance(value, list) else [value]


def positive_finite(values: list[float]) -> list[float]:
    for v in values:
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"must be a positive finite number, got {v}")
    if not values:
        raise ValueError("must hold at least one value")
    if len(set(values)) != len(values):
        raise ValueError(f"lists a value twice: {values}")
    return values


Sweep = Annotated[list[float], BeforeValidator(_as_list)]


def unit_words(unit: str | None, capped_at: int | None) -> str:
    """A DP-SGD unit in the words that follow "add/remove one": "patient", "image", or, for images under
    max_images_per_patient, "image of the training set as capped at k per patient": the cap keeps each patient's k
    images of smallest keyed hash, so one image added to the data as supplied can swap one kept image for another,
    and the eps is of add/remove in the capped set, not in the supplied images."""
    return (f"image of the training set as capped at {capped_at} per patient" if unit == "image" and capped_at
            else str(unit))


def refuse_vacuous_delta(what: str, delta: float | None, n: int, *, counted: str, whole: str) -> None:
    """ConfigError for a user's delta at or above 1/N (``what``: where it was set, "arm 'dp': delta" or
    "privacy_budget.delta"; ``counted``: what the N are; ``whole``: the release that shows why). Releasing each of
    N records whole with probability delta is (0, delta)-DP and gives away delta N of them in expectation, so at
    such a delta a calibration may drop the noise to almost nothing and still print a small eps. Planning is the
    first point that knows N (the study file does not), and it precedes any training."""
    if delta is None or n < 1 or delta < 1.0 / n:   # no units: the plan's own checks say so
        return
    from dpmed.accounting import default_delta   # imported here: its module imports dp_accounting (a second)

    raise ConfigError(
        f"{what} {delta:g} is at or above 1/N = 1/{n} = {1.0 / n:.3g}, N being {counted}; at such a "
        f"delta no eps means anything ({whole} with probability delta is (0, delta)-DP). Set delta well below 1/N, "
        f"or leave it out for the default min(1e-5, 1/(10 N)) = {default_delta(n):.3g}")


def computable_scale(what: str, value: float) -> float:
    """``value``, a local-DP noise scale, if it and its reciprocal are finite floats: the closed forms divide the
    pixel range by it. ValueError naming ``what`` otherwise (a scale of 5e-324, or one a target of 1e-320 made inf)."""
    if not (0 < value < math.inf and 1.0 / value < math.inf):
        raise ValueError(f"{what} = {value:g} is too extreme to compute with (it and its reciprocal must be finite)")
    return value


def exactly_one(arm: BaseModel, keys: tuple[str, str], why: str) -> None:
    given = [k for k in keys if getattr(arm, k) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {keys[0]!r} and {keys[1]!r} ({why}); got "
                         f"{' and '.join(repr(k) for k in given) if given else 'neither'}")


class AuditConfig(Strict):
    """The one-run privacy audit (Steinke, Nasr and Jagielski 2023, arXiv:2305.08846): about ``canaries`` images, one
    of each drawn patient (each patient drawn at rate canaries / N; where the image is the unit, N counts images and
    every image of a drawn patient is one, so fewer patients give them) leave the training split, get a wrong label
    (``kind``: mislabelled, marked = mislabelled with a random 4x4 patch, noise = noise images with random labels),
    and each goes back in with probability 1/2 (a secret draw). The trained model's fit to each canary's label
    guesses which went in; the count of correct guesses gives an empirical *lower* bound on eps at the run's delta
    (1e-5 for a non-private arm), valid at ``confidence``."""

    canaries: int = Field(ge=2)
    kind: Literal[CANARY_KINDS] = "mislabelled"  # type: ignore[valid-type]
    confidence: float = Field(default=0.95, gt=0, lt=1)


class ArmBase(Strict):
    """What every arm has: a name (it names folders), optional overrides of the study's training settings, and an
    optional audit where the mechanism can be audited (``auditable``)."""

    auditable: ClassVar[bool] = False
    name: str
    epochs: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    learning_rate: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    audit: AuditConfig | None = None

    @field_validator("name", mode="before")
    @classmethod
    def _slug(cls, v: object) -> object:
        if isinstance(v, str) and not re.fullmatch(SLUG, v):
            raise ValueError(f"arm name must start with a letter or digit and hold only letters, digits, '_', '-' "
                             f"or '.', at most 64 (it names folders); got {v!r}: rename it")
        return v

    @model_validator(mode="after")
    def _auditable(self) -> "ArmBase":
        if self.audit is not None and not self.auditable:
            mechanism = self.mechanism  # type: ignore[attr-defined]
            raise ValueError(f"audit applies to arms without privacy or with DP-SGD, not {mechanism!r}: "
                             "local DP protects the released images, not their labels, so canaries with wrong labels "
                             "would not test its claim")
        return self


@dataclass(frozen=True)
class PlanContext:
    """What planning a run needs to know of the data and of the run's training schedule, and a cache shared by the
    runs of one study (calibrating the same noise once).

    images_per_patient: int64 [P], training images of each training patient (P patients, N = their sum images).
    patients_known: whether the dataset publishes patient ids (else each image is its own patient).
    image_shape: (C, H, W) of a training image: d = C H W values for local DP.
    batch_size, epochs, steps: the run's (after the arm's overrides; :func:`training_steps` turns them into T).
    released_sizes: the DP counts of the training units by count key (`dpmed.released_size`), released at
    size_epsilon each, that DP-SGD plans from; None: plan from the exact counts, taken as public (direct callers)."""

    images_per_patient: np.ndarray
    image_shape: tuple[int, ...]
    patients_known: bool = True
    released_sizes: Mapping[str, int] | None = None
    size_epsilon: float = 0.0
    batch_size: int = 64
    epochs: int | str = 1
    steps: int | None = None
    cache: dict = field(default_factory=dict, compare=False)

    @property
    def n_images(self) -> int:
        return int(self.images_per_patient.sum())

    @property
    def dimension(self) -> int:
        return int(math.prod(self.image_shape))


# A privacy claim is derived by dpmed and read back from run.json, where an infinite eps is the string "Infinity"
# (strict JSON; the record's own setting does not reach a nested model, which would write null: a claim with its
# value gone), and lax mode reads that string back as a float.
_CLAIM_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=False, ser_json_inf_nan="strings")


class GroupGuarantee(Strict):
    """What an image-level run's (epsilon, delta) implies for a patient with k images (the declared
    max_images_per_patient): the group-privacy formula (k eps, k e^((k-1) eps) delta) and, where computed, DP-SGD's
    tight group eps (`accounting.group_privacy`)."""

    model_config = _CLAIM_CONFIG

    k: int
    formula_epsilon: float
    formula_delta: float
    tight_epsilon: float | None = None
    statement: str = ""


class PrivacyCard(Strict):
    """What one run's privacy claim is, with every parameter it rests on; never a bare eps. Derived from the run's
    plan and ledger by its mechanism (:attr:`MechanismInfo.card`). Fields a mechanism does not use stay None."""

    model_config = _CLAIM_CONFIG

    mechanism: str
    is_dp: bool
    statement: str
    epsilon: float | None = None
    delta: float | None = None
    accountant: str | None = None
    accountant_description: str | None = None
    accountant_note: str | None = None
    scope: str | None = None
    unit: Literal["patient", "image"] | None = None
    capped_at: int | None = None            # image unit: the images kept per patient (max_images_per_patient)
    n_units: int | None = None
    released_units: int | None = None       # DP-SGD: the released count where it fell below the batch (N is then B)
    size_epsilon: float | None = None
    neighbour_relation: str | None = None
    covers: str | None = None
    randomness: str | None = None
    labels: str | None = None
    patients: str | None = None
    unit_note: str | None = None
    patient_guarantee: GroupGuarantee | None = None
    # local DP
    scale_b: float | None = None
    std: float | None = None
    value_range_R: float | None = None
    dimension_d: int | None = None
    epsilon_pixel: float | None = None
    epsilon_image: float | None = None
    # DP-SGD
    target_epsilon: float | None = None
    sampling: str | None = None
    noise: str | None = None
    clipping: str | None = None
    sample_rate: float | None = None
    steps: int | None = None
    noise_multiplier: float | None = None
    noise_given: bool | None = None
    max_grad_norm: float | None = None
    epsilon_if_poisson: float | None = None
    sampler_delta: float | None = None      # DP-SGD: the part of delta paid for the noise sampler's bounded draws
    sampler_voids: bool | None = None       # the bounded draws void the claim (the accounted eps is kept, labelled)

    @property
    def training_epsilon(self) -> float | None:
        """The eps of training alone (an audit tests that), without what the released training-set size costs."""
        return None if self.epsilon is None else self.epsilon - (self.size_epsilon or 0.0)

    @property
    def neighbours_in_brief(self) -> str:
        """The neighbour relation in a few words, for a label beside the eps (``neighbour_relation`` says it in
        full): "any two images" for local DP on the images, else "add/remove one patient" (or image, or capped
        image: `unit_words`)."""
        if self.epsilon_image is not None:
            return "any two images"
        return f"add/remove one {unit_words(self.unit, self.capped_at)}"

    def in_brief(self) -> str:
        """The eps in one plain-text line, never bare, for the terminal (the plan and the summary), results.csv and
        comparisons.json, rounded up to four figures (`dpmed.numbers.epsilon_text`); the report typesets its own
        (`dpmed.reporting.inputs.eps_label`).

        "0.9995 (delta 1e-05, PLD, add/remove one patient)" for 0.99942; local DP "2,048 per image (local DP, delta
        0, closed form, any two images)"; "inf (no privacy)"; a shuffled-batch run "not DP: shuffled batches (a
        Poisson run would have eps 8.37 at delta 1e-05, PLD, add/remove one image)"; a reproducible-mode run the
        accounted line followed by "; not DP: seed known"; "not DP" for a mechanism with no eps at all. A card
        that states no delta (a run.json edited by hand) reads "delta unknown": as 0 it would claim pure DP."""
        if not self.is_dp and self.epsilon is not None:   # an accounted value whose claim does not hold, labelled
            return f"{self.model_copy(update={'is_dp': True}).in_brief()}; not DP: {self.why_not_dp_in_brief}"
        delta = "unknown" if self.delta is None else delta_text(self.delta)
        if self.epsilon is None and self.epsilon_if_poisson is not None:
            return (f"not DP: shuffled batches (a Poisson run would have eps {epsilon_text(self.epsilon_if_poisson)} "
                    f"at delta {delta}, {self.accountant_in_brief}, {self.neighbours_in_brief})")
        if not self.is_dp:
            return "inf (no privacy)" if self.mechanism == "none" else "not DP"
        if self.epsilon_image is not None:   # per image, for "any two images" (not comparable to DP-SGD's eps)
            return (f"{epsilon_text(self.epsilon_image)} per image (local DP, delta {delta}, "
                    f"{self.accountant_in_brief}, {self.neighbours_in_brief})")
        if self.epsilon is None:
            raise ValueError(f"a {self.mechanism} card claims DP (is_dp) but states no eps: {self.statement!r}")
        return f"{epsilon_text(self.epsilon)} (delta {delta}, {self.accountant_in_brief}, {self.neighbours_in_brief})"

    @property
    def why_not_dp_in_brief(self) -> str:
        """Why an accounted eps does not hold, in a few words: "seed known" (reproducible mode), "noise below the
        sampler's reach" (draws too bounded for the noise level, `accounting.truncation`), or both."""
        reasons = (["seed known"] if self.randomness == NOT_DP_REPRODUCIBLE else []) + (
            ["noise below the sampler's reach"] if self.sampler_voids else [])
        return ", ".join(reasons) or "see its privacy card"

    @property
    def accountant_in_brief(self) -> str:
        """The accountant in a word or two, for a label beside the eps: "PLD", "RDP", local DP's "closed form" or
        "analytic Gaussian" (``accountant`` says it in full)."""
        from dpmed.accounting import ACCOUNTANTS   # imported here: reading a card needs no dp_accounting

        short = (self.accountant or "").split(" (")[0].replace(" mechanism", "")
        return short.upper() if short in ACCOUNTANTS else short


class ReconstructionRecord(Strict):
    """Reconstruction and membership-inference bounds of a DP-SGD run (METHODS.md s.7; `accounting.reconstruction_risk`)
    with prior kappa = 1/N over its N units, how each was obtained, and the assumptions they rest on. Declared here,
    beside the card, as the type of every entry's :attr:`MechanismInfo.reconstruction` (only DP-SGD's gives one)."""

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


class ImageMechanism(Protocol):
    """A local DP transform of the released training images: ``apply(images, rng)`` -> perturbed copy,
    ``event(image_shape)`` -> the privacy event of one image's release (None: not DP)."""

    def apply(self, images: np.ndarray, *, rng: np.random.Generator) -> np.ndarray: ...

    def event(self, image_shape: tuple[int, ...]) -> ImageEvent | None: ...


ArmT = TypeVar("ArmT", bound=ArmBase)
PlanT = TypeVar("PlanT", bound=Strict)


@dataclass(frozen=True)
class MechanismInfo(Generic[ArmT, PlanT]):
    """One privacy mechanism, as the rest of dpmed knows it.

    name: ``mechanism:`` in a study file. arm / plan: its arm schema and its per-run plan type (both carry
    ``mechanism: Literal[name]``). sweep_keys: arm keys that may hold several values, and the short tag each gets in
    a run id. make_plan(arm, swept values, context) -> plan: every derived privacy value, computed before training.
    card(plan, ledger, randomness mode) -> PrivacyCard. image_mechanism(plan) -> the local DP transform of the
    training images, or None (DP-SGD acts in training; ``none`` nowhere). reconstruction(plan) -> the
    reconstruction-risk record, or None. size(arm, context) -> (count key, exact count) of the training units its
    plans rest on, which a study releases as a DP count (`dpmed.released_size`), or None. is_private: whether its
    guarantee can hold for released models at all (False: no privacy, or a labelled reproduction of a flawed
    mechanism). local: a guarantee per released image
    ("any two images"), which does not compose with DP-SGD's add/remove eps.

    Generic over its arm and plan types, so that a type checker holds each entry's functions to them: a field that
    its plan lacks, read by its card or its image transform, is an error where the entry is made."""

    name: str
    arm: type[ArmT]
    plan: type[PlanT]
    sweep_keys: Mapping[str, str]
    make_plan: Callable[[ArmT, Mapping[str, float], PlanContext], PlanT]
    card: Callable[[PlanT, Ledger, str], PrivacyCard]
    image_mechanism: Callable[[PlanT], ImageMechanism | None] = lambda plan: None
    reconstruction: Callable[[PlanT], ReconstructionRecord | None] = lambda plan: None
    size: Callable[[ArmT, PlanContext], tuple[str, int] | None] = lambda arm, context: None
    is_private: bool = True
    local: bool = False
    description: str = ""
