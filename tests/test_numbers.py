"""How dpmed writes numbers: an eps rounded up is never shown smaller than accounted, and never larger by more than
one unit of its last figure (checked against the float it was made from, over the whole positive range)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.numbers import bytes_text, epsilon_text, number_text, percent_interval_text, round_down

POSITIVE = st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False)


def _read(text: str) -> float:
    return float(text.replace(",", ""))


@settings(max_examples=400, deadline=None)
@given(POSITIVE, st.integers(min_value=1, max_value=6))
def test_rounding_up_never_shows_less_and_at_most_one_unit_of_the_last_figure_more(value, digits):
    shown = _read(number_text(value, digits, up=True))
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    if value.is_integer() and value < 1e6:
        assert shown == value                                        # integers below a million are exact
    else:
        assert shown >= value * (1 - 1e-9)                           # up; the last bits of binary rounding forgiven
        assert shown <= value + unit * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(POSITIVE)
def test_epsilon_text_is_four_figures_up(value):
    assert epsilon_text(value) == number_text(value, 4, up=True)
    assert _read(epsilon_text(value)) >= value * (1 - 1e-9)


def test_epsilon_text_by_hand():
    assert [epsilon_text(v) for v in (0.99942, 7.99612, 8.0, 16384.2, 2.5123e15, 1e-5, float("inf"))] == [
        "0.9995", "7.997", "8", "16,390", "2.513e15", "1e-5", "inf"]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-300, max_value=1.0, allow_nan=False), st.integers(min_value=1, max_value=6))
def test_deltas_and_the_calculator_s_eps_keep_python_s_notation_and_round_up(value, digits):
    from dpmed.numbers import delta_text, up_to_figures

    printed = float(f"{up_to_figures(value, digits):.{digits}g}")
    assert value * (1 - 1e-9) <= printed <= value * (1 + 10.0 ** (1 - digits)) * (1 + 1e-9)   # up, by < 1 unit
    assert float(delta_text(value)) >= value * (1 - 1e-9)


def test_a_delta_far_below_any_use_is_printed_not_a_division_by_zero():
    """Found by fuzzing: delta 5e-324 (a study file's delta) made the rounding scale underflow to 0: ZeroDivisionError
    in every card that printed it."""
    from dpmed.numbers import delta_text, up_to_figures

    import random

    draw = random.Random(0)
    tinies = [5e-324, 1e-310, 2.5e-308, 7.9705e-319] + [10.0 ** draw.uniform(-323.5, -299) for _ in range(3000)]
    for tiny in tinies:
        assert up_to_figures(tiny, 3) >= tiny and float(delta_text(tiny)) >= tiny, tiny


def test_delta_text_by_hand():
    from dpmed.numbers import delta_text

    assert [delta_text(d) for d in (1e-5, 1.3108610730117053e-05, 2.1316334936330522e-05, 1e-6, 0.0)] == [
        "1e-05", "1.32e-05", "2.14e-05", "1e-06", "0"]      # before: 1.31e-05 for a claim at 1.3109e-05


def test_a_value_rounded_up_to_a_million_is_written_as_a_million_is():
    """Before: 999,100.87 at three figures read "1,000,000" on a card beside "target ε 1e6"."""
    assert [number_text(v, 3, up=True) for v in (999100.87, 1e6, 999.96)] == ["1e6", "1e6", "1,000"]
    assert epsilon_text(999999.9) == "1e6" and epsilon_text(999100.87) == "999,200"


def test_bytes_text_by_hand():
    cases = {0: "0 bytes", 999: "999 bytes", 1536: "2 kB", 4_915_200: "4.9 MB", 12_345_678: "12 MB",
             99_999_999: "100 MB", 350_000_000: "350 MB", 10 ** 9: "1.0 GB", 44_957_696_000: "45.0 GB",
             2_500_000_000_000: "2.5 TB", 102_399_999_999_999_984: "102.4 PB", 4 * 10 ** 23: "400.0 ZB",
             10 ** 30: "1e+30 bytes"}      # a study of 10**23 images is told its size, not "1e14 GB"
    assert {n: bytes_text(n) for n in cases} == cases


@settings(max_examples=300, deadline=None)
@given(POSITIVE, st.integers(min_value=1, max_value=6))
def test_rounding_down_never_shows_more_and_at_most_one_unit_of_the_last_figure_less(value, digits):
    """A lower bound (an audit's empirical eps) shown shorter must not look larger than it is."""
    shown = _read(number_text(value, digits, down=True))
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    assert shown <= value * (1 + 1e-9)
    assert shown >= value - unit * (1 + 1e-9)


def test_number_text_by_hand():
    """What a reader sees for the values that are not plain numbers, and both directions of rounding."""
    cases = [(None, "–"), (float("nan"), "–"), (float("inf"), "∞"), (float("-inf"), "−∞"), (True, "yes"),
             (False, "no"), (0.0, "0"), (12300, "12,300"), ("pld", "pld"), (0.5, "0.5"), (2.5e15, "2.5e15")]
    assert [number_text(v) for v in (v for v, _ in cases)] == [text for _, text in cases]
    assert [number_text(1.2345, 3, up=True), number_text(1.2345, 3, down=True), number_text(1.2345, 3)] == [
        "1.24", "1.23", "1.23"]
    assert number_text(-1.2345, 3, down=True) == "-1.24" and number_text(3.3e-6, 2, down=True) == "3.3e-6"
    assert number_text(0.29, 2, down=True) == "0.29"     # 0.29 * 100 is 28.999999999999996 in binary: not 0.28


def test_rounding_down_zero_gives_zero_not_minus_zero():
    """A lower bound of 0 formatted after rounding down must read "0.0", not "-0.0"."""
    assert f"{round_down(0.0):.1f}" == "0.0" and f"{round_down(-0.0):.1f}" == "0.0"
    assert round_down(2.7) == 2.0 and round_down(-2.3) == -3.0 and round_down(3.0000000000001) == 3.0


RATES = st.floats(min_value=0, max_value=1, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(RATES, RATES)
def test_a_rate_interval_is_shown_outward_by_at_most_a_tenth_of_a_percent(a, b):
    """The attack's interval (the report's table and the terminal line): never narrower than computed."""
    low, high = min(a, b), max(a, b)
    shown_low, shown_high = (float(end.strip(" %")) / 100 for end in percent_interval_text(low, high)[1:-1].split(","))
    # the last bits of binary rounding forgiven: a billionth of the last figure shown (round_up)
    assert low - 0.001 * (1 + 1e-9) <= shown_low <= low + 1e-11
    assert high - 1e-11 <= shown_high <= high + 0.001 * (1 + 1e-9)
    assert percent_interval_text(0.00054, 0.0194) == "[0.0%, 2.0%]" and percent_interval_text(0, 1) == "[0.0%, 100.0%]"
