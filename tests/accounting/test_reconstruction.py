"""Reconstruction risk: the reference value, properties, degenerate cases and the high-budget regime, the other
add/remove direction, the safety net, and the public surface. The PLDs against exact closed forms and a Monte-Carlo
attack are in test_reconstruction_pld.py, the Edgeworth expansion in test_reconstruction_edgeworth.py.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import optimize, special

import dpmed.accounting as accounting
from dpmed import cli
from dpmed.accounting import (MIA_FPRS, RECONSTRUCTION_METHODS, ReconstructionRisk, default_kappa, default_delta,
                              dp_sgd_schedule, effective_accountant, membership_inference_tpr, noise_multiplier_for,
                              reconstruction_bound, reconstruction_method, reconstruction_risk,
                              relaxed_reconstruction_bound)
from dpmed.accounting import _limits
from dpmed.accounting import _pld
from dpmed.accounting import reconstruction as reconstruction_module

# METHODS.md s.7 (the setting of 004_6210268d59b6f8e5.txt's source paper): worst-case gamma about 1.21%.
REFERENCE = dict(noise_multiplier=3.1852, sample_rate=0.2525, steps=300)
REFERENCE_KAPPA = 1 / 8111

sigmas = st.floats(0.6, 8.0)
rates = st.floats(0.005, 1.0)
step_counts = st.integers(1, 200)
kappas = st.sampled_from([1e-4, 1e-3, 1e-2, 0.05])
FEW = settings(max_examples=5, deadline=None)


@pytest.fixture(scope="module")
def reference_risk() -> ReconstructionRisk:
    return reconstruction_risk(**REFERENCE, kappa=REFERENCE_KAPPA)


def ceiling(q: float, steps: int, kappa: float) -> float:
    """The power when the attacker sees exactly whether the target was sampled (sigma = 0), with a = (1-q)^T:
    1 - a (1 - kappa) testing 'without' against 'with' the target; min(1, kappa / a) the other way round."""
    never = (1 - q) ** steps
    return max(1 - never * (1 - kappa), min(1.0, kappa / never) if never > 0 else 1.0)


# --- the reference value ---------------------------------------------------------------------------------------------

def test_reference_value(reference_risk):
    """1.21% as published, to the printed precision (+-0.005 percentage points); ours is 1.2144%, 0.02% above the
    fine-grid PLD value 1.2142% (pessimistic discretisation)."""
    value = reconstruction_bound(**REFERENCE, kappa=REFERENCE_KAPPA)
    assert value == pytest.approx(0.0121, abs=5e-5)
    assert reference_risk.worst_case == value


def test_reference_risk_is_consistent(reference_risk):
    r = reference_risk
    assert r.kappa == REFERENCE_KAPPA
    assert r.kappa < r.relaxed < r.worst_case
    assert r.worst_case_edgeworth == pytest.approx(r.worst_case, rel=0.01)
    assert r.gdp == pytest.approx(r.worst_case, rel=0.03)
    assert set(r.tpr_at_fpr) == set(MIA_FPRS) == {0.001, 0.01}
    assert 0.001 < r.tpr_at_fpr[0.001] < r.tpr_at_fpr[0.01] < 1
    assert 0.01 < r.tpr_at_fpr[0.01]


def test_risk_is_json_able_and_states_its_assumptions(reference_risk):
    data = json.loads(json.dumps(reference_risk.to_dict()))
    assert data["worst_case"] == reference_risk.worst_case
    assert data["tpr_at_fpr"] == {"0.001": reference_risk.tpr_at_fpr[0.001],
                                  "0.01": reference_risk.tpr_at_fpr[0.01]}
    assert data["worst_case_via"] == data["relaxed_via"] == "PLD"
    assert data["worst_case_edgeworth_via"] == "Edgeworth expansion" and data["gdp_via"] == "GDP/CLT"
    assert data["tpr_at_fpr_via"] == {"0.001": "PLD", "0.01": "PLD"}
    text = reference_risk.assumptions
    for phrase in ("kappa", "informed adversary", "Poisson", "add or remove"):
        assert phrase in text
    assert "target image" in text and "patient" not in text
    with pytest.raises(TypeError, match="does not support item assignment"):
        reference_risk.tpr_at_fpr[0.5] = 1.0  # frozen all the way down
    with pytest.raises(TypeError, match="does not support item assignment"):
        reference_risk.tpr_at_fpr_via[0.5] = "PLD"


def test_with_the_patient_as_unit_the_same_numbers_name_the_patient_as_the_target(reference_risk):
    """A patient-unit run's kappa is 1 / N patients and its neighbours differ by one patient; the assumptions said
    "knows every training image but the target" and "add or remove the target image" for every run."""
    patient = reconstruction_risk(**REFERENCE, kappa=REFERENCE_KAPPA, unit="patient")
    assert patient.worst_case == reference_risk.worst_case and patient.relaxed == reference_risk.relaxed
    text = patient.assumptions
    assert "every training patient but the target patient" in text
    assert "add or remove the target patient with all of their images" in text and "target image" not in text
    with pytest.raises(ValueError, match="unit"):
        reconstruction_risk(**REFERENCE, kappa=REFERENCE_KAPPA, unit="record")


# --- cross-checks between methods (the PLD against independent truth: test_reconstruction_pld.py; the Edgeworth
# expansion: test_reconstruction_edgeworth.py) -------------------------------------------------------------------

def test_gdp_agrees_with_pld_in_the_clt_regime():
    """Small q, many steps, moderate sigma: the GDP value is 0.9% below the PLD (q = 0.01, T = 10^4, sigma = 2,
    kappa = 1e-3); 2% tolerance. Outside this regime it is only a sanity value: q = 0.5, T = 10, sigma = 1,
    kappa = 0.05 gives 0.67 against the exact ~0.505."""
    args = dict(noise_multiplier=2.0, sample_rate=0.01, steps=10_000, kappa=1e-3)
    assert reconstruction_bound(**args, method="gdp") == pytest.approx(reconstruction_bound(**args), rel=0.02)


# --- properties ------------------------------------------------------------------------------------------------------

# The PLD is a pessimistic discretisation whose grid depends on T, q and sigma; its excess (< ~1e-4 relative) may
# differ between two settings, so orderings are checked up to 1e-3 relative.
ORDER_SLACK = 1e-3


@FEW
@given(sigma=sigmas, q=rates, steps=step_counts, kappa=kappas)
def test_every_value_lies_between_guessing_and_certainty(sigma, q, steps, kappa):
    """kappa <= gamma (the attacker can always guess), gamma <= gamma_inf (the power when it sees exactly whether
    the target was used) for the bounds and Edgeworth, and the relaxed attacker never beats the worst case."""
    args = dict(noise_multiplier=sigma, sample_rate=q, steps=steps, kappa=kappa)
    top = ceiling(q, steps, kappa)
    for method in RECONSTRUCTION_METHODS:
        value = reconstruction_bound(**args, method=method)
        assert kappa <= value <= 1.0
        if method != "gdp":
            assert value <= top + 1e-12
    relaxed, worst = relaxed_reconstruction_bound(**args), reconstruction_bound(**args)
    assert kappa <= relaxed <= worst * (1 + ORDER_SLACK)


@FEW
@given(sigma=sigmas, q=rates, steps=step_counts, kappa=kappas, factor=st.floats(1.2, 3.0))
def test_more_steps_help_the_attacker(sigma, q, steps, kappa, factor):
    args = dict(noise_multiplier=sigma, sample_rate=q, kappa=kappa)
    more = max(steps + 1, int(steps * factor))
    assert reconstruction_bound(**args, steps=more) >= reconstruction_bound(**args, steps=steps) * (1 - ORDER_SLACK)


@FEW
@given(sigma=sigmas, q=st.floats(0.005, 0.8), steps=step_counts, kappa=kappas, factor=st.floats(1.2, 3.0))
def test_a_higher_sampling_rate_helps_the_attacker(sigma, q, steps, kappa, factor):
    args = dict(noise_multiplier=sigma, steps=steps, kappa=kappa)
    assert (reconstruction_bound(**args, sample_rate=min(1.0, q * factor))
            >= reconstruction_bound(**args, sample_rate=q) * (1 - ORDER_SLACK))


@FEW
@given(sigma=sigmas, q=rates, steps=step_counts, kappa=kappas, factor=st.floats(1.2, 3.0))
def test_more_noise_hinders_the_attacker(sigma, q, steps, kappa, factor):
    args = dict(sample_rate=q, steps=steps, kappa=kappa)
    assert (reconstruction_bound(**args, noise_multiplier=sigma * factor)
            <= reconstruction_bound(**args, noise_multiplier=sigma) * (1 + ORDER_SLACK))


@FEW
@given(sigma=sigmas, q=st.floats(0.005, 0.999), steps=step_counts,
       kappa=st.sampled_from([1e-12, 1e-6, 1e-3, 0.05, 0.5, 0.99]), factor=st.floats(1.2, 3.0))
@example(sigma=1.0, q=0.5, steps=10, kappa=1e-3, factor=3.0)  # gamma ~ 0.1: far above kappa, so order matters
def test_subsampling_lies_between_guessing_and_the_full_batch_power_and_grows_with_kappa(sigma, q, steps, kappa,
                                                                                          factor):
    """Poisson subsampling is a post-processing of the full-batch pair (keep the output with probability q, else
    draw afresh from N(0, 1)), in both add/remove directions, so no attacker beats the exact full-batch power
    Phi(Phi^-1(kappa) + sqrt(T)/sigma) (mu-GDP, computed here without dp_accounting); nor does it fall below
    guessing. And gamma = 1 - f(kappa) grows with kappa, since the trade-off curve f falls."""
    args = dict(noise_multiplier=sigma, sample_rate=q, steps=steps)
    full_batch = float(special.ndtr(special.ndtri(kappa) + math.sqrt(steps) / sigma))
    value = reconstruction_bound(**args, kappa=kappa)
    assert kappa <= relaxed_reconstruction_bound(**args, kappa=kappa) <= full_batch * (1 + ORDER_SLACK)
    assert kappa <= value <= full_batch * (1 + ORDER_SLACK)
    larger = min(0.999, kappa * factor)
    assert reconstruction_bound(**args, kappa=larger) >= value * (1 - ORDER_SLACK)


def test_membership_inference_tpr_is_gamma_at_kappa_equal_to_fpr():
    """The same trade-off curve: TPR at FPR x is gamma at kappa = x, and it grows with x."""
    args = dict(noise_multiplier=1.5, sample_rate=0.05, steps=100)
    tprs = [membership_inference_tpr(**args, fpr=fpr) for fpr in (1e-3, 0.1)]
    assert tprs == [reconstruction_bound(**args, kappa=fpr) for fpr in (1e-3, 0.1)]
    assert 1e-3 < tprs[0] < tprs[1] < 1 and tprs[1] > 0.1


def test_relaxed_stays_weaker_without_subsampling():
    """q = 1 does not make the relaxed attacker as strong as the worst case: not knowing the sign still costs it
    (exact, T = 1, sigma = 1, kappa = 0.05: 0.170 against 0.260). The two meet only where both reach certainty."""
    args = dict(noise_multiplier=1.0, sample_rate=1.0, steps=1, kappa=0.05)
    assert relaxed_reconstruction_bound(**args) == pytest.approx(0.1701, abs=1e-4)
    assert reconstruction_bound(**args) == pytest.approx(0.2595, abs=1e-4)


# --- degenerate cases and the high-budget regime ---------------------------------------------------------------------

@pytest.mark.parametrize("method", RECONSTRUCTION_METHODS)
def test_no_steps_leaves_the_attacker_guessing(method):
    """Nothing released: the best test has power equal to its type-I error."""
    assert reconstruction_bound(noise_multiplier=1.0, sample_rate=0.1, steps=0, kappa=1e-3, method=method) == 1e-3
    assert relaxed_reconstruction_bound(noise_multiplier=1.0, sample_rate=0.1, steps=0, kappa=1e-3) == 1e-3


@pytest.mark.parametrize("method", RECONSTRUCTION_METHODS)
def test_no_noise_reveals_whether_the_target_was_used(method):
    """sigma = 0: the exact gradient sum shows whether the target was sampled in some step (probability
    1 - (1-q)^T); otherwise the attacker can only guess. q = 1 gives certainty."""
    args = dict(noise_multiplier=0.0, kappa=1e-3, method=method)
    assert reconstruction_bound(**args, sample_rate=1.0, steps=5) == 1.0
    never = 0.99 ** 50
    assert reconstruction_bound(**args, sample_rate=0.01, steps=50) == pytest.approx(1 - never * (1 - 1e-3))
    assert relaxed_reconstruction_bound(noise_multiplier=0.0, sample_rate=1.0, steps=5, kappa=1e-3) == 1.0


def test_no_noise_in_the_other_direction():
    """The add/remove relation includes testing 'with' against 'without' the target: at level kappa that test
    rejects the never-sampled outcomes up to kappa / (1-q)^T of their P-mass, which is certainty here
    ((1-q)^T = 0.0052 < kappa = 0.01), where the paper's direction gives 1 - 0.0052 * 0.99."""
    args = dict(noise_multiplier=0.0, sample_rate=0.1, steps=50, kappa=0.01)
    assert reconstruction_bound(**args) == relaxed_reconstruction_bound(**args) == 1.0


@pytest.mark.parametrize("sigma", [0.01, 1e-3, 1e-6, 1e-200])
def test_high_budgets_give_certainty_without_overflow(sigma):
    """The high-budget regime (sigma = 0.01 at the reference setting is eps ~ 1.6e6 at delta = 1e-5 by RDP;
    smaller sigma is more): every value is 1.0, promptly and without floating-point warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        risk = reconstruction_risk(noise_multiplier=sigma, **{k: v for k, v in REFERENCE.items()
                                                              if k != "noise_multiplier"}, kappa=REFERENCE_KAPPA)
    assert risk.worst_case == risk.worst_case_edgeworth == risk.relaxed == risk.gdp == 1.0
    assert all(tpr == 1.0 for tpr in risk.tpr_at_fpr.values())


@pytest.mark.parametrize("sigma", [5e-324, 1e-310])
def test_a_subnormal_sigma_gives_the_no_noise_power_without_nan_arithmetic(sigma):
    """1 / sigma overflows to inf for a subnormal sigma: the exact tests would take inf - inf. The sigma = 0 power,
    1 - (1 - q)^T (1 - kappa) at q = 0.1, T = 10, kappa = 1e-3, is the answer, reached without a warning."""
    expected = 1 - 0.9 ** 10 * (1 - 1e-3)
    args = dict(noise_multiplier=sigma, sample_rate=0.1, steps=10, kappa=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        risk = reconstruction_risk(**args)
    assert risk.worst_case == pytest.approx(expected, rel=1e-12)
    assert risk.relaxed == pytest.approx(expected, rel=1e-12)
    assert "the sigma = 0 power" in risk.worst_case_via and "the sigma = 0 power" in risk.relaxed_via


def test_small_sigma_with_rare_sampling_tends_to_the_ceiling():
    """q = 1e-3, T = 50: the target is used with probability ~5%, so even sigma -> 0 leaves gamma at
    1 - (1-q)^T (1-kappa) ~ 0.0497, approached from below."""
    args = dict(sample_rate=1e-3, steps=50, kappa=1e-3)
    top = ceiling(1e-3, 50, 1e-3)
    values = [reconstruction_bound(**args, noise_multiplier=s) for s in (0.5, 0.2, 0.05, 1e-4)]
    assert values == sorted(values)
    assert values[0] < 0.5 * top and values[-1] == pytest.approx(top, rel=1e-9)


@pytest.mark.parametrize("sigma", [1e10, 1e200])
def test_huge_noise_leaves_the_attacker_guessing(sigma):
    args = dict(noise_multiplier=sigma, sample_rate=0.5, steps=100, kappa=1e-3)
    assert relaxed_reconstruction_bound(**args) == pytest.approx(1e-3, rel=1e-6)
    for method in RECONSTRUCTION_METHODS:
        assert reconstruction_bound(**args, method=method) == pytest.approx(1e-3, rel=1e-6)


@pytest.mark.parametrize("sigma", [1e7, 1e8])
@pytest.mark.parametrize("kappa", [0.5, 0.1])
def test_huge_noise_is_still_bounded_above_the_exact_power_of_one_step(sigma, kappa):
    """q = 1, T = 1: the attacker tests N(0, 1) against N(1/sigma, 1), and the Neyman-Pearson test at level kappa
    has power Phi(Phi^-1(kappa) + 1/sigma) exactly, about kappa + 0.4 / sigma at kappa = 1/2. Where the value is
    pinned next to kappa (here), the upper bound settled on must not fall below that power: a bound shaved by a
    constant factor would, however close to kappa both are."""
    exact = special.ndtr(special.ndtri(kappa) + 1 / sigma)
    assert exact > kappa
    bound = reconstruction_bound(noise_multiplier=sigma, sample_rate=1.0, steps=1, kappa=kappa)
    assert bound >= exact
    assert bound == pytest.approx(kappa, rel=1e-6)


# --- the other add/remove direction: the exact power of a maximum test ----------------------------------------------

def exact_add_one_step(sigma: float, q: float, kappa: float, *, relaxed: bool) -> float:
    """T = 1, the test of Q against P (level under Q, power under P): the likelihood ratio P/Q falls with z (with
    |z| when relaxed), so the optimal test rejects Q when z < c (|z| < c) with Q(z < c) = kappa. Solved here in
    linear space, independently of _limits."""
    mu = 1 / sigma
    if relaxed:
        def level(c):
            return (1 - q) * special.erf(c / math.sqrt(2)) + q * (special.ndtr(c - mu) - special.ndtr(-c - mu))
        c = optimize.brentq(lambda c: level(c) - kappa, 0.0, mu + 50, xtol=1e-14)
        return special.erf(c / math.sqrt(2))
    c = optimize.brentq(lambda c: (1 - q) * special.ndtr(c) + q * special.ndtr(c - mu) - kappa, -50, mu + 50,
                        xtol=1e-14)
    return special.ndtr(c)


# (sigma, q, kappa): in the first two the ADD direction is the larger (REMOVE: 0.839 / 0.734), in the last two
# the smaller (REMOVE: 0.155 / 0.110 and 0.427 / 0.393).
ADD_ONE_STEP = [(0.7, 0.8, 0.5), (0.5, 0.9, 0.2), (1.0, 0.5, 0.05), (0.3, 0.5, 0.01)]


@pytest.mark.parametrize("relaxed", [False, True], ids=["worst_case", "relaxed"])
@pytest.mark.parametrize("sigma, q, kappa", ADD_ONE_STEP)
def test_the_add_maximum_test_is_the_exact_add_power_for_one_step(sigma, q, kappa, relaxed):
    """At T = 1 the maximum test is the likelihood-ratio test of the ADD direction: its power equals the exact
    ADD gamma, and the PLD (both directions) stays above it."""
    power = _limits.add_max_test_power(1 / sigma, q, 1, kappa, folded=relaxed)
    assert power == pytest.approx(exact_add_one_step(sigma, q, kappa, relaxed=relaxed), rel=1e-9)
    args = dict(noise_multiplier=sigma, sample_rate=q, steps=1, kappa=kappa)
    assert (relaxed_reconstruction_bound(**args) if relaxed else reconstruction_bound(**args)) >= power - 1e-12


@pytest.mark.parametrize("relaxed", [False, True], ids=["worst_case", "relaxed"])
def test_the_pld_reaches_the_add_power_where_that_direction_dominates(relaxed):
    """sigma = 0.7, q = 0.8, kappa = 0.5, T = 1: ADD 0.8823 (relaxed 0.7905) against REMOVE 0.8387 (0.7339), and
    dp_accounting's PLD agrees with our ADD power to < 1e-5 (measured: 2e-7 and 3e-6 relative)."""
    args = dict(noise_multiplier=0.7, sample_rate=0.8, steps=1, kappa=0.5)
    pld = relaxed_reconstruction_bound(**args) if relaxed else reconstruction_bound(**args)
    assert pld == pytest.approx(exact_add_one_step(0.7, 0.8, 0.5, relaxed=relaxed), rel=1e-5)


@pytest.mark.parametrize("relaxed", [False, True], ids=["max", "max_abs"])
def test_the_add_maximum_test_matches_a_simulation(relaxed):
    """T = 5, q = 0.3, sigma = 0.5, kappa = 0.05. The returned power fixes the threshold c through
    P(max < c) = F(c)^T (no mixture involved). Simulated, the test at that c has level kappa under the mixture Q
    (so c is the largest valid threshold) and the stated power under P, each within 4 standard errors."""
    sigma, q, steps, kappa, n = 0.5, 0.3, 5, 0.05, 400_000
    power = _limits.add_max_test_power(1 / sigma, q, steps, kappa, folded=relaxed)
    per_step = power ** (1 / steps)
    c = special.erfinv(per_step) * math.sqrt(2) if relaxed else special.ndtri(per_step)
    rng = np.random.default_rng(1)
    shift = (rng.random((n, steps)) < q) / sigma
    if relaxed:
        shift *= rng.choice([-1.0, 1.0], size=(n, steps))

    def statistic(z):
        return (np.abs(z) if relaxed else z).max(axis=1)

    level = float(np.mean(statistic(rng.standard_normal((n, steps)) + shift) < c))
    simulated_power = float(np.mean(statistic(rng.standard_normal((n, steps))) < c))
    assert abs(level - kappa) <= 4 * math.sqrt(kappa * (1 - kappa) / n)
    assert abs(simulated_power - power) <= 4 * math.sqrt(power * (1 - power) / n)


@FEW
@given(sigma=st.floats(0.3, 5.0), q=rates, steps=step_counts, kappa=kappas)
@example(sigma=0.3046875, q=1 - 2 ** -53, steps=1, kappa=1e-4)   # dp_accounting's PLD failed here (accountable_rate)
def test_the_add_lower_bounds_never_exceed_the_pld(sigma, q, steps, kappa):
    """The maximum tests are lower bounds on gamma: never above the raw PLD values (computed without the exact
    limits), which are upper bounds."""
    pld = reconstruction_method("pld").gamma(sigma, q, steps, kappa)
    relaxed_pld = _pld.relaxed_pld(sigma, q, steps, kappa)
    assert _limits.add_max_test_power(1 / sigma, q, steps, kappa, folded=False) <= pld + 1e-12
    assert _limits.add_max_test_power(1 / sigma, q, steps, kappa, folded=True) <= relaxed_pld + 1e-12


@pytest.mark.parametrize("relaxed", [False, True], ids=["max", "max_abs"])
@pytest.mark.parametrize("q, steps, kappa", [(128 / 4708, 370, 1 / 4708), (0.5, 10, 1e-3), (1e-3, 50, 1e-3)])
def test_the_add_maximum_test_grows_with_mu_to_its_limit(q, steps, kappa, relaxed):
    """Less noise, more power; as sigma -> 0 the power tends to the ADD ceiling min(1, kappa / (1-q)^T)
    (1 in the first setting, 0.0499 in the last one), without overflow down to sigma = 1e-200."""
    sigmas_down = [10.0, 3.0, 1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 1e-3, 1e-6, 1e-15, 1e-200]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        powers = [_limits.add_max_test_power(1 / s, q, steps, kappa, folded=relaxed) for s in sigmas_down]
    assert all(a <= b * (1 + 1e-12) for a, b in zip(powers, powers[1:])) and powers[0] >= kappa  # up to rounding
    assert powers[-1] == pytest.approx(min(1.0, kappa / (1 - q) ** steps), rel=1e-9)


# --- eps 1 .. 1e15 at the sizes of the source documents' datasets ----------------------------------------------------

# (N, expected batch, epochs): PneumoniaMNIST's training images; Kermany's images; Kermany at the patient level
DATASETS = {"pneumoniamnist": (4708, 128, 10), "kermany_images": (4282, 64, 10), "kermany_patients": (2400, 64, 10)}
BUDGETS = (1, 8, 1e2, 1e3, 1e6, 1e9, 1e12, 1e15)


@pytest.fixture(scope="module", params=list(DATASETS))
def risks_by_budget(request) -> dict[float, ReconstructionRisk]:
    """reconstruction_risk at the sigma calibrated for each eps in BUDGETS (delta = default_delta(N), the accountant
    a study would use: PLD up to eps 500, RDP above)."""
    n, batch, epochs = DATASETS[request.param]
    q, steps = dp_sgd_schedule(n, batch_size=batch, epochs=epochs)
    risks = {}
    for eps in BUDGETS:
        accountant, _ = effective_accountant("pld", target_epsilon=eps)
        sigma = noise_multiplier_for(target_epsilon=eps, delta=default_delta(n), sample_rate=q, steps=steps,
                                     accountant=accountant)
        risks[eps] = reconstruction_risk(noise_multiplier=sigma, sample_rate=q, steps=steps, kappa=default_kappa(n))
    return risks


def test_every_budget_gives_finite_ordered_values(risks_by_budget):
    for eps, risk in risks_by_budget.items():
        values = [risk.worst_case, risk.worst_case_edgeworth, risk.relaxed, risk.gdp, *risk.tpr_at_fpr.values()]
        assert all(math.isfinite(v) and risk.kappa <= v <= 1.0 for v in values), eps
        assert risk.worst_case >= risk.relaxed, eps
        assert all(not via.startswith("trivial ceiling")
                   for via in (risk.worst_case_via, risk.relaxed_via, *risk.tpr_at_fpr_via.values())), eps


def test_every_bound_grows_with_the_budget(risks_by_budget):
    """Non-decreasing in eps: the worst case, the relaxed bound, the Edgeworth and GDP values, and the
    membership-inference TPR at each false-positive rate."""
    risks = [risks_by_budget[eps] for eps in BUDGETS]
    series = {"worst_case": [r.worst_case for r in risks], "relaxed": [r.relaxed for r in risks],
              "edgeworth": [r.worst_case_edgeworth for r in risks], "gdp": [r.gdp for r in risks],
              **{f"tpr_at_{fpr}": [r.tpr_at_fpr[fpr] for r in risks] for fpr in MIA_FPRS}}
    for name, values in series.items():
        assert values == sorted(values), name


def test_high_budgets_are_pinned_at_certainty(risks_by_budget):
    """From eps = 1e3 on (sigma <= 0.141) the attacker is certain: kappa = 1/N exceeds (1-q)^T ~ 4e-5, so the
    test of 'with' against 'without' the target reaches power 1 as sigma -> 0, and its maximum test pins gamma
    there; the PLD is not needed. Low budgets come from the PLD."""
    for eps in BUDGETS[3:]:
        risk = risks_by_budget[eps]
        assert risk.worst_case == risk.relaxed == 1.0 and set(risk.tpr_at_fpr.values()) == {1.0}
        assert risk.worst_case_via == risk.relaxed_via == _limits.PINNED_CEILING
    for eps in BUDGETS[:2]:
        assert risks_by_budget[eps].worst_case_via == risks_by_budget[eps].relaxed_via == "PLD"
        assert risks_by_budget[eps].worst_case < 0.05


def test_the_cli_prints_the_risk_at_eps_1e12(capsys):
    """PneumoniaMNIST at eps = 1e12 (sigma = 1.43e-5): this used to overflow inside dp_accounting."""
    code = cli.main(["privacy", "risk", "--noise-multiplier", "1.43e-5", "--dataset-size", "4708",
                     "--batch-size", "128", "--epochs", "10"])
    out = capsys.readouterr().out
    assert code == 0
    assert "100.0000%" in out and "exact limit (pinned)" in out


# --- the safety net: values that double precision cannot compute ----------------------------------------------------

PNEUMONIA_1E12 = dict(noise_multiplier=1.43e-5, sample_rate=128 / 4708, steps=370, kappa=1 / 4708)


def test_an_uncomputable_pld_gives_the_trivial_ceiling_and_says_so(monkeypatch):
    """Without the exact limits, sigma = 1.43e-5 would need a PLD grid interval of ~1e5 nats (e^h overflows):
    every value falls back to the sigma = 0 power, an upper bound at every sigma, and says why."""
    monkeypatch.setattr(_limits, "pinned", lambda *args, **kwargs: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        risk = reconstruction_risk(**PNEUMONIA_1E12)
    top = ceiling(128 / 4708, 370, 1 / 4708)
    assert risk.worst_case == risk.relaxed == risk.worst_case_edgeworth == top == 1.0
    for via in (risk.worst_case_via, risk.relaxed_via, *risk.tpr_at_fpr_via.values()):
        assert via.startswith("trivial ceiling") and "PLD not computable in double precision" in via
    assert "Edgeworth expansion not computable in double precision" in risk.worst_case_edgeworth_via


def test_an_overflow_inside_dp_accounting_gives_the_trivial_ceiling(monkeypatch):
    """With our own check of the grid interval bypassed, the OverflowError that dp_accounting's connect-the-dots
    raises (math.expm1 of an interval of 1e5 nats) is caught and reported, not raised."""
    monkeypatch.setattr(_limits, "pinned", lambda *args, **kwargs: None)
    monkeypatch.setattr(_pld, "interval", lambda *args: 1e5)
    value, via = reconstruction_module._worst_case(*PNEUMONIA_1E12.values())
    assert value == 1.0 and via.startswith("trivial ceiling") and "math range error" in via


def test_other_errors_are_not_swallowed(monkeypatch):
    def broken(*args):
        raise RuntimeError("a bug, not a numerical limit")

    monkeypatch.setattr(_limits, "pinned", lambda *args, **kwargs: None)
    monkeypatch.setattr(_pld, "relaxed_pld", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        relaxed_reconstruction_bound(**PNEUMONIA_1E12)


def test_beyond_pld_s_step_ceiling_the_rdp_duality_bounds_every_value(monkeypatch):
    """Past _pld.MAX_STEPS (here lowered to 10, so that PLD can still be computed beside it) the worst case, the
    relaxed case and the membership-inference TPRs come from the duality with RDP's delta(eps): never below PLD's
    bound nor the exact power without subsampling (q = 1: the Gaussian trade-off, Phi(Phi^-1(kappa) + sqrt(T) /
    sigma)), not far above it, and labelled as such. Before, the PLD grid grew with T (1e8 steps ran for minutes)."""
    setting = dict(noise_multiplier=10.0, sample_rate=1.0, steps=50)
    pld = reconstruction_risk(**setting, kappa=0.01)
    monkeypatch.setattr(_pld, "MAX_STEPS", 10)
    rdp = reconstruction_risk(**setting, kappa=0.01)
    exact = float(special.ndtr(special.ndtri(0.01) + math.sqrt(50) / 10))
    assert pld.worst_case_via == "PLD" and pld.worst_case == pytest.approx(exact, rel=1e-3)
    assert exact <= pld.worst_case <= rdp.worst_case <= 2 * exact
    assert pld.relaxed <= rdp.relaxed == rdp.worst_case
    for fpr in MIA_FPRS:
        assert pld.tpr_at_fpr[fpr] <= rdp.tpr_at_fpr[fpr] <= 3 * pld.tpr_at_fpr[fpr]
    for via in (rdp.worst_case_via, rdp.relaxed_via, *rdp.tpr_at_fpr_via.values()):
        assert via.startswith("RDP duality (PLD composes at most")
    assert rdp.worst_case_edgeworth_via == "Edgeworth expansion" and rdp.gdp_via == "GDP/CLT"


def test_an_rdp_order_that_rounds_below_zero_is_not_read_as_delta_zero(monkeypatch):
    """dp_accounting reads an order whose RDP rounds below 0 (extreme noise) as delta = 0 at every eps, and the
    duality would then give kappa itself: here 0.01, below the exact power 0.0527 (q = 1, the Gaussian trade-off).
    That order is left out, so the bound stays above the exact power."""
    from dp_accounting.rdp import rdp_privacy_accountant

    compose = rdp_privacy_accountant.RdpAccountant.compose

    def rounded_below_zero(self, event, count=1):
        out = compose(self, event, count)
        self._rdp = [-1e-12 if i == 3 else r for i, r in enumerate(self._rdp)]
        return out

    monkeypatch.setattr(rdp_privacy_accountant.RdpAccountant, "compose", rounded_below_zero)
    monkeypatch.setattr(_pld, "MAX_STEPS", 10)
    exact = float(special.ndtr(special.ndtri(0.01) + math.sqrt(50) / 10))
    assert exact <= reconstruction_bound(noise_multiplier=10.0, sample_rate=1.0, steps=50, kappa=0.01) <= 2 * exact


def test_a_hundred_million_steps_are_bounded_by_rdp():
    """The CLI's and a study's step counts have no ceiling: 1e8 steps get an RDP bound, above PLD's at 2e6 steps
    (more steps help the attacker) and below certainty at this much noise."""
    setting = dict(noise_multiplier=60.0, sample_rate=1e-3, kappa=1e-3)
    at_ceiling = reconstruction_bound(**setting, steps=_pld.MAX_STEPS // 100)
    far = reconstruction_risk(**setting, steps=100_000_000)
    assert far.worst_case_via.startswith("RDP duality")
    assert at_ceiling < far.worst_case < 0.01

# --- arguments and the public surface --------------------------------------------------------------------------------


@pytest.mark.parametrize("kappa", [0, 1, 1.5, -0.1, math.nan, True, "0.01"])
def test_kappa_must_be_a_probability_strictly_between_0_and_1(kappa):
    with pytest.raises(ValueError, match="kappa"):
        reconstruction_bound(**REFERENCE, kappa=kappa)
    with pytest.raises(ValueError, match="kappa") as refused:
        reconstruction_risk(**REFERENCE, kappa=kappa)
    assert "prior success" in str(refused.value) and "false-positive" not in str(refused.value)


@pytest.mark.parametrize("bad", [dict(noise_multiplier=-1.0), dict(sample_rate=0.0), dict(sample_rate=1.5),
                                 dict(steps=-1), dict(steps=2.5)])
def test_invalid_settings_are_refused_with_their_name(bad):
    args = {**REFERENCE, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        reconstruction_bound(**args, kappa=1e-3)
    with pytest.raises(ValueError, match=next(iter(bad))):
        relaxed_reconstruction_bound(**args, kappa=1e-3)


def test_fpr_and_method_and_n_train_are_checked():
    with pytest.raises(ValueError, match="fpr") as refused:
        membership_inference_tpr(**REFERENCE, fpr=0.0)
    assert "false-positive rate" in str(refused.value) and "prior success" not in str(refused.value)
    with pytest.raises(ValueError, match="method must be one of"):
        reconstruction_bound(**REFERENCE, kappa=1e-3, method="rdp")
    with pytest.raises(ValueError, match="n_train"):
        default_kappa(1)
    assert default_kappa(8111) == REFERENCE_KAPPA


def test_the_method_registry_describes_each_method():
    assert RECONSTRUCTION_METHODS[0] == "pld"  # the default of reconstruction_bound
    assert [reconstruction_method(m).is_upper_bound for m in RECONSTRUCTION_METHODS] == [True, False, False]
    assert all(reconstruction_method(m).description for m in RECONSTRUCTION_METHODS)


@pytest.mark.parametrize("function", [reconstruction_bound, relaxed_reconstruction_bound, membership_inference_tpr,
                                      reconstruction_risk])
def test_privacy_arguments_are_keyword_only(function):
    kinds = {p.kind for p in inspect.signature(function).parameters.values()}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY}


def test_the_names_are_exported():
    names = {"RECONSTRUCTION_METHODS", "ReconstructionMethod", "reconstruction_method", "MIA_FPRS",
             "NEIGHBOUR_RECONSTRUCTION", "ReconstructionRisk", "default_kappa", "reconstruction_bound",
             "relaxed_reconstruction_bound", "membership_inference_tpr", "reconstruction_risk"}
    assert names <= set(accounting.__all__)


def test_the_released_count_multiplies_every_bound_by_its_likelihood_ratio(reference_risk):
    """A count of the training units released at eps_N beside the model: with or without the target it moves by one,
    so its likelihood ratio is at most e^eps_N, and the attacker's power over both is at most e^eps_N times the
    power over the model alone (capped at 1). eps_N = ln 2 doubles each number; eps_N = 0 is the model alone."""
    assert reconstruction_risk(**REFERENCE, kappa=REFERENCE_KAPPA, size_epsilon=0.0) == reference_risk
    doubled = reconstruction_risk(**REFERENCE, kappa=REFERENCE_KAPPA, size_epsilon=math.log(2))
    for name in ("worst_case", "worst_case_edgeworth", "relaxed", "gdp"):
        assert getattr(doubled, name) == pytest.approx(min(1.0, 2 * getattr(reference_risk, name)), rel=1e-12)
    for fpr, tpr in reference_risk.tpr_at_fpr.items():
        assert doubled.tpr_at_fpr[fpr] == pytest.approx(min(1.0, 2 * tpr), rel=1e-12)
    assert "eps_N = 0.693147" in doubled.assumptions and "eps_N" not in reference_risk.assumptions
    high = reconstruction_risk(noise_multiplier=0.5, sample_rate=0.5, steps=100, kappa=0.01, size_epsilon=1.0)
    assert high.worst_case == 1.0 and all(0 <= v <= 1 for v in high.tpr_at_fpr.values())
    with pytest.raises(ValueError, match="size_epsilon"):
        reconstruction_risk(**REFERENCE, kappa=REFERENCE_KAPPA, size_epsilon=-0.1)


def test_the_assumptions_state_the_no_noise_limit_the_high_budgets_reach():
    """Before: "The bounds reach ~100% long before eps = 1e6" beside bounds of 65.7 % at sigma 1e-6 (10 steps at q
    0.1: the target was never sampled with probability 0.9^10). The limit is now stated as the run's own number."""
    high = reconstruction_risk(noise_multiplier=1e-6, sample_rate=0.1, steps=10, kappa=1 / 64)
    never = 0.9 ** 10 * (1 - 1 / 64)
    assert high.worst_case == pytest.approx(1 - never, rel=1e-9)
    assert f"exceeds {math.ceil((1 - never) * 1e4) / 100:g}%, its value with no noise at all: the chance that " \
           "the target image was " \
           "sampled in some step at all" in high.assumptions
    assert "65.68%" in high.assumptions and "~100%" not in high.assumptions


# --- the REMOVE tests that pin gamma, against a simulation and against Pinsker ----------------------------------------

@pytest.mark.parametrize("test", ["max", "max_abs", "sum"])
def test_the_remove_tests_match_a_simulation(test):
    """The REMOVE tests are lower bounds on gamma that pin it at the ceiling where they reach it: one stated above
    its true power pins a value that is not the bound. T = 5, q = 0.3, sigma = 0.5, kappa = 0.05; the threshold is
    set here from the level alone (P(max z > c) = kappa: per step 1 - (1 - kappa)^(1/T), folded: half of it in each
    tail; the sum: N(0, T) above c), and the simulated test at it has level kappa without the target and the
    returned power with it, each within 4 standard errors."""
    sigma, q, steps, kappa, n = 0.5, 0.3, 5, 0.05, 400_000
    mu = 1 / sigma
    per_step = 1 - (1 - kappa) ** (1 / steps)
    if test == "sum":
        power = _limits.remove_sum_test_power(mu, q, steps, kappa)
        c = math.sqrt(steps) * special.ndtri(1 - kappa)
    else:
        power = _limits.remove_max_test_power(mu, q, steps, kappa, folded=test == "max_abs")
        c = special.ndtri(1 - per_step / 2) if test == "max_abs" else special.ndtri(1 - per_step)
    rng = np.random.default_rng(2)
    shift = (rng.random((n, steps)) < q) * mu
    if test == "max_abs":
        shift *= rng.choice([-1.0, 1.0], size=(n, steps))

    def rejects(z):
        return (z.sum(axis=1) if test == "sum" else (np.abs(z) if test == "max_abs" else z).max(axis=1)) > c

    level = float(np.mean(rejects(rng.standard_normal((n, steps)))))
    simulated_power = float(np.mean(rejects(rng.standard_normal((n, steps)) + shift)))
    assert abs(level - kappa) <= 4 * math.sqrt(kappa * (1 - kappa) / n)
    assert abs(simulated_power - power) <= 4 * math.sqrt(power * (1 - power) / n)
    assert kappa < power < 1


def pinsker_log(sigma: float, q: float, steps: int, kappa: float, *, relaxed: bool) -> float:
    """kappa + TV, TV <= sqrt(T KL / 2) and one step's KL <= log(1 + chi^2): chi^2 = q^2 (e^(mu^2) - 1) for the
    worst-case pair and q^2 (cosh(mu^2) - 1) for the relaxed one (E_P[(1 - q + q e^(-mu^2/2) cosh(mu z))^2] - 1),
    mu = 1/sigma. An upper bound on either gamma in both directions, derived here, not taken from _limits."""
    m2 = 1 / sigma ** 2
    chi2 = q * q * (math.cosh(m2) - 1 if relaxed else math.expm1(m2))
    return kappa + math.sqrt(steps * math.log1p(chi2) / 2)


# (sigma, q, T, kappa, relaxed), each with its value (measured): where a lower bound of the worst case, or one stated
# above its truth, would pin the value at the ceiling (1.0) far above this upper bound.
BELOW_PINSKER = [(10.0, 1.0, 7000, 1e-3, True),     # 0.0063: the sum test, which holds for the worst case only
                 (5.0, 0.9, 1000, 0.2, True),       # 0.482: likewise
                 (30.0, 0.9, 1, 0.6, True),         # 0.6002: the folded maximum test's level
                 (0.5, 0.001, 1000, 0.6, True),     # 0.653: the maximum test's T steps composed
                 (30.0, 1.0, 1000, 0.2, False)]     # 0.584: the sum test's threshold


@pytest.mark.parametrize("sigma, q, steps, kappa, relaxed", BELOW_PINSKER)
def test_no_value_exceeds_an_independent_pinsker_bound(sigma, q, steps, kappa, relaxed):
    args = dict(noise_multiplier=sigma, sample_rate=q, steps=steps, kappa=kappa)
    value = relaxed_reconstruction_bound(**args) if relaxed else reconstruction_bound(**args)
    assert kappa <= value <= pinsker_log(sigma, q, steps, kappa, relaxed=relaxed)
    assert value == reconstruction_risk(**args).__getattribute__("relaxed" if relaxed else "worst_case")


@pytest.mark.parametrize("sigma, q, steps, kappa", [(1.0, 0.1, 100, 1e-3), (0.5, 0.05, 400, 1e-12),
                                                    (3.0, 0.3, 50, 0.01)])
def test_the_gdp_value_is_the_clt_formula(sigma, q, steps, kappa):
    """gamma = Phi(Phi^-1(kappa) + q sqrt(T) sqrt(e^(1/sigma^2) - 1)) as METHODS.md s.7 states it, to rounding: in
    the second setting mu_T = 7.3 and kappa = 1e-12, where the value is 0.61, not certainty."""
    mu_t = q * math.sqrt(steps) * math.sqrt(math.expm1(1 / sigma ** 2))
    expected = special.ndtr(special.ndtri(kappa) + mu_t)
    value = reconstruction_bound(noise_multiplier=sigma, sample_rate=q, steps=steps, kappa=kappa, method="gdp")
    assert value == pytest.approx(expected, rel=1e-12) and value < 0.9


def test_the_no_noise_limit_in_the_assumptions_is_rounded_up_and_includes_the_count():
    """sigma -> 0, q = 0.1, T = 5, kappa = 0.01: 1 - 0.9^5 (1 - 0.01) = 41.5415 %, shown as 41.55 % (an upper
    bound, rounded up as eps is); with the count released at eps_N = ln 2 the limit is twice that, 83.083 %."""
    args = dict(noise_multiplier=1e-6, sample_rate=0.1, steps=5, kappa=0.01)
    assert "exceeds 41.55%, its value" in reconstruction_risk(**args).assumptions
    with_count = reconstruction_risk(**args, size_epsilon=math.log(2))
    assert "exceeds 83.09%, its value" in with_count.assumptions and "with kappa and eps_N" in with_count.assumptions


def test_the_gdp_value_is_never_pinned_by_the_exact_limits():
    """GDP is a sanity value, not a bound, and skips the limits that pin the others: q = 1e-3, T = 50 at
    sigma = 1e-4 pins the worst case at the no-noise power 1 - (1-q)^T (1-kappa) ~ 0.05, while the CLT formula
    (mu_T beyond 50) gives certainty."""
    args = dict(noise_multiplier=1e-4, sample_rate=1e-3, steps=50, kappa=1e-3)
    risk = reconstruction_risk(**args)
    assert risk.worst_case == pytest.approx(ceiling(1e-3, 50, 1e-3), rel=1e-9) and risk.worst_case < 0.06
    assert risk.gdp == reconstruction_bound(**args, method="gdp") == 1.0 and risk.gdp_via == "GDP/CLT"


def test_an_uncomputable_pld_falls_back_to_the_no_noise_power_not_to_certainty(monkeypatch):
    """Rare sampling (q = 1e-3, T = 50): the sigma = 0 power that takes an uncomputable PLD's place is
    1 - (1-q)^T (1-kappa) ~ 0.05, not 1."""
    monkeypatch.setattr(_limits, "pinned", lambda *args, **kwargs: None)
    monkeypatch.setattr(_pld, "interval", lambda *args: 1e5)
    value, via = reconstruction_module._worst_case(1e-4, 1e-3, 50, 1e-3)
    assert value == pytest.approx(ceiling(1e-3, 50, 1e-3), rel=1e-12) and via.startswith("trivial ceiling")


def test_the_rdp_duality_with_no_usable_order_gives_the_no_noise_power(monkeypatch):
    """Every RDP order left out: the duality has no delta to use, and the sigma = 0 power stands (~0.395 at
    q = 0.01, T = 50, kappa = 1e-3), not certainty."""
    monkeypatch.setattr(reconstruction_module, "rdp_curve", lambda events: (np.array([]), np.array([])))
    monkeypatch.setattr(_pld, "MAX_STEPS", 10)
    value, via = reconstruction_module._worst_case(1.0, 0.01, 50, 1e-3)
    assert value == pytest.approx(ceiling(0.01, 50, 1e-3), rel=1e-12) and via.startswith("RDP duality")


def test_the_rdp_duality_stays_above_the_exact_power_at_a_large_kappa(monkeypatch):
    """kappa = 0.5, q = 1, T = 50, sigma = 10: the exact power is Phi(sqrt(50) / 10) = 0.76, above the total
    variation delta(0) ~ 0.28. The duality's infimum runs over eps < 0 too, where delta(eps) grows by 1 - e^eps;
    reading delta(eps) as delta(0) there would bound the power by delta(0) alone, below the truth."""
    monkeypatch.setattr(_pld, "MAX_STEPS", 10)
    exact = float(special.ndtr(math.sqrt(50) / 10))
    value = reconstruction_bound(noise_multiplier=10.0, sample_rate=1.0, steps=50, kappa=0.5)
    assert exact <= value <= 1.0 and exact > 0.75


def test_a_released_count_at_eps_2_multiplies_by_e_squared(reference_risk):
    """e^2 = 7.39: the reference worst case 1.21 % becomes 8.97 %, still below the cap."""
    counted = reconstruction_risk(**REFERENCE, kappa=REFERENCE_KAPPA, size_epsilon=2.0)
    assert counted.worst_case == pytest.approx(math.e ** 2 * reference_risk.worst_case, rel=1e-12)
    assert counted.worst_case < 0.1


def test_the_no_noise_limit_reads_as_the_ceiling_of_every_bound():
    """The assumptions said "No noise helps the attacker more than none, where the bound is 100%: the chance ...",
    which reads as if noise helped the attacker and as if the bound were 100% and a sampling chance at once. It
    says what the number is: the most any reconstruction bound of the run can reach, its value with no noise at all."""
    text = reconstruction_risk(noise_multiplier=1e-6, sample_rate=0.1, steps=5, kappa=0.01).assumptions
    assert "No reconstruction bound here exceeds 41.55%, its value with no noise at all: the chance that the " \
           "target image was " \
           "sampled in some step at all" in text
    assert "helps the attacker" not in text
