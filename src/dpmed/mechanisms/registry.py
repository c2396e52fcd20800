"""The registry of privacy mechanisms: one frozen :class:`MechanismInfo` per mechanism, from which the study schema
builds its union of arms and the run plan its union of plans. Adding a mechanism is its module plus one line here,
and its arm and plan in the unions below."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from dpmed.accounting import Ledger
from dpmed.mechanisms import dp_sgd, none, pixel_gaussian, pixel_laplace, scalar_shift
from dpmed.mechanisms.base import MechanismInfo, PrivacyCard
from dpmed.randomness import NOT_DP_REPRODUCIBLE

__all__ = ["MECHANISMS", "mechanism_info", "Arm", "PrivacyPlan", "claims_beyond"]

MECHANISMS: dict[str, MechanismInfo[Any, Any]] = {info.name: info for info in (
    none.INFO, pixel_laplace.INFO, pixel_gaussian.INFO, scalar_shift.INFO, dp_sgd.INFO)}


def mechanism_info(name: str) -> MechanismInfo[Any, Any]:
    if name not in MECHANISMS:
        raise KeyError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]


def claims_beyond(card: PrivacyCard, plan: Any, ledger: Ledger) -> list[str]:
    """Where ``card``, a finished run's, claims more than this dpmed finds for the same run from its plan and ledger.

    A card an earlier dpmed wrote (before the noise sampler's bounded draws were priced in delta, say) may call a
    run DP that this version calls NOT DP, or state a smaller delta or eps: a claim this version does not make. A
    claim this version finds stronger still holds, and so does one below this version's by less than a millionth
    (the accountants' own numerical rounding). Each line ends with this version's claim in brief (`in_brief`: eps
    with its delta, accountant and neighbours)."""
    if not card.is_dp:
        return []
    randomness = "reproducible" if card.randomness == NOT_DP_REPRODUCIBLE else "secure"
    now = mechanism_info(plan.mechanism).card(plan, ledger, randomness)
    if not now.is_dp:
        return [f"its card (an earlier dpmed's) calls it DP, this version NOT DP: {now.in_brief()}"]
    return [f"its card (an earlier dpmed's) states {name} = {old:.6g}, this version {new:.6g}: {now.in_brief()}"
            for name, old, new in (("delta", card.delta, now.delta), ("eps", card.epsilon, now.epsilon))
            if old is not None and new is not None and new > old * (1 + 1e-6)]


# A study file's arm, and one run's privacy plan: the union over the registry, told apart by ``mechanism``. Spelt
# out, member by member in the registry's order, so that a type checker sees the union (one built from the registry
# at import time is no type to it: every plan's fields were unchecked); tests/mechanisms hold it to the registry.
Arm = Annotated[Union[none.NoPrivacyArm, pixel_laplace.PixelLaplaceArm, pixel_gaussian.PixelGaussianArm,
                      scalar_shift.ScalarShiftArm, dp_sgd.DpSgdArm], Field(discriminator="mechanism")]
PrivacyPlan = Annotated[Union[none.NoPrivacyPlan, pixel_laplace.PixelLaplacePlan, pixel_gaussian.PixelGaussianPlan,
                              scalar_shift.ScalarShiftPlan, dp_sgd.DpSgdPlan], Field(discriminator="mechanism")]
