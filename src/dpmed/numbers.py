"""How dpmed writes a number for a reader: in the report, on the terminal and in a privacy card's statement.

One place, so that every eps is rounded the same way wherever it is printed: up, never shown smaller than the
accountant's value (a study total of 8.00001 over a budget of 8 must not read "8").
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["count_text", "number_text", "epsilon_text", "delta_text", "delta_number", "bytes_text", "shape_text",
           "up_to_figures", "round_up", "round_down", "confidence_text", "percent_interval_text"]


def count_text(count: int, noun: str) -> str:
    """"1 epoch", "3 epochs": a count with its noun in the number it needs (a report read "1 epochs")."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def shape_text(shape: tuple[int, ...]) -> str:
    """"1x64x64": an image shape (channels, height, width) as `dpmed plan`, `dpmed run` and the report all write it
    (they wrote it two ways: 1x64x64 and (1, 64, 64))."""
    return "x".join(map(str, shape))


def round_up(x: float) -> float:
    """ceil, forgiving the last bits of binary rounding (999.0000000001 -> 999)."""
    return float(math.ceil(x - 1e-9 * max(1.0, abs(x))))


def round_down(x: float) -> float:
    """floor, forgiving the last bits of binary rounding (a lower bound shown shorter must not look larger); 0 as 0,
    not -0."""
    return -round_up(-x) + 0.0


def number_text(value: Any, digits: int = 3, *, up: bool = False, down: bool = False) -> str:
    """A number as a reader reads it: at most ``digits`` significant figures with thousands separators (0.0923,
    3.46, 0.5, 8,192, 12,300), scientific below 1e-4 and from 1e6 (1e-5, 2.5e15), integers exact, inf as "∞",
    booleans as yes / no, None and nan as "–". Never Python's repr (no ``False``, ``None`` or 16 digits).
    ``up``: round up, not to nearest: an eps or delta shown shorter must never look smaller than it is (0.99942
    -> 1, not 0.999); ``down``: round down, for a lower bound (an audit's empirical eps)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if not isinstance(value, float):
        return str(value)
    if math.isnan(value):
        return "–"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 1e6:
        return f"{int(value):,}"
    direct = round_up if up else round_down if down else None
    magnitude = math.floor(math.log10(abs(value)))
    if -4 <= magnitude < 6:
        decimals = digits - 1 - magnitude
        shown = direct(value * 10.0 ** decimals) / 10.0 ** decimals if direct else round(value, decimals)
        if abs(shown) < 1e6:        # rounded up to a million: written as 1e6, as a million itself is
            text = f"{shown:,.{max(0, decimals)}f}"
            return text.rstrip("0").rstrip(".") if "." in text else text   # 0.5, not 0.500
    scale = 10.0 ** (magnitude - digits + 1)
    mantissa_value = direct(value / scale) * scale if direct else value
    mantissa, exponent = f"{mantissa_value:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def up_to_figures(value: float, digits: int) -> float:
    """``value`` rounded up to ``digits`` significant figures (positive finite values; others as they are), for the
    plain forms that print it with ``:.{digits}g``: a delta (1.31086e-05 -> 1.32e-05) and the privacy calculator's
    eps, which scripts may read back, so they keep Python's notation."""
    if not math.isfinite(value) or value <= 0:
        return value
    scale = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    rounded = round_up(value / scale) * scale if scale > 0 else 0.0
    if value >= 1e-300 and rounded >= value:
        return rounded
    # far below any use floats are sparse and the scale subnormal (or 0): step up until the text is no smaller
    up = max(rounded, math.nextafter(value, math.inf))
    while float(f"{up:.{digits}g}") < value:
        up = max(up * (1 + 10.0 ** (1 - digits)), math.nextafter(up, math.inf))
    return up


def delta_text(delta: float) -> str:
    """A delta as cards and the terminal write it (1e-05, 1.32e-05), rounded up: never shown smaller than the claim,
    which a bounded noise sampler's share can make a little larger than the delta asked for."""
    return f"{up_to_figures(delta, 3):.3g}"


def delta_share_text(asked: float, share: float, payer: str) -> str:
    """Where ``share`` moves the delta shown (``asked + share`` by :func:`delta_text`), the parts it sums, to open
    the terms after it: "1e-05 + 7.68e-15 for the noise sampler's bounded draws, rounded up; ". Rounded up to three
    figures, a share of 1e-15 makes 1e-05 read 1.01e-05: "of which 7.7e-15 pays for ..." left the other 1e-07
    unexplained, and stood among the eps terms as if it were one of them. Empty where the delta shown is the one
    asked for."""
    if delta_text(asked + share) == delta_text(asked):
        return ""
    return f"{delta_text(asked)} + {delta_text(share)} for {payer}, rounded up; "


def delta_number(delta: float) -> str:
    """A delta as the report writes it (1e-5, 1.32e-5): the figures of :func:`delta_text`, rounded up as strictly (a
    bounded noise sampler's share of 1e-15 makes 1e-5 read 1.01e-5 in both), in :func:`number_text`'s notation."""
    return number_text(up_to_figures(float(delta), 3), up=True)


def confidence_text(level: float, *, up: bool = False) -> str:
    """A confidence level as a percentage, "95%", "97.5%", "99.9%": to four figures, rounded down, for a whole
    percent made 0.999 read "100%", a certainty no finite count of trials gives, and 0.975 read "98%". ``up``: an
    error rate (1 - a level), which is never shown smaller than it is."""
    return f"{number_text(100.0 * level, 4, up=up, down=not up)}%"


def percent_interval_text(low: float, high: float) -> str:
    """An interval on a rate as percentages with one decimal, rounded outward, "[0.0%, 2.0%]": to nearest, 0.054 %
    to 1.94 % read "[0.1%, 1.9%]", narrower than the interval computed. The report and the terminal write the
    attack's success so."""
    return f"[{round_down(1000 * low) / 10:.1f}%, {round_up(1000 * high) / 10:.1f}%]"


def bytes_text(n: int) -> str:
    """A size in bytes, in decimal units, as a person reads it: 512 bytes, 2 kB, 4.9 MB, 350 MB, 14.7 GB, 2.5 TB;
    beyond zettabytes (what a mistyped count asks for) in powers of ten: 1e+30 bytes."""
    if n >= 1e24:
        return f"{n:.2g} bytes"
    for at_least, unit, size, decimals in ((1e21, "ZB", 1e21, 1), (1e18, "EB", 1e18, 1), (1e15, "PB", 1e15, 1),
                                           (1e12, "TB", 1e12, 1), (1e9, "GB", 1e9, 1), (1e7, "MB", 1e6, 0),
                                           (1e6, "MB", 1e6, 1), (1e3, "kB", 1e3, 0)):
        if n >= at_least:
            return f"{n / size:.{decimals}f} {unit}"
    return f"{n} bytes"


def epsilon_text(eps: float) -> str:
    """An eps in plain text, to four figures and rounded up (0.99942 -> 0.9995, 16,384, 2.5e15; inf as "inf"): the
    form of a card's statement, the terminal and results.csv."""
    return "inf" if math.isinf(eps) and eps > 0 else number_text(float(eps), 4, up=True)
