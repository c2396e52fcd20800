"""Local DP of the pixel Laplace mechanism (METHODS.md s.1), and several local-DP releases of the same image
composed into one per-image guarantee."""

from __future__ import annotations

import math

import pytest

from dp_accounting.pld import privacy_loss_distribution
from scipy import stats

from dpmed.accounting import (NEIGHBOUR_LDP_IMAGE, GaussianImageEvent, LaplaceImageEvent, compose_image_events,
                              gaussian_epsilon, gaussian_image_epsilon, gaussian_std_for_image, laplace_image_epsilon,
                              laplace_pixel_epsilon, laplace_scale_for_image)


def test_a_224x224x3_image_at_scale_1_costs_150528():
    event = LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=224 * 224 * 3)
    assert laplace_image_epsilon(event) == 150_528
    assert laplace_pixel_epsilon(scale=1.0, value_range=1.0) == 1.0


@pytest.mark.parametrize("beta, eps_pixel", [(1, 1.0), (2, 0.5), (4, 0.25)])
def test_the_source_betas_are_laplace_scales_in_unit_range(beta, eps_pixel):
    """000_56c2431ae4df8d10.txt's beta = 1, 2, 4 with R = 1 (METHODS.md s.1)."""
    assert laplace_pixel_epsilon(scale=beta, value_range=1.0) == eps_pixel
    assert laplace_image_epsilon(LaplaceImageEvent(scale=beta, value_range=1.0, dimension=10)) == 10 * eps_pixel


def test_the_noise_for_an_image_eps_grows_with_the_value_range(exact_gaussian_epsilon):
    """b = d R / eps_image and the s with sqrt(d) R / s at the target: R = 2 doubles both. Every caller in the
    pipeline passes R = 1, so only this test sees R; the Gaussian's eps is checked at the returned s, independently."""
    assert laplace_scale_for_image(epsilon_image=40, dimension=10, value_range=2.0) == 0.5
    one, two = (gaussian_std_for_image(epsilon_image=100, delta=1e-5, dimension=256, value_range=r) for r in (1, 2))
    assert two == pytest.approx(2 * one, rel=1e-8)
    delivered = exact_gaussian_epsilon(math.sqrt(256) * 2.0 / two, 1e-5)
    assert delivered <= 100 * (1 + 1e-9) and delivered == pytest.approx(100, rel=1e-6)


@pytest.mark.parametrize("mu, delta", [(0.5, 1e-5), (3.0, 1e-5), (40.0, 1e-6), (2000.0, 1e-8),
                                       (2e-6, 6e-14), (1.2e-6, 4.5e-13), (7e-5, 4e-10), (1e4, 1e-12)])
def test_the_gaussian_eps_is_rounded_up_so_its_delta_holds(mu, delta):
    """eps is found by bisection and the upper end returned: at it, delta(eps) of Balle and Wang's Thm. 8, evaluated
    here with 50 significant digits, does not exceed the claimed delta (the lower end's would). At mu of 1e-6 the
    two terms of delta(eps) agree to 7 digits, and their float rounding alone once put delta 1e-8 above the claim."""
    import mpmath

    mpmath.mp.dps = 50
    eps = mpmath.mpf(gaussian_epsilon(mu=mu, delta=delta))
    m = mpmath.mpf(mu)
    held = mpmath.ncdf(m / 2 - eps / m) - mpmath.exp(eps) * mpmath.ncdf(-m / 2 - eps / m)
    assert held <= delta
    assert held > delta * (1 - 1e-6)                          # and not far above the smallest eps that holds


@pytest.mark.parametrize("call, argument", [
    (lambda: laplace_pixel_epsilon(scale=0.0, value_range=1.0), "scale"),
    (lambda: laplace_pixel_epsilon(scale=1.0, value_range=-1.0), "value_range"),
    (lambda: LaplaceImageEvent(scale=-1.0, value_range=1.0, dimension=3), "scale"),
    (lambda: LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=0), "dimension"),
    (lambda: LaplaceImageEvent(scale=1.0, value_range=-1.0, dimension=3), "value_range"),   # else eps < 0
    (lambda: LaplaceImageEvent(scale=1.0, value_range=0.0, dimension=3), "value_range"),
    (lambda: GaussianImageEvent(std=0.0, value_range=1.0, dimension=3), "std"),
    (lambda: GaussianImageEvent(std=1.0, value_range=-1.0, dimension=3), "value_range"),
    (lambda: GaussianImageEvent(std=1.0, value_range=1.0, dimension=0), "dimension"),
    (lambda: GaussianImageEvent(std=1.0, value_range=1.0, dimension=2.0), "dimension"),
    (lambda: gaussian_epsilon(mu=0.0, delta=1e-5), "mu"),
    (lambda: gaussian_epsilon(mu=1.0, delta=0.0), "delta"),            # no finite eps: the search would not end
    (lambda: gaussian_epsilon(mu=1.0, delta=1.0), "delta"),
    (lambda: gaussian_std_for_image(epsilon_image=0.0, delta=1e-5, dimension=4, value_range=1.0), "epsilon_image"),
    (lambda: gaussian_std_for_image(epsilon_image=1.0, delta=0.0, dimension=4, value_range=1.0), "delta"),
    (lambda: gaussian_std_for_image(epsilon_image=1.0, delta=1e-5, dimension=0, value_range=1.0), "dimension"),
    (lambda: gaussian_std_for_image(epsilon_image=1.0, delta=1e-5, dimension=4, value_range=0.0), "value_range"),
    (lambda: laplace_scale_for_image(epsilon_image=-1.0, dimension=4, value_range=1.0), "epsilon_image"),
    (lambda: laplace_scale_for_image(epsilon_image=1.0, dimension=0, value_range=1.0), "dimension"),
    (lambda: laplace_scale_for_image(epsilon_image=1.0, dimension=4, value_range=math.nan), "value_range"),
])
def test_invalid_arguments_name_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_neighbour_relation_is_any_two_images():
    assert NEIGHBOUR_LDP_IMAGE.startswith("any two images")


# --- several releases of the same image (one per local-DP run) compose -----------------------------------------------

D = 16 * 16          # a 16x16 grey image


def test_two_laplace_runs_add_up_to_a_pure_per_image_eps():
    """b = 0.5 on 256 values: each run is eps_image 512 (pure); the two together 1024, still pure (Dwork & Roth
    2014, Thm 3.16); another scale adds its own d R / b."""
    half = LaplaceImageEvent(scale=0.5, value_range=1.0, dimension=D)
    both = compose_image_events([half, half])
    assert (both.epsilon, both.delta, both.releases, both.mu) == (1024.0, 0.0, 2, None)
    assert both.method == "basic composition of the Laplace mechanism" and "Thm 3.16" in both.citation
    assert both.neighbour_relation == NEIGHBOUR_LDP_IMAGE
    assert compose_image_events([half, LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=D)],
                                deltas=[0, 0]).epsilon == 512 + 256
    assert compose_image_events([half]).epsilon == laplace_image_epsilon(half)


def _balle_wang_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian mechanism with sensitivity / std = mu (Balle & Wang 2018, Thm. 8), written out
    with scipy.stats, independently of dpmed."""
    return stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu)


def test_two_gaussian_runs_compose_into_one_gaussian_mechanism(exact_gaussian_epsilon):
    """s = 8 and s = 16 on 256 values: mu_i = sqrt(256) / s_i = 2 and 1, so together the Gaussian mechanism with
    mu = sqrt(5) (Dong, Roth & Su 2019, Cor. 3.3), at the larger of the two deltas; far below the sum of their eps."""
    first, second = (GaussianImageEvent(std=s, value_range=1.0, dimension=D) for s in (8.0, 16.0))
    both = compose_image_events([first, second], deltas=[1e-5, 1e-6])
    mu = math.sqrt(2.0 ** 2 + 1.0 ** 2)
    assert both.mu == pytest.approx(mu, rel=1e-15) and both.delta == 1e-5 and both.releases == 2
    assert both.epsilon == pytest.approx(gaussian_epsilon(mu=mu, delta=1e-5), rel=1e-12)
    assert both.epsilon == pytest.approx(exact_gaussian_epsilon(mu, 1e-5), rel=1e-9)
    assert _balle_wang_delta(both.epsilon, mu) == pytest.approx(1e-5, rel=1e-6)   # the composed delta at that eps
    assert both.epsilon < gaussian_image_epsilon(first, delta=1e-5) + gaussian_image_epsilon(second, delta=1e-6)
    assert "Cor. 3.3" in both.citation


def test_the_composed_gaussian_matches_dp_accountings_composition_of_the_two():
    """The composition theorem itself, checked against dp_accounting's PLD of the two Gaussian mechanisms composed
    (pessimistic discretisation: a little above the exact eps, never below)."""
    both = compose_image_events([GaussianImageEvent(std=s, value_range=1.0, dimension=D) for s in (8.0, 16.0)],
                                deltas=[1e-5, 1e-5])
    pld = privacy_loss_distribution.from_gaussian_mechanism(1 / 2.0, value_discretization_interval=1e-4)
    pld = pld.compose(privacy_loss_distribution.from_gaussian_mechanism(1 / 1.0, value_discretization_interval=1e-4))
    assert pld.get_epsilon_for_delta(1e-5) == pytest.approx(both.epsilon, rel=1e-3)
    assert pld.get_epsilon_for_delta(1e-5) >= both.epsilon - 1e-9


def test_one_laplace_and_one_gaussian_run_compose_by_basic_composition():
    """eps and delta add up: 512 + the Gaussian run's own eps at its delta, delta = that delta + 0."""
    laplace = LaplaceImageEvent(scale=0.5, value_range=1.0, dimension=D)
    gaussian = GaussianImageEvent(std=8.0, value_range=1.0, dimension=D)
    both = compose_image_events([laplace, gaussian], deltas=[0.0, 1e-5])
    assert both.epsilon == pytest.approx(512 + gaussian_epsilon(mu=2.0, delta=1e-5), rel=1e-15)
    assert both.epsilon == 512 + gaussian_image_epsilon(gaussian, delta=1e-5)
    assert both.delta == 1e-5 and both.mu is None and "Thm 3.16" in both.citation


def test_mixed_runs_compose_the_gaussian_ones_first():
    """Two Gaussian runs and one Laplace run: the Laplace eps plus the two Gaussians' exact composition (at their
    larger delta), which is below basic composition of all three (sum eps, sum delta)."""
    laplace = LaplaceImageEvent(scale=0.5, value_range=1.0, dimension=D)
    gaussians = [GaussianImageEvent(std=s, value_range=1.0, dimension=D) for s in (8.0, 16.0)]
    three = compose_image_events([gaussians[0], laplace, gaussians[1]], deltas=[1e-5, 0.0, 1e-6])
    gaussian_part = compose_image_events(gaussians, deltas=[1e-5, 1e-6])
    assert three.epsilon == pytest.approx(512 + gaussian_part.epsilon, rel=1e-15) and three.delta == 1e-5
    basic = 512 + gaussian_image_epsilon(gaussians[0], delta=1e-5) + gaussian_image_epsilon(gaussians[1], delta=1e-6)
    assert three.epsilon < basic


def test_one_gaussian_run_alone_is_its_own_guarantee():
    event = GaussianImageEvent(std=3.0, value_range=1.0, dimension=D)
    assert compose_image_events([event], deltas=[1e-5]).epsilon == gaussian_image_epsilon(event, delta=1e-5)


@pytest.mark.parametrize("events, deltas, error, match", [
    ([], None, ValueError, "at least one"),
    ([LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=4)], [1e-5], ValueError, r"deltas\[0\] must be 0"),
    ([GaussianImageEvent(std=1.0, value_range=1.0, dimension=4)], None, ValueError, r"deltas\[0\] must be in"),
    ([GaussianImageEvent(std=1.0, value_range=1.0, dimension=4)], [1e-5, 1e-5], ValueError, "one delta per event"),
    (["not an event"], None, TypeError, "LaplaceImageEvent or GaussianImageEvent"),
])
def test_composition_refuses_what_it_cannot_compose(events, deltas, error, match):
    with pytest.raises(error, match=match):
        compose_image_events(events, deltas=deltas)


@pytest.mark.parametrize("target, delta, dimension", [(100.0, 1e-5, 256), (3.0, 1e-8, 1), (2500.0, 1e-6, 50_176)])
def test_the_std_for_an_image_eps_delivers_it_exactly_and_no_more_noise_than_needed(target, delta, dimension):
    """The std s returned is the noise at which the image's (target, delta) claim holds: Balle and Wang's delta at
    eps = target, for mu = sqrt(d) R / s, worked in 50 digits, is at most delta with no slack; and it is the smallest
    such s to 1e-9: 1e-8 less noise breaks the claim. (A slack of 1e-9 on eps let through the std one bisection step
    too small, whose claim does not hold.)"""
    import mpmath

    mpmath.mp.dps = 50

    def held(mu):
        m, eps = mpmath.mpf(mu), mpmath.mpf(target)
        return mpmath.ncdf(m / 2 - eps / m) - mpmath.exp(eps) * mpmath.ncdf(-m / 2 - eps / m)

    s = gaussian_std_for_image(epsilon_image=target, delta=delta, dimension=dimension, value_range=1.0)
    mu = math.sqrt(dimension) / s
    assert held(mu) <= delta
    assert held(mu * (1 + 1e-8)) > delta


def test_an_image_in_0_to_255_costs_its_range_in_every_value():
    """Values in [0, 255]: two images differ by up to d * 255 in L1 and sqrt(d) * 255 in L2, so the Laplace release
    costs d R / b = 4 * 255 / 2 = 510 (by hand), and the Gaussian one is the Gaussian mechanism with
    mu = sqrt(4) * 255 / 510 = 1; each is what the unit-range image costs at a noise 255 times smaller. Every
    caller in the pipeline passes R = 1, so an R dropped from the formula would show only here."""
    assert laplace_image_epsilon(LaplaceImageEvent(scale=2.0, value_range=255.0, dimension=4)) == 510.0
    gaussian = GaussianImageEvent(std=510.0, value_range=255.0, dimension=4)
    assert gaussian_image_epsilon(gaussian, delta=1e-5) == gaussian_epsilon(mu=1.0, delta=1e-5)
    assert _balle_wang_delta(gaussian_image_epsilon(gaussian, delta=1e-5), 1.0) == pytest.approx(1e-5, rel=1e-6)
    both = compose_image_events([gaussian, gaussian], deltas=[1e-5, 1e-5])
    assert both.mu == pytest.approx(math.sqrt(2), rel=1e-15)
    mixed = compose_image_events([LaplaceImageEvent(scale=2.0, value_range=255.0, dimension=4), gaussian],
                                 deltas=[0.0, 1e-5])
    assert mixed.epsilon == pytest.approx(510.0 + gaussian_epsilon(mu=1.0, delta=1e-5), rel=1e-15)


@pytest.mark.parametrize("mu", [0.1, 1.0, 4.0])
def test_the_gaussian_eps_is_zero_only_at_a_delta_that_covers_the_whole_difference(mu):
    """At eps = 0, delta is the total variation between N(0, 1) and N(mu, 1), 2 Phi(mu / 2) - 1 (by hand, with
    math.erf): at a delta just below it eps is above 0, and at a delta just above it eps is 0."""
    total_variation = math.erf(mu / 2 / math.sqrt(2))
    assert gaussian_epsilon(mu=mu, delta=total_variation * 0.99) > 0
    assert gaussian_epsilon(mu=mu, delta=min(total_variation * 1.01, 0.999)) == 0.0


def test_each_image_epsilon_takes_its_own_event_only():
    """A Gaussian release read as a Laplace one (or the reverse) would give an eps of the wrong mechanism."""
    laplace, gaussian = LaplaceImageEvent(scale=1.0, dimension=4, value_range=1.0), \
        GaussianImageEvent(std=1.0, dimension=4, value_range=1.0)
    with pytest.raises(TypeError, match="event must be a LaplaceImageEvent"):
        laplace_image_epsilon(gaussian)
    with pytest.raises(TypeError, match="event must be a GaussianImageEvent"):
        gaussian_image_epsilon(laplace, delta=1e-5)
