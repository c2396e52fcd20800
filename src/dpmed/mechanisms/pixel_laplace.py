"""pixel_laplace: local DP by iid Laplace(b) noise on every released pixel value (000_56c2431ae4df8d10.txt's stated
mechanism; METHODS.md s.1).

Each of the d values of the released tensor (after resize and channel conversion) gets Laplace(b) noise, then is
clipped to [0, R] (post-processing, free). Changing one value by at most R changes the density ratio by at most
e^(R/b), so each value is (R/b)-DP and, since any two images differ in at most all d values, the image is
(d R / b)-DP under the relation "any two images are neighbours" (Dwork and Roth 2014, Thm 3.6, composed over d
coordinates). That eps_image is large; it is printed, because it is the honest number. The unit is the image and only
the pixels are protected: the labels go out in the clear, and a patient's k images are k releases.

The sampler's draws lie between -52 log 2 and 53 log 2 scales (`dpmed.randomness`), so a pixel at R is released as 0
(and one at 0 as R) less often than exact noise would: the ratio at the clipped end exceeds e^(R/b)
(`accounting.laplace_end_excess`), by 4e-16 of it at R/b = 2 and without bound once R/b reaches 52 log 2. Where the
excess is above ``accounting.NEGLIGIBLE_SHARE`` (1e-9) of eps_pixel (R/b above about 18, b below R / 18) the closed
form is not the run's: the card says not DP, and the study counts no eps for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, TypedDict

import numpy as np
from pydantic import field_validator, model_validator

from dpmed import accounting
from dpmed.accounting import LaplaceImageEvent, Ledger
from dpmed.mechanisms.base import (ArmBase, MechanismInfo, PlanContext, PrivacyCard, Strict, Sweep, computable_scale,
                                   exactly_one, positive_finite)
from dpmed.mechanisms.cards import (COVERAGE, LABELS_IN_CLEAR, LOCAL_RANDOMNESS, PIXEL_VALUE, label_not_dp,
                                    label_randomness)
from dpmed.mechanisms.perturb import perturb
from dpmed.numbers import epsilon_text
from dpmed.randomness import DRAW_BOUNDS, LAPLACE_DRAW_BOUND

__all__ = ["PixelLaplace", "PixelLaplaceArm", "PixelLaplacePlan", "INFO", "LOCAL_CARD", "LocalCard"]


class LocalCard(TypedDict):
    """What every local-DP card says about its unit (the image) and the patient: `PrivacyCard` fields, typed."""

    scope: str
    unit: Literal["image"]
    neighbour_relation: str
    labels: str
    covers: str
    patients: str
    randomness: str


LOCAL_CARD: LocalCard = {
    "scope": ("local DP on each released training image: noised once per run, and that one noised copy trains every "
              "epoch (one release; each run noises its own copy, and the study composes them)"),
    "unit": "image",
    "neighbour_relation": accounting.NEIGHBOUR_LDP_IMAGE, "labels": LABELS_IN_CLEAR, "covers": COVERAGE,
    "patients": ("each image is released on its own: a patient with k images is protected by k eps_image "
                 "(basic composition)"), "randomness": LOCAL_RANDOMNESS}


@dataclass(frozen=True)
class PixelLaplace:
    """scale: Laplace scale b in the units of value_range R (images are in [0, 1], so R = 1)."""

    scale: float
    value_range: float = 1.0

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"pixel_laplace scale must be > 0, got {self.scale}")

    def apply(self, images: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """images: float32 [N, C, H, W] in [0, R] -> a perturbed copy, clipped to [0, R]; ``rng`` is the run's
        secret local-DP stream (N * C * H * W Laplace draws, in image order)."""
        return perturb(images, rng=rng, value_range=self.value_range,
                       draw=lambda g, shape: g.laplace(0.0, self.scale, size=shape))

    def event(self, image_shape: tuple[int, ...]) -> LaplaceImageEvent:
        """What one release of an image of ``image_shape`` (C, H, W) costs, for the accountant."""
        return LaplaceImageEvent(scale=self.scale, value_range=self.value_range, dimension=int(np.prod(image_shape)))


class PixelLaplaceArm(ArmBase):
    """Local DP: iid Laplace(scale) noise on every released pixel value in [0, 1], then clipped (METHODS.md s.1).

    scale is b in [0, 1] units (000_56c2431ae4df8d10.txt's beta): eps_pixel = 1 / b, eps_image = d / b. Or give
    target_epsilon_image and b = d / eps_image is solved for the study's image size.
    """

    mechanism: Literal["pixel_laplace"]
    scale: Sweep | None = None
    target_epsilon_image: Sweep | None = None

    @field_validator("scale", "target_epsilon_image")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        return None if v is None else positive_finite(v)

    @model_validator(mode="after")
    def _one_noise_setting(self) -> "PixelLaplaceArm":
        exactly_one(self, ("scale", "target_epsilon_image"), "the noise scale, or the per-image eps to solve it for")
        return self


class PixelLaplacePlan(Strict):
    mechanism: Literal["pixel_laplace"] = "pixel_laplace"
    scale: float
    dimension: int
    target_epsilon_image: float | None = None


def _plan(arm: PixelLaplaceArm, swept: Mapping[str, float], context: PlanContext) -> PixelLaplacePlan:
    target = swept.get("target_epsilon_image")
    scale = swept["scale"] if target is None else accounting.laplace_scale_for_image(
        epsilon_image=target, dimension=context.dimension, value_range=1.0)   # the arm gives exactly one of them
    computable_scale("scale b" if "scale" in swept else f"the scale b that target_epsilon_image {target:g} gives",
                     scale)
    return PixelLaplacePlan(scale=scale, dimension=context.dimension, target_epsilon_image=target)


def _card(plan: PixelLaplacePlan, ledger: Ledger, randomness_mode: str) -> PrivacyCard:
    event = next(e for e in ledger.events if isinstance(e, LaplaceImageEvent))
    eps_pixel = accounting.laplace_pixel_epsilon(scale=event.scale, value_range=event.value_range)
    eps_image = accounting.laplace_image_epsilon(event)
    statement = (f"eps_image = {epsilon_text(eps_image)} at delta = 0 (closed form, the Laplace mechanism; unit: "
                 f"one image, pixels only ({LABELS_IN_CLEAR}); neighbours: {accounting.NEIGHBOUR_LDP_IMAGE}; Laplace "
                 f"b = {event.scale:g}, R = {event.value_range:g}, d = {event.dimension}); {PIXEL_VALUE}: "
                 f"eps_pixel = {epsilon_text(eps_pixel)}")
    card = PrivacyCard(mechanism="pixel_laplace", is_dp=True, statement=statement, **LOCAL_CARD,
                       scale_b=event.scale, value_range_R=event.value_range, dimension_d=event.dimension,
                       epsilon_pixel=eps_pixel, epsilon_image=eps_image, epsilon=eps_image, delta=0.0,
                       accountant="closed form (Laplace mechanism, pure DP)")
    # whether the bounded draws void the closed form (module docstring), at the release's own R / b = eps_pixel
    excess = accounting.laplace_end_excess(ratio=eps_pixel, bound=LAPLACE_DRAW_BOUND)
    if excess > accounting.NEGLIGIBLE_SHARE * eps_pixel:
        never = eps_pixel >= LAPLACE_DRAW_BOUND
        card = label_not_dp(
            card, f"NOT DP as run: the noise sampler's draws are bounded ({DRAW_BOUNDS['laplace']}), and at "
            f"b = {event.scale:g} (R / b = {epsilon_text(eps_pixel)}) a pixel at R is "
            + ("never released as 0, which a pixel at 0 is half the time" if never else
               "released as 0 measurably less often than exact noise would, so the end-point ratio exceeds "
               "e^(R / b)") + "; the closed form holds only for exact Laplace noise", sampler_voids=True)
    return label_randomness(card, randomness_mode)


INFO = MechanismInfo(name="pixel_laplace", arm=PixelLaplaceArm, plan=PixelLaplacePlan,
                     sweep_keys={"scale": "b", "target_epsilon_image": "epsimg"}, make_plan=_plan, card=_card,
                     image_mechanism=lambda plan: PixelLaplace(scale=plan.scale), local=True,
                     description="local DP: Laplace noise on every pixel of the released training images")
