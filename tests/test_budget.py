"""The study's privacy as a whole (dpmed.budget): every run on the same patients composes, finished runs left out of
the study file included; a budget refuses what exceeds it or has no single eps. Planned runs, no training."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest

from dpmed import accounting
from dpmed.budget import check_budget, study_privacy
from dpmed.config import PrivacyBudget, load_study, plan_runs
from dpmed.errors import PrivacyError
from dpmed.mechanisms import PlanContext
from dpmed.numbers import delta_text, epsilon_text
from dpmed.records import StudyPrivacy


def _plans(study, n: int = 140):
    """The study planned on n training images of one patient each, 16 x 16 grey."""
    return plan_runs(study, PlanContext(images_per_patient=np.ones(n, dtype=np.int64), image_shape=(1, 16, 16)))


BUDGET = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
          "privacy_budget: {epsilon: 10, delta: 1e-5}\n"
          "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 8}]\n")


def _privacy(study, finished=()):
    return study_privacy(_plans(study), finished, budget=study.privacy_budget)


def test_a_study_over_its_total_budget_stops_before_training(write_study):
    """Two eps-8 runs on the same images compose to more than 8; the declared budget catches it."""
    study = load_study(write_study(BUDGET))
    with pytest.raises(PrivacyError, match=r"2 DP-SGD runs together cost eps = 1\d\.\d+ .* above the budget eps = 10"):
        check_budget(study.privacy_budget, _privacy(study))
    wider = load_study(write_study(BUDGET.replace("epsilon: 10,", "epsilon: 20,")))
    privacy = _privacy(wider)
    check_budget(wider.privacy_budget, privacy)
    assert 8 < privacy.dp_sgd_epsilon < 16 and privacy.accountant == "pld" and privacy.unit == "patient"


def test_the_budget_counts_every_run_on_the_same_patients(write_study, make_record):
    """A non-private or local-DP run on the same patients is released too: the total is then infinite, or has no
    single eps, and a budget refuses the study; a finished run that left the study file still counts."""
    with_baseline = BUDGET.replace("arms: [", "arms: [{name: base, mechanism: none}, ")
    study = load_study(write_study(with_baseline.replace("epsilon: 10,", "epsilon: 1000,")))
    privacy = _privacy(study)
    assert privacy.epsilon == float("inf") and privacy.not_private == ("base_seed0", "base_seed1")
    with pytest.raises(PrivacyError, match="base_seed0, base_seed1 train without privacy"):
        check_budget(study.privacy_budget, privacy)
    local = BUDGET.replace("arms: [", "arms: [{name: lap, mechanism: pixel_laplace, scale: 1}, ")
    with pytest.raises(PrivacyError, match="another neighbour relation"):
        study = load_study(write_study(local.replace("epsilon: 10,", "epsilon: 1000,")))
        check_budget(study.privacy_budget, _privacy(study))
    one = load_study(write_study(BUDGET.replace("seeds: [0, 1]", "seeds: [0]")))
    alone = _privacy(one)
    plan = _plans(one)[0]
    d = plan.privacy
    left = make_record("dp_eps8_C1_seed7", "dp", "dp_sgd", eps=8.0, seed=7).model_copy(update={
        "plan": plan.model_copy(update={"run_id": "dp_eps8_C1_seed7", "seed": 7}),
        "ledger": accounting.Ledger().record(accounting.dp_sgd_event(
            noise="gaussian", noise_multiplier=d.noise_multiplier, sample_rate=d.sample_rate, steps=d.steps))})
    both = _privacy(one, [left])
    assert both.dp_sgd_runs == ("dp_eps8_C1_seed0", "dp_eps8_C1_seed7")
    assert both.dp_sgd_epsilon > alone.dp_sgd_epsilon
    # a finished run counts with the steps its ledger recorded, not those its plan would take today: T and 3T steps
    # at one q and sigma compose as one run of 4T
    longer = left.model_copy(update={"ledger": accounting.Ledger().record(accounting.dp_sgd_event(
        noise="gaussian", noise_multiplier=d.noise_multiplier, sample_rate=d.sample_rate, steps=3 * d.steps))})
    assert _privacy(one, [longer]).dp_sgd_epsilon == pytest.approx(accounting.dp_sgd_epsilon(
        noise_multiplier=d.noise_multiplier, sample_rate=d.sample_rate, steps=4 * d.steps, delta=1e-5), rel=1e-3)
    # shuffled batches: no accountant covers the run, so it counts as a release without privacy
    shuffled = load_study(write_study(BUDGET.replace("arms: [", "arms: [{name: sh, mechanism: dp_sgd, "
                                                                "target_epsilon: 8, sampling: shuffle}, ")))
    assert _privacy(shuffled).not_private == ("sh_eps8_C1_seed0", "sh_eps8_C1_seed1")


def test_runs_with_different_units_have_no_single_total(write_study):
    text = BUDGET.replace("arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 8}]",
                          "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 1}, "
                          "{name: img, mechanism: dp_sgd, target_epsilon: 1, privacy_unit: image}]")
    study = load_study(write_study(text))
    privacy = _privacy(study)
    assert privacy.dp_sgd_epsilon is None and "do not compose" in privacy.statement
    with pytest.raises(PrivacyError, match="do not compose"):
        check_budget(study.privacy_budget, privacy)


def test_a_budget_delta_at_or_above_one_over_n_is_refused_before_training(tmp_path, write_study):
    """The study's total eps is composed at the budget's delta: at delta 0.5 the two eps-8 runs composed to a small
    eps and passed a budget they exceed at any meaningful delta."""
    from dpmed.errors import ConfigError
    from dpmed.study import prepare_study

    study = load_study(write_study(BUDGET.replace("delta: 1e-5", "delta: 0.5")))
    with pytest.raises(ConfigError, match=r"privacy_budget.delta 0.5 is at or above 1/N = 1/\d+ .* training patients"):
        prepare_study(study, out=tmp_path)
    prepare_study(load_study(write_study(BUDGET.replace("epsilon: 10,", "epsilon: 20,"))), out=tmp_path)


def test_a_released_count_is_paid_once_however_many_runs_plan_from_it(write_study):
    """Two seeds plan from the one count of training patients: the study adds its eps once, to the composed
    training; a count released at another eps (an earlier draw of the folder) is another release, added too."""
    study = load_study(write_study(BUDGET.replace("epsilon: 10,", "epsilon: 20,")))
    context = PlanContext(images_per_patient=np.ones(140, dtype=np.int64), image_shape=(1, 16, 16),
                          released_sizes={"patients": 150}, size_epsilon=0.05)
    plans = plan_runs(study, context)
    privacy = study_privacy(plans, budget=study.privacy_budget)
    ledger = accounting.Ledger()
    for plan in plans:
        p = plan.privacy
        ledger = ledger.record(accounting.dp_sgd_event(noise=p.noise, noise_multiplier=p.noise_multiplier,
                                                       sample_rate=p.sample_rate, steps=p.steps))
    training = accounting.ledger_epsilon(ledger, delta=1e-5, accountant="pld")
    assert privacy.dp_sgd_epsilon == pytest.approx(training + 0.05)
    assert "1 DP count of the training set: patients at eps 0.05" in privacy.statement
    other = plan_runs(study, replace(context, size_epsilon=0.1))[:1]
    both = study_privacy(plans + [other[0].model_copy(update={"run_id": "old"})], budget=study.privacy_budget)
    assert both.dp_sgd_epsilon > training + 0.05 + 0.1


def test_the_samplers_shares_add_to_the_studys_delta_or_come_out_of_the_budgets(write_study):
    """At sigma 0.15 one unit moves a coordinate 6.7 std, near the sampler's bound: each run pays a share of delta
    that float64 sees. Without a budget the study's delta is the runs' plus every share; with one, the runs are
    composed at the budget's delta less the shares, so that the total holds at the budget's delta."""
    text = BUDGET.replace("target_epsilon: 8}]", "noise_multiplier: 0.15, accountant: rdp}]")
    free = load_study(write_study(text.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "")))
    plans = _plans(free)
    shares = sum(p.privacy.sampler_delta for p in plans)
    assert shares > 1e-4 * 1e-5
    privacy = study_privacy(plans)
    assert privacy.delta == pytest.approx(1e-5 + shares, rel=1e-12, abs=0) and privacy.delta > 1e-5
    budgeted = load_study(write_study(text.replace("epsilon: 10,", "epsilon: 1.0e+6, accountant: rdp,")))
    privacy = study_privacy(_plans(budgeted), budget=budgeted.privacy_budget)
    ledger = accounting.Ledger()
    for plan in _plans(budgeted):
        p = plan.privacy
        ledger = ledger.record(accounting.dp_sgd_event(noise=p.noise, noise_multiplier=p.noise_multiplier,
                                                       sample_rate=p.sample_rate, steps=p.steps))
    assert privacy.delta == 1e-5
    assert privacy.dp_sgd_epsilon == pytest.approx(
        accounting.ledger_epsilon(ledger, delta=1e-5 - shares, accountant="rdp"), rel=1e-9)
    assert privacy.dp_sgd_epsilon > accounting.ledger_epsilon(ledger, delta=1e-5, accountant="rdp")


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_budget_whose_delta_the_samplers_shares_use_up_exactly_is_refused_for_them(write_study, accountant):
    """The runs compose at the budget's delta less the samplers' shares. Where the shares are all of it, that is
    delta 0, at which no accountant certifies anything: the refusal says the samplers spent the budget's delta, not
    that the accountant failed at a delta 0 the user never gave, nor that another accountant would do."""
    text = BUDGET.replace("target_epsilon: 8}]", "noise_multiplier: 0.15, accountant: rdp}]")
    free = load_study(write_study(text.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "")))
    shares = sum(p.privacy.sampler_delta for p in _plans(free))
    study = load_study(write_study(text.replace(
        "{epsilon: 10, delta: 1e-5}", f"{{epsilon: 1.0e+6, delta: {shares!r}, accountant: {accountant}}}")))
    assert study.privacy_budget.delta == shares
    privacy = _privacy(study)
    assert privacy.dp_sgd_epsilon is None
    with pytest.raises(PrivacyError, match="noise samplers, whose draws are bounded, already cost") as refused:
        check_budget(study.privacy_budget, privacy)
    assert "could not certify" not in str(refused.value) and "privacy_budget.accountant" not in str(refused.value)


def test_without_a_budget_the_study_takes_the_largest_delta_and_rdp_if_any_run_needs_it(write_study):
    """The docstring's two rules: the runs' largest delta (the weakest claim among them), and RDP as soon as one run
    was certified with RDP (PLD might not certify the composition)."""
    text = BUDGET.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "").replace(
        "target_epsilon: 8}]", "target_epsilon: 8, delta: 1.0e-6}, {name: r, mechanism: dp_sgd, target_epsilon: 8, "
        "accountant: rdp}]")
    privacy = study_privacy(_plans(load_study(write_study(text))))
    assert privacy.accountant == "rdp" and privacy.delta == pytest.approx(1e-5, rel=1e-6)


def test_runs_under_different_caps_of_images_per_patient_do_not_compose_into_one_eps(write_study):
    """A cap keeps each patient's k images of smallest keyed hash, so one image added to the data as supplied can
    swap one kept image for another: a capped run's add/remove is of the capped set. Composed under one label with an
    uncapped run, the total read as add/remove one supplied image, which the capped run does not give."""
    capped = BUDGET.replace("target_epsilon: 8}]", "target_epsilon: 8}, {name: cap, mechanism: dp_sgd, "
                            "target_epsilon: 8, privacy_unit: image, max_images_per_patient: 1}]")
    study = load_study(write_study(capped.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "")
                                   .replace("arms: [{name: dp,", "arms: [{name: dp, privacy_unit: image,")))
    privacy = study_privacy(plan_runs(study, PlanContext(images_per_patient=np.full(70, 2, dtype=np.int64),
                                                         image_shape=(1, 16, 16))))
    assert privacy.dp_sgd_epsilon is None and privacy.unit is None
    assert ("units image and image of the training set as capped at 1 per patient do not compose into one eps"
            in privacy.statement)
    # before: "no single eps (RDP; neighbours: add/remove one image or image of the training set as capped ...)",
    # an accountant that composed nothing, and two relations run together
    assert "(neighbours: add/remove one image; add/remove one image of the training set as capped at 1 per patient)" \
        in privacy.statement and "RDP" not in privacy.statement and "PLD" not in privacy.statement
    assert "one image or patient" not in privacy.statement                  # no arm has the patient as its unit
    alone = load_study(write_study(BUDGET.replace("target_epsilon: 8}]", "target_epsilon: 8, privacy_unit: image, "
                                                  "max_images_per_patient: 1}]")))
    one = study_privacy(plan_runs(alone, PlanContext(images_per_patient=np.full(70, 2, dtype=np.int64),
                                                     image_shape=(1, 16, 16))))
    assert one.dp_sgd_epsilon is not None
    assert "add/remove one image of the training set as capped at 1 per patient" in one.statement


def test_a_capped_run_that_kept_its_own_seed_s_images_composes_with_the_study_s_only_for_the_patient(
        write_study, make_record):
    """A version before the study-wide key kept each seed's own images (keyed by the run's seed), and such a finished
    run left in the folder is still released. It trained on another capped set than the study's runs, so no eps of
    add/remove one image of "the" capped set holds for both; each choice reads a patient's own images alone, so for
    the patient they still compose, as groups of at most k images."""
    study = load_study(write_study(MIXED.replace("{name: dp, mechanism: dp_sgd, target_epsilon: 1}, ", "")
                                   .replace("seeds: [0, 1]", "seeds: [0]")
                                   .replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "")))
    plans = plan_runs(study, MIXED_CONTEXT)
    assert study_privacy(plans).unit == "image of the training set as capped at 2 per patient"
    p = plans[0].privacy
    old = plans[0].model_copy(update={"run_id": "img_eps1_C1_seed7", "seed": 7,
                                      "privacy": p.model_copy(update={"image_cap_key": None})})
    record = make_record(old.run_id, "img", "dp_sgd", eps=1.0, seed=7).model_copy(update={
        "plan": old, "ledger": accounting.Ledger().record(_event(old))})
    privacy = study_privacy(plans, [record])
    assert privacy.unit == "patient", privacy.statement
    groups = [accounting.ImageGroup(2, _event(p)) for p in (plans[0], old)]
    assert privacy.dp_sgd_epsilon == pytest.approx(accounting.patient_epsilon([], groups, delta=1e-5) + 2 * 0.05,
                                                   rel=1e-12)
    # two old runs of one seed kept one set: they compose per image, as add/remove in that set
    twin = record.model_copy(update={"run_id": "img_eps2_C1_seed7", "plan": old.model_copy(update={
        "run_id": "img_eps2_C1_seed7"})})
    assert study_privacy([], [record, twin]).unit == (
        "image of the training set as capped at 2 per patient, its images kept by seed 7's key")


def test_a_run_whose_noise_one_unit_outruns_makes_the_study_not_dp(write_study):
    """eps 1e9 needs noise so small that one unit moves a coordinate past every draw of the sampler
    (`accounting.truncation`): that run holds no claim, so neither does the study, and a budget refuses it."""
    high = BUDGET.replace("target_epsilon: 8}", "target_epsilon: 8}, {name: huge, mechanism: dp_sgd, "
                          "target_epsilon: 1.0e+9, accountant: rdp}").replace("epsilon: 10,", "epsilon: 1.0e+12,")
    study = load_study(write_study(high))
    privacy = _privacy(study)
    assert privacy.not_private == ("huge_eps1e09_C1_seed0", "huge_eps1e09_C1_seed1")
    assert privacy.epsilon == float("inf") and privacy.dp_sgd_runs == ("dp_eps8_C1_seed0", "dp_eps8_C1_seed1")
    assert privacy.delta == 1e-5                          # the eps-8 runs' samplers cost nothing float64 can see
    with pytest.raises(PrivacyError, match="noise below what the sampler draws"):
        check_budget(study.privacy_budget, privacy)


LOCAL = ("name: l\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
         "arms: [{name: lap, mechanism: pixel_laplace, scale: 0.5}]\n")


def test_local_dp_runs_on_the_same_images_add_up_per_image(write_study, make_record):
    """Each local-DP run releases a new noisy copy of every training image: two seeds of b = 0.5 on 16x16 grey images
    are 512 each, 1,024 per image together (pure, basic composition), stated under their own neighbour relation; a
    finished run left out of the study file released its copy too. DP-SGD's eps does not absorb it."""
    study = load_study(write_study(LOCAL))
    privacy = _privacy(study)
    assert privacy.local_dp == ("lap_b0.5_seed0", "lap_b0.5_seed1")
    assert (privacy.local_dp_epsilon, privacy.local_dp_delta, privacy.epsilon) == (1024.0, 0.0, None)
    assert privacy.statement == (
        "the 2 local-DP runs together (lap_b0.5_seed0, lap_b0.5_seed1): eps_image = 1,024 at delta = 0 "
        "(basic composition of the Laplace mechanism, Dwork & Roth 2014, Thm 3.16; neighbours: "
        f"{accounting.NEIGHBOUR_LDP_IMAGE}), under another neighbour relation than DP-SGD's")
    old_plan = _plans(load_study(write_study(LOCAL.replace("scale: 0.5", "scale: 0.25"), "old.yaml")))[0]
    old = make_record("lap_b0.25_seed0", "lap", "pixel_laplace").model_copy(update={
        "plan": old_plan, "ledger": accounting.Ledger().record(
            accounting.LaplaceImageEvent(scale=0.25, value_range=1.0, dimension=256))})
    assert _privacy(study, [old]).local_dp_epsilon == 512 + 512 + 1024
    with_dp = load_study(write_study(LOCAL.replace("}]", "}, {name: dp, mechanism: dp_sgd, target_epsilon: 8}]")))
    both = _privacy(with_dp)
    assert both.local_dp_epsilon == 1024 and both.epsilon is None and 8 < both.dp_sgd_epsilon < 16
    assert both.statement.endswith("under another neighbour relation than DP-SGD's, so no single total with it")


def test_local_gaussian_runs_compose_as_one_gaussian_mechanism(write_study):
    """Swept std and two seeds: four releases of each image, composed from the runs' plans (mu = sqrt(sum mu_i^2))
    at the arm's delta."""
    study = load_study(write_study(LOCAL.replace("{name: lap, mechanism: pixel_laplace, scale: 0.5}",
                                                 "{name: g, mechanism: pixel_gaussian, std: [4, 8], delta: 1.0e-6}")))
    privacy = _privacy(study)
    mu = math.sqrt(2 * (16 / 4) ** 2 + 2 * (16 / 8) ** 2)
    assert privacy.local_dp_delta == 1e-6
    assert privacy.local_dp_epsilon == pytest.approx(accounting.gaussian_epsilon(mu=mu, delta=1e-6), rel=1e-12)
    total = epsilon_text(privacy.local_dp_epsilon)
    assert privacy.statement.startswith("the 4 local-DP runs together (g_s4_seed0, g_s4_seed1, g_s8_seed0, "
                                        f"g_s8_seed1): eps_image = {total} at delta = 1e-06 (the Gaussian "
                                        "runs composed into one Gaussian mechanism")


def test_reproducible_local_runs_keep_their_listing_without_a_total(write_study):
    """A reproducible run is not DP against anyone who knows the seed: no per-image total is claimed for it."""
    study = load_study(write_study(LOCAL))
    privacy = study_privacy(_plans(study), reproducible=True)
    assert privacy.local_dp_epsilon is None and privacy.local_dp_delta is None
    # said first: before, at the end of the statement, after the runs' eps that it voids
    assert privacy.statement == ("NOT DP against anyone who knows the seed (reproducible mode); as accounted: 2 "
                                 "local-DP run(s) (lap_b0.5_seed0, lap_b0.5_seed1) hold per image under another "
                                 "neighbour relation and do not compose with DP-SGD's eps")


def test_a_local_run_whose_noise_cannot_span_the_pixel_range_counts_as_no_privacy(write_study):
    """b = R / 50: a pixel at 0 is never released as R (`dpmed.mechanisms.pixel_laplace`): no per-image eps holds,
    so the study's releases together are not DP, and the run is not added to the local total."""
    study = load_study(write_study(BUDGET.replace("arms: [", "arms: [{name: lap, mechanism: pixel_laplace, "
                                                  "scale: [0.5, 0.02]}, ").replace("seeds: [0, 1]", "seeds: [0]")))
    privacy = _privacy(study)
    assert privacy.not_private == ("lap_b0.02_seed0",) and privacy.epsilon == float("inf")
    assert privacy.local_dp == ("lap_b0.5_seed0",) and privacy.local_dp_epsilon == 2 * 256


def test_a_budget_is_not_refused_for_a_sampler_share_that_the_composition_can_absorb(write_study):
    """An eps-3000 run's sampler share (2e-15 here, at q 1/7) made a budget at eps 1e5 refuse the study: runs
    calibrated at the budget's delta plus any share exceeded it. The composition now takes the shares from the
    budget's delta, so the total holds at the budget's delta itself."""
    study = load_study(write_study(BUDGET.replace("target_epsilon: 8}", "target_epsilon: 3000, accountant: rdp}")
                                   .replace("epsilon: 10,", "epsilon: 100000, accountant: rdp,")))
    plans = _plans(study)
    assert all(1e-5 + p.privacy.sampler_delta > 1e-5 for p in plans)       # a share float64 does not round away
    privacy = _privacy(study)
    check_budget(study.privacy_budget, privacy)
    assert privacy.delta == 1e-5 and 3000 < privacy.dp_sgd_epsilon < 1e5


def test_a_large_composed_local_eps_is_written_in_digits():
    """Before: "eps_image = 1.638e+04 per image" for two runs of 8,192 each, beside rows written "8,192"."""
    values = (16384.0, 87808.0, 1024.0, 49.31927, 0.99942, 8.19249, 8.192, 1.0, 2.5e15, 1e15)
    assert [epsilon_text(v) for v in values] == [
        "16,384", "87,808", "1,024", "49.32", "0.9995", "8.193", "8.192", "1", "2.5e15", "1e15"]   # never rounded down
    assert [epsilon_text(v) for v in (2.5123e15, 1000.0, 1234.2, 999.9999999999999)] == [
        "2.513e15", "1,000", "1,235", "1,000"]          # up at every scale; a float's last bits are not a digit


def test_a_total_just_over_the_budget_never_reads_as_equal_to_it():
    """Before: "cost eps = 8 at delta = 1e-05 ..., above the budget eps = 8" for a total of 8.00001 (rounded to
    nearest); a total is rounded up, like every eps dpmed prints."""
    privacy = StudyPrivacy(dp_sgd_runs=("dp_seed0", "dp_seed1"), not_private=(), local_dp=(), unit="patient",
                           delta=1e-5, accountant="pld", dp_sgd_epsilon=8.00001, epsilon=8.00001, reproducible=False,
                           statement="")
    with pytest.raises(PrivacyError, match=r"cost eps = 8\.001 at delta = 1e-05 .* above the budget eps = 8;"):
        check_budget(PrivacyBudget(epsilon=8, delta=1e-5), privacy)
    closer = privacy.model_copy(update={"dp_sgd_epsilon": 8.000000001})      # inside the rounding's tolerance
    with pytest.raises(PrivacyError, match=r"cost eps = 8\.000000001 at delta = 1e-05 .* above the budget eps = 8;"):
        check_budget(PrivacyBudget(epsilon=8, delta=1e-5), closer)
    check_budget(PrivacyBudget(epsilon=8, delta=1e-5), privacy.model_copy(update={"dp_sgd_epsilon": 8.0}))  # spent


def test_runs_each_within_pld_s_reach_whose_composition_is_not_are_composed_by_rdp(write_study):
    """Six runs at about 400 each: before, "no single eps (PLD could not certify the composition ...
    accountant='rdp' has none)" without a budget, and a refusal naming a Python argument under one."""
    text = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1, 2, 3, 4, 5]\n"
            "training: {epochs: 20, batch_size: 20}\narms: [{name: dp, mechanism: dp_sgd, noise_multiplier: 0.2}]\n")
    study = load_study(write_study(text))
    plans = _plans(study)
    assert {p.privacy.accountant for p in plans} == {"pld"}
    privacy = study_privacy(plans)
    ledger = accounting.Ledger()
    for p in plans:
        ledger = ledger.record(accounting.dp_sgd_event(noise="gaussian", noise_multiplier=0.2,
                                                       sample_rate=p.privacy.sample_rate, steps=p.privacy.steps))
    expected = accounting.ledger_epsilon(ledger, delta=plans[0].privacy.delta, accountant="rdp")   # at the runs' delta
    assert privacy.accountant == "rdp" and privacy.dp_sgd_epsilon == pytest.approx(expected, rel=1e-6)
    assert expected > 500
    shares = sum(p.privacy.sampler_delta for p in plans)        # 3e-11 of the 1.01e-05
    assert (f"at delta = 1.01e-05 (1e-05 + {delta_text(shares)} for the noise samplers' bounded draws, rounded up; "
            "RDP; neighbours: add/remove one patient) (the composition lies beyond what PLD resolves") in (
        privacy.statement)
    budgeted = load_study(write_study(text + "privacy_budget: {epsilon: 100000, delta: 1e-4}\n"))
    privacy = study_privacy(_plans(budgeted), budget=budgeted.privacy_budget)
    assert privacy.dp_sgd_epsilon is None and "set privacy_budget.accountant: rdp" in privacy.statement


def test_laplace_runs_certified_by_the_pure_bound_compose_under_it(write_study):
    """A Laplace arm on the pure accountant made the study compose by RDP, which has no analysis of Laplace noise:
    "no single eps" for a study whose pure bound is the runs' sum. The pure total of T steps each is that sum."""
    text = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
            "training: {epochs: 2, batch_size: 20}\n"
            "arms: [{name: lap, mechanism: dp_sgd, noise: laplace, accountant: pure, target_epsilon: 8}]\n")
    plans = _plans(load_study(write_study(text)))
    privacy = study_privacy(plans)
    ledger = accounting.Ledger()
    for p in plans:
        ledger = ledger.record(accounting.dp_sgd_event(noise="laplace", noise_multiplier=p.privacy.noise_multiplier,
                                                       sample_rate=p.privacy.sample_rate, steps=p.privacy.steps))
    assert privacy.accountant == "pure"
    assert privacy.dp_sgd_epsilon == pytest.approx(accounting.ledger_epsilon(ledger, delta=1e-5, accountant="pure"))
    assert 8 < privacy.dp_sgd_epsilon <= 16      # two runs of at most 8 each


def test_a_studys_delta_that_the_samplers_tiny_shares_round_up_says_why(write_study):
    """Laplace noise at eps 8 under PLD: the samplers' shares (about 1e-15) made the study's 1e-05 read 1.01e-05, as
    rounding up must, with no word of why; a Gaussian study's shares leave 1e-05 as it is and need none."""
    text = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\n"
            "training: {epochs: 2, batch_size: 20}\n"
            "arms: [{name: dp, mechanism: dp_sgd, noise: laplace, target_epsilon: 8}]\n")
    plans = _plans(load_study(write_study(text)))
    shares = sum(p.privacy.sampler_delta for p in plans)
    privacy = study_privacy(plans)
    assert 0 < shares < 1e-12 and delta_text(privacy.delta) == "1.01e-05"
    assert f"at delta = 1.01e-05 (1e-05 + {delta_text(shares)} for the noise samplers' bounded draws, rounded up; " \
           "PLD; neighbours: add/remove one patient)" in privacy.statement
    gaussian = study_privacy(_plans(load_study(write_study(text.replace("noise: laplace, ", "")))))
    assert delta_text(gaussian.delta) == "1e-05" and "noise sampler" not in gaussian.statement


def test_the_pure_bound_is_stated_at_the_delta_its_samplers_cost_alone(write_study):
    """The pure bound holds at delta 0 (Balle et al. 2018); the sampler's bounded draws add their share. Before, a
    pure run's card and the study read "at delta = 1.01e-05", the arm's delta that the pure bound never used: a
    pure-DP claim printed as an approximate one a billion times weaker in delta."""
    from dpmed.study import planned_card

    text = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
            "training: {epochs: 2, batch_size: 20}\n"
            "arms:\n  - {name: lap, mechanism: dp_sgd, noise: laplace, accountant: pure, target_epsilon: 8}\n"
            "  - {name: pld, mechanism: dp_sgd, noise: laplace, target_epsilon: 8}\n")
    plans = _plans(load_study(write_study(text)))
    cards = {p.arm: planned_card(p, (1, 16, 16), "secure") for p in plans}
    pure, pld = next(p.privacy for p in plans if p.arm == "lap"), next(p.privacy for p in plans if p.arm == "pld")
    assert 0 < pure.sampler_delta < 1e-12 and pure.delta == pld.delta == 1e-5
    assert cards["lap"].delta == pure.claimed_delta == pure.sampler_delta
    assert (f"at delta = {delta_text(pure.sampler_delta)} (PURE accountant; pure DP but for the noise sampler's "
            "bounded draws, which that delta pays for;") in cards["lap"].statement
    assert cards["pld"].delta == pld.claimed_delta == pld.delta + pld.sampler_delta
    # the study: the pure composition (the PLD runs' Laplace steps are pure too) at the samplers' shares alone
    privacy = study_privacy([p for p in plans if p.arm == "lap"])
    assert privacy.accountant == "pure" and privacy.delta == pytest.approx(2 * pure.sampler_delta)
    assert f"at delta = {delta_text(privacy.delta)} (PURE;" in privacy.statement
    assert study_privacy(plans).delta == pytest.approx(sum(p.privacy.sampler_delta for p in plans))
    # under a budget the total holds at the budget's delta, as before
    budget = PrivacyBudget(epsilon=100, delta=1e-5, accountant="pure")
    assert study_privacy(plans, budget=budget).delta == 1e-5


def test_a_budget_may_name_the_pure_bound_its_advice_names_for_laplace_runs(write_study):
    """The advice for Laplace runs says 'set privacy_budget.accountant: pure', which the schema refused."""
    text = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
            "training: {epochs: 2, batch_size: 20}\nprivacy_budget: {epsilon: 20, delta: 1e-5, accountant: pure}\n"
            "arms: [{name: lap, mechanism: dp_sgd, noise: laplace, accountant: pure, target_epsilon: 8}]\n")
    study = load_study(write_study(text))
    privacy = _privacy(study)
    check_budget(study.privacy_budget, privacy)
    assert privacy.accountant == "pure" and 8 < privacy.dp_sgd_epsilon <= 16


def test_an_image_unit_total_states_what_it_means_for_a_patient(write_study):
    """The study's image-unit total protects a patient with k images only as a group of k (METHODS.md s.2b: "state
    it where the image is the unit"). Each capped run's card states it for that run alone; the study's total, which
    is what whoever holds every model has, stated it for no patient. With max_images_per_patient k it gives the
    group-privacy formula (k eps, k e^((k-1) eps) delta) of the composed total; without a cap it says that the
    patient is protected only as a group, for a k it does not state."""
    capped = load_study(write_study(BUDGET.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "").replace(
        "target_epsilon: 8}]", "target_epsilon: 1, privacy_unit: image, max_images_per_patient: 3}]")))
    context = PlanContext(images_per_patient=np.full(70, 3, dtype=np.int64), image_shape=(1, 16, 16))
    privacy = study_privacy(plan_runs(capped, context))
    eps, delta = privacy.dp_sgd_epsilon, privacy.delta
    group = accounting.group_privacy(epsilon=eps, delta=delta, k=3)
    assert group.formula_epsilon == pytest.approx(3 * eps) and not group.formula_is_vacuous
    assert (f"a patient with at most 3 training images (max_images_per_patient) is protected as a group of 3: "
            f"({epsilon_text(3 * eps)}, {delta_text(3 * math.exp(2 * eps) * delta)})-DP"
            in privacy.statement), privacy.statement
    uncapped = load_study(write_study(BUDGET.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "").replace(
        "target_epsilon: 8}]", "target_epsilon: 1, privacy_unit: image}]")))
    loose = study_privacy(plan_runs(uncapped, context))
    assert "a patient with k images is protected only as a group of k" in loose.statement, loose.statement
    patients = study_privacy(_plans(load_study(write_study(BUDGET))))       # the patient is the unit: nothing to add
    assert "group" not in patients.statement


MIXED = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
         "training: {epochs: 4, batch_size: 16}\nprivacy_budget: {epsilon: 10, delta: 1e-5}\n"
         "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 1}, {name: img, mechanism: dp_sgd, target_epsilon: 1, "
         "privacy_unit: image, max_images_per_patient: 2}]\n")
# 70 patients of 2 images each, and the two DP counts the arms plan from, at eps 0.05 each
MIXED_CONTEXT = PlanContext(images_per_patient=np.full(70, 2, dtype=np.int64), image_shape=(1, 16, 16),
                            released_sizes={"patients": 72, "images, at most 2 per patient": 139}, size_epsilon=0.05)


def _event(plan):
    p = plan.privacy
    return accounting.PoissonGaussianEvent(p.noise_multiplier, p.sample_rate, p.steps)


def test_runs_of_both_units_compose_with_the_patient_as_the_unit_where_image_runs_cap_a_patient_s_images(
        write_study, pld_by_hand):
    """Before: "no single eps ... do not compose" for patient-unit runs beside image-unit runs capped at 2 images per
    patient. A patient is at most 2 images of each image-unit run, a group whose steps are the mixture of Gaussians
    (Ganesh 2024), so all four runs compose for add/remove one patient in one PLD: as dp_accounting's accountant
    composes them by hand, between the largest part and the sum of the parts, plus each DP count once, the count of
    capped images twice (a patient is up to 2 of the images it counts)."""
    study = load_study(write_study(MIXED))
    plans = plan_runs(study, MIXED_CONTEXT)
    privacy = study_privacy(plans, budget=study.privacy_budget)
    patients = [_event(p) for p in plans if p.privacy.unit == "patient"]
    images = [_event(p) for p in plans if p.privacy.unit == "image"]
    assert len(patients) == len(images) == 2 and images[0].sample_rate < 0.2
    training = accounting.patient_epsilon(patients, [accounting.ImageGroup(2, e) for e in images], delta=1e-5)
    assert privacy.dp_sgd_epsilon == pytest.approx(training + 0.05 + 2 * 0.05, rel=1e-12)
    assert training == pytest.approx(pld_by_hand(patients, [(2, e) for e in images], 1e-5), rel=5e-3)
    assert (privacy.epsilon, privacy.unit, privacy.accountant, privacy.delta) == (
        privacy.dp_sgd_epsilon, "patient", "pld", 1e-5)

    def parts(delta):             # each run alone for a patient, and each count once
        return [accounting.ledger_epsilon(accounting.Ledger((e,)), delta=delta) for e in patients] + [
            accounting.group_privacy(epsilon=1.0, delta=delta, k=2, noise_multiplier=e.noise_multiplier,
                                     sample_rate=e.sample_rate, steps=e.steps).tight_epsilon for e in images]
    assert max(parts(1e-5)) + 0.15 < privacy.dp_sgd_epsilon < sum(parts(1e-5 / 4)) + 0.15
    assert (f"the 4 DP-SGD runs together: eps = {epsilon_text(privacy.dp_sgd_epsilon)} at delta = 1e-05 (PLD; "
            "neighbours: add/remove one patient with all of their images;") in privacy.statement
    assert ("img_eps1_C1_seed0, img_eps1_C1_seed1 as groups of at most 2 images; "
            f"{accounting.TIGHT_GROUP_CITATION})") in privacy.statement
    assert "images, at most 2 per patient at eps 0.05, times 2" in privacy.statement
    check_budget(study.privacy_budget, privacy)
    with pytest.raises(PrivacyError, match=r"4 DP-SGD runs together cost eps = .* \(PLD; neighbours: add/remove one "
                                           r"patient\), above the budget eps = 2;"):
        check_budget(PrivacyBudget(epsilon=2, delta=1e-5), privacy)


def test_image_unit_runs_under_one_cap_state_the_patient_s_total_composed_directly(write_study, pld_by_hand):
    """Before, only the group-privacy formula of the image-level total: (k eps, k e^((k-1) eps) delta), at a delta
    hundreds of times the runs'. The runs' steps as mixtures of a patient's 2 images give the patient's eps at the
    runs' own delta, as dp_accounting composes them by hand, with the count of capped images twice."""
    text = MIXED.replace("{name: dp, mechanism: dp_sgd, target_epsilon: 1}, ", "")
    study = load_study(write_study(text))
    plans = plan_runs(study, MIXED_CONTEXT)
    privacy = study_privacy(plans)
    images = [_event(p) for p in plans]
    assert privacy.unit == "image of the training set as capped at 2 per patient" and len(images) == 2
    patient = pld_by_hand([], [(2, e) for e in images], 1e-5)
    stated = re.search(r"composed for the patient directly: eps = ([\d.,]+) at delta = 1e-05 "
                       r"\(PLD; neighbours: add/remove one patient with all of their images; each run's steps as the "
                       r"mixture of Gaussians of the patient's 2 images", privacy.statement)
    assert stated is not None, privacy.statement
    assert float(stated[1]) == pytest.approx(patient + 2 * 0.05, rel=5e-3)
    assert float(stated[1]) > privacy.dp_sgd_epsilon + 0.05                          # a group costs more


def test_an_uncapped_image_unit_run_leaves_a_mixed_study_without_a_total_and_says_what_to_set(write_study):
    """Without max_images_per_patient a patient is a group of as many images as they have, a statistic of the
    training set: no patient total, and the statement, and the budget's refusal, say which runs and what to set."""
    study = load_study(write_study(MIXED.replace(", max_images_per_patient: 2", "")))
    privacy = study_privacy(plan_runs(study, replace(MIXED_CONTEXT, released_sizes=None)), budget=study.privacy_budget)
    assert (privacy.dp_sgd_epsilon, privacy.epsilon, privacy.unit) == (None, None, None)
    why = ("no total with the patient as the unit is derived: the image-unit run(s) img_eps1_C1_seed0, "
           "img_eps1_C1_seed1 set no max_images_per_patient")
    assert why in privacy.statement
    assert "set max_images_per_patient (or privacy_unit: patient) on their arms" in privacy.statement
    with pytest.raises(PrivacyError, match="set no max_images_per_patient"):
        check_budget(study.privacy_budget, privacy)


@pytest.mark.parametrize("changes, why", [
    ([("delta: 1e-5}", "delta: 1e-5, accountant: rdp}")], "set privacy_budget.accountant: pld"),
    ([("privacy_unit: image,", "privacy_unit: image, noise: laplace,")], "add Laplace noise"),
    ([("target_epsilon: 1, privacy_unit", "noise_multiplier: 0.15, accountant: rdp, privacy_unit")],
     "past every draw of the noise sampler"),
    ([("target_epsilon: 1}", "target_epsilon: 300}"), ("seeds: [0, 1]", "seeds: [0, 1, 2]"),
      ("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "")],
     "PLD could not certify the composition: the composition's eps lies above the 500 a PLD resolves"),
])
def test_a_mixed_study_without_a_patient_total_says_why(write_study, changes, why):
    """A budget on an accountant without the mixture of Gaussians (RDP), Laplace noise on the images (no mixture
    analysis), a sampler that a patient's 2 images outrun together, a composition beyond what PLD resolves (three
    patient-unit runs at eps 300): each keeps "no single eps", and says which."""
    text = MIXED
    for change in changes:
        text = text.replace(*change)
    study = load_study(write_study(text))
    privacy = study_privacy(plan_runs(study, MIXED_CONTEXT), budget=study.privacy_budget)
    assert privacy.dp_sgd_epsilon is None and privacy.epsilon is None and not privacy.not_private
    assert why in privacy.statement, privacy.statement


def test_an_image_unit_run_pays_the_sampler_share_of_a_patient_s_images_together(write_study):
    """At sigma 0.28 one image moves a coordinate 3.6 std, far inside the sampler's bound, but a patient's 2 images
    together move it 7.1 std: the patient total pays each image-unit run's share for 2 images (9e-8 here), not its
    share for one (1e-17). Without a budget it adds to the study's delta; with one, it comes out of the budget's."""
    text = MIXED.replace("target_epsilon: 1, privacy_unit", "noise_multiplier: 0.28, privacy_unit")
    free = load_study(write_study(text.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "")))
    plans = plan_runs(free, MIXED_CONTEXT)
    image_plans = [p.privacy for p in plans if p.privacy.unit == "image"]
    shares = (sum(p.privacy.sampler_delta for p in plans if p.privacy.unit == "patient")
              + sum(p.sampler_share(group=2) for p in image_plans))
    assert shares > 1e3 * sum(p.sampler_delta for p in image_plans) and shares > 1e-3 * 1e-5
    privacy = study_privacy(plans)
    assert privacy.unit == "patient" and privacy.delta == pytest.approx(1e-5 + shares, rel=1e-12, abs=0)
    budgeted = load_study(write_study(text.replace("epsilon: 10,", "epsilon: 1000,")))
    privacy = study_privacy(plan_runs(budgeted, MIXED_CONTEXT), budget=budgeted.privacy_budget)
    patients = [_event(p) for p in plans if p.privacy.unit == "patient"]
    groups = [accounting.ImageGroup(2, _event(p)) for p in plans if p.privacy.unit == "image"]
    assert privacy.delta == 1e-5
    assert privacy.dp_sgd_epsilon == pytest.approx(
        accounting.patient_epsilon(patients, groups, delta=1e-5 - shares) + 0.15, rel=1e-12)
    assert privacy.dp_sgd_epsilon > accounting.patient_epsilon(patients, groups, delta=1e-5) + 0.15


def test_without_patient_ids_a_mixed_study_has_no_patient_total(write_study):
    """Without ids each image passes for a patient of its own: the patient arm's unit is the image, and a "patient"
    total would protect one image under the patient's name. The capped arm keeps every image (a cap of k >= 1 on
    one-image "patients"), so both arms are add/remove one image of one set: their total is the image's, and the
    statement says that a patient is protected only as a group."""
    study = load_study(write_study(MIXED))
    context = replace(MIXED_CONTEXT, images_per_patient=np.ones(140, dtype=np.int64), patients_known=False,
                      released_sizes=None)
    plans = plan_runs(study, context)
    privacy = study_privacy(plans, budget=study.privacy_budget)
    composed = accounting.ledger_epsilon(accounting.Ledger([_event(p) for p in plans]), delta=1e-5)
    assert privacy.unit == "image" and privacy.dp_sgd_epsilon == pytest.approx(composed, rel=1e-6)
    assert "no patient ids are known for these images" in privacy.statement, privacy.statement


def test_the_patient_s_direct_total_states_the_delta_of_a_patient_s_images_outrunning_the_sampler(write_study):
    """At sigma 0.28 a patient's 2 images together outrun the noise sampler with probability 8.9e-8 per run (one
    image: 1e-17), so the patient's total composed directly holds at the runs' delta plus those two shares: 1.02e-05
    here, not the image-level total's 1e-05 + 2e-17 (which reads 1.01e-05 only by rounding up)."""
    text = (MIXED.replace("{name: dp, mechanism: dp_sgd, target_epsilon: 1}, ", "")
            .replace("target_epsilon: 1, privacy_unit", "noise_multiplier: 0.28, privacy_unit")
            .replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", ""))
    plans = plan_runs(load_study(write_study(text)), MIXED_CONTEXT)
    group_shares = sum(p.privacy.sampler_share(group=2) for p in plans)
    assert len(plans) == 2 and group_shares > 1e-7 > 1e6 * sum(p.privacy.sampler_delta for p in plans)
    privacy = study_privacy(plans)
    stated = re.search(r"composed for the patient directly: eps = [\d.,]+ at delta = (\S+) \(PLD",
                       privacy.statement)
    assert stated is not None, privacy.statement
    assert stated[1] == delta_text(1e-5 + group_shares) == "1.02e-05"
    assert float(stated[1]) >= 1e-5 + group_shares


@pytest.mark.parametrize("arm", ["target_epsilon: 8}", "target_epsilon: 8, privacy_unit: image}",
                                 "target_epsilon: 8, privacy_unit: image, max_images_per_patient: 2}"])
def test_without_patient_ids_a_study_total_promises_a_patient_nothing_beyond_group_privacy(write_study, arm):
    """Without ids each image passes for a patient of its own, so no cap of a patient's images can be known to hold:
    the total says that the unit is one image and a patient is protected only as a group, and states no group of
    max_images_per_patient images nor a patient's total, which would promise what the data cannot back."""
    study = load_study(write_study(BUDGET.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "")
                                   .replace("target_epsilon: 8}", arm)))
    context = PlanContext(images_per_patient=np.ones(140, dtype=np.int64), image_shape=(1, 16, 16),
                          patients_known=False)
    plans = plan_runs(study, context)
    privacy = study_privacy(plans)
    # nor a unit "image of the training set as capped at 2 per patient": no patient is known to be capped
    assert privacy.dp_sgd_epsilon is not None and privacy.unit == "image"
    assert all(p.privacy.max_images_per_patient is None and p.privacy.size_key == "images" for p in plans)
    assert privacy.statement.endswith("; no patient ids are known for these images, so the unit is one image and a "
                                      "patient with several images is protected only as a group of them (group "
                                      "privacy)"), privacy.statement
    assert "max_images_per_patient" not in privacy.statement and "for the patient" not in privacy.statement


def test_a_cap_of_one_image_per_patient_makes_the_image_total_the_patient_s(write_study):
    """A group of one is the run itself (k = 1 in the group formula gives (eps, delta) back): the total says it is
    also the patient's, and states neither a group formula nor a second, direct total for the patient."""
    study = load_study(write_study(BUDGET.replace("privacy_budget: {epsilon: 10, delta: 1e-5}\n", "").replace(
        "target_epsilon: 8}]", "target_epsilon: 1, privacy_unit: image, max_images_per_patient: 1}]")))
    context = PlanContext(images_per_patient=np.full(70, 2, dtype=np.int64), image_shape=(1, 16, 16))
    privacy = study_privacy(plan_runs(study, context))
    assert privacy.unit == "image of the training set as capped at 1 per patient"
    assert privacy.statement.endswith("; a patient has at most 1 training image (max_images_per_patient), so this "
                                      "total is also the patient's"), privacy.statement
    assert "group" not in privacy.statement and "for the patient directly" not in privacy.statement


def test_the_statement_says_why_each_run_without_a_guarantee_has_none(write_study):
    """A baseline without a mechanism is said to be without privacy, not to have a claim that does not hold; a run
    whose mechanism claims privacy that its settings void is said to have a claim that does not hold."""
    base = load_study(write_study(BUDGET.replace("arms: [", "arms: [{name: base, mechanism: none}, ")
                                  .replace("seeds: [0, 1]", "seeds: [0]")))
    statement = study_privacy(_plans(base)).statement
    assert "1 run without privacy on the same patients (base_seed0)" in statement
    assert "claim does not hold" not in statement and "run(s)" not in statement
    shuffled = load_study(write_study(BUDGET.replace("arms: [", "arms: [{name: base, mechanism: none}, {name: sh, "
                                                     "mechanism: dp_sgd, target_epsilon: 8, sampling: shuffle}, ")))
    statement = study_privacy(_plans(shuffled)).statement
    assert ("2 runs without privacy (base_seed0, base_seed1) and 2 runs whose privacy claim does not hold "
            "(sh_eps8_C1_seed0, sh_eps8_C1_seed1), on the same patients") in statement


def test_a_patient_total_of_image_unit_runs_names_the_samplers_shares_that_move_its_delta(write_study):
    """A Laplace run with the patient as its unit and a Gaussian one with the image (capped) compose for the patient
    as a mixture; the Laplace sampler's share made the runs' 1e-05 read 1.01e-05 with no word of why, where a study
    of a single unit named it."""
    text = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\ntraining: {epochs: 2, batch_size: 20}\n"
            "arms: [{name: p, mechanism: dp_sgd, noise: laplace, target_epsilon: 8},\n"
            "       {name: i, mechanism: dp_sgd, target_epsilon: 8, privacy_unit: image, "
            "max_images_per_patient: 3}]\n")
    context = PlanContext(images_per_patient=np.full(70, 3, dtype=np.int64), image_shape=(1, 16, 16))
    plans = plan_runs(load_study(write_study(text)), context)
    privacy = study_privacy(plans)
    shares = privacy.delta - 1e-5
    assert 0 < shares < 1e-9 and delta_text(privacy.delta) == "1.01e-05", privacy.statement
    assert (f"at delta = 1.01e-05 (1e-05 + {delta_text(shares)} for the noise samplers' bounded draws, rounded up; "
            "PLD; neighbours: add/remove one patient with all of their images;") in privacy.statement, privacy.statement


@pytest.mark.parametrize("arm", ["{name: base, mechanism: none}",
                                 "{name: ldp, mechanism: pixel_laplace, target_epsilon_image: 50}"])
def test_a_budgeted_study_without_dp_sgd_runs_records_the_budget_s_delta(write_study, arm):
    """study.yaml's privacy states the delta the study is held to: with a budget, the budget's, also where no DP-SGD
    run composes to one of its own."""
    study = load_study(write_study(BUDGET.replace("{name: dp, mechanism: dp_sgd, target_epsilon: 8}", arm)))
    privacy = _privacy(study)
    assert privacy.dp_sgd_runs == () and privacy.delta == 1e-5
    assert study_privacy(_plans(study)).delta is None          # without a budget, none
