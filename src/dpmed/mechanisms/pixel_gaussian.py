"""pixel_gaussian: local DP by iid N(0, s^2) noise on every released pixel value (METHODS.md s.1).

The Gaussian mechanism with L2 sensitivity sqrt(d) R (any two images differ by at most that): an (eps, delta)
guarantee for "any two images" from the analytic Gaussian (Balle and Wang 2018). Unit: the image, pixels only.

The sampler's draws never exceed about 12.23 std (`dpmed.randomness`). Clipped to [0, R], every output stays
reachable from every input while R / s is below that; the mass a pixel at 0 puts at R is then the exact one less the
missing tail. Where that shortfall is above 1e-9 of it (`accounting.gaussian_end_shortfall`, R / s above about 10)
the analytic Gaussian's (eps, delta) is not known to hold for the run, and its card says not DP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

import numpy as np
from pydantic import Field, field_validator, model_validator

from dpmed import accounting
from dpmed.accounting import GaussianImageEvent, Ledger
from dpmed.mechanisms.base import (ArmBase, MechanismInfo, PlanContext, PrivacyCard, Strict, Sweep, computable_scale,
                                   exactly_one, positive_finite, refuse_vacuous_delta)
from dpmed.mechanisms.cards import LABELS_IN_CLEAR, PIXEL_VALUE, label_not_dp, label_randomness
from dpmed.mechanisms.perturb import perturb
from dpmed.mechanisms.pixel_laplace import LOCAL_CARD, LocalCard
from dpmed.numbers import delta_text, epsilon_text
from dpmed.randomness import DRAW_BOUNDS, GAUSSIAN_DRAW_BOUND

__all__ = ["PixelGaussian", "PixelGaussianArm", "PixelGaussianPlan", "INFO"]

# Basic composition over a patient's k releases adds the deltas too (Dwork & Roth 2014, Thm 3.16); the k releases
# are also one Gaussian mechanism with sqrt(k) times the sensitivity (Dong, Roth, Su 2019, Cor. 3.3).
PATIENTS = ("each image is released on its own: a patient with k images is protected by (k eps_image, k delta) "
            "(basic composition), or as one Gaussian mechanism with sqrt(k) times the sensitivity")
_GAUSSIAN_CARD: LocalCard = {**LOCAL_CARD, "patients": PATIENTS}


@dataclass(frozen=True)
class PixelGaussian:
    """std: noise standard deviation s in the units of value_range R; eps_image from the analytic Gaussian."""

    std: float
    value_range: float = 1.0

    def __post_init__(self) -> None:
        if not self.std > 0:
            raise ValueError(f"pixel_gaussian std must be > 0, got {self.std}")

    def apply(self, images: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """images: float32 [N, C, H, W] in [0, R] -> a perturbed copy, clipped to [0, R]; noise from ``rng``."""
        return perturb(images, rng=rng, value_range=self.value_range,
                       draw=lambda g, shape: g.normal(0.0, self.std, size=shape))

    def event(self, image_shape: tuple[int, ...]) -> GaussianImageEvent:
        return GaussianImageEvent(std=self.std, value_range=self.value_range, dimension=int(np.prod(image_shape)))


class PixelGaussianArm(ArmBase):
    """Local DP: iid N(0, std^2) noise on every released pixel value in [0, 1], then clipped (METHODS.md s.1).

    An (eps, delta) guarantee for "any two images" (L2 sensitivity sqrt(d)); give std, or target_epsilon_image
    (solved with the analytic Gaussian). delta defaults to min(1e-5, 1 / (10 N_train)).
    """

    mechanism: Literal["pixel_gaussian"]
    std: Sweep | None = None
    target_epsilon_image: Sweep | None = None
    delta: float | None = Field(default=None, gt=0, lt=1)

    @field_validator("std", "target_epsilon_image")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        return None if v is None else positive_finite(v)

    @model_validator(mode="after")
    def _one_noise_setting(self) -> "PixelGaussianArm":
        exactly_one(self, ("std", "target_epsilon_image"), "the noise std, or the per-image eps to solve it for")
        return self


class PixelGaussianPlan(Strict):
    mechanism: Literal["pixel_gaussian"] = "pixel_gaussian"
    std: float
    delta: float
    dimension: int
    target_epsilon_image: float | None = None


def _plan(arm: PixelGaussianArm, swept: Mapping[str, float], context: PlanContext) -> PixelGaussianPlan:
    # delta is per image ("any two images"), and the N training images are each released under it
    refuse_vacuous_delta(f"arm {arm.name!r}: delta", arm.delta, context.n_images,
                         whole="releasing every image unperturbed",
                         counted=f"the {context.n_images} training images released, each under this per-image delta")
    delta = arm.delta or accounting.default_delta(context.n_images)
    target = swept.get("target_epsilon_image")
    std = swept["std"] if target is None else accounting.gaussian_std_for_image(
        epsilon_image=target, delta=delta, dimension=context.dimension, value_range=1.0)   # the arm gives one of them
    computable_scale("std s" if "std" in swept else f"the std s that target_epsilon_image {target:g} gives", std)
    return PixelGaussianPlan(std=std, delta=delta, dimension=context.dimension, target_epsilon_image=target)


def _card(plan: PixelGaussianPlan, ledger: Ledger, randomness_mode: str) -> PrivacyCard:
    event = next(e for e in ledger.events if isinstance(e, GaussianImageEvent))
    eps_image = accounting.gaussian_image_epsilon(event, delta=plan.delta)
    eps_pixel = accounting.gaussian_epsilon(mu=event.value_range / event.std, delta=plan.delta)
    statement = (f"eps_image = {epsilon_text(eps_image)} at delta = {delta_text(plan.delta)} (analytic Gaussian; "
                 f"unit: one image, pixels only ({LABELS_IN_CLEAR}); neighbours: {accounting.NEIGHBOUR_LDP_IMAGE}; "
                 f"s = {event.std:g}, R = {event.value_range:g}, d = {event.dimension}); {PIXEL_VALUE}: "
                 f"eps_pixel = {epsilon_text(eps_pixel)} at delta = {delta_text(plan.delta)}")
    card = PrivacyCard(mechanism="pixel_gaussian", is_dp=True, statement=statement,
                       **_GAUSSIAN_CARD, std=event.std, value_range_R=event.value_range,
                       dimension_d=event.dimension, epsilon_pixel=eps_pixel, epsilon_image=eps_image,
                       epsilon=eps_image, delta=plan.delta,
                       accountant="analytic Gaussian mechanism (Balle & Wang 2018), L2 sensitivity sqrt(d) R")
    ratio = event.value_range / event.std
    shortfall = accounting.gaussian_end_shortfall(ratio=ratio, bound=GAUSSIAN_DRAW_BOUND)
    if shortfall > accounting.NEGLIGIBLE_SHARE:       # of the release's own R / s (module docstring)
        card = label_not_dp(
            card, f"NOT DP as run: the noise sampler's draws are bounded ({DRAW_BOUNDS['gaussian']}), and at "
            f"s = {event.std:g} (R / s = {ratio:.4g}) the tail a pixel at 0 needs to be released as R is "
            + ("beyond every draw" if shortfall >= 1 else f"a share {shortfall:.2g} beyond the sampler's draws")
            + "; the analytic Gaussian holds only for exact Gaussian noise", sampler_voids=True)
    return label_randomness(card, randomness_mode)


INFO = MechanismInfo(name="pixel_gaussian", arm=PixelGaussianArm, plan=PixelGaussianPlan,
                     sweep_keys={"std": "s", "target_epsilon_image": "epsimg"}, make_plan=_plan, card=_card,
                     image_mechanism=lambda plan: PixelGaussian(std=plan.std), local=True,
                     description="local DP: Gaussian noise on every pixel of the released training images")
