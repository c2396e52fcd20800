"""pixel_gaussian's privacy card against an independent analytic Gaussian, and what its statement must name.

The card is what a reader of the study sees: its eps_image (L2 sensitivity sqrt(d) R, so mu = sqrt(d) R / s) and
eps_pixel (one value, mu = R / s) must be the exact analytic-Gaussian eps at the plan's own delta (Balle and Wang
2018, Thm. 8), here solved with scipy in log space, independently of dpmed's bisection; and the statement must say
at which delta, by which accountant, for which unit, and that labels and the number of images are not protected.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmed.accounting import Ledger
from dpmed.mechanisms import PixelGaussian, mechanism_info
from dpmed.mechanisms.pixel_gaussian import PixelGaussianPlan
from dpmed.numbers import epsilon_text


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
    assert card.statement.startswith(f"eps_image = {epsilon_text(eps)} at delta = 1e-06 (analytic Gaussian; "
                                     "unit: one image")
    assert "how many images there are" in card.statement and "labels" in card.statement
    assert f"eps_pixel = {epsilon_text(exact_gaussian_epsilon(2.0, 1e-6))} at delta = 1e-06" in card.statement
    assert "any two images" in card.statement and "d = 4096" in card.statement
    assert "analytic Gaussian" in card.accountant and "Balle" in card.accountant
    assert card.unit == "image" and "how many images there are" in card.labels
    assert "sampling" not in card.randomness and "noise" in card.randomness


def test_a_patient_with_k_images_is_told_both_halves_of_basic_composition():
    """k releases of an (eps, delta) Gaussian mechanism are (k eps, k delta): the note said k eps_image alone."""
    card = _card(0.5, (1, 8, 8), 1e-5)
    assert "(k eps_image, k delta)" in card.patients and "sqrt(k)" in card.patients


@pytest.mark.parametrize("mechanism", ["pixel_gaussian", "pixel_laplace"])
def test_a_reproducible_local_card_never_claims_fresh_randomness_nor_dp(mechanism):
    """Local noise regenerated from the published seed is no privacy at all (as for DP-SGD, `test_cards`)."""
    from dpmed.mechanisms import PixelLaplace
    from dpmed.mechanisms.cards import SECURE_RANDOMNESS
    from dpmed.mechanisms.pixel_laplace import PixelLaplacePlan
    from dpmed.randomness import NOT_DP_REPRODUCIBLE
    if mechanism == "pixel_gaussian":
        card = _card(0.5, (1, 16, 16), 1e-5, mode="reproducible")
    else:
        card = mechanism_info("pixel_laplace").card(PixelLaplacePlan(scale=0.5, dimension=256),
                                                    Ledger((PixelLaplace(scale=0.5).event((1, 16, 16)),)),
                                                    "reproducible")
    assert not card.is_dp and card.randomness == NOT_DP_REPRODUCIBLE and card.randomness != SECURE_RANDOMNESS
    assert card.statement.startswith("NOT DP against anyone who knows the seed")
    assert "not DP: seed known" in card.in_brief()


def test_where_the_sampler_cannot_reach_the_tail_a_pixel_at_zero_needs_the_card_says_not_dp():
    """numpy's Gaussian never exceeds 12.23 std, so at s = R / 13 a pixel at 0 is never released as R (a pixel at R
    is half the time): the analytic Gaussian's delta does not hold. At R / s = 8 the missing tail is 2e-19 of the
    mass at the end: left out."""
    from dpmed.randomness import PrivacyRandomness
    rng = PrivacyRandomness.reproducible(seed=0, run_id="g").stream("local_dp")
    n = 400_000
    mech = PixelGaussian(std=1 / 13)
    assert (mech.apply(np.zeros((n, 1, 1, 1), dtype=np.float32), rng=rng) == 1.0).sum() == 0
    assert (mech.apply(np.ones((n, 1, 1, 1), dtype=np.float32), rng=rng) == 1.0).mean() == pytest.approx(0.5, abs=0.01)
    void = _card(1 / 13, (1, 8, 8), 1e-5)
    assert not void.is_dp and void.sampler_voids and "beyond every draw" in void.statement
    near = _card(1 / 11, (1, 8, 8), 1e-5)
    assert not near.is_dp and "a share 5.9e-07 beyond the sampler's draws" in near.statement
    fine = _card(1 / 8, (1, 8, 8), 1e-5)
    assert fine.is_dp and not fine.sampler_voids


def test_whether_the_sampler_voids_the_claim_reads_the_release_s_own_range():
    """R / s decides it, not s alone: pixels in [0, 2] at s = 2 / 13 are as far out of the sampler's reach as pixels
    in [0, 1] at s = 1 / 13, and at s = 2 / 8 as safe."""
    assert not _card(2 / 13, (1, 8, 8), 1e-5, value_range=2.0).is_dp
    assert _card(2 / 8, (1, 8, 8), 1e-5, value_range=2.0).is_dp
    assert _card(1 / 8, (1, 8, 8), 1e-5, value_range=1.0).is_dp
