"""eps of DP-SGD: reference values, an independent exact truth, properties, and degenerate cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dpmed.accounting import (ACCOUNTANTS, NEIGHBOUR_DP_SGD, PoissonGaussianEvent, accountant_info, default_delta,
                              describe_accountant, dp_sgd_epsilon, dp_sgd_schedule)
from dpmed.accounting import PoissonLaplaceEvent
from dpmed.accounting import epsilon as epsilon_module
from dpmed.accounting._pld import subsampled_gaussian_pld
from dpmed.accounting.epsilon import _pld_epsilon, _rdp_epsilon

GAUSSIAN = [a for a in ACCOUNTANTS if "gaussian" in accountant_info(a).noises]  # Laplace-only ones excluded

# The setting of 000_56c2431ae4df8d10.txt (METHODS.md s.3).
REFERENCE = dict(noise_multiplier=5.002, sample_rate=128 / 5218, steps=2039, delta=1e-4)

sigmas = st.floats(0.6, 20.0)
rates = st.floats(1e-3, 1.0)
step_counts = st.integers(1, 2000)
deltas = st.sampled_from([1e-3, 1e-5, 1e-7])


def test_reference_values():
    assert dp_sgd_epsilon(**REFERENCE, accountant="pld") == pytest.approx(0.687, abs=1e-3)   # METHODS.md s.3
    assert dp_sgd_epsilon(**REFERENCE, accountant="rdp") == pytest.approx(0.770, abs=0.01)
    assert dp_sgd_epsilon(**REFERENCE) == dp_sgd_epsilon(**REFERENCE, accountant="pld")  # PLD is the default


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 5.0, 10.0])
@pytest.mark.parametrize("steps", [1, 4])
@pytest.mark.parametrize("delta", [1e-3, 1e-5])
def test_full_batch_is_the_exact_gaussian_mechanism(sigma, steps, delta, exact_gaussian_epsilon):
    """q = 1: every step is the Gaussian mechanism with sensitivity 1 and std sigma; T of them compose to one with
    std sigma / sqrt(T). PLD (pessimistic) may exceed the exact eps by its discretisation error, never undercut it;
    RDP is an upper bound too."""
    exact = exact_gaussian_epsilon(math.sqrt(steps) / sigma, delta)
    pld = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=1.0, steps=steps, delta=delta, accountant="pld")
    rdp = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=1.0, steps=steps, delta=delta, accountant="rdp")
    assert pld == pytest.approx(exact, rel=0.01)
    assert pld >= exact - 1e-9
    assert rdp >= exact - 1e-9


@pytest.mark.parametrize("q", [1 - 2 ** -53, 1 - 1e-13, 1 - 1e-10])
@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_rate_a_hair_below_one_is_accounted_as_one(q, accountant, exact_gaussian_epsilon):
    """dp_accounting's subsampled Gaussian PLD raised ("a must be greater than b") for 1 - q below about 1e-13 at
    sigma 0.3. Rounding such a rate up to 1 is sound (subsampling at a lower rate only amplifies): the eps is the
    exact Gaussian mechanism's, never less."""
    sigma, steps, delta = 0.3046875, 3, 1e-5
    eps = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta, accountant=accountant)
    assert eps == dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=1.0, steps=steps, delta=delta,
                                 accountant=accountant)
    assert eps >= exact_gaussian_epsilon(math.sqrt(steps) / sigma, delta) - 1e-9


@pytest.mark.parametrize("sigma, q, steps, delta", [
    (1.0, 0.01, 1000, 1e-5), (2.0, 0.1, 200, 1e-5), (5.002, 128 / 5218, 2039, 1e-4), (0.8, 0.05, 500, 1e-6),
    (3.0, 0.2, 50, 1e-5), (0.6, 0.001, 10000, 1e-5), (1.5, 0.8, 20, 1e-3), (10.0, 0.5, 3000, 1e-8)])
def test_pld_eps_lies_within_a_second_accountant_s_certified_bracket(sigma, q, steps, delta):
    """Against an implementation that shares no code with dp_accounting: Opacus's PRV accountant (Gopi, Lee, Wutschitz
    2021) brackets the true eps of the remove direction between certified bounds, here within 0.01 either side. The
    true eps of add/remove, dpmed's relation, is at least the remove direction's, so dpmed's eps must not fall below
    the lower bound (a claim too small); and at these settings the remove direction is the larger one, so it must not
    exceed the upper bound either (the pessimistic PLD's rounding is well inside 0.01). Settings from small to large
    q, delta and T, and 000_56c2431ae4df8d10.txt's."""
    import warnings

    from opacus.accountants import PRVAccountant

    prv = PRVAccountant()
    prv.history = [(sigma, q, steps)]          # (noise multiplier, sample rate, steps), as its step() records them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # its RDP-based domain sizing warns at the largest order
        low, _, high = prv._get_dprv(eps_error=0.01, delta_error=delta / 1000).compute_epsilon(delta, delta / 1000,
                                                                                                0.01)
    eps = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta, accountant="pld")
    assert low <= eps <= high, (low, eps, high)


@pytest.mark.parametrize("runs", [
    [(0.8703, 0.09143, 88), (3.491, 0.09143, 88)],                    # the quickstart's two DP-SGD runs
    [(1.0, 0.01, 1000), (2.0, 0.05, 300), (0.8, 0.02, 100)],
    [(2.446, 128 / 4708, 500), (0.730, 128 / 4708, 500)] * 3])        # PneumoniaMNIST's arms, three seeds
def test_a_study_s_runs_compose_within_a_second_accountant_s_certified_bracket(runs):
    """A study's total composes runs of other noise and rates on the same patients (`dpmed.budget`, through
    ledger_epsilon); Opacus's PRV accountant composes them heterogeneously without dp_accounting. Its certified
    bracket (0.01 either side) must hold dpmed's eps, as for one run above."""
    import warnings

    from opacus.accountants import PRVAccountant

    from dpmed.accounting import Ledger, ledger_epsilon

    prv = PRVAccountant()
    prv.history = list(runs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        low, _, high = prv._get_dprv(eps_error=0.01, delta_error=1e-8).compute_epsilon(1e-5, 1e-8, 0.01)
    ledger = Ledger(tuple(PoissonGaussianEvent(noise_multiplier=sigma, sample_rate=q, steps=steps)
                          for sigma, q, steps in runs))
    assert low <= ledger_epsilon(ledger, delta=1e-5) <= high, (low, high)


def within_pld_range(**args) -> bool:
    """Settings whose RDP eps is below 400 have PLD eps below its 500 limit."""
    return dp_sgd_epsilon(**args, accountant="rdp") < 400


@settings(max_examples=25, deadline=None)
@given(sigma=sigmas, q=rates, steps=step_counts, delta=deltas)
def test_pld_is_tighter_than_rdp(sigma, q, steps, delta):
    args = dict(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta)
    assume(within_pld_range(**args))
    assert dp_sgd_epsilon(**args, accountant="pld") <= dp_sgd_epsilon(**args, accountant="rdp")


@settings(max_examples=25, deadline=None)
@given(sigma=sigmas, factor=st.floats(1.01, 3.0), q=rates, steps=step_counts,
       accountant=st.sampled_from(GAUSSIAN))
def test_more_noise_gives_smaller_epsilon(sigma, factor, q, steps, accountant):
    args = dict(sample_rate=q, steps=steps, delta=1e-5)
    assume(within_pld_range(noise_multiplier=sigma, **args))
    assert (dp_sgd_epsilon(noise_multiplier=sigma * factor, **args, accountant=accountant)
            < dp_sgd_epsilon(noise_multiplier=sigma, **args, accountant=accountant))


@pytest.mark.parametrize("accountant", GAUSSIAN)
def test_more_steps_give_larger_epsilon(accountant):
    eps = [dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=t, delta=1e-5, accountant=accountant)
           for t in (1, 10, 100, 1000)]
    assert eps == sorted(eps) and len(set(eps)) == len(eps)


@pytest.mark.parametrize("q, steps", [(1.0, 1), (0.5, 2)])
def test_a_delta_that_covers_the_whole_difference_gives_zero_without_a_pld_grid(monkeypatch, q, steps):
    """At delta 0.9 the RDP bound is already 0 (at q = 1, exactly: the total variation between N(0, 1) and N(1, 1) is
    2 Phi(1/2) - 1 = 0.38 <= delta). PLD's grid, sized relative to eps, was at its finest there: 10 million points and
    two and a half minutes for `dpmed privacy epsilon ... --delta 0.9` to print the same 0."""
    from scipy.stats import norm
    assert 2 * norm.cdf(0.5) - 1 < 0.9

    def no_grid(*args, **kwargs):
        raise AssertionError("a PLD grid was built for an eps of 0")
    monkeypatch.setattr(epsilon_module, "subsampled_gaussian_pld", no_grid)
    assert dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=q, steps=steps, delta=0.9, accountant="pld") == 0.0
    assert dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=q, steps=steps, delta=0.9, accountant="rdp") == 0.0


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_any_noise_gives_zero_at_a_delta_no_smaller_than_the_chance_of_being_drawn(noise):
    """An example never drawn changes nothing, so the total variation between the runs with and without it is at
    most 1 - (1 - q)^T: at that delta eps is 0 for any noise. Before, PLD called that 'above 500' at tiny noise
    (its grid gave up) and took seconds per call, which calibration repeated. Independent truth for the edge: one
    Gaussian step at rate q has total variation exactly q (2 Phi(1 / (2 sigma)) - 1), so just below that delta eps
    is not 0."""
    from scipy.stats import norm
    for sigma in (1e-6, 0.3, 5.0):
        assert dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=0.5, steps=2, delta=0.75, noise=noise) == 0.0
        assert dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=0.01, steps=300, delta=1 - 0.99 ** 300,
                              noise=noise) == 0.0
    sigma, q = 0.2, 0.5
    exact = q * (2 * norm.cdf(1 / (2 * sigma)) - 1)              # 0.494, below q
    assert dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=1, delta=0.99 * exact) > 0.0
    assert dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=1, delta=0.99 * exact, accountant="rdp") > 0.0


@pytest.mark.parametrize("accountant", GAUSSIAN)
def test_no_noise_is_infinite_and_no_steps_is_zero(accountant):
    assert dp_sgd_epsilon(noise_multiplier=0.0, sample_rate=0.1, steps=1, delta=1e-5, accountant=accountant) == math.inf
    assert dp_sgd_epsilon(noise_multiplier=0.0, sample_rate=0.1, steps=0, delta=1e-5, accountant=accountant) == 0.0
    assert dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=0.1, steps=0, delta=1e-5, accountant=accountant) == 0.0


@pytest.mark.parametrize("argument, value", [
    ("noise_multiplier", -1.0), ("noise_multiplier", math.nan), ("noise_multiplier", math.inf),
    ("noise_multiplier", True), ("noise_multiplier", "1.0"), ("delta", "1e-5"),
    ("sample_rate", 0.0), ("sample_rate", 1.5), ("sample_rate", -0.1),
    ("steps", -1), ("steps", 2.5), ("steps", True),
    ("delta", 0.0), ("delta", 1.0), ("delta", -1e-5), ("delta", math.nan),
    ("accountant", "gdp"), ("noise", "uniform"), ("noise", "Gaussian"),
])
def test_invalid_arguments_name_the_argument(argument, value):
    args = dict(noise_multiplier=1.0, sample_rate=0.01, steps=100, delta=1e-5, accountant="pld")
    args[argument] = value
    with pytest.raises(ValueError, match=argument):
        dp_sgd_epsilon(**args)


@pytest.mark.parametrize("setting", [
    dict(noise_multiplier=1e-7, sample_rate=0.25, steps=300),  # eps ~ 1e16: beyond any PLD grid
    dict(noise_multiplier=0.609375, sample_rate=0.609375, steps=950),  # eps ~ 725: dp_accounting's inversion overflows
    dict(noise_multiplier=0.035, sample_rate=1.0, steps=1),  # eps ~ 530: finite, but above the stated limit
])
def test_pld_refuses_budgets_beyond_its_range_and_rdp_takes_over(setting):
    with pytest.raises(ValueError, match="accountant='rdp'"):
        dp_sgd_epsilon(**setting, delta=1e-5, accountant="pld")
    assert 500 < dp_sgd_epsilon(**setting, delta=1e-5, accountant="rdp") < math.inf


def test_pld_resolves_eps_up_to_its_limit(exact_gaussian_epsilon):
    """q = 1, T = 1: the exact Gaussian eps is about 418 here, inside the range."""
    exact = exact_gaussian_epsilon(1 / 0.04, 1e-5)
    assert 400 < exact < 500
    pld = dp_sgd_epsilon(noise_multiplier=0.04, sample_rate=1.0, steps=1, delta=1e-5)
    assert exact - 1e-9 <= pld <= exact * (1 + 1e-3)


def test_registry_describes_every_accountant():
    assert ACCOUNTANTS == ("pld", "rdp", "rdp-classic", "pure")
    for name in ACCOUNTANTS:
        info = accountant_info(name)
        assert info.name == name and info.noises
        assert name.split("-")[0].upper() in describe_accountant(name) or name in describe_accountant(name)
    with pytest.raises(ValueError, match="accountant must be one of pld, rdp, rdp-classic, pure"):
        describe_accountant("moments")
    assert "add or remove" in NEIGHBOUR_DP_SGD and "Poisson" in NEIGHBOUR_DP_SGD


def test_events_normalise_their_fields():
    import numpy as np

    event = PoissonGaussianEvent(noise_multiplier=np.float32(1.5), sample_rate=1, steps=np.int64(7))
    assert type(event.noise_multiplier) is float and type(event.sample_rate) is float and type(event.steps) is int


@pytest.mark.parametrize("n, expected", [(5218, 1e-5), (10**5, 1e-6), (1, 1e-5)])
def test_default_delta(n, expected):
    assert default_delta(n) == pytest.approx(expected, rel=1e-12)
    assert default_delta(n) <= 1 / (10 * n)


@pytest.mark.parametrize("n", [0, -3, 2.0])
def test_default_delta_rejects_impossible_sizes(n):
    with pytest.raises(ValueError, match="n_train"):
        default_delta(n)


# PLD's floor on delta (see _PLD_MIN_DELTA in dpmed.accounting.epsilon): max(1e-12, 1e-15 T).

def test_pld_below_its_delta_floor_is_refused_for_the_real_cause_not_as_an_eps_above_500():
    """Before: at delta = 1e-15 dp_accounting's PLD returned inf (each composition moves up to 1e-15 of probability
    to an infinite loss) and dpmed said the eps "lies above 500", while RDP gives 2.6."""
    with pytest.raises(ValueError, match=r"cannot resolve delta = 1e-15 after 88 steps.*accountant 'rdp'") as error:
        dp_sgd_epsilon(noise_multiplier=3.0, sample_rate=0.089, steps=88, delta=1e-15, accountant="pld")
    assert "above 500" not in str(error.value)
    assert dp_sgd_epsilon(noise_multiplier=3.0, sample_rate=0.089, steps=88, delta=1e-15,
                          accountant="rdp") == pytest.approx(2.59, abs=0.01)
    with pytest.raises(ValueError, match="accountant 'pure'"):   # Laplace noise: the pure bound needs no delta
        dp_sgd_epsilon(noise_multiplier=3.0, sample_rate=0.089, steps=88, delta=1e-15, accountant="pld",
                       noise="laplace")


def test_the_floor_grows_with_the_steps_where_the_pld_turns_to_rounding_noise():
    """q = 0.01, sigma = 1, T = 1e4: below the floor (1e-11 here) the PLD eps is noise; at delta = 1e-14 it lay above
    RDP's bound, which the true PLD never exceeds. At the floor it is below RDP again."""
    setting = dict(noise_multiplier=1.0, sample_rate=0.01, steps=10_000)
    events = [PoissonGaussianEvent(**setting)]
    assert _pld_epsilon(events, 1e-14) > _rdp_epsilon(events, 1e-14)   # why: below the floor, PLD is wrong
    with pytest.raises(ValueError, match=r"resolves delta down to 1e-11"):
        dp_sgd_epsilon(**setting, delta=5e-12, accountant="pld")
    assert dp_sgd_epsilon(**setting, delta=1e-11, accountant="pld") < dp_sgd_epsilon(**setting, delta=1e-11,
                                                                                      accountant="rdp")
    assert accountant_info("pld").min_delta(88) == 1e-12 and accountant_info("rdp").min_delta(10**9) == 0


def test_the_delta_floor_counts_the_steps_of_every_entry():
    """Two entries of 5,000 steps compose 10,000 steps, whose floor is 1e-11: delta 5e-12 is refused, though it is at
    the floor of either entry alone (where the PLD eps would be rounding noise, in either direction)."""
    events = [PoissonGaussianEvent(noise_multiplier=1.0, sample_rate=0.01, steps=5000),
              PoissonGaussianEvent(noise_multiplier=1.2, sample_rate=0.01, steps=5000)]
    assert accountant_info("pld").min_delta(5000) == 5e-12
    with pytest.raises(ValueError, match=r"cannot resolve delta = 5e-12 after 10000 steps.*down to 1e-11"):
        epsilon_module._epsilon(events, delta=5e-12, accountant="pld")


def test_pld_refuses_more_steps_than_it_composes_before_building_a_grid_and_plans_fall_back_to_rdp(monkeypatch):
    """PLD's grid grows with T: `dpmed privacy calibrate ... --steps 1e9` (or a study's mistyped training.steps) ran
    for minutes towards an exhausted memory. Beyond 2e6 steps it refuses at once, naming the accountant that serves
    them, and a planned run is certified by that one, saying why."""
    from dpmed.accounting import effective_accountant, noise_multiplier_for

    def no_grid(*args, **kwargs):
        raise AssertionError("a PLD grid was built for more steps than PLD composes")
    monkeypatch.setattr(epsilon_module, "subsampled_gaussian_pld", no_grid)
    limit = accountant_info("pld").max_steps
    assert limit == 2_000_000 and accountant_info("rdp").max_steps == math.inf
    setting = dict(sample_rate=0.01, steps=10 ** 9, delta=1e-5)
    with pytest.raises(ValueError, match=r"composes at most 2,000,000 steps, not 1,000,000,000.*accountant 'rdp'"):
        dp_sgd_epsilon(noise_multiplier=200.0, accountant="pld", **setting)
    with pytest.raises(ValueError, match=r"composes at most 2,000,000 steps.*accountant 'rdp'"):
        noise_multiplier_for(target_epsilon=8.0, accountant="pld", **setting)
    with pytest.raises(ValueError, match=r"composes at most 2,000,000 steps.*accountant 'pure'"):
        dp_sgd_epsilon(noise_multiplier=200.0, accountant="pld", noise="laplace", **setting)
    with pytest.raises(ValueError, match=r"composes at most 2,000,000 steps.*account for fewer steps"):
        epsilon_module._epsilon([PoissonGaussianEvent(noise_multiplier=9.0, sample_rate=0.01, steps=limit),
                                 PoissonLaplaceEvent(noise_multiplier=9.0, sample_rate=0.01, steps=1)],
                                delta=1e-5, accountant="pld")
    assert 0 < dp_sgd_epsilon(noise_multiplier=200.0, accountant="rdp", **setting) < 9     # RDP serves them
    name, note = effective_accountant("pld", target_epsilon=8.0, delta=1e-5, steps=limit + 1)
    assert name == "rdp" and "at most 2,000,000 steps" in note and "2,000,001" in note
    assert effective_accountant("pld", target_epsilon=8.0, delta=1e-5, steps=limit) == ("pld", None)
    assert effective_accountant("pld", target_epsilon=8.0, noise="laplace", steps=limit + 1)[0] == "pure"


def _dense(pmf):
    dense = pmf.to_dense_pmf()
    return dense._lower_loss, dense._probs, dense._infinity_mass


@settings(max_examples=40, deadline=None)
@given(sigma=st.floats(0.3, 30.0), q=st.one_of(st.floats(1e-4, 1.0), st.sampled_from([1.0, 1 - 1e-6, 1e-4])),
       h=st.sampled_from([1e-3, 3e-3, 1e-2, 0.1]))
def test_one_step_pld_is_dp_accounting_s_own_pmf(sigma, q, h):
    """dpmed builds one DP-SGD step's PLD with the hockey-stick curve in array arithmetic, where dp_accounting inverts
    the loss point by point in Python: both must give the same grid, masses and infinity mass, in both directions."""
    from dp_accounting.pld import privacy_loss_distribution
    theirs = privacy_loss_distribution.from_gaussian_mechanism(sigma, value_discretization_interval=h, sampling_prob=q)
    ours = subsampled_gaussian_pld(sigma, q, h)
    for mine, reference in ((ours._pmf_remove, theirs._pmf_remove), (ours._pmf_add, theirs._pmf_add)):
        (lower, probs, inf_mass), (ref_lower, ref_probs, ref_inf) = _dense(mine), _dense(reference)
        assert lower == ref_lower and probs.shape == ref_probs.shape
        # dp_accounting 0.4.4 (the declared floor) and 0.5 differ between themselves by up to 9e-13 here
        assert abs(inf_mass - ref_inf) <= 1e-12
        assert float(abs(probs - ref_probs).max()) <= 1e-12


@pytest.mark.parametrize("events", [
    [PoissonGaussianEvent(noise_multiplier=1.1, sample_rate=0.01, steps=3000)],
    [PoissonGaussianEvent(noise_multiplier=0.8, sample_rate=0.02, steps=500),
     PoissonGaussianEvent(noise_multiplier=2.0, sample_rate=1.0, steps=20)],
    [PoissonGaussianEvent(noise_multiplier=1.5, sample_rate=0.05, steps=400),
     PoissonLaplaceEvent(noise_multiplier=20.0, sample_rate=0.05, steps=10)],
], ids=["one event", "two Gaussian events", "Gaussian then Laplace"])
def test_pld_eps_is_what_dp_accounting_s_accountant_gives_on_the_same_grid(monkeypatch, events):
    """A second implementation: dp_accounting's PLDAccountant, on the grid dpmed chose, composing the same events."""
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.privacy_accountant import NeighboringRelation
    grids = []

    def spy(sigma, q, h):
        grids.append(h)
        return subsampled_gaussian_pld(sigma, q, h)
    monkeypatch.setattr(epsilon_module, "subsampled_gaussian_pld", spy)
    ours = _pld_epsilon(events, 1e-5)
    assert grids and len(set(grids)) == 1
    accountant = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                      value_discretization_interval=grids[0])
    accountant.compose(epsilon_module._as_dp_event(events))
    assert ours == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-12)


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_rounding_below_zero_in_the_rdp_curve_is_not_read_as_eps_zero(accountant):
    """One step at q = 0.01, sigma = 1e7: the subsampled Gaussian moves the output by q (2 Phi(1 / (2 sigma)) - 1)
    = 4.0e-10 in total variation (worked here with math.erf), so at delta = 1e-10 eps is above 0. dp_accounting's
    RDP came out below 0 at some orders (rounding) and its get_epsilon answered eps = 0 for the whole curve; PLD,
    which sizes its grid from that RDP estimate, answered 0 too, and calibration met tiny targets it did not."""
    sigma, q, delta = 1e7, 0.01, 1e-10
    total_variation = q * math.erf(1 / (2 * sigma) / math.sqrt(2))
    assert total_variation > 3 * delta
    eps = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=1, delta=delta, accountant=accountant)
    assert eps > 0
    # where the whole difference is below delta eps = 0 is a true bound, and is still given
    assert dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=1, delta=1e-8, accountant=accountant) == 0


@pytest.mark.parametrize("sigma, q, steps, delta", [(5.002, 128 / 5218, 2039, 1e-4), (1.1, 0.004, 20_000, 1e-6),
                                                    (0.7, 0.3, 50, 1e-5), (2.0, 1.0, 10, 1e-3)])
def test_rdp_eps_is_dp_accounting_s_rdp_accountant_called_directly(sigma, q, steps, delta):
    """A second implementation: dp_accounting's RdpAccountant at its default orders, add/remove-one neighbours,
    composing the same Poisson-subsampled Gaussian steps, built here with its own API."""
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import NeighboringRelation
    from dp_accounting.rdp import rdp_privacy_accountant
    accountant = rdp_privacy_accountant.RdpAccountant(neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)),
                                                    steps))
    ours = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta, accountant="rdp")
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=1e-12)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_an_accountant_s_nan_or_inf_is_refused_not_printed_as_an_eps(monkeypatch, value):
    """A nan would print as eps = nan and compare as 'not above' any budget; an inf at noise > 0 means the accountant
    could not resolve eps, not that the run is non-private. Each is refused in words, naming the accountant."""
    import dataclasses
    stand_in = dataclasses.replace(accountant_info("rdp"), compute=lambda events, delta: value)
    monkeypatch.setattr(epsilon_module, "accountant_info", lambda name, noise=None: stand_in)
    with pytest.raises(ValueError, match="returned nan" if math.isnan(value) else "lies above what accountant 'rdp'"):
        dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=10, delta=1e-5, accountant="rdp")


def test_the_schedule_by_hand_at_the_reference_and_at_a_batch_of_the_whole_set():
    """q = B / N and T = epochs * round(N / B): 5218 / 128 = 40.8 batches an epoch, so 41, and 50 epochs are 2050
    steps; a batch of all N images is q = 1, one step an epoch, and is allowed; one image more is refused."""
    assert dp_sgd_schedule(5218, batch_size=128, epochs=50) == (128 / 5218, 2050)
    assert dp_sgd_schedule(100, batch_size=100, epochs=3) == (1.0, 3)
    assert dp_sgd_schedule(100, batch_size=1, epochs=1) == (0.01, 100)
    with pytest.raises(ValueError, match="batch_size 101 exceeds the 100 training images"):
        dp_sgd_schedule(100, batch_size=101, epochs=3)
    for argument in ("n_train", "batch_size", "epochs"):
        args = dict(n_train=100, batch_size=10, epochs=2)
        args[argument] = 0
        with pytest.raises(ValueError, match=argument):
            dp_sgd_schedule(args.pop("n_train"), **args)


def test_the_pure_accountant_refuses_gaussian_noise():
    """The Gaussian mechanism is never pure DP: reading sigma as a Laplace b / C1 would print a finite eps at
    delta = 0 for a run that has none."""
    with pytest.raises(ValueError, match="accountant 'pure' does not analyse gaussian noise; it handles laplace. For "
                                         "gaussian noise use 'pld' or "):
        dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=100, delta=1e-5, accountant="pure")


def test_eps_is_zero_only_at_a_delta_that_covers_the_chance_of_ever_being_drawn():
    """delta = 0.02 is above one step's rate q = 0.01 but far below the chance of being drawn in any of T = 100
    steps, 1 - 0.99^100 = 0.634: the run is not (0, 0.02)-DP, and its eps is dp_accounting's own PLD value."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    from dpmed.accounting.epsilon import inclusion_probability

    event = PoissonGaussianEvent(noise_multiplier=1.0, sample_rate=0.01, steps=100)
    assert inclusion_probability([event]) == pytest.approx(1 - 0.99 ** 100, rel=1e-12)
    truth = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    truth.compose(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0)),
                                               100))
    expected = truth.get_epsilon(0.02)                                     # 0.0955
    assert expected > 0.09
    eps = dp_sgd_epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=100, delta=0.02)
    assert eps == pytest.approx(expected, rel=0.01)
    assert eps >= expected * (1 - 1e-3)                                  # the safe direction
