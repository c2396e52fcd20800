"""The registry of privacy mechanisms: one frozen :class:`MechanismInfo` per mechanism, from which the study schema
builds its union of arms and the run plan its union of plans. Adding a mechanism is its module plus one line here."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from dpmed.mechanisms import dp_sgd, none, pixel_gaussian, pixel_laplace, scalar_shift
from dpmed.mechanisms.base import MechanismInfo

__all__ = ["MECHANISMS", "mechanism_info", "Arm", "PrivacyPlan"]

MECHANISMS: dict[str, MechanismInfo] = {info.name: info for info in (
    none.INFO, pixel_laplace.INFO, pixel_gaussian.INFO, scalar_shift.INFO, dp_sgd.INFO)}


def mechanism_info(name: str) -> MechanismInfo:
    if name not in MECHANISMS:
        raise KeyError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]


# A study file's arm, and one run's privacy plan: the union over the registry, told apart by ``mechanism``.
Arm = Annotated[Union[tuple(info.arm for info in MECHANISMS.values())], Field(discriminator="mechanism")]
PrivacyPlan = Annotated[Union[tuple(info.plan for info in MECHANISMS.values())], Field(discriminator="mechanism")]
