"""What a noise sampler with bounded draws costs a claim (`dpmed.accounting.truncation`), against simulations of the
sampler dpmed draws from and against the excess summed by hand over gradient shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from dpmed import accounting
from dpmed.accounting.truncation import _gaussian_step_mass
from dpmed.randomness import GAUSSIAN_DRAW_BOUND, LAPLACE_DRAW_BOUND

B = GAUSSIAN_DRAW_BOUND


def _excess(shifts: np.ndarray) -> float:
    """Sum over coordinates of P(B - a_j < Z <= B): the mass past the bound, coordinate by coordinate."""
    return float(np.sum(norm.sf(B - shifts) - norm.sf(B)))


def test_a_run_that_moves_a_coordinate_past_the_sampler_is_caught_as_often_as_the_bound_says():
    """Simulate the one-coordinate worst case with the very sampler dpmed uses: in each of T steps the unit is drawn
    with probability q and shifts the coordinate by 1 / sigma std; an output above the largest draw is one the run
    without the unit never produces. Its frequency over runs is what the delta pays, and the union bound is close."""
    sigma, q, steps, runs = 0.1, 0.05, 20, 200_000
    rng = np.random.default_rng(1)
    noise = rng.standard_normal((runs, steps))
    sampled = rng.random((runs, steps)) < q
    caught = np.any(sampled & (noise + 1 / sigma > B), axis=1).mean()
    paid = accounting.bounded_noise_delta(noise="gaussian", noise_multiplier=sigma, sample_rate=q, steps=steps,
                                          bound=B)
    exact = 1 - (1 - q * (norm.sf(B - 1 / sigma) - norm.sf(B))) ** steps
    se = math.sqrt(exact * (1 - exact) / runs)
    assert abs(caught - exact) < 5 * se                 # the sampler's tail is the exact one up to its bound
    assert exact <= paid <= 1.05 * exact + 1e-20        # the union bound over steps, not far above


@settings(max_examples=60, deadline=None)
@given(sigma=st.floats(0.09, 3.0), k=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1))
def test_no_gradient_shape_moves_more_mass_past_the_bound_than_the_step_bound(sigma, k, seed):
    """Random clipped gradients over k coordinates (L2 norm 1, i.e. C), including one-hot and even spreads."""
    rng = np.random.default_rng(seed)
    shape = np.abs(rng.standard_normal(k)) ** rng.uniform(0.5, 6.0)
    shifts = shape / np.linalg.norm(shape) / sigma
    bound = _gaussian_step_mass(1 / sigma, B)
    assert _excess(shifts) <= bound
    assert _excess(np.full(k, 1 / (sigma * math.sqrt(k)))) <= bound
    assert _excess(np.array([1 / sigma])) <= bound


@settings(max_examples=60, deadline=None)
@given(sigma=st.floats(0.05, 5.0), k=st.integers(1, 1000), seed=st.integers(0, 2**32 - 1))
def test_for_laplace_noise_one_coordinate_taking_the_whole_l1_norm_is_the_worst(sigma, k, seed):
    rng = np.random.default_rng(seed)
    shifts = rng.dirichlet(np.ones(k)) / sigma                              # L1 norm C, in units of b
    lap = LAPLACE_DRAW_BOUND
    spread = float(np.sum(0.5 * np.exp(-lap) * np.expm1(shifts)))           # P(bound - a < Z <= bound), per coordinate
    one = accounting.bounded_noise_delta(noise="laplace", noise_multiplier=sigma, sample_rate=1.0, steps=1, bound=lap)
    assert spread <= one * (1 + 1e-9)


def test_the_delta_paid_falls_with_the_noise_and_is_all_of_it_where_one_unit_outruns_every_draw():
    def paid(sigma: float, noise: str = "gaussian") -> float:
        return accounting.bounded_noise_delta(noise=noise, noise_multiplier=sigma, sample_rate=0.05, steps=500,
                                              bound=B if noise == "gaussian" else LAPLACE_DRAW_BOUND)
    sigmas = [1e-6, 0.01, 0.1, 0.12, 0.15, 0.2, 0.5, 1.0, 5.0]
    gaussian = [paid(s) for s in sigmas]
    assert gaussian == sorted(gaussian, reverse=True)
    assert gaussian[0] == gaussian[1] == 1.0                  # the high-budget regime: no claim survives
    assert gaussian[-3] < 1e-20                               # sigma 0.5: below float64's resolution of 1e-5
    laplace = [paid(s, "laplace") for s in sigmas]
    assert laplace == sorted(laplace, reverse=True) and laplace[0] == 1.0
    assert 0 < laplace[-2] < 1e-14                            # b = C: about T q e^(1 - bound) / 2
    assert accounting.bounded_noise_delta(noise="gaussian", noise_multiplier=0.1, sample_rate=0.05, steps=0,
                                          bound=B) == 0.0


def test_a_clipped_pixel_is_void_where_its_noise_cannot_span_the_range():
    assert accounting.laplace_end_excess(ratio=LAPLACE_DRAW_BOUND, bound=LAPLACE_DRAW_BOUND) == math.inf
    assert accounting.laplace_end_excess(ratio=2.0, bound=LAPLACE_DRAW_BOUND) == pytest.approx(
        math.exp(2.0 - LAPLACE_DRAW_BOUND), rel=1e-9, abs=0)                # 1.7e-15: no absolute slack
    # by hand: P(pixel at R -> R) = 1/2; P(pixel at 0 -> R) = (e^-r - e^-bound) / 2 for the bounded sampler
    r = 30.0
    ratio = 0.5 / (0.5 * (math.exp(-r) - math.exp(-LAPLACE_DRAW_BOUND)))
    assert r + accounting.laplace_end_excess(ratio=r, bound=LAPLACE_DRAW_BOUND) == pytest.approx(math.log(ratio))
    assert accounting.gaussian_end_shortfall(ratio=B, bound=B) == 1.0
    assert accounting.gaussian_end_shortfall(ratio=3.0, bound=B) == pytest.approx(norm.sf(B) / norm.sf(3.0), rel=1e-9,
                                                                                  abs=0)


def test_near_the_bound_the_end_corrections_are_their_closed_forms():
    """Where the corrections are large enough to read (above, at R / b = 30 and R / s = 3, they are 1e-3 and 1e-31,
    inside any default tolerance): one scale below the bound, the Laplace ratio grows by 1 / (1 - e^-1), its log
    0.458675; half a std below it, the Gaussian sampler misses Q(B) / Q(B - 1/2) of the end mass."""
    L = LAPLACE_DRAW_BOUND
    assert accounting.laplace_end_excess(ratio=L - 1, bound=L) == pytest.approx(-math.log(1 - math.exp(-1)),
                                                                                 rel=1e-12, abs=0)
    assert accounting.gaussian_end_shortfall(ratio=B - 0.5, bound=B) == pytest.approx(
        norm.sf(B) / norm.sf(B - 0.5), rel=1e-9, abs=0)


def test_a_groups_share_mixes_the_shifts_of_j_sampled_units_by_their_binomial_weights():
    """k = 2 images of one patient: one sampled (probability 2 q (1 - q)) shifts by 1/sigma, both (q^2) by 2/sigma;
    understating either weight would understate the delta of the patient's tight group value."""
    sigma, q, steps = 0.5, 0.1, 100
    m1, m2 = _gaussian_step_mass(1 / sigma, B), _gaussian_step_mass(2 / sigma, B)
    assert 0 < m1 < m2 < 1
    got = accounting.bounded_noise_delta(noise="gaussian", noise_multiplier=sigma, sample_rate=q, steps=steps,
                                         bound=B, group=2)
    assert got == pytest.approx(steps * (2 * q * (1 - q) * m1 + q * q * m2), rel=1e-12, abs=0)


def test_the_laplace_share_is_the_closed_form_by_hand():
    """One unit shifts Laplace noise by 1/sigma = 1 scale: it moves P(L - 1 < Z <= L) = e^-L (e - 1) / 2 past the
    bound L in a step that samples it (probability q), T steps."""
    bound = 20.0
    got = accounting.bounded_noise_delta(noise="laplace", noise_multiplier=1.0, sample_rate=0.05, steps=500,
                                         bound=bound)
    assert got == pytest.approx(500 * 0.05 * 0.5 * math.exp(-bound) * (math.e - 1), rel=1e-9, abs=0)


def test_above_sigma_six_no_coordinate_moves_a_fifth_of_a_std_and_the_share_keeps_falling():
    """From sigma about 6 on one unit moves no coordinate by more than 0.165 std, and the step bound is the spread
    term alone: far below any delta, and falling with the noise like every other sigma's share. It is no smaller than
    the one-coordinate excess (by hand), nor than the excess of a gradient spread evenly over 1e12 coordinates, more
    than any model dpmed trains has: n P(B - A / sqrt(n) < Z <= B) worked in 50 digits, which a bound using the
    density at B itself, or fewer coordinates, falls below."""
    import mpmath

    mpmath.mp.dps = 50
    q, steps = 0.05, 500
    sigmas = [5.0, 6.5, 10.0, 100.0]
    paid = [accounting.bounded_noise_delta(noise="gaussian", noise_multiplier=s, sample_rate=q, steps=steps, bound=B)
            for s in sigmas]
    assert paid == sorted(paid, reverse=True) and 0 < paid[-1] and paid[1] < 1e-20
    n = mpmath.mpf(10) ** 12
    for sigma, share in zip(sigmas, paid, strict=True):
        a = mpmath.mpf(1) / sigma

        def past(shift):        # P(B - shift < Z <= B), from the upper tails: no cancellation against 1
            return mpmath.ncdf(shift - B) - mpmath.ncdf(-B)
        one_hot, spread = past(a), n * past(a / mpmath.sqrt(n))
        assert steps * q * max(one_hot, spread) <= share


@pytest.mark.parametrize("argument, value", [
    ("steps", -1), ("steps", 2.0), ("group", 0), ("bound", 0.0), ("bound", math.inf), ("noise_multiplier", 0.0),
    ("noise_multiplier", -0.5), ("sample_rate", 0.0), ("sample_rate", 1.5), ("noise", "uniform"),
])
def test_the_delta_paid_refuses_impossible_arguments_by_name(argument, value):
    """A negative step count would pay a negative delta, a group of 0 none at all: each is refused, naming it."""
    args = dict(noise="gaussian", noise_multiplier=0.5, sample_rate=0.05, steps=10, bound=B, group=1)
    args[argument] = value
    with pytest.raises(ValueError, match=argument):
        accounting.bounded_noise_delta(**args)


def test_the_delta_paid_takes_the_edges_of_its_arguments():
    """No steps pay nothing; a rate of 1 samples the unit in every step: T times the one-step mass."""
    args = dict(noise="laplace", noise_multiplier=1.0, bound=20.0)
    assert accounting.bounded_noise_delta(**args, sample_rate=1.0, steps=0) == 0.0
    one_step = 0.5 * math.exp(-20.0) * (math.e - 1)                  # P(19 < Z <= 20), Z Laplace(1), by hand
    assert accounting.bounded_noise_delta(**args, sample_rate=1.0, steps=3) == pytest.approx(3 * one_step, rel=1e-9)


@pytest.mark.parametrize("function", [accounting.laplace_end_excess, accounting.gaussian_end_shortfall])
@pytest.mark.parametrize("ratio", [0.0, -1.0, math.nan])
def test_the_end_corrections_refuse_a_ratio_that_is_not_positive(function, ratio):
    with pytest.raises(ValueError, match="ratio"):
        function(ratio=ratio, bound=B)
