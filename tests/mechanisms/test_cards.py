"""What a DP-SGD card says when its eps does not hold: a shuffled-batch reproduction or a reproducible-mode run must
not call anything on it DP, nor claim randomness or a sampling it did not have. The runs are planned on 140 images of
70 patients (two each) with the image as the unit, so each card carries a note for the patient with two images."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed import accounting
from dpmed.accounting import Ledger, dp_sgd_event, shuffled_event
from dpmed.config import load_study, plan_runs
from dpmed.mechanisms import PlanContext, mechanism_info, patient_guarantee
from dpmed.mechanisms.cards import SECURE_RANDOMNESS
from dpmed.numbers import delta_text, epsilon_text
from dpmed.randomness import DRAW_BOUND, GAUSSIAN_DRAW_BOUND, NOT_DP_REPRODUCIBLE

STUDY = """
name: cards
data: {source: phantom, n_images: 200, image_size: 16}
training: {epochs: 1, batch_size: 20}
arms:
  - {name: poisson, mechanism: dp_sgd, target_epsilon: 8, privacy_unit: image, max_images_per_patient: 2}
  - {name: shuffled, mechanism: dp_sgd, target_epsilon: 8, privacy_unit: image, sampling: shuffle,
     max_images_per_patient: 2}
"""


@pytest.fixture
def plans(write_study):
    specs = plan_runs(load_study(write_study(STUDY)),
                      PlanContext(images_per_patient=np.full(70, 2, dtype=np.int64), image_shape=(1, 16, 16)))
    return {s.arm: s.privacy for s in specs}


def _card(plan, mode: str):
    make = shuffled_event if plan.sampling == "shuffle" else dp_sgd_event
    ledger = Ledger((make(noise=plan.noise, noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
                          steps=plan.steps),))
    return mechanism_info("dp_sgd").card(plan, ledger, mode)


def test_a_secure_poisson_card_is_dp_and_its_patient_note_names_the_eps_it_derives_from(plans):
    card = _card(plans["poisson"], "secure")
    assert card.is_dp and card.randomness == SECURE_RANDOMNESS
    assert "(Poisson sampling)" in card.neighbour_relation
    note = card.patient_guarantee.statement
    assert not note.startswith("NOT DP") and "k = 2" in note
    assert f"eps = {epsilon_text(card.epsilon)} at delta = {card.delta:.3g} (PLD accountant)" in note


def test_a_shuffled_card_labels_its_patient_note_not_dp_and_does_not_claim_poisson_sampling(plans):
    card = _card(plans["shuffled"], "secure")
    assert not card.is_dp and card.epsilon is None and card.statement.startswith("NOT DP")
    assert card.patient_guarantee.statement.startswith("NOT DP")          # was "... gives (eps, delta)-DP"
    assert "as if Poisson" in card.neighbour_relation and "shuffled fixed-size batches" in card.neighbour_relation
    assert "(Poisson sampling)" not in card.neighbour_relation
    assert card.epsilon_if_poisson == pytest.approx(accounting.dp_sgd_epsilon(
        noise_multiplier=card.noise_multiplier, sample_rate=card.sample_rate, steps=card.steps, delta=card.delta))


@pytest.mark.parametrize("arm", ["poisson", "shuffled"])
def test_a_reproducible_card_never_claims_fresh_randomness_nor_dp(plans, arm):
    """The shuffled branch returned before the reproducible label: its card said its noise was fresh OS entropy. The
    label goes first and the secure run's words follow it whole, on the card and on the patient's note: a reader
    still sees what was accounted, marked as not holding."""
    card = _card(plans[arm], "reproducible")
    assert not card.is_dp and card.randomness == NOT_DP_REPRODUCIBLE and card.randomness != SECURE_RANDOMNESS
    label = "NOT DP against anyone who knows the seed (reproducible mode); as accounted: "
    secure = _card(plans[arm], "secure")
    assert card.statement == label + secure.statement
    assert card.patient_guarantee.statement == label + secure.patient_guarantee.statement


def test_the_one_line_label_of_a_shuffled_run_names_delta_accountant_and_neighbours_of_its_poisson_eps(plans):
    """The plan, the summary, results.csv and comparisons.json print `in_brief`; a shuffled run's was a bare "not
    DP" there, while the plan (then its own formatter) gave the eps it would have had with Poisson sampling."""
    card = _card(plans["shuffled"], "secure")
    text = card.in_brief()
    assert text.startswith("not DP: shuffled batches") and f"{epsilon_text(card.epsilon_if_poisson)}" in text
    assert f"delta {card.delta:.3g}" in text and "PLD" in text and "add/remove one image" in text


def test_a_poisson_card_claims_its_delta_unchanged_where_the_samplers_bound_costs_nothing_visible(plans):
    card = _card(plans["poisson"], "secure")
    assert card.is_dp and card.sampler_delta < 1e-25 and not card.sampler_voids
    assert card.delta == plans["poisson"].delta                 # the sampler's share is below float64's resolution
    assert "sampler" not in card.statement


@pytest.mark.parametrize("eps", [1e6, 1e12])
def test_at_the_high_budget_noise_that_one_unit_outruns_the_card_is_not_dp_and_says_why(plans, eps):
    """Calibrated for eps 1e6 or more, sigma is so small that one image's clipped gradient moves a coordinate past
    every draw of numpy's sampler: the run is not (eps, delta)-DP at any eps, and nothing may call it DP."""
    plan = plans["poisson"].model_copy(update={"noise_multiplier": accounting.noise_multiplier_for(
        target_epsilon=eps, delta=1e-5, sample_rate=plans["poisson"].sample_rate, steps=plans["poisson"].steps,
        accountant="rdp"), "accountant": "rdp"})
    card = _card(plan, "secure")
    assert plan.sampler_delta == 1.0 and card.sampler_voids
    assert not card.is_dp and card.statement.startswith(
        "NOT DP as run: the noise sampler's draws are bounded (numpy's Gaussian never exceeds 12.23 std)")
    assert card.epsilon is not None and card.epsilon <= eps           # the accounted value, kept and labelled
    assert card.in_brief().endswith("not DP: noise below the sampler's reach")
    assert card.patient_guarantee.statement.startswith("NOT DP as run")
    # the patient's note of a void run reads the run's delta, not delta plus a share of 1 (that raised)
    note = patient_guarantee(plan, 2, {})
    assert f"at delta = {plan.delta:.3g} " in note.statement and note.tight_epsilon is None
    from dpmed.reporting.inputs import not_dp_text
    assert "one unit can move an output past every value the noise sampler draws" in not_dp_text(card)


def test_between_the_two_the_card_pays_the_samplers_share_in_its_delta(plans):
    """At sigma 0.15 one sampled step can move a coordinate past the bound with probability about Q(12.23 - 6.7):
    the claim holds at delta plus T q times that, and says so."""
    plan = plans["poisson"].model_copy(update={"noise_multiplier": 0.15, "accountant": "rdp"})
    plan = plan.model_copy(update={"patient_guarantee": patient_guarantee(plan, 2, {})})
    card = _card(plan, "secure")
    share = plan.sampler_delta
    assert 1e-3 * plan.delta < share < plan.delta and card.is_dp
    assert card.delta == plan.delta + share and card.sampler_delta == share
    assert f"at delta = {delta_text(card.delta)} (1e-05 + {delta_text(share)} for the noise sampler's bounded " \
           "draws, rounded up; RDP accountant; unit" in card.statement
    # eps is the accountant's at delta, not at the larger delta stated (which would read a smaller eps)
    assert card.epsilon == pytest.approx(accounting.dp_sgd_epsilon(
        noise_multiplier=0.15, sample_rate=plan.sample_rate, steps=plan.steps, delta=plan.delta,
        accountant="rdp") + plan.size_epsilon, rel=1e-9)
    # a patient's two images add up to 2 C: 13.3 std at sigma 0.15, past every draw in any step that samples both
    note = card.patient_guarantee
    assert note.tight_epsilon is None and "does not hold as run: the patient's k images together" in note.statement
    assert f"at delta = {delta_text(card.delta)}" in note.statement     # the run's own claim, rounded up


def test_a_delta_that_the_samplers_tiny_share_rounds_up_says_why(plans):
    """Laplace noise at eps 8: the sampler's share (about 1e-15) is far below a thousandth of delta, so the card
    said nothing of it, yet its delta, rounded up to three figures, read 1.01e-05 where the study asked for 1e-05.
    Rounding down would understate delta; the card now names the share wherever it changes the delta shown, beside
    that delta and as the sum it is: "of which 7.7e-15", among the eps terms, left the other 1e-07 unexplained."""
    plan = plans["poisson"].model_copy(update={"noise": "laplace", "noise_multiplier": 0.5, "accountant": "pld"})
    card = _card(plan, "secure")
    share = plan.sampler_delta
    assert 0 < share < 1e-3 * plan.delta and card.is_dp
    assert delta_text(plan.delta) == "1e-05" and delta_text(card.delta) == "1.01e-05"     # never below the claim
    assert f"at delta = 1.01e-05 (1e-05 + {delta_text(share)} for the noise sampler's bounded draws, rounded up; " \
           "PLD accountant; unit: one" in card.statement
    assert float(delta_text(share)) >= share and "of which" not in card.statement
    gaussian = _card(plans["poisson"], "secure")          # a share that leaves the delta shown as asked: not named
    assert delta_text(gaussian.delta) == "1e-05" and "noise sampler" not in gaussian.statement


def test_a_patients_tight_group_value_states_delta_plus_the_samplers_share_for_k_images(plans):
    """sigma 0.25, q 0.1, T 70: two images together outrun the sampler with probability 8.3e-6 over the run, below
    delta, so the tight value holds at delta plus that share, not at delta."""
    plan = plans["poisson"].model_copy(update={"noise_multiplier": 0.25, "accountant": "rdp", "sample_rate": 0.1,
                                               "steps": 70, "delta": 1e-5})
    share = accounting.bounded_noise_delta(noise="gaussian", noise_multiplier=0.25, sample_rate=0.1, steps=70,
                                           bound=GAUSSIAN_DRAW_BOUND, group=2)
    assert 1e-6 < share < 1e-5
    note = patient_guarantee(plan, 2, {})
    assert note.tight_epsilon is not None
    assert (f"tight group value is eps = {epsilon_text(note.tight_epsilon)} at delta = {delta_text(1e-5 + share)}"
            in note.statement)


def test_a_noise_level_whose_sampler_share_is_above_delta_is_not_dp(plans):
    """sigma 0.1: T q S is about 0.3 at q 0.05, T 500; a claim "at delta 0.3" would be no claim: the card must say
    NOT DP (not only where the share reaches 1)."""
    plan = plans["poisson"].model_copy(update={"noise_multiplier": 0.1, "accountant": "rdp", "sample_rate": 0.05,
                                               "steps": 500})
    assert 0.1 < plan.sampler_delta < 0.9
    card = _card(plan, "secure")
    assert not card.is_dp and card.sampler_voids and card.delta == plan.delta


def test_a_noiseless_plan_pays_all_of_delta_to_the_sampler_and_claims_nothing(plans):
    """noise_multiplier 0 (clipping only, as a direct caller may train): no draw hides a unit, so the share is 1
    and the claim is void, not a bounded-noise computation refusing sigma 0."""
    plan = plans["poisson"].model_copy(update={"noise_multiplier": 0.0})
    assert plan.sampler_share() == plan.sampler_share(group=3) == plan.sampler_delta == 1.0
    assert plan.sampler_voids and plan.claimed_delta == plan.delta


def test_every_eps_a_card_prints_is_rounded_up():
    """Before: in_brief and the statements rounded to nearest at four figures ("7.996" for 7.99612), while the
    report and the study's total rounded up ("7.997"): the terminal and results.csv showed less than accounted."""
    from dpmed.mechanisms import PrivacyCard

    card = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="", epsilon=7.99612, delta=1e-5, accountant="pld",
                       unit="patient", neighbour_relation="add/remove one patient")
    assert card.in_brief().startswith("7.997 (delta 1e-05, PLD")
    local = card.model_copy(update={"epsilon_image": 16384.2, "mechanism": "pixel_laplace", "delta": 0.0})
    assert local.in_brief().startswith("16,390 per image (local DP, delta 0")
    assert [epsilon_text(v) for v in (7.99612, 1e15, float("inf"))] == ["7.997", "1e15", "inf"]


def test_only_an_image_unit_names_the_cap_in_its_neighbours():
    """The cap changes what add/remove one image means; a patient unit with a cap still adds or removes a patient."""
    from dpmed.mechanisms.base import unit_words

    assert unit_words("image", 3) == "image of the training set as capped at 3 per patient"
    assert unit_words("patient", 3) == "patient" and unit_words("image", None) == "image"


def _released(write_study, epsilon: float = 0.05):
    """The poisson arm planned from a released count of 140 capped images, at size_epsilon ``epsilon``."""
    specs = plan_runs(load_study(write_study(STUDY)), PlanContext(
        images_per_patient=np.full(70, 2, dtype=np.int64), image_shape=(1, 16, 16),
        released_sizes={"images, at most 2 per patient": 140}, size_epsilon=epsilon))
    return next(s.privacy for s in specs if s.arm == "poisson")


def test_the_patients_guarantee_adds_the_released_size_once_per_image_of_the_patient(write_study):
    """The released count counts each of the patient's k = 2 images, so the patient pays 2 size_epsilon on top of the
    group value of training: the formula (k eps, k e^((k-1) eps) delta) is applied to the card's eps, training plus
    0.05, and the tight value adds k 0.05. Without it the patient's note claimed 0.05 or 0.1 less than the run has."""
    plan = _released(write_study)
    card = _card(plan, "secure")
    training = accounting.dp_sgd_epsilon(noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
                                         steps=plan.steps, delta=plan.delta)
    assert card.epsilon == pytest.approx(training + 0.05) and card.is_dp
    group = card.patient_guarantee
    assert group.k == 2 and group.formula_epsilon == pytest.approx(2 * (training + 0.05))
    assert group.formula_delta == pytest.approx(2 * np.exp(training + 0.05) * card.delta)
    tight = accounting.group_privacy(epsilon=training, delta=plan.delta, k=2, noise_multiplier=plan.noise_multiplier,
                                     sample_rate=plan.sample_rate, steps=plan.steps).tight_epsilon
    assert tight is not None and group.tight_epsilon == pytest.approx(tight + 2 * 0.05)
    assert f"eps = {epsilon_text(card.epsilon)} at delta = {delta_text(card.delta)} (PLD accountant plus the " \
           "released size)" in group.statement
    assert "plus k times the released size's eps" in group.statement


def test_a_card_states_the_steps_of_its_ledger_and_accounts_them(write_study):
    """The eps is the ledger's: a run that recorded one step fewer (or more) than planned must say T as recorded, the
    value the accountant composed, not the plan's."""
    plan = _released(write_study)
    for steps in (plan.steps - 1, plan.steps + 1):
        ledger = Ledger((dp_sgd_event(noise=plan.noise, noise_multiplier=plan.noise_multiplier,
                                      sample_rate=plan.sample_rate, steps=steps),))
        card = mechanism_info("dp_sgd").card(plan, ledger, "secure")
        assert card.steps == steps and f", T = {steps}, " in card.statement
        assert card.epsilon == pytest.approx(accounting.dp_sgd_epsilon(
            noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate, steps=steps, delta=plan.delta) + 0.05)


@pytest.mark.parametrize("unit", ["patient", "image"])
@pytest.mark.parametrize("size_epsilon", [0.0, 0.05])
def test_a_card_statement_names_its_delta_accountant_unit_and_neighbours(write_study, plans, unit, size_epsilon):
    """Never a bare eps: the statement names the delta it holds at, the accountant, the unit and the neighbour
    relation, for a count taken as public and for a released one (whose training eps names its accountant too)."""
    plan = _released(write_study) if size_epsilon else plans["poisson"]
    if unit == "patient":
        plan = plan.model_copy(update={"unit": "patient", "max_images_per_patient": None, "patient_guarantee": None,
                                       "image_cap_key": None})
    card = _card(plan, "secure")
    neighbours = (accounting.NEIGHBOUR_PATIENT if unit == "patient"
                  else "add or remove one image of the training set as capped at 2 per patient (Poisson sampling)")
    assert card.neighbour_relation == neighbours and card.unit == unit
    assert card.statement.startswith(f"eps = {epsilon_text(card.epsilon)} at delta = {delta_text(card.delta)} (")
    assert f"; unit: one {unit}; neighbours: {neighbours}; {unit}s: N = 140" in card.statement
    if size_epsilon:
        assert "by the PLD accountant + 0.05 for the released size, added (basic composition)" in card.statement
        assert "N = 140, a count released at eps 0.05 (discrete Laplace)" in card.statement
    else:
        assert "(PLD accountant; unit" in card.statement and "N = 140, taken as public" in card.statement


def test_a_pure_laplace_card_claims_only_the_samplers_share_as_its_delta(plans):
    """The pure bound for Laplace noise holds at delta 0 (Balle et al. 2018): the card's delta is what the bounded
    sampler costs (about 1e-16 at b = 2 C1 here), not the arm's delta plus it, and the statement says so."""
    plan = plans["poisson"].model_copy(update={"noise": "laplace", "noise_multiplier": 2.0, "accountant": "pure",
                                               "patient_guarantee": None})
    share = accounting.bounded_noise_delta(noise="laplace", noise_multiplier=2.0, sample_rate=plan.sample_rate,
                                           steps=plan.steps, bound=DRAW_BOUND["laplace"])
    card = _card(plan, "secure")
    assert card.is_dp and 0 < share < 1e-12 and card.delta == share == card.sampler_delta
    assert "pure DP but for the noise sampler's bounded draws, which that delta pays for" in card.statement
    assert card.epsilon == pytest.approx(accounting.dp_sgd_epsilon(
        noise_multiplier=2.0, sample_rate=plan.sample_rate, steps=plan.steps, delta=plan.delta, accountant="pure",
        noise="laplace"))


def test_a_patients_guarantee_shared_cache_keeps_runs_of_different_deltas_apart(plans):
    """Runs of one study share a cache: a second run that differs only in delta must get the group value at its own
    delta, not the first run's."""
    first = plans["poisson"]
    second = first.model_copy(update={"delta": first.delta / 100})
    cache: dict = {}
    patient_guarantee(first, 2, cache)
    assert patient_guarantee(second, 2, cache) == patient_guarantee(second, 2, {})
    assert patient_guarantee(second, 2, {}).formula_epsilon > patient_guarantee(first, 2, {}).formula_epsilon


def test_a_shuffled_runs_patient_note_states_no_tight_group_value(plans):
    """DP-SGD's tight group value is a mixture-of-Gaussians analysis of Poisson sampling: shuffled batches have none,
    and only the group formula (from the Poisson counterpart's eps, labelled not DP) may stand."""
    plan = plans["shuffled"]
    assert plan.patient_guarantee.tight_epsilon is None
    assert "tight group value is eps" not in plan.patient_guarantee.statement
    assert plans["poisson"].patient_guarantee.tight_epsilon is not None


def test_a_card_that_claims_dp_without_an_eps_says_so_in_brief():
    """A card read back that claims DP but states no eps (per run or per image) is no claim: its one-line form names
    that, where it raised a TypeError from the number formatting."""
    from dpmed.mechanisms import PrivacyCard

    card = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="edited", delta=1e-5, accountant="pld")
    with pytest.raises(ValueError, match="dp_sgd card claims DP .* but states no eps"):
        card.in_brief()
