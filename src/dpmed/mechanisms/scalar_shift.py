"""scalar_shift: NOT DP. The reproduction of 000_56c2431ae4df8d10.txt's code, which drew *one* Laplace value per
image and added it to every pixel (a brightness shift).

The image content is released unchanged up to a shift: two images that differ anywhere but in brightness stay
distinguishable with certainty, so no finite eps holds; at scale 1 about 37 % of images saturate to all-white or
all-black. It declares no privacy event and is labelled "not DP" everywhere (METHODS.md s.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

import numpy as np
from pydantic import field_validator

from dpmed.accounting import Ledger
from dpmed.mechanisms.base import ArmBase, MechanismInfo, PlanContext, PrivacyCard, Strict, Sweep, positive_finite
from dpmed.mechanisms.perturb import perturb

__all__ = ["ScalarShift", "ScalarShiftArm", "ScalarShiftPlan", "INFO"]


@dataclass(frozen=True)
class ScalarShift:
    """NOT DP. One Laplace(scale) value per image added to all its pixels, then clipped."""

    scale: float
    value_range: float = 1.0

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scalar_shift scale must be > 0, got {self.scale}")

    def apply(self, images: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """images [N, C, H, W] -> each image plus one scalar Laplace draw, clipped to [0, R]."""
        return perturb(images, rng=rng, value_range=self.value_range,
                       draw=lambda g, shape: g.laplace(0.0, self.scale, size=(shape[0], 1, 1, 1)))

    def event(self, image_shape: tuple[int, ...]) -> None:
        return None  # not DP: there is nothing an accountant could certify


class ScalarShiftArm(ArmBase):
    """NOT DP: the reproduction of 000_56c2431ae4df8d10.txt's code, one Laplace(scale) brightness shift per image.
    It carries no privacy guarantee (no finite eps exists) and is reported as "not DP" everywhere."""

    mechanism: Literal["scalar_shift"]
    scale: Sweep

    @field_validator("scale")
    @classmethod
    def _scale(cls, v: list[float]) -> list[float]:
        return positive_finite(v)


class ScalarShiftPlan(Strict):
    mechanism: Literal["scalar_shift"] = "scalar_shift"
    scale: float


def _plan(arm: ScalarShiftArm, swept: Mapping[str, float], context: PlanContext) -> ScalarShiftPlan:
    return ScalarShiftPlan(scale=swept["scale"])


def _card(plan: ScalarShiftPlan, ledger: Ledger, randomness_mode: str) -> PrivacyCard:
    return PrivacyCard(mechanism="scalar_shift", is_dp=False, scale_b=plan.scale,
                       statement=("NOT DP: one Laplace brightness shift per image (reproduction of "
                                  "the code of Singh, Sikka, Kotti and Trask 2020); the image content is released "
                                  "unchanged, so no finite eps holds"))


INFO = MechanismInfo(name="scalar_shift", arm=ScalarShiftArm, plan=ScalarShiftPlan, sweep_keys={"scale": "b"},
                     make_plan=_plan, card=_card, image_mechanism=lambda plan: ScalarShift(scale=plan.scale),
                     is_private=False, description="NOT DP: the brightness shift of Singh et al. 2020's code")
