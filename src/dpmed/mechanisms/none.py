"""No privacy: the baseline every private arm is compared with (eps = infinity)."""

from __future__ import annotations

from typing import Literal, Mapping

from dpmed.accounting import Ledger
from dpmed.mechanisms.base import ArmBase, MechanismInfo, PlanContext, PrivacyCard, Strict

__all__ = ["NoPrivacyArm", "NoPrivacyPlan", "INFO"]


class NoPrivacyArm(ArmBase):
    """The non-private baseline: eps = infinity."""

    auditable = True
    mechanism: Literal["none"]


class NoPrivacyPlan(Strict):
    mechanism: Literal["none"] = "none"


def _plan(arm: NoPrivacyArm, swept: Mapping[str, float], context: PlanContext) -> NoPrivacyPlan:
    return NoPrivacyPlan()


def _card(plan: NoPrivacyPlan, ledger: Ledger, randomness_mode: str) -> PrivacyCard:
    return PrivacyCard(mechanism="none", is_dp=False, statement="no privacy protection (eps = infinity)")


INFO = MechanismInfo(name="none", arm=NoPrivacyArm, plan=NoPrivacyPlan, sweep_keys={}, make_plan=_plan, card=_card,
                     is_private=False, description="no privacy (the baseline)")
