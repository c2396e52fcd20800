"""Checks of privacy-relevant arguments, shared by the accounting modules.

A wrong privacy parameter must fail loudly where it enters, with the argument's name and what to do, instead of
turning into a silently wrong eps (or an obscure error deep inside dp_accounting).
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import SupportsIndex, cast

__all__ = ["real", "positive", "probability", "count", "ANALYSED_NOISES", "check_accountant_noise"]

# The noises each accountant analyses. The registry of `dpmed.accounting.epsilon` reads them from here, where a study
# file's arms can check theirs without importing dp_accounting (`dpmed status` reads runs without it).
ANALYSED_NOISES: dict[str, tuple[str, ...]] = {"pld": ("gaussian", "laplace"), "rdp": ("gaussian",),
                                               "rdp-classic": ("gaussian",), "pure": ("laplace",)}


def check_accountant_noise(accountant: str, noise: str) -> None:
    """ValueError where accountant ``accountant`` (a known name) does not analyse ``noise``, naming those that do."""
    handled = ANALYSED_NOISES[accountant]
    if noise not in handled:
        raise ValueError(f"accountant {accountant!r} does not analyse {noise} noise; it handles {', '.join(handled)}. "
                         f"For {noise} noise use "
                         f"{' or '.join(repr(n) for n, noises in ANALYSED_NOISES.items() if noise in noises)}")


def real(name: str, value: object, *, hint: str = "") -> float:
    """``value`` as a finite float; bools and non-numbers are rejected."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}{_tail(hint)}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}{_tail(hint)}")
    return value


def positive(name: str, value: object, *, allow_zero: bool = False, hint: str = "") -> float:
    """``value`` as a finite float > 0 (>= 0 with ``allow_zero``)."""
    value = real(name, value, hint=hint)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}{_tail(hint)}")
    return value


def probability(name: str, value: object, *, include_one: bool, hint: str = "") -> float:
    """``value`` in (0, 1] (``include_one``) or in (0, 1)."""
    value = real(name, value, hint=hint)
    if not (0 < value < 1 or (include_one and value == 1)):
        interval = "(0, 1]" if include_one else "(0, 1)"
        raise ValueError(f"{name} must be in {interval}, got {value!r}{_tail(hint)}")
    return value


def count(name: str, value: object, *, minimum: int, hint: str = "") -> int:
    """``value`` as a Python int >= ``minimum`` (numpy integers accepted; floats and bools are not)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        # a cast, not isinstance against the protocol: that costs about 20 us, and operator.index checks it anyway
        value = operator.index(cast(SupportsIndex, value))
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}{_tail(hint)}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}{_tail(hint)}")
    return value


def _tail(hint: str) -> str:
    return f"; {hint}" if hint else ""
