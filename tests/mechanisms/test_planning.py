"""Every mechanism plans its runs before training: calibration over the whole budget range with the fallback to RDP,
local DP noise solved from a per-image eps, and given noise kept as given."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed import accounting
from dpmed.config import load_study, plan_runs
from dpmed.errors import ConfigError, PrivacyError
from dpmed.mechanisms import PlanContext, mechanism_info

STUDY = """
name: arms
data: {source: phantom, n_images: 200, image_size: 16}
training: {epochs: 1, batch_size: 20}
arms:
  - {name: lap, mechanism: pixel_laplace, target_epsilon_image: 512}
  - {name: gauss, mechanism: pixel_gaussian, target_epsilon_image: 100}
  - {name: high, mechanism: dp_sgd, target_epsilon: [1e6, 1e9, 1e12, 1e15]}
  - {name: laplace-sgd, mechanism: dp_sgd, target_epsilon: 8, noise: laplace}
  - {name: given, mechanism: dp_sgd, noise_multiplier: 1.1, accountant: rdp-classic}
"""


def _plans(study, n: int = 140):
    """The study planned on n training images of one patient each, 16 x 16 grey."""
    return plan_runs(study, PlanContext(images_per_patient=np.ones(n, dtype=np.int64), image_shape=(1, 16, 16)))


def test_every_derived_value_is_resolved_before_training(write_study):
    specs = {s.run_id: s for s in _plans(load_study(write_study(STUDY)))}
    assert specs["lap_epsimg512_seed0"].privacy.scale == pytest.approx(256 / 512)
    gauss = specs["gauss_epsimg100_seed0"].privacy
    eps = accounting.gaussian_image_epsilon(accounting.GaussianImageEvent(std=gauss.std, value_range=1.0,
                                                                          dimension=256), delta=gauss.delta)
    assert eps <= 100 and eps == pytest.approx(100, rel=1e-5)
    for target in (1e6, 1e9, 1e12, 1e15):
        d = specs[f"high_eps{target:g}_C1_seed0".replace("+", "")].privacy
        assert d.accountant == "rdp" and "PLD cannot resolve" in d.accountant_note
        assert accounting.dp_sgd_epsilon(noise_multiplier=d.noise_multiplier, sample_rate=d.sample_rate,
                                         steps=d.steps, delta=d.delta, accountant="rdp") <= target
    assert specs["given_sigma1.1_C1_seed0"].privacy.noise_given is True
    assert specs["laplace-sgd_eps8_C1_seed0"].privacy.accountant == "pld"


@pytest.mark.parametrize("scale, accountant", [(0.5, "pld"), (1e-300, "pure")])
def test_given_laplace_noise_keeps_pld_unless_pld_cannot_certify_it(write_study, scale, accountant):
    """The pure bound grows with T, PLD's eps with about sqrt(T): at b = 0.5, q = 2/140, T = 10000 the pure bound is
    875 (above PLD's 500) while PLD certifies far less, and a fallback read from the pure bound printed an eps many
    times too large. Only noise PLD cannot certify (b = 1e-300: an internal error before) falls back."""
    study = load_study(write_study(f"name: s\ntraining: {{steps: 10000, batch_size: 2}}\narms: [{{name: a, "
                                   f"mechanism: dp_sgd, noise: laplace, noise_multiplier: {scale}}}]\n"))
    plan = _plans(study)[0].privacy
    pure = accounting.dp_sgd_epsilon(noise_multiplier=scale, sample_rate=plan.sample_rate, steps=plan.steps,
                                     delta=plan.delta, accountant="pure", noise="laplace")
    assert plan.steps == 10000 and pure > 500 and plan.accountant == accountant
    if accountant == "pld":
        assert plan.accountant_note is None
        assert accounting.dp_sgd_epsilon(noise_multiplier=scale, sample_rate=plan.sample_rate, steps=plan.steps,
                                         delta=plan.delta, noise="laplace") < pure / 10


def test_without_patient_ids_the_unit_is_the_image_and_the_card_says_why(write_study):
    """A dataset without patient ids (MedMNIST files) cannot protect a patient: every image would pass for a patient
    of its own. The default patient unit then falls back to the image, and the card names the reason."""
    from dpmed.accounting import Ledger, dp_sgd_event
    from dpmed.mechanisms import mechanism_info

    study = load_study(write_study(STUDY))
    unknown = plan_runs(study, PlanContext(images_per_patient=np.ones(140, dtype=np.int64), image_shape=(1, 16, 16),
                                           patients_known=False))
    known = _plans(study)
    dp = next(p for p in unknown if p.arm == "laplace-sgd").privacy
    assert dp.unit == "image" and dp.n_units == 140
    assert next(p for p in known if p.arm == "laplace-sgd").privacy.unit == "patient"
    ledger = Ledger((dp_sgd_event(noise=dp.noise, noise_multiplier=dp.noise_multiplier, sample_rate=dp.sample_rate,
                                  steps=dp.steps),))
    card = mechanism_info("dp_sgd").card(dp, ledger, "secure")
    assert "unit: one image" in card.statement and "one patient" not in card.statement
    assert card.unit_note.startswith("no patient ids are known for these images (the dataset, as read, names none)")


def test_a_batch_larger_than_the_patients_names_patients_not_images():
    """30 patients with 4 images each: an expected batch of 40 fits the 120 images but not the 30 patients that
    DP-SGD samples, and the message must count what it samples."""
    from dpmed.config.schema import Study
    from dpmed.errors import ConfigError

    study = Study.model_validate({"name": "b", "training": {"epochs": 1, "batch_size": 40},
                                  "arms": [{"name": "dp", "mechanism": "dp_sgd", "target_epsilon": 8}]})
    with pytest.raises(ConfigError, match=r"batch_size 40 exceeds the 30 training patients .*lower "
                                          r"training.batch_size"):
        plan_runs(study, PlanContext(images_per_patient=np.full(30, 4, dtype=np.int64), image_shape=(1, 16, 16)))


@pytest.mark.parametrize("unit, counts, n", [
    ("image", np.ones(40, dtype=np.int64), 40),
    ("patient", np.full(30, 4, dtype=np.int64), 30),     # 120 images, but the accountant counts 30 patients
])
def test_a_delta_at_or_above_one_over_n_is_refused_at_planning(unit, counts, n):
    """delta 0.9 at N = 40 calibrated sigma = 0.0003 and printed "eps 0 (delta 0.9)": noiseless training read as
    perfectly private. A user's delta must stay below 1/N, N the units the accountant counts; below it, it is kept."""
    from dpmed.config.schema import Study
    from dpmed.errors import ConfigError

    context = PlanContext(images_per_patient=counts, image_shape=(1, 16, 16))

    def study(delta: float) -> Study:
        return Study.model_validate({"name": "d", "training": {"epochs": 1, "batch_size": 8}, "arms": [
            {"name": "dp", "mechanism": "dp_sgd", "target_epsilon": 8, "delta": delta, "privacy_unit": unit}]})

    for delta in (0.9, 1.0 / n):
        with pytest.raises(ConfigError) as info:
            plan_runs(study(delta), context)
        message = str(info.value)
        assert f"arm 'dp': delta {delta:g} is at or above 1/N = 1/{n}" in message
        assert f"the {n} training {unit}s the accountant counts" in message
        assert f"default min(1e-5, 1/(10 N)) = {accounting.default_delta(n):.3g}" in message
    below = 0.99 / n
    (plan,) = plan_runs(study(below), context)
    assert plan.privacy.delta == below and plan.privacy.n_units == n and plan.privacy.noise_multiplier > 0.3


def test_a_per_image_delta_of_local_dp_at_or_above_one_over_n_is_refused():
    """pixel_gaussian's delta is per image ("any two images"), but all N training images are released under it:
    releasing each one unperturbed with probability delta is (0, delta)-DP and gives away delta N images. N counts
    images, not patients: here 10 patients of 4 images, so a delta of 0.05 (below 1/10) is refused all the same."""
    from dpmed.config.schema import Study
    from dpmed.errors import ConfigError

    context = PlanContext(images_per_patient=np.full(10, 4, dtype=np.int64), image_shape=(1, 16, 16))

    def study(delta: float) -> Study:
        return Study.model_validate({"name": "g", "arms": [
            {"name": "gauss", "mechanism": "pixel_gaussian", "target_epsilon_image": 100, "delta": delta}]})

    with pytest.raises(ConfigError, match=r"arm 'gauss': delta 0\.5 is at or above 1/N = 1/40 = 0\.025, N being "
                                          r"the 40 training images released.*default min\(1e-5, 1/\(10 N\)\)"):
        plan_runs(study(0.5), context)
    with pytest.raises(ConfigError, match=r"delta 0\.05 is at or above 1/N = 1/40"):
        plan_runs(study(0.05), context)
    (plan,) = plan_runs(study(0.02), context)
    assert plan.privacy.delta == 0.02


def test_local_dp_plans_from_every_value_of_every_image():
    """The default per-image delta is min(1e-5, 1/(10 N)) over the N images released (50,000 here: 2e-6, where the
    1,000 patients would give 1e-5), and d counts the channels: eps_image 512 on 3 x 16 x 16 images is b = 768 / 512
    (grey images, which every other test plans on, cannot tell d = C H W from H W)."""
    from dpmed.config.schema import Study

    many = PlanContext(images_per_patient=np.full(1000, 50, dtype=np.int64), image_shape=(1, 16, 16))
    gauss = Study.model_validate({"name": "g", "arms": [
        {"name": "gauss", "mechanism": "pixel_gaussian", "target_epsilon_image": 100}]})
    (plan,) = plan_runs(gauss, many)
    assert plan.privacy.delta == 2e-6
    rgb = PlanContext(images_per_patient=np.ones(4, dtype=np.int64), image_shape=(3, 16, 16))
    assert rgb.dimension == 768
    laplace = Study.model_validate({"name": "l", "arms": [
        {"name": "lap", "mechanism": "pixel_laplace", "target_epsilon_image": 512}]})
    (plan,) = plan_runs(laplace, rgb)
    assert plan.privacy.scale == 768 / 512 and plan.privacy.dimension == 768


@pytest.mark.parametrize("target, delta", [(100.0, 1e-3), (8.0, None)])
def test_a_gaussian_target_is_solved_at_the_arms_own_delta_and_delivered_by_the_exact_analytic_gaussian(
        target, delta, exact_gaussian_epsilon):
    """The std a target eps_image gives must deliver it at the delta the card states (the arm's, or the default for
    400 images, min(1e-5, 1/(10 N)) = 1e-5): the exact analytic Gaussian (Balle and Wang 2018, solved independently)
    at mu = sqrt(d) / s, d = 3 x 8 x 8, gives the target back, and no more than it."""
    from dpmed.config.schema import Study

    arm = {"name": "gauss", "mechanism": "pixel_gaussian", "target_epsilon_image": target}
    study = Study.model_validate({"name": "g", "arms": [arm if delta is None else {**arm, "delta": delta}]})
    context = PlanContext(images_per_patient=np.full(100, 4, dtype=np.int64), image_shape=(3, 8, 8))
    (plan,) = plan_runs(study, context)
    expected_delta = 1e-5 if delta is None else delta
    assert plan.privacy.delta == expected_delta and plan.privacy.target_epsilon_image == target
    delivered = exact_gaussian_epsilon(np.sqrt(192) / plan.privacy.std, expected_delta)
    assert delivered == pytest.approx(target, rel=1e-6) and delivered <= target * (1 + 1e-9)


SIZED = """
name: sized
data: {source: phantom, n_images: 200, image_size: 16}
training: {epochs: 2, batch_size: 20}
arms:
  - {name: dp, mechanism: dp_sgd, target_epsilon: 1}
  - {name: given, mechanism: dp_sgd, noise_multiplier: 2.0}
"""


def _sized(study, released: int, epsilon: float = 0.05):
    context = PlanContext(images_per_patient=np.ones(140, dtype=np.int64), image_shape=(1, 16, 16),
                          released_sizes={"patients": released}, size_epsilon=epsilon)
    return {p.arm: p.privacy for p in plan_runs(study, context)}


def test_a_released_count_is_what_q_t_and_delta_are_planned_from_and_its_eps_is_on_the_card(write_study):
    """140 training patients, released as 173: q = 20 / 173, T = 2 round(173 / 20), delta from 173; the noise is
    calibrated to 1 - 0.05, and the card's eps adds the count's 0.05 to what the accountant gives the training."""
    plans = _sized(load_study(write_study(SIZED)), 173)
    dp = plans["dp"]
    assert dp.n_units == 173 and dp.size_epsilon == 0.05 and dp.expected_batch_size == pytest.approx(20)
    assert dp.sample_rate == pytest.approx(20 / 173) and dp.steps == 2 * 9
    assert dp.delta == pytest.approx(min(1e-5, 1 / 1730))
    training = accounting.dp_sgd_epsilon(noise_multiplier=dp.noise_multiplier, sample_rate=dp.sample_rate,
                                         steps=dp.steps, delta=dp.delta)
    assert 0.94 < training <= 0.95
    ledger = accounting.Ledger((accounting.dp_sgd_event(noise="gaussian", noise_multiplier=dp.noise_multiplier,
                                                        sample_rate=dp.sample_rate, steps=dp.steps),))
    card = mechanism_info("dp_sgd").card(dp, ledger, "secure")
    assert card.epsilon == pytest.approx(training + 0.05) and card.training_epsilon == pytest.approx(training)
    assert "N = 173, a count released at eps 0.05" in card.statement
    assert "+ 0.05 for the released size" in card.statement
    given = plans["given"]     # given noise: its eps is what it is, the count's added
    assert given.noise_multiplier == 2.0 and given.size_epsilon == 0.05


def test_a_count_drawn_below_the_batch_plans_q_1_and_a_target_under_the_count_eps_is_refused(write_study):
    """The card states the count as released and the reconstruction baseline reads it: before, the card said "N = 20,
    a count released at eps 0.05" for a count of 7, and kappa was 1/20, which made the risk bound look smaller."""
    plans = _sized(load_study(write_study(SIZED)), 7)
    dp = plans["dp"]
    assert dp.n_units == 20 and dp.sample_rate == 1.0 and dp.released_units == 7
    card = mechanism_info("dp_sgd").card(dp, accounting.Ledger((accounting.dp_sgd_event(
        noise="gaussian", noise_multiplier=dp.noise_multiplier, sample_rate=1.0, steps=dp.steps),)), "secure")
    assert ("N = 20, the expected batch: the count released at eps 0.05 (discrete Laplace), 7, is below it, so every "
            "patient is in every step") in card.statement
    assert (card.n_units, card.released_units) == (20, 7)       # the report's key facts and results.csv show both
    assert mechanism_info("dp_sgd").reconstruction(dp).kappa == pytest.approx(1 / 7)
    assert _sized(load_study(write_study(SIZED)), -3)["dp"].released_units == -3
    assert mechanism_info("dp_sgd").reconstruction(_sized(load_study(write_study(SIZED)), -3)["dp"]).kappa == 0.5
    assert _sized(load_study(write_study(SIZED)), 20)["dp"].released_units is None     # N is the count: as before
    with pytest.raises(ConfigError, match="target_epsilon 1 leaves nothing for training once the study's "
                                          "size_epsilon 1 is spent"):
        _sized(load_study(write_study(SIZED)), 140, epsilon=1.0)


@pytest.mark.parametrize("batch, delta", [(140, None), (141, None), (20, 1 / 140), (20, 1 / 141), (20, 0.0071)])
def test_whether_a_dp_sgd_arm_plans_depends_on_the_released_count_not_the_exact_one(write_study, batch, delta):
    """Whether a study runs is seen by whoever holds its files. Two neighbouring training sets, 139 and 141
    patients, with the same released count 140: every outcome, a plan or a refusal and its message, must be the
    same, including at a batch or a delta right at the exact counts' thresholds (before: refused on one side)."""
    text = SIZED.replace("batch_size: 20", f"batch_size: {batch}").replace(
        "target_epsilon: 1}", "target_epsilon: 1" + ("}" if delta is None else f", delta: {delta}}}"))

    def outcome(exact: int):
        context = PlanContext(images_per_patient=np.ones(exact, dtype=np.int64), image_shape=(1, 16, 16),
                              released_sizes={"patients": 140}, size_epsilon=0.05)
        try:
            return [p.privacy.model_dump() for p in plan_runs(load_study(write_study(text)), context)]
        except ConfigError as exc:
            return str(exc)

    assert outcome(139) == outcome(141)


@pytest.mark.parametrize("cap", [None, 3, 1])
def test_an_image_unit_card_with_patients_known_says_what_it_means_for_a_patient(write_study, cap):
    """With patient ids and the image as the unit, the card must speak of patients: without a cap it says that a
    patient of k images is protected only as a group of k, for a k it cannot state (the most images of one patient is
    a statistic of the training set); with a cap of k it states the patient's guarantee, and its neighbours are
    images of the capped set, since one image added to the data as supplied can swap one kept image for another."""
    text = STUDY.replace("noise: laplace}", "noise: laplace, privacy_unit: image"
                         + ("}" if cap is None else f", max_images_per_patient: {cap}}}"))
    context = PlanContext(images_per_patient=np.array([1, 2, 5] * 30, dtype=np.int64), image_shape=(1, 16, 16))
    dp = next(p for p in plan_runs(load_study(write_study(text)), context) if p.arm == "laplace-sgd").privacy
    ledger = accounting.Ledger((accounting.dp_sgd_event(noise=dp.noise, noise_multiplier=dp.noise_multiplier,
                                                        sample_rate=dp.sample_rate, steps=dp.steps),))
    card = mechanism_info("dp_sgd").card(dp, ledger, "secure")
    assert "unit: one image" in card.statement
    if cap is None:
        assert card.patient_guarantee is None
        assert "a patient with k images is protected only as a group of k" in card.unit_note
        assert "max_images_per_patient" in card.unit_note and "5" not in card.unit_note    # the largest patient
        assert card.neighbour_relation == accounting.NEIGHBOUR_DP_SGD
    else:
        assert card.patient_guarantee is not None and card.patient_guarantee.k == cap and card.unit_note is None
        assert f"one image of the training set as capped at {cap} per patient" in card.neighbour_relation
        assert f"capped at {cap} per patient" in card.statement
        assert card.in_brief().endswith(f"add/remove one image of the training set as capped at {cap} per patient)")
        if cap == 1:                          # one image per patient: the patient's guarantee is the run's own
            assert card.patient_guarantee.formula_epsilon == pytest.approx(card.epsilon)


def test_a_delta_below_what_pld_resolves_plans_with_rdp_and_says_so(write_study):
    """At delta 1e-15 dp_accounting's PLD returns inf or rounding noise; an arm given a target or a noise must then be
    planned and certified by RDP, with the card's note naming why (before: an internal error at the card)."""
    text = SIZED.replace("target_epsilon: 1}", "target_epsilon: 1, delta: 1.0e-15}").replace(
        "noise_multiplier: 2.0}", "noise_multiplier: 2.0, delta: 1.0e-15}")
    plans = _sized(load_study(write_study(text)), 140)
    for name in ("dp", "given"):
        dp = plans[name]
        assert dp.accountant == "rdp" and "cannot resolve delta" in dp.accountant_note
        ledger = accounting.Ledger((accounting.dp_sgd_event(noise=dp.noise, noise_multiplier=dp.noise_multiplier,
                                                            sample_rate=dp.sample_rate, steps=dp.steps),))
        card = mechanism_info("dp_sgd").card(dp, ledger, "secure")
        # the card's delta adds what the noise sampler's bounded draws cost (`accounting.truncation`): ~1e-26 here
        assert np.isfinite(card.epsilon) and card.accountant == "rdp"
        assert card.delta == 1e-15 + card.sampler_delta and 0 < card.sampler_delta < 1e-25
        if name == "dp":
            assert card.epsilon <= 1.0 + 1e-9          # the target, met under RDP


def test_given_laplace_noise_below_pld_s_delta_floor_names_the_delta_as_the_reason(write_study):
    """Laplace noise b = 2 C1 over 14 steps at q = 1/7 has an eps of about 1.24 (the pure bound), but at delta 1e-15
    PLD cannot resolve it and the pure bound certifies it. The card's note must say why: the delta (as for a target,
    and for Gaussian noise), not "PLD cannot resolve eps above 500", which is false for this run."""
    text = SIZED.replace("target_epsilon: 1}", "target_epsilon: 1, noise: laplace, delta: 1.0e-15}").replace(
        "noise_multiplier: 2.0}", "noise_multiplier: 2.0, noise: laplace, delta: 1.0e-15}")
    plans = _sized(load_study(write_study(text)), 140)
    for name in ("dp", "given"):
        dp = plans[name]
        assert dp.accountant == "pure" and "cannot resolve delta below 1e-12" in dp.accountant_note
        assert "above 500" not in dp.accountant_note
    given = plans["given"]
    assert accounting.dp_sgd_epsilon(noise_multiplier=2.0, sample_rate=given.sample_rate, steps=given.steps,
                                     delta=given.delta, accountant="pure", noise="laplace") < 2


def test_a_patient_unit_card_with_a_cap_says_what_the_model_trained_on(write_study):
    """A patient-unit arm with max_images_per_patient trains on the capped set; its eps (add/remove one patient with
    all of their images) holds for the data as supplied, but the card must still say that the model saw at most k
    images of each patient (before: nothing on the card named the cap)."""
    text = STUDY.replace("noise: laplace}", "noise: laplace, max_images_per_patient: 2}")
    context = PlanContext(images_per_patient=np.array([1, 2, 5] * 30, dtype=np.int64), image_shape=(1, 16, 16))
    dp = next(p for p in plan_runs(load_study(write_study(text)), context) if p.arm == "laplace-sgd").privacy
    ledger = accounting.Ledger((accounting.dp_sgd_event(noise=dp.noise, noise_multiplier=dp.noise_multiplier,
                                                        sample_rate=dp.sample_rate, steps=dp.steps),))
    card = mechanism_info("dp_sgd").card(dp, ledger, "secure")
    assert card.unit == "patient" and card.neighbour_relation == accounting.NEIGHBOUR_PATIENT
    assert card.capped_at is None           # capped_at is the image unit's: the patient's neighbours are not capped
    assert "at most 2 images of each patient" in card.unit_note and "max_images_per_patient" in card.unit_note


@pytest.mark.parametrize("exact, released", [(140, 20000), (20000, 140)])
def test_the_default_delta_is_read_from_the_released_count_not_the_exact_one(write_study, exact, released):
    """min(1e-5, 1/(10 N)) with N the released count: 5e-6 for a count of 20,000 drawn from 140 patients, and 1e-5
    for a count of 140 drawn from 20,000 (the exact count would give 1e-5 and 5e-6: a delta that tells the sets
    apart, and a claim at a delta larger than 1/(10 N) of the set the card names)."""
    context = PlanContext(images_per_patient=np.ones(exact, dtype=np.int64), image_shape=(1, 16, 16),
                          released_sizes={"patients": released}, size_epsilon=0.05)
    study = load_study(write_study(SIZED.replace("target_epsilon: 1}", "noise_multiplier: 1.5}")))
    plans = {p.arm: p.privacy for p in plan_runs(study, context)}
    for plan in plans.values():
        assert plan.n_units == released and plan.delta == min(1e-5, 1 / (10 * released))


def test_an_image_unit_with_a_cap_counts_the_capped_images_and_only_where_patients_are_known():
    """Patients of 1, 2 and 5 images, 30 of each, capped at 2: the accountant counts 30 (1 + 2 + 2) = 150 images, the
    count released under its own key; without patient ids the cap means nothing (each image its own patient) and
    the 240 images are counted, under the key of all images."""
    from dpmed.config.schema import Study

    study = Study.model_validate({"name": "c", "training": {"epochs": 1, "batch_size": 10}, "arms": [
        {"name": "dp", "mechanism": "dp_sgd", "noise_multiplier": 1.5, "privacy_unit": "image",
         "max_images_per_patient": 2}]})
    (arm,) = study.arms
    counts = np.array([1, 2, 5] * 30, dtype=np.int64)
    known = PlanContext(images_per_patient=counts, image_shape=(1, 16, 16))
    assert mechanism_info("dp_sgd").size(arm, known) == ("images, at most 2 per patient", 150)
    (plan,) = plan_runs(study, known)
    assert plan.privacy.n_units == 150 and plan.privacy.sample_rate == pytest.approx(10 / 150)
    assert plan.privacy.max_images_per_patient == 2 and plan.privacy.size_key == "images, at most 2 per patient"
    unknown = PlanContext(images_per_patient=counts, image_shape=(1, 16, 16), patients_known=False)
    assert mechanism_info("dp_sgd").size(arm, unknown) == ("images", 240)
    (plan,) = plan_runs(study, unknown)
    assert plan.privacy.n_units == 240 and plan.privacy.max_images_per_patient is None
    assert plan.privacy.patient_guarantee is None and plan.privacy.image_cap_key is None


def test_a_patient_unit_samples_at_the_patients_rate_not_the_images():
    """Patients of 1, 2 and 5 images, 30 of each (90 patients, 240 images), the patient the unit, batch 10: the
    accountant's q is the patients' 10 / 90 (not the images' 10 / 240), and where the count is released it is the
    released patient count's 10 / 97. A q over images would understate what one patient's inclusion costs."""
    from dpmed.config.schema import Study

    study = Study.model_validate({"name": "p", "training": {"epochs": 1, "batch_size": 10}, "arms": [
        {"name": "dp", "mechanism": "dp_sgd", "noise_multiplier": 1.5, "privacy_unit": "patient"}]})
    counts = np.array([1, 2, 5] * 30, dtype=np.int64)
    (plan,) = plan_runs(study, PlanContext(images_per_patient=counts, image_shape=(1, 16, 16)))
    assert plan.privacy.unit == "patient" and plan.privacy.size_key == "patients"
    assert plan.privacy.n_units == 90 and plan.privacy.sample_rate == pytest.approx(10 / 90)
    released = PlanContext(images_per_patient=counts, image_shape=(1, 16, 16), released_sizes={"patients": 97},
                           size_epsilon=0.05)
    (plan,) = plan_runs(study, released)
    assert plan.privacy.n_units == 97 and plan.privacy.sample_rate == pytest.approx(10 / 97)


@pytest.mark.parametrize("n", [1, 20])
def test_a_batch_equal_to_a_public_count_plans_every_unit_in_every_step(n):
    """An expected batch of all N units is q = 1, not a refusal: T = epochs round(N / B) = 2 epochs of one step, the
    expected batch N, the default delta min(1e-5, 1/(10 N)) = 1e-5 even for a single patient, and the card says
    q = 1 (only a batch above N is refused)."""
    from dpmed.config.schema import Study

    context = PlanContext(images_per_patient=np.full(n, 3, dtype=np.int64), image_shape=(1, 16, 16))
    study = Study.model_validate({"name": "q", "training": {"epochs": 2, "batch_size": n}, "arms": [
        {"name": "dp", "mechanism": "dp_sgd", "noise_multiplier": 4.0}]})
    (plan,) = plan_runs(study, context)
    dp = plan.privacy
    assert (dp.sample_rate, dp.steps, dp.n_units, dp.released_units) == (1.0, 2, n, None)
    assert dp.expected_batch_size == n and dp.delta == 1e-5 and dp.unit == "patient"
    ledger = accounting.Ledger((accounting.dp_sgd_event(noise="gaussian", noise_multiplier=4.0, sample_rate=1.0,
                                                        steps=2),))
    card = mechanism_info("dp_sgd").card(dp, ledger, "secure")
    assert f"patients: N = {n}, taken as public, q = 1, T = 2, sigma = 4," in card.statement
    assert card.epsilon == pytest.approx(accounting.dp_sgd_epsilon(noise_multiplier=4.0, sample_rate=1.0, steps=2,
                                                                   delta=1e-5))
    with pytest.raises(ConfigError, match=f"batch_size {n + 1} exceeds the {n} training patients"):
        plan_runs(study.model_copy(update={"training": study.training.model_copy(update={"batch_size": n + 1})}),
                  context)


def test_a_refusal_at_a_released_count_names_it_as_a_dp_count_and_its_noise(write_study):
    """Planned from a released count, a refusal must say that N is a DP count, not the training set's size, and how
    far it may lie from it: discrete Laplace of scale 1/0.05 has variance 2 e^-0.05 / (1 - e^-0.05)^2, a standard
    deviation of 28.3, printed 28."""
    eps = 0.05
    std = (2 * np.exp(-eps)) ** 0.5 / (1 - np.exp(-eps))
    assert round(std) == 28
    text = SIZED.replace("target_epsilon: 1}", "target_epsilon: 1, delta: 0.01}")
    with pytest.raises(ConfigError) as info:
        _sized(load_study(write_study(text)), 140, epsilon=eps)
    assert ("N being the DP count 140 of the training patients the accountant counts (privacy_unit: patient; the "
            f"count is the exact one plus noise of standard deviation {round(std)} (size_epsilon 0.05))"
            in str(info.value))


def test_a_target_no_noise_multiplier_can_meet_is_a_privacy_error_naming_the_arm(write_study):
    """At eps 1e30 every noise multiplier down to 1e-12 meets the budget: there is no calibrated noise, and the
    refusal names the arm and its target rather than surfacing the accounting's bare ValueError."""
    text = STUDY.split("arms:")[0] + "arms:\n  - {name: vast, mechanism: dp_sgd, target_epsilon: 1e30}\n"
    with pytest.raises(PrivacyError, match=r"arm 'vast', target_epsilon 1e\+30: .*every noise multiplier down to "
                                           r"1e-12 meets it: the budget protects nothing"):
        _plans(load_study(write_study(text)))


def test_an_unknown_mechanism_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="unknown mechanism 'dp-sgd'; known: none, pixel_laplace, pixel_gaussian, "
                                       "scalar_shift, dp_sgd"):
        mechanism_info("dp-sgd")


@pytest.mark.parametrize("noise", accounting.NOISES)
@pytest.mark.parametrize("name", accounting.ACCOUNTANTS)
def test_a_dp_sgd_arm_accepts_the_accountants_the_accounting_registry_does_and_refuses_in_its_words(name, noise):
    """The arm checks which accountant analyses which noise without the registry, so that reading a study file
    imports no dp_accounting; it must accept what the registry accepts and refuse in the registry's words."""
    from pydantic import ValidationError

    from dpmed.mechanisms.dp_sgd import DpSgdArm

    arm = {"name": "dp", "mechanism": "dp_sgd", "target_epsilon": [1.0], "noise": noise, "accountant": name}
    try:
        accounting.accountant_info(name, noise)
    except ValueError as refused:
        with pytest.raises(ValidationError) as caught:
            DpSgdArm.model_validate(arm)
        assert str(refused) in str(caught.value)
    else:
        DpSgdArm.model_validate(arm)
