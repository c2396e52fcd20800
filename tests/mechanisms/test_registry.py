"""The unions of arms and plans that study files and run plans validate against (`dpmed.mechanisms.registry`)."""

from __future__ import annotations

from typing import get_args

from dpmed.mechanisms import MECHANISMS, Arm, PrivacyPlan


def test_the_unions_hold_every_registered_mechanism_and_nothing_else():
    """The unions are spelt out for type checkers; a mechanism registered but left out of them would be refused in
    every study file, and one left in after leaving the registry would validate with no card to describe it."""
    assert get_args(get_args(Arm)[0]) == tuple(info.arm for info in MECHANISMS.values())
    assert get_args(get_args(PrivacyPlan)[0]) == tuple(info.plan for info in MECHANISMS.values())
