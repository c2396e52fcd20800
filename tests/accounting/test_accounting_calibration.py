"""Noise calibration: never overshoots, nearly tight, robust from eps 0.1 to 1e15."""

from __future__ import annotations

import dataclasses
import math

import pytest
from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.accounting import (ACCOUNTANTS, accountant_info, dp_sgd_epsilon, effective_accountant,
                              noise_multiplier_for)
from dpmed.accounting.calibration import _bracket

GAUSSIAN = [a for a in ACCOUNTANTS if "gaussian" in accountant_info(a).noises]  # Laplace-only ones excluded

RTOL = 1e-3


def assert_calibrated(target, q, steps, delta, accountant, rtol=RTOL):
    sigma = noise_multiplier_for(target_epsilon=target, delta=delta, sample_rate=q, steps=steps,
                                 accountant=accountant, rtol=rtol)
    args = dict(sample_rate=q, steps=steps, delta=delta, accountant=accountant)
    assert dp_sgd_epsilon(noise_multiplier=sigma, **args) <= target  # never overshoots
    assert dp_sgd_epsilon(noise_multiplier=sigma * (1 - 2 * rtol), **args) > target  # and is nearly the smallest
    return sigma


@settings(max_examples=25, deadline=None)
@given(log_target=st.floats(math.log(0.1), math.log(100.0)), q=st.floats(1e-3, 1.0), steps=st.integers(1, 3000),
       accountant=st.sampled_from(GAUSSIAN))
def test_calibrated_sigma_meets_the_target_and_is_nearly_tight(log_target, q, steps, accountant):
    assert_calibrated(math.exp(log_target), q, steps, 1e-5, accountant)


def test_reference_setting_round_trips():
    """q = 128/5218, T = 2039, delta = 1e-4: the PLD eps of sigma = 5.002 is about 0.687; calibrating back to that
    eps gives sigma = 5.002 within the tolerance."""
    target = dp_sgd_epsilon(noise_multiplier=5.002, sample_rate=128 / 5218, steps=2039, delta=1e-4)
    sigma = assert_calibrated(target, 128 / 5218, 2039, 1e-4, "pld")
    assert sigma == pytest.approx(5.002, rel=2 * RTOL)


@pytest.mark.parametrize("target", [1e3, 1e6, 1e10, 1e15])
def test_high_budgets_calibrate_without_overflow_under_rdp(target):
    """The 004_6210268d59b6f8e5.txt regime: sigma shrinks roughly as eps^(-1/2) and the search runs in log sigma."""
    sigma = assert_calibrated(target, 0.25, 300, 1e-5, "rdp")
    assert 0 < sigma < 1


@settings(max_examples=12, deadline=None)
@given(log_target=st.floats(math.log(0.1), math.log(1e15)), q=st.floats(1e-3, 1.0), steps=st.integers(1, 3000))
def test_calibration_never_overshoots_anywhere_from_0_1_to_1e15(log_target, q, steps):
    """The whole range of METHODS.md s.2, through the accountant a study would pick (PLD, RDP above 500)."""
    target = math.exp(log_target)
    assert_calibrated(target, q, steps, 1e-5, effective_accountant("pld", target_epsilon=target)[0])


def test_pld_calibrates_up_to_its_limit_and_points_to_rdp_beyond():
    assert_calibrated(450.0, 128 / 5218, 2039, 1e-5, "pld")
    for target in (1e3, 1e15):
        with pytest.raises(ValueError, match="accountant='rdp'"):
            noise_multiplier_for(target_epsilon=target, delta=1e-5, sample_rate=0.25, steps=300, accountant="pld")


def test_pld_s_limit_itself_is_a_budget_pld_calibrates_and_a_hair_above_it_goes_to_rdp():
    """500 is the largest eps PLD certifies: a target of exactly 500 is calibrated by PLD (q = 1, T = 1: the Gaussian
    mechanism, sigma about 0.036), and the plan names PLD; just above 500 both point to RDP."""
    sigma = noise_multiplier_for(target_epsilon=500.0, delta=1e-5, sample_rate=1.0, steps=1, accountant="pld")
    assert 0.03 < sigma < 0.04
    assert dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=1.0, steps=1, delta=1e-5) <= 500.0
    assert effective_accountant("pld", target_epsilon=500.0) == ("pld", None)
    assert effective_accountant("pld", target_epsilon=500.001)[0] == "rdp"
    with pytest.raises(ValueError, match="accountant='rdp'"):
        noise_multiplier_for(target_epsilon=500.001, delta=1e-5, sample_rate=1.0, steps=1, accountant="pld")


def test_looser_tolerance_is_still_safe():
    assert_calibrated(2.0, 0.01, 1000, 1e-5, "pld", rtol=0.05)


@pytest.mark.parametrize("argument, value", [
    ("target_epsilon", 0.0), ("target_epsilon", -1.0), ("target_epsilon", math.inf), ("target_epsilon", True),
    ("delta", 0.0), ("delta", 1.0), ("sample_rate", 0.0), ("sample_rate", 2.0),
    ("steps", 0), ("steps", 1.5), ("accountant", "gdp"), ("rtol", 0.0), ("rtol", 0.9), ("rtol", 0.5),
    ("rtol", "1e-3"), ("sample_rate", 1 + 2 ** -52),
])
def test_invalid_arguments_name_the_argument(argument, value):
    args = dict(target_epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=100, accountant="pld", rtol=1e-3)
    args[argument] = value
    with pytest.raises(ValueError, match=argument):
        noise_multiplier_for(**args)


# The search on its own, against synthetic eps curves (cheap, so many examples).

@settings(max_examples=200, deadline=None)
@given(root=st.floats(-25.0, 25.0), power=st.floats(0.2, 4.0), log_target=st.floats(-20.0, 20.0),
       x0=st.floats(-5.0, 5.0), tol=st.sampled_from([1e-6, 1e-3, 0.05]))
def test_search_brackets_any_power_law(root, power, log_target, x0, tol):
    def eps_at(sigma):  # eps = target exactly at log(sigma) = root
        return math.exp(log_target - power * (math.log(sigma) - root))

    target = math.exp(log_target)
    lo, hi = _bracket(eps_at, target=target, x0=x0, slope=-1.0, tol=tol)
    assert 0 < hi.x - lo.x <= tol
    assert eps_at(hi.sigma) <= target < eps_at(lo.sigma)


@settings(max_examples=100, deadline=None)
@given(root=st.floats(-10.0, 10.0), wiggle=st.floats(0.0, 0.3), tol=st.sampled_from([1e-4, 1e-2]))
def test_search_never_returns_a_point_above_target_even_on_a_rough_curve(root, wiggle, tol):
    """Infinite and zero eps, plateaus and non-monotone wiggles: the returned upper end was evaluated at or below the
    target, the lower end above it."""
    def eps_at(sigma):
        x = math.log(sigma)
        if x < root - 3:
            return math.inf
        if x > root + 3:
            return 0.0
        return math.exp(-(x - root) + wiggle * math.sin(40 * x))

    lo, hi = _bracket(eps_at, target=1.0, x0=0.0, slope=-1.0, tol=tol)
    assert hi.x - lo.x <= tol
    assert eps_at(hi.sigma) <= 1.0 < eps_at(lo.sigma)


def _rdp_epsilon_by_dp_accounting(sigma, q, steps, delta):
    """dp_accounting's RDP accountant called directly, not through dpmed."""
    accountant = rdp_privacy_accountant.RdpAccountant(neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps))
    return accountant.get_epsilon(delta)


def test_below_pld_s_delta_floor_calibration_refuses_pld_and_falls_back_to_rdp():
    """Before: at delta = 1e-15 PLD calibration returned sigma = 766653 with eps 0.0005 for a target of 1 (PLD
    returned inf, read as "above target", until a sigma where its tail mass rounded to exactly 1e-15). Now PLD is
    refused for the real cause, the effective accountant falls back to RDP, and RDP's sigma is checked against
    dp_accounting's RDP accountant directly: it meets the target and a slightly smaller one does not."""
    q, steps, delta = 0.089, 88, 1e-15
    with pytest.raises(ValueError, match=r"cannot resolve delta = 1e-15.*accountant 'rdp'.*at least 1e-12"):
        noise_multiplier_for(target_epsilon=1.0, delta=delta, sample_rate=q, steps=steps, accountant="pld")
    name, note = effective_accountant("pld", target_epsilon=1.0, delta=delta, steps=steps)
    assert name == "rdp" and "cannot resolve delta below 1e-12" in note
    assert effective_accountant("pld", target_epsilon=1.0, delta=1e-12, steps=steps) == ("pld", None)
    assert effective_accountant("pld", target_epsilon=1.0, noise="laplace", delta=delta, steps=steps)[0] == "pure"
    sigma = noise_multiplier_for(target_epsilon=1.0, delta=delta, sample_rate=q, steps=steps, accountant=name)
    assert _rdp_epsilon_by_dp_accounting(sigma, q, steps, delta) <= 1.0
    assert _rdp_epsilon_by_dp_accounting(sigma * (1 - 2 * RTOL), q, steps, delta) > 1.0
    assert 5 < sigma < 10


def test_a_delta_no_smaller_than_the_chance_of_being_drawn_is_refused_with_the_reason():
    """q = 0.5, T = 2: an example is drawn into some batch with chance 0.75, so at delta 0.9 every noise gives eps 0
    (PLD agrees wherever it resolves). The search once returned sigma = 1.7e-4 "(eps = 0 <= target 1)", the edge
    below which PLD resolves nothing; then it refused after 40-50 s of PLD evaluations at tiny noise."""
    with pytest.raises(ValueError, match=r"delta = 0.9 is at least the chance \(0.75\) that an example is drawn"):
        noise_multiplier_for(target_epsilon=1.0, delta=0.9, sample_rate=0.5, steps=2, accountant="pld")


def test_calibration_never_returns_the_edge_of_what_the_accountant_resolves_as_an_answer(monkeypatch):
    """An accountant that resolves nothing (inf) below some sigma and gives 0 above it: the search must not read inf
    as "above the target" and return that edge. dp_accounting's PLD did so at q = 0.5, T = 2, delta = 0.9 (now
    refused before any search, above); a stand-in keeps the guard tested."""
    from dpmed.accounting import calibration

    real = accountant_info("pld")
    edge = dataclasses.replace(real, compute=lambda events, delta: (
        math.inf if events[0].noise_multiplier < 1.7e-4 else 0.0))
    monkeypatch.setattr(calibration, "accountant_info", lambda name, noise=None: edge)
    with pytest.raises(ValueError, match="stops resolving eps, not at the target"):
        noise_multiplier_for(target_epsilon=1.0, delta=1e-5, sample_rate=0.5, steps=2, accountant="pld")


def test_the_search_refuses_a_nan_rather_than_take_it_for_a_met_target():
    """nan compares as "not above the target": taken as a met target, the search would return a sigma whose eps no
    one knows. Here the accountant resolves eps = 1/sigma up to sigma 1.5 and nothing above, and the target needs 10."""
    def eps_at(sigma):
        return 1 / sigma if sigma < 1.5 else math.nan

    with pytest.raises(ValueError, match="returned nan"):
        _bracket(eps_at, target=0.1, x0=0.0, slope=-1.0, tol=1e-3)


@pytest.mark.parametrize("eps, problem", [(1e30, "no noise multiplier up to 1e12 meets it"),
                                          (0.0, "every noise multiplier down to 1e-12 meets it")])
def test_the_search_stops_at_the_ends_of_its_range_and_says_which(eps, problem):
    with pytest.raises(ValueError, match=problem):
        _bracket(lambda sigma: eps, target=1.0, x0=0.0, slope=-1.0, tol=1e-3)


@pytest.mark.parametrize("accountant, noise", [("pure", "gaussian"), ("rdp", "laplace"), ("rdp-classic", "laplace")])
def test_calibration_refuses_an_accountant_that_does_not_analyse_the_noise(accountant, noise):
    """The pure bound holds for Laplace noise only and RDP for Gaussian noise only: asked for the other, calibration
    names the pair up front instead of searching with the wrong analysis."""
    with pytest.raises(ValueError, match=rf"accountant '{accountant}' does not analyse {noise} noise; .* For {noise} "
                       "noise use '"):
        noise_multiplier_for(target_epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=100, accountant=accountant,
                             noise=noise)


@pytest.mark.parametrize("target, delta, accountant", [(0.05, 1e-12, "pld"), (0.1, 1e-15, "rdp"),
                                                       (0.1, 1e-15, "rdp-classic")])
def test_a_small_target_at_a_small_delta_is_calibrated_where_the_rough_estimate_never_reaches_it(target, delta,
                                                                                                 accountant):
    """The rough RDP estimate that seeds the search reads orders up to 256 only, so at a small delta it stays above
    log(1/delta) / 255 however large sigma is (0.08 at delta 1e-12). Calibration refused such targets ("no noise
    multiplier up to 1e12 meets it") although the accountant itself gives 0.02 at sigma 30 (PLD, delta 1e-12)."""
    assert_calibrated(target, 0.01, 100, delta, accountant)


def test_a_target_below_what_the_accountant_reaches_at_any_noise_is_refused_with_its_own_eps():
    """RDP's eps at delta 1e-15 does not fall below about log(1/delta) / (largest order - 1) = 0.026 however large
    sigma is: a target of 0.02 has no sigma, and the message gives the accountant's eps, not the rough estimate's."""
    with pytest.raises(ValueError, match=r"target_epsilon = 0.02: no noise multiplier up to 1e12 meets it "
                                         r"\(eps = 0.0260\d* at sigma = 1e\+12\): that is RDP's floor at delta = "
                                         r"1e-15, which more noise does not lower .*; use accountant 'pld', which goes "
                                         r"lower, or a larger target_epsilon or delta$") as error:
        noise_multiplier_for(target_epsilon=0.02, delta=1e-15, sample_rate=0.01, steps=100, accountant="rdp")
    assert type(error.value) is ValueError            # the documented plain ValueError, not the search's own
