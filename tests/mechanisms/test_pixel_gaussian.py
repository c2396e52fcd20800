"""pixel_gaussian's privacy card against an independent analytic Gaussian, and what its statement must name.

The card is what a reader of the study sees: its eps_image (L2 sensitivity sqrt(d) R, so mu = sqrt(d) R / s) and
eps_pixel (one value, mu = R / s) must be the exact analytic-Gaussian eps at the plan's own delta (Balle and Wang
2018, Thm. 8), here solved with scipy in log space, independently of dpmed's bisection; and the statement must say
at which delta, by which accountant, for which unit, and that labels and the number of images are not protected.
"""

from __future__ import annotations

import math

import pytest

from dpmed.accounting import Ledger
from dpmed.mechanisms import PixelGaussian, mechanism_info
from dpmed.mechanisms.pixel_gaussian import PixelGaussianPlan




def _card(std: float, shape: tuple[int, ...], delta: float, value_range: float = 1.0, mode: str = "secure"):
    event = PixelGaussian(std=std, value_range=value_range).event(shape)
    plan = PixelGaussianPlan(std=std, delta=delta, dimension=math.prod(shape))
    return mechanism_info("pixel_gaussian").card(plan, Ledger((event,)), mode)


@pytest.mark.parametrize("std, shape, delta, value_range", [
    (0.5, (1, 64, 64), 1e-5, 1.0),          # mu = 128: eps_image ~ 8,700
    (20.0, (1, 16, 16), 1e-6, 1.0),         # mu = 0.8: eps_image below 4
    (3.0, (3, 8, 8), 2e-4, 2.0),            # R = 2 doubles the sensitivity: mu = sqrt(192) 2 / 3
])
def test_card_epsilons_are_the_analytic_gaussian_at_the_plans_delta(std, shape, delta, value_range,
                                                                   exact_gaussian_epsilon):
    """eps_image: mu = sqrt(d) R / s; eps_pixel: mu = R / s; both at the plan's delta (not a default one), and the
    card's headline eps is eps_image. dpmed rounds eps up, never down, to 1e-12 relative."""
    d = math.prod(shape)
    card = _card(std, shape, delta, value_range)
    image = exact_gaussian_epsilon(math.sqrt(d) * value_range / std, delta)
    pixel = exact_gaussian_epsilon(value_range / std, delta)
    assert card.epsilon_image == pytest.approx(image, rel=1e-9) and card.epsilon_image >= image * (1 - 1e-12)
    assert card.epsilon_pixel == pytest.approx(pixel, rel=1e-9) and card.epsilon_pixel >= pixel * (1 - 1e-12)
    assert card.epsilon == card.epsilon_image and card.delta == delta and card.is_dp
    assert (card.std, card.value_range_R, card.dimension_d) == (std, value_range, d)


def test_a_smaller_delta_gives_a_larger_epsilon_on_the_card():
    """The eps depends on delta: one card per delta, never a delta dropped on the way."""
    loose, strict = _card(2.0, (1, 16, 16), 1e-3), _card(2.0, (1, 16, 16), 1e-8)
    assert strict.epsilon_image > loose.epsilon_image and strict.epsilon_pixel > loose.epsilon_pixel


def test_the_card_names_delta_the_accountant_the_unit_what_is_unprotected_and_no_private_sampling(
        exact_gaussian_epsilon):
    card = _card(0.5, (1, 64, 64), 1e-6)
    eps = exact_gaussian_epsilon(128.0, 1e-6)
    assert card.statement.startswith(f"eps_image = {eps:,.6g} at delta = 1e-06 (analytic Gaussian; unit: one image")
    assert "how many images there are" in card.statement and "labels" in card.statement
    assert f"eps_pixel = {exact_gaussian_epsilon(2.0, 1e-6):.4g} at delta = 1e-06" in card.statement
    assert "any two images" in card.statement and "d = 4096" in card.statement
    assert "analytic Gaussian" in card.accountant and "Balle" in card.accountant
    assert card.unit == "image" and "how many images there are" in card.labels
    assert "sampling" not in card.randomness and "noise" in card.randomness
