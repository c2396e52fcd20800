"""Group privacy: what an image-level DP-SGD run implies for a patient with k training images (METHODS.md s.2b).

Two values are stated on every image-level card whose arm declares max_images_per_patient: the group-privacy formula
(k eps, k e^((k-1) eps) delta) of Dwork and Roth 2014, Lemma 2.2 (approximate DP: Vadhan 2017), and DP-SGD's tight
group value (Ganesh 2024: the PLD of a mixture of Gaussians with sensitivities 0..k and Binomial(k, q) weights).
A wrong value here is a wrong promise to every patient with several images, so each is checked against independent
truth: the formula worked by hand, the tight value at q = 1 against the exact Gaussian mechanism (Balle and Wang
2018, solved here with scipy, not dp_accounting), one step at q < 1 against the exact mixture (normal tails, both
directions), and the released count's eps, which ``patient_guarantee`` must add k times (the count counts each of the
patient's images).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmed.accounting import dp_sgd_epsilon, group_privacy
from dpmed.mechanisms.dp_sgd import DpSgdPlan, patient_guarantee
from dpmed.numbers import epsilon_text

DELTA = 1e-5


def test_the_formula_worked_by_hand():
    """eps = 1, delta = 1e-5, k = 3: (3 * 1, 3 e^(2 * 1) 1e-5) = (3, 2.2167e-4)."""
    g = group_privacy(epsilon=1.0, delta=DELTA, k=3)
    assert g.k == 3
    assert g.formula_epsilon == pytest.approx(3.0, rel=1e-12)
    assert g.formula_delta == pytest.approx(3 * math.e ** 2 * 1e-5, rel=1e-12)
    assert g.formula_delta == pytest.approx(2.21671682968e-4, rel=1e-10)
    assert not g.formula_is_vacuous
    assert g.tight_epsilon is None                       # not asked for: no DP-SGD parameters given


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 7.5])
def test_a_group_of_one_is_the_run_itself(epsilon):
    """k = 1: the formula gives (eps, delta) back, and so does the tight value (a patient with one image is one
    image), with or without DP-SGD parameters."""
    for extra in ({}, dict(noise_multiplier=1.0, sample_rate=0.1, steps=10)):
        g = group_privacy(epsilon=epsilon, delta=DELTA, k=1, **extra)
        assert g.formula_epsilon == epsilon and g.formula_delta == pytest.approx(DELTA, rel=1e-12)
        assert g.tight_epsilon == epsilon


def test_a_formula_delta_of_one_or_more_is_capped_at_one_and_called_vacuous():
    """eps = 10, k = 3: k e^((k-1) eps) delta = 3 e^20 1e-5 ~ 1.5e4, no guarantee at all; the formula says so by
    delta_k = 1 (not a number above 1, not an overflow)."""
    g = group_privacy(epsilon=10.0, delta=DELTA, k=3)
    assert g.formula_epsilon == 30.0 and g.formula_delta == 1.0 and g.formula_is_vacuous
    huge = group_privacy(epsilon=1e4, delta=DELTA, k=50)     # e^(49e4) overflows a float: still capped at 1
    assert huge.formula_delta == 1.0 and huge.formula_is_vacuous
    edge = group_privacy(epsilon=0.5, delta=0.4, k=2)        # 2 e^0.5 0.4 = 1.32: vacuous just above 1
    assert edge.formula_delta == 1.0


@pytest.mark.parametrize("sigma, steps, k", [(2.0, 1, 2), (4.0, 3, 3), (8.0, 10, 2), (6.0, 4, 5)])
def test_at_sample_rate_one_the_tight_value_is_the_gaussian_mechanism_of_k_images(sigma, steps, k,
                                                                                  exact_gaussian_epsilon):
    """q = 1: all k images join every step, so the patient moves the sum by k C each step: T Gaussian mechanisms
    of sensitivity k and std sigma, one of mu = k sqrt(T) / sigma. The PLD is pessimistic: at or above the exact
    eps, and within its discretisation (a few percent) of it."""
    exact = exact_gaussian_epsilon(k * math.sqrt(steps) / sigma, DELTA)
    run = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=1.0, steps=steps, delta=DELTA)
    tight = group_privacy(epsilon=run, delta=DELTA, k=k, noise_multiplier=sigma, sample_rate=1.0,
                          steps=steps).tight_epsilon
    assert tight is not None
    assert tight >= exact - 1e-9
    assert tight == pytest.approx(exact, rel=0.02)


@pytest.mark.parametrize("sigma, q, steps, k", [(1.5, 0.05, 200, 3), (3.0, 0.1, 100, 5), (2.0, 1.0, 3, 3)])
def test_the_tight_value_is_no_worse_than_the_formula_at_the_formula_s_delta(sigma, q, steps, k):
    """The formula is a valid bound, so the tight curve must lie under it: at the formula's delta_k the tight eps
    is at most k eps. (At the run's own, smaller delta the tight eps can exceed k eps: the two statements on a card
    are at different deltas, and comparing their eps alone would compare unlike things.) The tight value also
    grows with k and is at least the run's eps."""
    run = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=DELTA)
    formula = group_privacy(epsilon=run, delta=DELTA, k=k)
    assert not formula.formula_is_vacuous
    dp_sgd = dict(noise_multiplier=sigma, sample_rate=q, steps=steps)
    at_delta_k = group_privacy(epsilon=run, delta=formula.formula_delta, k=k, **dp_sgd).tight_epsilon
    assert at_delta_k <= formula.formula_epsilon
    tight = group_privacy(epsilon=run, delta=DELTA, k=k, **dp_sgd).tight_epsilon
    fewer = group_privacy(epsilon=run, delta=DELTA, k=k - 1, **dp_sgd).tight_epsilon
    assert run - 1e-9 <= fewer < tight


def test_the_tight_value_is_skipped_beyond_what_the_pld_resolves():
    g = group_privacy(epsilon=200.0, delta=DELTA, k=3, noise_multiplier=0.1, sample_rate=0.5, steps=100)
    assert g.formula_epsilon == 600.0 and g.tight_epsilon is None


@pytest.mark.parametrize("bad, refusal", [(dict(k=0), r"^k must be >= 1"), (dict(k=2.0), r"^k must be an integer"),
                                          (dict(delta=0.0), r"^delta must be in \(0, 1\)"),
                                          (dict(delta=1.0), r"^delta must be in \(0, 1\)")])
def test_impossible_arguments_are_refused(bad, refusal):
    with pytest.raises(ValueError, match=refusal):
        group_privacy(**{"epsilon": 1.0, "delta": DELTA, "k": 2, **bad})


@pytest.mark.parametrize("given, refusal", [
    (dict(noise_multiplier=1.0), r"sample_rate and steps"), (dict(noise_multiplier=1.0, steps=100), r"sample_rate"),
    (dict(sample_rate=0.01, steps=100), r"noise_multiplier"),
    (dict(noise_multiplier=-1.0, sample_rate=0.01, steps=100), r"^noise_multiplier must be >= 0"),
    (dict(noise_multiplier=1.0, sample_rate=2.0, steps=100), r"^sample_rate must be in \(0, 1\]"),
    (dict(noise_multiplier=1.0, sample_rate=0.01, steps=2.5), r"^steps must be an integer")])
def test_a_partial_or_impossible_dp_sgd_schedule_is_refused_in_words(given, refusal):
    """The tight value needs the whole schedule: one left out raised a bare TypeError (None compared with an int)
    or was dropped without a word, and an impossible one read as "could not be computed at this setting"."""
    with pytest.raises(ValueError, match=refusal):
        group_privacy(epsilon=1.0, delta=DELTA, k=3, **given)


PLAN = DpSgdPlan(noise_multiplier=1.5, max_grad_norm=1.0, sample_rate=0.05, steps=200, unit="image", delta=DELTA,
                 n_units=4000, accountant="pld")


@pytest.mark.parametrize("k", [2, 3])
def test_patient_guarantee_adds_the_released_count_s_eps_k_times(k):
    """An image-level run of a study that released its image count at size_epsilon s: the patient's images are k
    records of that count as of the training, so the run is (eps_train + s)-DP per image and the patient's
    formula is (k (eps_train + s), k e^((k-1)(eps_train + s)) delta); the tight value is the training's tight value
    plus k s. Leaving s out, or adding it once instead of k times, changes both. The two plans share one cache, as
    a study's arms do: the training's values are the same for both, and the released size is added after."""
    s = 0.25
    plan = PLAN.model_copy(update={"size_epsilon": s})
    train_eps = dp_sgd_epsilon(noise_multiplier=1.5, sample_rate=0.05, steps=200, delta=DELTA, accountant="pld")
    cache: dict = {}
    got = patient_guarantee(plan, k, cache)
    per_image = train_eps + s
    assert got.k == k
    assert got.formula_epsilon == pytest.approx(k * per_image, rel=1e-12)
    assert got.formula_delta == pytest.approx(k * math.exp((k - 1) * per_image) * DELTA, rel=1e-10)
    tight_train = group_privacy(epsilon=train_eps, delta=DELTA, k=k, noise_multiplier=1.5, sample_rate=0.05,
                                steps=200).tight_epsilon
    assert got.tight_epsilon == pytest.approx(tight_train + k * s, rel=1e-12)
    without = patient_guarantee(PLAN, k, cache)                       # the same run with N taken as public
    assert got.formula_epsilon - without.formula_epsilon == pytest.approx(k * s, rel=1e-9)
    assert got.tight_epsilon - without.tight_epsilon == pytest.approx(k * s, rel=1e-9)
    assert "plus the released size" in got.statement and "plus k times the released size's eps" in got.statement
    assert epsilon_text(got.formula_epsilon) in got.statement and epsilon_text(got.tight_epsilon) in got.statement


def test_patient_guarantee_says_when_the_formula_is_vacuous():
    """sigma 0.8, q 0.02, T 500: eps ~ 4.7 per image, so for k = 5 the formula's delta is far above 1."""
    plan = PLAN.model_copy(update={"noise_multiplier": 0.8, "sample_rate": 0.02, "steps": 500})
    got = patient_guarantee(plan, 5, {})
    assert got.formula_delta == 1.0 and "vacuous" in got.statement
    assert got.tight_epsilon is not None and epsilon_text(got.tight_epsilon) in got.statement


def test_a_shuffled_plan_gets_no_tight_value_even_after_its_poisson_twin_filled_the_cache():
    """The tight value is proved for Poisson sampling only. A study caches one value per setting, and the key left the
    sampling out, so a shuffled arm planned after an otherwise identical Poisson arm was given the Poisson value."""
    cache: dict = {}
    assert patient_guarantee(PLAN, 3, cache).tight_epsilon is not None
    assert patient_guarantee(PLAN.model_copy(update={"sampling": "shuffle"}), 3, cache).tight_epsilon is None


def test_the_tight_value_is_skipped_below_the_delta_the_pld_resolves():
    """After 1e4 steps the PLD resolves delta down to 1e-11 only (dpmed.accounting.epsilon._PLD_MIN_DELTA); below,
    its eps is double-precision noise, so no tight value is stated from it."""
    dp_sgd = dict(noise_multiplier=1.0, sample_rate=0.01, steps=10_000)
    assert group_privacy(epsilon=5.0, delta=1e-13, k=2, **dp_sgd).tight_epsilon is None
    assert group_privacy(epsilon=5.0, delta=1e-10, k=2, **dp_sgd).tight_epsilon is not None


def test_a_tight_value_the_pld_library_cannot_compute_is_left_out_not_a_crash(monkeypatch):
    """dp_accounting's mixture-of-Gaussians PLD can fail its own truncation search and add None to an int: a
    fresh-clone CI run of the attack study hit it in planning (the DP count it planned from is drawn fresh each
    time), and `dpmed run` ended in an internal error. The formula value stands without the tight one."""
    from dp_accounting.pld import pld_privacy_accountant

    def broken(self, event, count=1):
        raise TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'")

    monkeypatch.setattr(pld_privacy_accountant.PLDAccountant, "compose", broken)
    got = group_privacy(epsilon=1.0, delta=1e-5, k=2, noise_multiplier=1.59, sample_rate=0.076, steps=13)
    assert got.tight_epsilon is None and (got.formula_epsilon, got.k) == (2.0, 2)


def test_a_patient_eps_the_pld_library_cannot_compute_is_refused_in_words(monkeypatch):
    """The same dp_accounting failure in the patient-level composition: there is no formula value to fall back on,
    so it is a ValueError naming the cause, not dp_accounting's TypeError from deep inside its truncation search."""
    from dp_accounting.pld import pld_privacy_accountant

    from dpmed.accounting import ImageGroup, PoissonGaussianEvent, patient_epsilon

    def broken(self, event, count=1):
        raise TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'")

    monkeypatch.setattr(pld_privacy_accountant.PLDAccountant, "compose", broken)
    with pytest.raises(ValueError, match=r"mixture of Gaussians could not be computed at this setting \(TypeError"):
        patient_epsilon([], [ImageGroup(2, PoissonGaussianEvent(1.59, 0.076, 13))], delta=DELTA)


def test_beyond_the_steps_a_pld_composes_the_tight_value_is_not_computed_and_the_card_says_why(monkeypatch):
    """The eps accountant gives way to RDP above _pld.MAX_STEPS (2e6): a PLD's grid, time and memory grow with T.
    The tight group value built its mixture-of-Gaussians PLD at any T, so a study of 3e6 steps spent minutes on it
    in planning. It is now skipped there, said on the patient's note, and the formula still stands."""
    from dpmed.accounting import _pld, group

    def never(*args, **kwargs):
        raise AssertionError("the mixture-of-Gaussians PLD was composed beyond the PLD's step ceiling")

    monkeypatch.setattr(group, "_tight", never)
    steps = _pld.MAX_STEPS + 1
    got = group_privacy(epsilon=1.0, delta=DELTA, k=2, noise_multiplier=50.0, sample_rate=1e-4, steps=steps)
    assert got.tight_epsilon is None and (got.formula_epsilon, got.k) == (2.0, 2)
    assert f"at most {_pld.MAX_STEPS:,} steps" in got.tight_missing and f"{steps:,}" in got.tight_missing
    plan = PLAN.model_copy(update={"noise_multiplier": 50.0, "sample_rate": 1e-4, "steps": steps,
                                   "accountant": "rdp"})
    note = patient_guarantee(plan, 2, {})
    assert note.tight_epsilon is None
    assert "tight group value" in note.statement and "is not stated: a PLD composes at most" in note.statement


def test_a_tight_value_left_out_says_why():
    """Each reason the tight value is skipped is stated, not a silent gap on the card."""
    dp_sgd = dict(noise_multiplier=1.0, sample_rate=0.01, steps=10_000)
    assert "delta down to 1e-11" in group_privacy(epsilon=5.0, delta=1e-13, k=2, **dp_sgd).tight_missing
    big = group_privacy(epsilon=200.0, delta=DELTA, k=3, noise_multiplier=0.1, sample_rate=0.5, steps=100)
    assert "above the 500" in big.tight_missing
    assert group_privacy(epsilon=5.0, delta=1e-10, k=2, **dp_sgd).tight_missing is None


def test_a_patient_total_is_the_pld_of_both_units_runs_composed_by_hand(pld_by_hand):
    """Patient-unit steps and an image-unit run's steps as groups of a patient's 3 images, in one PLD: within the
    discretisation of dp_accounting's accountant composing the same events by hand on a finer grid, and between
    each part alone and the sum of the parts (basic composition, each part at delta / 2)."""
    from dpmed.accounting import ImageGroup, Ledger, PoissonGaussianEvent, ledger_epsilon, patient_epsilon

    patients = PoissonGaussianEvent(noise_multiplier=2.0, sample_rate=0.1, steps=300)
    images = PoissonGaussianEvent(noise_multiplier=3.0, sample_rate=0.05, steps=500)
    got = patient_epsilon([patients], [ImageGroup(3, images)], delta=DELTA)
    truth = pld_by_hand([patients], [(3, images)], DELTA)
    assert got >= truth * (1 - 1e-6) and got == pytest.approx(truth, rel=5e-3)
    part = {d: (ledger_epsilon(Ledger((patients,)), delta=d),
                group_privacy(epsilon=1.0, delta=d, k=3, noise_multiplier=3.0, sample_rate=0.05,
                              steps=500).tight_epsilon) for d in (DELTA, DELTA / 2)}
    assert max(part[DELTA]) < got < sum(part[DELTA / 2])


@pytest.mark.parametrize("sigmas, steps, k", [((2.0, 3.0), (2, 3), 2), ((4.0, 6.0), (5, 4), 3)])
def test_at_sample_rate_one_a_patient_total_is_one_gaussian_mechanism(sigmas, steps, k, exact_gaussian_epsilon):
    """q = 1: each patient-unit step is a Gaussian mechanism of sensitivity 1, each image-unit step one of sensitivity
    k (all the patient's k images join): together mu = sqrt(T1 / sigma1^2 + k^2 T2 / sigma2^2), exactly (Balle and
    Wang 2018). The pessimistic PLD lies at or above it, within its discretisation."""
    from dpmed.accounting import ImageGroup, PoissonGaussianEvent, patient_epsilon

    (s1, s2), (t1, t2) = sigmas, steps
    got = patient_epsilon([PoissonGaussianEvent(s1, 1.0, t1)], [ImageGroup(k, PoissonGaussianEvent(s2, 1.0, t2))],
                          delta=DELTA)
    exact = exact_gaussian_epsilon(math.sqrt(t1 / s1 ** 2 + k * k * t2 / s2 ** 2), DELTA)
    assert exact - 1e-9 <= got and got == pytest.approx(exact, rel=0.02)


def test_a_group_of_one_image_is_the_run_itself():
    """k = 1: a patient with one image in an image-unit run is one image, so the mixture is the Poisson-subsampled
    Gaussian, and the total is the ledger's eps of both runs' steps (dpmed's own PLD of them, not the mixture's)."""
    from dpmed.accounting import ImageGroup, Ledger, PoissonGaussianEvent, ledger_epsilon, patient_epsilon

    a, b = PoissonGaussianEvent(1.5, 0.05, 200), PoissonGaussianEvent(2.5, 0.1, 300)
    got = patient_epsilon([a], [ImageGroup(1, b)], delta=DELTA)
    assert got == pytest.approx(ledger_epsilon(Ledger((a, b)), delta=DELTA), rel=5e-3)


def test_a_patient_total_beyond_what_a_pld_resolves_says_why():
    """There is no fallback (dp_accounting's RDP accountant has no mixture of Gaussians), so each limit of the PLD
    is a refusal that says which: the steps it composes, the smallest delta it resolves, the largest eps."""
    from dpmed.accounting import ImageGroup, PoissonGaussianEvent, PoissonLaplaceEvent, _pld, patient_epsilon

    many = ImageGroup(2, PoissonGaussianEvent(50.0, 1e-4, _pld.MAX_STEPS + 1))
    with pytest.raises(ValueError, match=r"at most 2,000,000 steps .* RDP accountant has no analysis"):
        patient_epsilon([], [many], delta=DELTA)
    with pytest.raises(ValueError, match="resolves delta down to 1e-11 only after 10,000 steps"):
        patient_epsilon([PoissonGaussianEvent(1.0, 0.01, 10_000)], [], delta=1e-13)
    with pytest.raises(ValueError, match="above the 500 a PLD resolves"):
        patient_epsilon([], [ImageGroup(3, PoissonGaussianEvent(0.5, 0.5, 300))], delta=DELTA)
    with pytest.raises(TypeError, match="Poisson-sampled Gaussian steps"):
        ImageGroup(2, PoissonLaplaceEvent(1.0, 0.1, 10))


def test_a_patient_total_of_noiseless_steps_is_infinite_and_of_no_steps_zero():
    """Degenerate cases, by definition rather than by the PLD: a step without noise releases its sum exactly, so any
    composition that holds one has eps = infinity, beside noisy runs too, whichever unit the noiseless run has; runs
    of no steps release nothing (eps = 0), and add nothing beside others (the total of the others, bit for bit)."""
    from dpmed.accounting import ImageGroup, PoissonGaussianEvent, patient_epsilon

    noisy, silent = PoissonGaussianEvent(2.0, 0.1, 50), PoissonGaussianEvent(0.0, 0.1, 50)
    assert patient_epsilon([silent], [], delta=DELTA) == math.inf
    assert patient_epsilon([], [ImageGroup(2, silent)], delta=DELTA) == math.inf
    assert patient_epsilon([noisy], [ImageGroup(3, silent)], delta=DELTA) == math.inf
    assert patient_epsilon([silent], [ImageGroup(3, noisy)], delta=DELTA) == math.inf
    nothing = PoissonGaussianEvent(2.0, 0.1, 0)
    assert patient_epsilon([], [], delta=DELTA) == 0.0
    assert patient_epsilon([nothing], [ImageGroup(2, nothing)], delta=DELTA) == 0.0
    alone = patient_epsilon([noisy], [ImageGroup(2, noisy)], delta=DELTA)
    assert 0 < alone < math.inf
    assert patient_epsilon([noisy, nothing], [ImageGroup(2, noisy), ImageGroup(3, nothing)], delta=DELTA) == alone


def test_every_image_unit_run_of_a_patient_counts_two_seeds_of_one_setting_included(exact_gaussian_epsilon):
    """q = 1, so each image-unit step is a Gaussian mechanism of sensitivity k: two seeds of one setting (the same
    sigma, q and k, merged into one mixture over both runs' steps) and a run of another setting and k are together
    mu = sqrt(sum k_i^2 T_i / sigma_i^2) = sqrt(2 * 4 * 3 / 16 + 9 * 2 / 36) = sqrt(2). Counting a setting's seeds
    once (mu^2 = 1.25) or composing one setting only (1.5) would state less than the patient's eps."""
    from dpmed.accounting import ImageGroup, PoissonGaussianEvent, patient_epsilon

    seed = PoissonGaussianEvent(4.0, 1.0, 3)
    other = PoissonGaussianEvent(6.0, 1.0, 2)
    got = patient_epsilon([], [ImageGroup(2, seed), ImageGroup(2, seed), ImageGroup(3, other)], delta=DELTA)
    exact = exact_gaussian_epsilon(math.sqrt(2.0), DELTA)
    assert exact - 1e-9 <= got and got == pytest.approx(exact, rel=0.02)


def test_a_group_of_no_images_is_refused():
    """k = 0 would be the mixture of sensitivity 0 alone: an image-unit run that costs its patients nothing."""
    from dpmed.accounting import ImageGroup, PoissonGaussianEvent

    with pytest.raises(ValueError, match="k"):
        ImageGroup(0, PoissonGaussianEvent(2.0, 0.1, 10))


@pytest.mark.parametrize("unresolved", [math.inf, math.nan, 600.0])
def test_a_pld_eps_it_does_not_resolve_is_never_stated(monkeypatch, unresolved):
    """Where dp_accounting's PLD answers inf, nan or an eps above the 500 it resolves, neither the tight group value
    nor a patient's total is stated from it: the first is left out (the formula stands), the second refused. The
    answer is all that is tested, so the accountant composes nothing: the mixture's PLD took seconds to build."""
    from dp_accounting.pld import pld_privacy_accountant

    from dpmed.accounting import ImageGroup, PoissonGaussianEvent, patient_epsilon

    monkeypatch.setattr(pld_privacy_accountant.PLDAccountant, "compose", lambda self, event, count=1: self)
    monkeypatch.setattr(pld_privacy_accountant.PLDAccountant, "get_epsilon", lambda self, delta: unresolved)
    got = group_privacy(epsilon=1.0, delta=DELTA, k=2, noise_multiplier=2.0, sample_rate=0.1, steps=10)
    assert got.tight_epsilon is None and "could not be computed" in got.tight_missing
    with pytest.raises(ValueError, match="above the 500 a PLD resolves"):
        patient_epsilon([], [ImageGroup(2, PoissonGaussianEvent(2.0, 0.1, 10))], delta=DELTA)


def _one_step_group_epsilon(sigma: float, q: float, k: int, delta: float) -> float:
    """eps(delta) of one step for add/remove one patient with k images, each Poisson-sampled at q, exactly:
    P = sum_j Binomial(j; k, q) N(j, sigma^2) against Q = N(0, sigma^2). log P/Q rises with x, so each direction's
    hockey stick is a difference of normal tails past the point where the loss crosses eps (remove) or -eps (add).
    scipy only: independent of dp_accounting's mixture-of-Gaussians PLD."""
    from scipy import optimize, special, stats

    j = np.arange(k + 1)
    w = stats.binom.pmf(j, k, q)

    def loss(x):
        return special.logsumexp(np.log(w) + (2 * j * x - j * j) / (2 * sigma ** 2))

    def crossing(level):
        return optimize.brentq(lambda x: loss(x) - level, -1e3, 1e3, xtol=1e-13)

    def both(eps):
        x = crossing(eps)
        remove = np.dot(w, stats.norm.sf((x - j) / sigma)) - math.exp(eps) * stats.norm.sf(x / sigma)
        if -eps <= math.log(w[0]):               # the loss never falls below log w_0: the add side is 0
            return remove
        x = crossing(-eps)
        add = stats.norm.cdf(x / sigma) - math.exp(eps) * np.dot(w, stats.norm.cdf((x - j) / sigma))
        return max(remove, add)

    return optimize.brentq(lambda eps: both(eps) - delta, 1e-9, 200.0, xtol=1e-12)


@pytest.mark.parametrize("sigma, q, k", [(1.0, 0.1, 3), (2.0, 0.3, 5), (0.7, 0.05, 2), (0.5, 0.5, 4)])
def test_one_step_s_tight_value_is_the_exact_mixture_of_gaussians_at_a_rate_below_one(sigma, q, k):
    """At q < 1 the patient's J ~ Binomial(k, q) images make the step a mixture; its exact eps in both directions
    (normal tails, no dp_accounting) lies at or below the tight value (a smaller one would promise too much), and
    within the PLD's discretisation of it. Weights or sensitivities off by one image, or one direction left out,
    move it by far more."""
    exact = _one_step_group_epsilon(sigma, q, k, DELTA)
    run = dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=1, delta=DELTA)
    tight = group_privacy(epsilon=run, delta=DELTA, k=k, noise_multiplier=sigma, sample_rate=q,
                          steps=1).tight_epsilon
    assert exact - 1e-9 <= tight and tight == pytest.approx(exact, rel=0.01)
