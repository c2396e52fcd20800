"""Laplace DP-SGD, the classic RDP conversion, Gaussian pixel noise and the high-budget fallback, each checked
against an independent computation (a closed form, a second library path, or a bound that must hold)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import fftconvolve

from dpmed.accounting import (GaussianImageEvent, Ledger, PoissonLaplaceEvent, dp_sgd_epsilon, effective_accountant,
                              event_from_dict, event_to_dict, fallback_accountant, gaussian_epsilon,
                              gaussian_image_epsilon, gaussian_std_for_image, laplace_scale_for_image, ledger_epsilon,
                              noise_multiplier_for)

REFERENCE = dict(noise_multiplier=5.002, sample_rate=128 / 5218, steps=2039, delta=1e-4)


def test_classic_rdp_conversion_reproduces_the_published_figure():
    """000_56c2431ae4df8d10.txt printed 0.994 for this setting (METHODS.md s.3); classic >= improved >= PLD."""
    classic = dp_sgd_epsilon(**REFERENCE, accountant="rdp-classic")
    assert classic == pytest.approx(0.994, abs=0.002)
    assert classic >= dp_sgd_epsilon(**REFERENCE, accountant="rdp") >= dp_sgd_epsilon(**REFERENCE, accountant="pld")


def pure_bound(b, q, steps):
    return steps * math.log1p(q * math.expm1(1 / b))


@settings(max_examples=15, deadline=None)
@given(b=st.floats(0.5, 20.0), q=st.floats(0.001, 1.0), steps=st.integers(1, 500))
def test_laplace_pld_never_exceeds_the_pure_dp_bound(b, q, steps):
    """Pure eps0-DP is (eps0, 0)-DP, so the PLD eps at any delta > 0 is at most the pure bound (+ grid slack)."""
    pld = dp_sgd_epsilon(noise_multiplier=b, sample_rate=q, steps=steps, delta=1e-5, noise="laplace")
    pure = dp_sgd_epsilon(noise_multiplier=b, sample_rate=q, steps=steps, delta=1e-5, noise="laplace",
                          accountant="pure")
    assert pure == pytest.approx(pure_bound(b, q, steps), rel=1e-12)
    assert pld <= pure * (1 + 1e-3) + 1e-9


def test_full_batch_laplace_is_the_laplace_mechanism():
    """q = 1, one step: the Laplace mechanism with scale b is exactly (1/b)-DP, delta(eps) = 0 from there on.
    The pessimistic PLD grid may only overstate it, by at most one grid interval (1e-4 of eps at one step)."""
    for b in (0.5, 2.0, 10.0):
        eps = dp_sgd_epsilon(noise_multiplier=b, sample_rate=1.0, steps=1, delta=1e-12, noise="laplace")
        assert 1 / b * (1 - 1e-9) <= eps <= 1 / b * 1.001


def test_laplace_pld_matches_a_direct_dp_accounting_construction():
    """The second path of METHODS.md s.2: from_laplace_mechanism(b, sampling_prob=q).self_compose(T)."""
    b, q, steps = 4.0, 0.05, 200
    pld = privacy_loss_distribution.from_laplace_mechanism(b, sensitivity=1.0, sampling_prob=q,
                                                           value_discretization_interval=1e-4).self_compose(steps)
    direct = pld.get_epsilon_for_delta(1e-5)
    ours = dp_sgd_epsilon(noise_multiplier=b, sample_rate=q, steps=steps, delta=1e-5, noise="laplace")
    assert ours == pytest.approx(direct, rel=5e-3)
    assert ours >= direct * (1 - 1e-3)  # pessimistic: not below the finer computation


@pytest.mark.parametrize("b", [0.5, 2.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 0.05, 0.3])
def test_one_full_batch_laplace_step_follows_its_closed_form_privacy_curve(b, delta):
    """The Laplace mechanism of sensitivity 1 and scale b has delta(eps) = 1 - e^((eps - 1/b) / 2) below 1/b (the
    hockey-stick divergence integrated by hand), so eps(delta) = 1/b + 2 log(1 - delta): the whole curve, not only
    its end at 1/b (and 0 from delta = 1 - e^(-1/(2b)) on), and the pessimistic grid may only overstate it."""
    exact = max(0.0, 1 / b + 2 * math.log1p(-delta))       # 0 once delta covers the total variation distance
    eps = dp_sgd_epsilon(noise_multiplier=b, sample_rate=1.0, steps=1, delta=delta, noise="laplace")
    assert exact <= eps <= exact + 1e-3 / b


def _laplace_loss_pmf(b: float, q: float, h: float, down: bool, cells: int = 100_000) -> tuple[np.ndarray, int]:
    """The privacy loss log(P / Q) of one step, P = (1 - q) Lap(0, b) + q Lap(1, b) (the unit removed), Q = Lap(0, b),
    under P, on the grid h Z: atoms where |x| - |x - 1| is -1 (x <= 0) or 1 (x >= 1), in between (where the loss rises
    with x) cells of exact mass each put at its left (``down``) or right end's loss, rounded down or up to the grid.
    Losses only lowered (raised) make every composition's delta(eps) a lower (upper) bound of the exact one."""
    def cdf(x):
        def one(m):
            return np.where(x < m, 0.5 * np.exp((x - m) / b), 1 - 0.5 * np.exp(-(x - m) / b))
        return (1 - q) * one(0.0) + q * one(1.0)

    def loss(x):
        return np.log1p(q * np.expm1((np.abs(x) - np.abs(x - 1)) / b))
    xs = np.linspace(0.0, 1.0, cells + 1)
    losses = np.concatenate([loss(np.array([-1.0])), loss(xs[:-1] if down else xs[1:]), loss(np.array([2.0]))])
    mass = np.concatenate([cdf(np.array([0.0])), np.diff(cdf(xs)), 1 - cdf(np.array([1.0]))])
    k = (np.floor(losses / h) if down else np.ceil(losses / h)).astype(np.int64)
    return np.bincount(k - k.min(), weights=mass), int(k.min())


def _composed_epsilon(b: float, q: float, steps: int, delta: float, h: float, down: bool) -> float:
    """eps(delta) of ``steps`` such steps: the loss PMF convolved with itself (numpy's FFT, by repeated squaring),
    delta(eps) = sum over losses L > eps of p(L) (1 - e^(eps - L)), inverted by bisection."""
    pmf, low = _laplace_loss_pmf(b, q, h, down)
    total, total_low, n = np.array([1.0]), 0, steps
    while n:
        if n & 1:
            total, total_low = np.clip(fftconvolve(total, pmf), 0, None), total_low + low
        n >>= 1
        if n:
            pmf, low = np.clip(fftconvolve(pmf, pmf), 0, None), 2 * low
    losses = (np.arange(len(total)) + total_low) * h

    def delta_at(eps):
        above = losses > eps
        return float(np.sum(total[above] * -np.expm1(eps - losses[above])))
    lo, hi = 0.0, float(losses[-1])
    for _ in range(60):
        lo, hi = (lo, (lo + hi) / 2) if delta_at((lo + hi) / 2) <= delta else ((lo + hi) / 2, hi)
    return hi


@pytest.mark.parametrize("b, steps, delta", [(2.0, 10, 1e-5), (5.0, 50, 1e-5), (0.5, 3, 1e-3)])
def test_full_batch_laplace_steps_compose_as_a_numerical_convolution_brackets_them(b, steps, delta):
    """q = 1, T > 1: T Laplace mechanisms, whose exact eps lies between those of the loss rounded down and up on a
    grid of 1e-4 (pair symmetric: one direction is both). dpmed's eps may not fall below the lower end and stays
    within its pessimistic grid's 1e-3 of the upper one (b = 2, T = 10: 4.98996 <= 4.989963 <= 4.98997)."""
    lower = _composed_epsilon(b, 1.0, steps, delta, 1e-4, down=True)
    upper = _composed_epsilon(b, 1.0, steps, delta, 1e-4, down=False)
    eps = dp_sgd_epsilon(noise_multiplier=b, sample_rate=1.0, steps=steps, delta=delta, noise="laplace")
    assert lower <= eps <= upper * (1 + 1e-3)
    assert upper - lower < 1e-3


@pytest.mark.parametrize("b, q, steps, delta", [(2.0, 0.1, 100, 1e-5), (0.5, 0.3, 20, 1e-6), (10.0, 0.05, 200, 1e-5)])
def test_subsampled_laplace_eps_is_never_below_a_lower_bound_by_hand(b, q, steps, delta):
    """q < 1: the remove direction alone, its losses rounded down on a grid of 2e-3 / T, bounds the add/remove eps
    from below (b = 2, q = 0.1, T = 100: 1.8909 against dpmed's 1.8926; the pure bound is 6.29). dpmed's eps may not
    fall below it, and lands within 1% of it (what the rounding down and the other direction leave)."""
    lower = _composed_epsilon(b, q, steps, delta, 2e-3 / steps, down=True)
    eps = dp_sgd_epsilon(noise_multiplier=b, sample_rate=q, steps=steps, delta=delta, noise="laplace")
    assert lower <= eps <= lower * 1.01


@pytest.mark.parametrize("accountant", ["rdp", "rdp-classic"])
def test_rdp_refuses_laplace_noise_with_a_pointer(accountant):
    with pytest.raises(ValueError, match="'pld' or 'pure'"):
        dp_sgd_epsilon(noise_multiplier=2.0, sample_rate=0.1, steps=10, delta=1e-5, noise="laplace",
                       accountant=accountant)


@settings(max_examples=10, deadline=None)
@given(log_target=st.floats(math.log(0.1), math.log(50.0)), q=st.floats(0.005, 1.0), steps=st.integers(1, 1000),
       accountant=st.sampled_from(["pld", "pure"]))
def test_laplace_calibration_never_overshoots(log_target, q, steps, accountant):
    target = math.exp(log_target)
    b = noise_multiplier_for(target_epsilon=target, delta=1e-5, sample_rate=q, steps=steps, noise="laplace",
                             accountant=accountant)
    args = dict(sample_rate=q, steps=steps, delta=1e-5, noise="laplace", accountant=accountant)
    assert dp_sgd_epsilon(noise_multiplier=b, **args) <= target
    assert dp_sgd_epsilon(noise_multiplier=b * (1 - 2e-3), **args) > target


def test_laplace_events_round_trip_and_compose_separately_from_gaussian():
    event = PoissonLaplaceEvent(noise_multiplier=3.0, sample_rate=0.1, steps=7)
    assert event_from_dict(event_to_dict(event)) == event
    ledger = Ledger().record(event).record(PoissonLaplaceEvent(noise_multiplier=3.0, sample_rate=0.1, steps=3))
    assert ledger.events == (PoissonLaplaceEvent(noise_multiplier=3.0, sample_rate=0.1, steps=10),)
    assert ledger_epsilon(ledger, delta=1e-5) == dp_sgd_epsilon(noise_multiplier=3.0, sample_rate=0.1, steps=10,
                                                                delta=1e-5, noise="laplace")


@pytest.mark.parametrize("mu", [0.3, 1.0, 4.0, 12.0])
def test_gaussian_epsilon_matches_the_analytic_formula_and_the_pld(mu, exact_gaussian_epsilon):
    ours = gaussian_epsilon(mu=mu, delta=1e-5)
    assert ours == pytest.approx(exact_gaussian_epsilon(mu, 1e-5), rel=1e-8)
    pld = privacy_loss_distribution.from_gaussian_mechanism(1 / mu, value_discretization_interval=1e-3)
    assert ours == pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=1e-4)


def test_gaussian_pixel_noise_at_image_level_works_far_beyond_the_pld_limit():
    """64x64 grey at s = 0.5: mu = 128, eps ~ 8,737, where the PLD's double precision has long given out."""
    event = GaussianImageEvent(std=0.5, value_range=1.0, dimension=64 * 64)
    eps = gaussian_image_epsilon(event, delta=1e-5)
    assert 128 ** 2 / 2 < eps < 128 ** 2 / 2 + 128 * 6  # mu^2/2 + mu * z_(1-delta) roughly
    assert math.isfinite(eps)


@settings(max_examples=25, deadline=None)
@given(log_eps=st.floats(math.log(0.1), math.log(1e6)), dimension=st.integers(1, 224 * 224 * 3))
def test_gaussian_std_round_trips_and_never_overshoots(log_eps, dimension):
    target = math.exp(log_eps)
    std = gaussian_std_for_image(epsilon_image=target, delta=1e-5, dimension=dimension, value_range=1.0)
    event = GaussianImageEvent(std=std, value_range=1.0, dimension=dimension)
    eps = gaussian_image_epsilon(event, delta=1e-5)
    assert eps <= target and eps == pytest.approx(target, rel=1e-6)


def test_laplace_scale_for_an_image_budget():
    assert laplace_scale_for_image(epsilon_image=150_528, dimension=224 * 224 * 3, value_range=1.0) == 1.0


def test_pld_hands_high_budgets_to_rdp_and_says_so():
    assert effective_accountant("pld", target_epsilon=8.0) == ("pld", None)
    for target in (1e6, 1e9, 1e12, 1e15):
        name, note = effective_accountant("pld", target_epsilon=target)
        assert name == "rdp" and "500" in note
        sigma = noise_multiplier_for(target_epsilon=target, delta=1e-5, sample_rate=0.25, steps=300, accountant=name)
        assert dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=0.25, steps=300, delta=1e-5,
                              accountant=name) <= target
    assert effective_accountant("pld", target_epsilon=1e9, noise="laplace")[0] == "pure"
    with pytest.raises(ValueError, match="laplace"):
        effective_accountant("rdp", target_epsilon=1.0, noise="laplace")


def test_planning_for_an_unknown_noise_names_the_noises_there_are():
    """Before: "accountant 'pld' does not analyse uniform noise; ... For uniform noise use " and nothing after."""
    with pytest.raises(ValueError, match=r"noise must be one of gaussian, laplace, got 'uniform'$"):
        effective_accountant("pld", target_epsilon=1.0, noise="uniform")


def test_the_pure_bound_by_hand_also_where_one_step_costs_more_than_30():
    """Sum over entries of T log(1 + q (e^(1/b) - 1)), worked in 50 digits: b = 1/40 (a per-step eps of 40, where
    e^(1/b) is rewritten to avoid overflow) at q = 1e-3 for 3 steps, then b = 2 at q = 0.1 for 5 steps. At q = 1 it
    is T / b exactly, with no amplification."""
    import mpmath

    mpmath.mp.dps = 50

    def by_hand(b, q, steps):
        return steps * mpmath.log(1 + mpmath.mpf(q) * mpmath.expm1(1 / mpmath.mpf(b)))

    ledger = Ledger().record(PoissonLaplaceEvent(noise_multiplier=1 / 40, sample_rate=1e-3, steps=3))
    ledger = ledger.record(PoissonLaplaceEvent(noise_multiplier=2.0, sample_rate=0.1, steps=5))
    assert len(ledger.events) == 2
    expected = by_hand(1 / 40, 1e-3, 3) + by_hand(2.0, 0.1, 5)
    assert ledger_epsilon(ledger, delta=1e-5, accountant="pure") == pytest.approx(float(expected), rel=1e-12)
    assert dp_sgd_epsilon(noise_multiplier=1 / 40, sample_rate=1.0, steps=3, delta=1e-5, noise="laplace",
                          accountant="pure") == pytest.approx(120.0, rel=1e-12)


def test_the_fallback_for_a_set_of_runs_serves_their_noise_or_none_for_both():
    """RDP analyses only Gaussian noise and the pure bound only Laplace noise: runs of both noises have no accountant
    to fall back on, and naming one would certify the other noise's runs with an analysis that does not hold."""
    assert fallback_accountant(["gaussian", "gaussian"]) == "rdp"
    assert fallback_accountant(iter(["laplace"])) == "pure"
    assert fallback_accountant(["gaussian", "laplace"]) is None
    assert fallback_accountant(["laplace", "gaussian", "laplace"]) is None
    assert fallback_accountant([]) is None


def test_laplace_eps_beyond_the_pld_names_the_pure_bound_not_rdp():
    """RDP refuses Laplace noise, so pointing a Laplace run beyond PLD's limit at it sends the user to a second
    refusal; the bound that certifies there, and the estimate printed, is the pure one (4769.75 here)."""
    with pytest.raises(ValueError, match="lies above 500") as caught:
        dp_sgd_epsilon(noise_multiplier=0.02, sample_rate=0.1, steps=100, delta=1e-5, noise="laplace")
    message = str(caught.value)
    assert "accountant='pure' has no such limit" in message and "rdp" not in message.lower()
    assert f"the pure-DP bound is eps ~ {pure_bound(0.02, 0.1, 100):.3g}" in message
