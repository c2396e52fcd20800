"""The audit as a run performs it (`dpmed.audit.procedure`): whose randomness decides which canaries go in, and what
the record and its sentence say at the claim's delta."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

import dpmed.audit.procedure as procedure
from dpmed.audit.bound import AuditResult, choose_canaries
from dpmed.data import make_phantom
from dpmed.mechanisms import AuditConfig


@pytest.fixture(scope="module")
def trial_inputs():
    data = make_phantom(seed=0, n_images=600, image_size=16)
    return data.train, data.task, len(np.unique(data.train.patient_ids))


def test_the_inclusion_bits_are_the_secret_streams_draws_not_the_public_seeds(trial_inputs):
    """Bits drawn from the run's public seed would be known to anyone who reads it, and the same in every run of
    that seed: the guesser's job would be done for it. With one seed, two secret streams give two sets of bits."""
    train, task, n_patients = trial_inputs
    trials = [procedure.insert_canaries_for(train, task, AuditConfig(canaries=100), seed=7, n_patients=n_patients,
                                            rng=np.random.default_rng(k))[1] for k in (1, 2)]
    for k, trial in zip((1, 2), trials, strict=True):
        drawn = choose_canaries(len(trial.included), rng=np.random.default_rng(k))
        np.testing.assert_array_equal(trial.included, drawn)
    assert len(trials[0].included) > 50 and not np.array_equal(trials[0].included, trials[1].included)


@pytest.mark.parametrize("delta, bound, expected_delta, consistent", [
    (1e-3, 1.5, 1e-3, False), (1e-3, 0.5, 1e-3, True), (None, 0.5, procedure.AUDIT_DELTA_NON_PRIVATE, None),
    (1.2356e-5, 0.5, 1.2356e-5, True)])
def test_the_bound_is_taken_and_stated_at_the_claims_delta_and_judged_against_its_eps(
        trial_inputs, monkeypatch, delta, bound, expected_delta, consistent):
    train, task, n_patients = trial_inputs
    _, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=40), seed=7, n_patients=n_patients,
                                             rng=np.random.default_rng(0))
    asked = []

    def grid(scores, included, *, delta, confidence):
        asked.append(delta)
        return AuditResult(epsilon_lower_bound=bound, n_canaries=len(included), n_guesses=10, n_correct=9,
                           confidence=confidence, delta=delta, k_positive=5, k_negative=5, method="stub")

    monkeypatch.setattr(procedure, "audit_epsilon_lower_bound_over_grid", grid)
    claimed = None if delta is None else 1.0       # a run without privacy has no claim, nor its terms
    record, _ = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=delta, claimed_epsilon=claimed,
                                   claim_terms="" if claimed is None else "PLD, add/remove one patient")
    assert asked == [expected_delta] and record.delta == expected_delta
    # rounded down, never to nearest (1.2356e-5 is not 1.24e-5): the audit refutes (eps, delta)-DP at the smaller
    shown = {1e-3: "0.001", 1e-5: "1e-5", 1.2356e-5: "1.23e-5"}[expected_delta]
    assert f"at delta = {shown}, add/remove one canary (an image that is its own patient) " in record.statement
    assert record.consistent_with_claim is consistent
    if consistent is False:
        assert "inconsistent with the claimed eps at 95%" in record.statement
    elif consistent:
        assert "claims eps = 1 (the same delta, PLD, add/remove one patient): consistent (a lower bound can " \
               "refute the claim, not prove it;" in record.statement
    else:
        assert "; no eps is claimed:" in record.statement


def test_the_drawn_patients_leave_and_the_included_canaries_follow_the_rest(trial_inputs):
    """Every patient drawn (at rate m / the public count) becomes one canary, none is dropped (seed 1 draws 43 for
    m = 40); none of their images stays in training; the rest keeps its order and the included canaries of the
    configured kind follow it, drawn from the run's public streams."""
    from dpmed.audit.canaries import hold_out_canary_sources, make_canaries
    from dpmed.randomness import public_seed

    train, task, n_patients = trial_inputs
    merged, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=40, kind="noise"), seed=1,
                                                  n_patients=n_patients, rng=np.random.default_rng(0))
    rest, sources = hold_out_canary_sources(train, 40, seed=public_seed(1, "canary_sources"), n_patients=n_patients)
    assert len(sources) == len(trial.included) == len(trial.canaries) != 40
    assert not set(sources.patient_ids.astype(str)) & set(merged.patient_ids.astype(str))
    assert len(merged) == len(rest) + trial.included.sum()
    np.testing.assert_array_equal(merged.images[:len(rest)], rest.images)
    expected = make_canaries(sources, len(sources), task=task, seed=public_seed(1, "canaries"), kind="noise")
    np.testing.assert_array_equal(trial.canaries.images, expected.images)
    np.testing.assert_array_equal(merged.images[len(rest):], expected.images[trial.included])


def test_the_record_holds_each_count_at_the_configured_confidence_and_a_bound_at_the_claim_is_consistent(
        trial_inputs, monkeypatch):
    train, task, n_patients = trial_inputs
    _, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=40, confidence=0.9), seed=7,
                                             n_patients=n_patients, rng=np.random.default_rng(0))
    asked = []

    def grid(scores, included, *, delta, confidence):
        asked.append(confidence)
        return AuditResult(epsilon_lower_bound=1.25, n_canaries=len(included), n_guesses=10, n_correct=9,
                           confidence=confidence, delta=delta, k_positive=7, k_negative=3, method="stub")

    monkeypatch.setattr(procedure, "audit_epsilon_lower_bound_over_grid", grid)
    record, arrays = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)),
                                        task_kind=task.kind, delta=1e-5, claimed_epsilon=1.25)
    assert asked == [0.9] and "90%" in record.statement
    assert (record.n_guesses, record.n_correct, record.k_positive, record.k_negative) == (10, 9, 7, 3)
    assert record.consistent_with_claim is True and (
        "claims eps = 1.25 (the same delta): consistent (a lower bound can refute the claim, not prove it;"
        in record.statement)
    np.testing.assert_array_equal(arrays["included"], trial.included)
    np.testing.assert_array_equal(arrays["labels"], trial.canaries.labels)


@pytest.mark.parametrize("confidence, shown", [(0.95, "95%"), (0.975, "97.5%"), (0.995, "99.5%"), (0.999, "99.9%")])
def test_the_statement_never_shows_a_confidence_above_the_audits(trial_inputs, monkeypatch, confidence, shown):
    """The statement's confidence is what the test holds at, shown no higher: to a whole percent, 0.995 and 0.999
    read "100%", a certainty no finite audit has, and 0.975 read "98%"."""
    trial, task = _trial_bounded_at(trial_inputs, monkeypatch, 3.0, correct=10, confidence=confidence)
    record, _ = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=1e-5, claimed_epsilon=1.0)
    assert record.confidence == confidence and record.consistent_with_claim is False
    assert f"canaries, {shown} confidence; 10 of 10 guesses correct)" in record.statement
    assert f"inconsistent with the claimed eps at {shown} confidence" in record.statement
    assert "100%" not in record.statement


def _trial_bounded_at(trial_inputs, monkeypatch, bound: float, *, correct: int = 6, **audit):
    """(a trial of 40 canaries, its task), with the audit's bound stubbed to ``bound`` from ``correct`` of 10
    guesses: what a statement says of it. ``audit``: other AuditConfig settings (its confidence)."""
    train, task, n_patients = trial_inputs
    _, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=40, **audit), seed=7,
                                             n_patients=n_patients, rng=np.random.default_rng(0))

    def grid(scores, included, *, delta, confidence):
        return AuditResult(epsilon_lower_bound=bound, n_canaries=len(included), n_guesses=10, n_correct=correct,
                           confidence=confidence, delta=delta, k_positive=5, k_negative=5, method="stub")

    monkeypatch.setattr(procedure, "audit_epsilon_lower_bound_over_grid", grid)
    return trial, task


@pytest.mark.parametrize("claimed, bound", [(None, 0.2), (8.0, 0.2), (1.0, 3.0)])
def test_the_statement_says_what_a_bound_below_or_above_the_claim_does_not_mean(trial_inputs, monkeypatch, claimed,
                                                                               bound):
    """A lower bound far below the claim (or a small one on a run without privacy) is no evidence that the run is
    more private than proven: the audit sees only the final model and its canaries, and in that black-box setting
    Steinke, Nasr and Jagielski (2023) find bounds well below the eps of the runs they audit. One above the claim
    refutes it at the confidence, which a correct run still shows in 1 - confidence of its audits."""
    trial, task = _trial_bounded_at(trial_inputs, monkeypatch, bound)
    record, _ = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=1e-5, claimed_epsilon=claimed)
    if claimed is None:
        assert record.statement.endswith("; no eps is claimed: the run has no privacy guarantee, and a small bound "
                                         "is no evidence of privacy")
    elif bound <= claimed:
        assert record.statement.endswith(": consistent (a lower bound can refute the claim, not prove it; one far "
                                         "below it is no evidence that the run is more private than claimed)")
    else:
        assert record.statement.endswith(": inconsistent with the claimed eps at 95% confidence (an audit of a run "
                                         "that keeps its claim says so at most 5% of the time)")


_KEYS = ["n_canaries", "kind", "n_included", "n_guesses", "n_correct", "k_positive", "k_negative",
         "epsilon_lower_bound", "confidence", "delta", "claimed_epsilon", "consistent_with_claim", "method",
         "citation", "statement", "canary_source", "private"]


@pytest.mark.parametrize("canaries", [40, 0])
def test_the_record_writes_the_keys_audit_json_always_had_and_reads_back_equal(trial_inputs, tmp_path, canaries):
    """audit.json keeps its keys and values (files written before the record was a type still read): what run.py
    writes reads back as the same record, an audited run's and one whose draw found no canary patient alike."""
    from dpmed.folders import write_json_atomic

    train, task, n_patients = trial_inputs
    _, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=40), seed=7, n_patients=n_patients,
                                             rng=np.random.default_rng(0))
    if canaries == 0:      # the unaudited record: no canary drawn, no bound
        trial = procedure.AuditTrial(trial.config, trial.canaries.subset(np.arange(0)), np.zeros(0, bool))
    record, _ = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=1e-5, claimed_epsilon=2.0, claim_terms="PLD")
    write_json_atomic(tmp_path / "audit.json", record.model_dump(mode="json"))
    on_disk = json.loads((tmp_path / "audit.json").read_text())
    assert list(on_disk) == _KEYS
    assert (on_disk["citation"], on_disk["delta"], on_disk["claimed_epsilon"]) == (procedure.AUDIT_CITATION, 1e-5, 2.0)
    assert on_disk["n_canaries"] == len(trial.included) and isinstance(on_disk["n_canaries"], int)
    assert (on_disk["epsilon_lower_bound"] is None) == (canaries == 0)
    assert procedure.AuditRecord.model_validate_json((tmp_path / "audit.json").read_bytes()) == record
    with pytest.raises(ValidationError, match="frozen"):     # frozen: a record is what the run concluded
        record.statement = "edited"


def test_an_image_unit_trial_does_not_call_each_canary_its_own_patient(trial_inputs):
    """Where the image is the unit every image of a drawn patient is a canary (`hold_out_canary_sources`), drawn at
    rate m / the count of images: the statement said each canary was "an image that is its own patient", and a
    draw with no canary spoke of the count of patients."""
    train, task, _ = trial_inputs
    _, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=40), seed=7, n_patients=len(train),
                                             rng=np.random.default_rng(0), unit="image")
    assert trial.unit == "image" and len(trial.included) > 0
    record, _ = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=1e-5, claimed_epsilon=2.0, claim_terms="PLD, add/remove one image")
    assert "its own patient" not in record.statement
    assert "add/remove one canary (one image; where the image is the unit, a patient's other images may be " \
           "canaries too)" in record.statement
    empty = procedure.AuditTrial(trial.config, trial.canaries.subset(np.arange(0)), np.zeros(0, bool), "image")
    unaudited, _ = procedure.conclude(empty, np.zeros((0, task.num_outputs)), task_kind=task.kind, delta=1e-5,
                                      claimed_epsilon=2.0)
    assert "m / the public count of images" in unaudited.statement
    _, patient_trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=40), seed=7,
                                                     n_patients=len(np.unique(train.patient_ids)),
                                                     rng=np.random.default_rng(0))
    record, _ = procedure.conclude(patient_trial, np.zeros((len(patient_trial.included), task.num_outputs)),
                                   task_kind=task.kind, delta=1e-5, claimed_epsilon=2.0)
    assert patient_trial.unit == "patient" and "(an image that is its own patient)" in record.statement


@pytest.mark.parametrize("bound", [0.2, 3.0])
def test_a_claim_stated_without_its_card_s_not_dp_label_reads_as_the_statement_written_with_it(
        trial_inputs, monkeypatch, bound):
    """An audit.json written before a reproducible-mode run's claim carried its card's "not DP: seed known" states
    the accounted eps bare. Labelled by its card, it reads as what `conclude` writes with the label, consistent or
    not; a record that has its label, of a card that is DP, or that states no bound is left as it is."""
    from dpmed.mechanisms import PrivacyCard
    from dpmed.mechanisms.cards import label_randomness

    trial, task = _trial_bounded_at(trial_inputs, monkeypatch, bound)
    terms = ("PLD, add/remove one patient; training alone: the card's 1.013 adds 0.0125 for the released "
             "training-set size")
    old, new = (procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=1e-5, claimed_epsilon=1.0, claim_terms=t)[0]
                for t in (terms, f"{terms}; not DP: seed known"))
    dp = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement="eps = 1", epsilon=1.0, delta=1e-5, accountant="pld")
    reproducible = label_randomness(dp, "reproducible")
    assert old.label_claim(reproducible) == new
    assert new.label_claim(reproducible) == new and old.label_claim(dp) == old
    bare = old.model_copy(update={"statement": old.statement.replace(f" (the same delta, {terms})", "")})
    assert "claims eps = 1: " in bare.statement
    assert "claims eps = 1 (not DP: seed known): " in bare.label_claim(reproducible).statement
    unaudited = old.model_copy(update={"statement": "no audit bound: none of the training patients was drawn"})
    assert unaudited.label_claim(reproducible) == unaudited


@pytest.mark.parametrize("fits", ["included", "excluded"])
def test_a_model_that_fits_the_included_canaries_labels_is_caught_and_one_that_fits_the_others_is_not(
        trial_inputs, fits):
    """The whole audit, unstubbed: logits that favour each canary's own (wrong) label by a margin of 5 where it was
    trained on, and its true label by 5 where it was not, make every guess right, and 100 canaries at 95% then
    refute an eps of 1; the same margins the other way round make every guess wrong and prove nothing."""
    train, task, n_patients = trial_inputs
    _, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=100), seed=7, n_patients=n_patients,
                                             rng=np.random.default_rng(3))
    m, labels = len(trial.included), trial.canaries.labels
    memorised = trial.included if fits == "included" else ~trial.included
    logits = np.zeros((m, task.num_outputs))
    logits[np.arange(m), labels] = np.where(memorised, 5.0, -5.0)
    record, arrays = procedure.conclude(trial, logits, task_kind=task.kind, delta=1e-5, claimed_epsilon=1.0)
    assert record.n_canaries == m > 50 and record.n_included == int(trial.included.sum())
    assert 0 < record.n_included < m
    assert np.all((arrays["scores"] > -0.1) == memorised)     # log p(label): about -0.007 fitted, -5 not
    if fits == "included":
        assert record.n_correct == record.n_guesses > 0 and record.epsilon_lower_bound > 1.0
        assert record.consistent_with_claim is False
    else:
        assert record.n_correct == 0 and record.epsilon_lower_bound == 0.0 and record.consistent_with_claim


def test_the_statement_rounds_the_bound_down_and_the_error_rate_up(trial_inputs, monkeypatch):
    """A bound of 2.99999 shown as "3" would claim more than was refuted, and an error rate of 1.2346% shown as
    1.234% less than the audit risks: the bound reads 2.99, the confidence 98.76% and the rate 1.235%."""
    trial, task = _trial_bounded_at(trial_inputs, monkeypatch, 2.99999, correct=10, confidence=0.987654)
    record, _ = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=1e-5, claimed_epsilon=1.0)
    assert record.statement.startswith("empirical lower bound eps >= 2.99 at delta = 1e-5,")
    assert "98.76% confidence; 10 of 10 guesses correct" in record.statement
    assert record.statement.endswith("(an audit of a run that keeps its claim says so at most 1.235% of the time)")


def test_a_run_without_a_claimed_eps_is_stated_with_its_cards_not_dp_label(trial_inputs, monkeypatch):
    """A DP-SGD run on shuffled batches (the source documents' method) has no eps; its audit statement must still
    carry the card's "not DP" label beside "no eps is claimed", never read as a plain run without privacy."""
    trial, task = _trial_bounded_at(trial_inputs, monkeypatch, 0.2)
    label = "not DP: shuffled batches (a Poisson run would have eps 8.37 at delta 1e-05, PLD, add/remove one image)"
    record, _ = procedure.conclude(trial, np.zeros((len(trial.included), task.num_outputs)), task_kind=task.kind,
                                   delta=1e-5, claimed_epsilon=None, claim_terms=label)
    assert record.statement.endswith(f"; no eps is claimed ({label}): the run has no privacy guarantee, and a small "
                                     "bound is no evidence of privacy")
    assert record.claimed_epsilon is None and record.consistent_with_claim is None


def test_a_run_whose_draw_found_no_canary_patient_trains_on_its_whole_set_and_states_no_bound(trial_inputs):
    """At a rate m / a count far above the patients no one is drawn: the training set is returned as it was, and the
    record has no bound, no method and zero counts, and says why."""
    train, task, _ = trial_inputs
    merged, trial = procedure.insert_canaries_for(train, task, AuditConfig(canaries=2), seed=7, n_patients=10 ** 9,
                                                  rng=np.random.default_rng(0))
    assert merged is train and len(trial.canaries) == 0 and trial.included.shape == (0,)
    record, arrays = procedure.conclude(trial, np.zeros((0, task.num_outputs)), task_kind=task.kind, delta=1e-5,
                                        claimed_epsilon=2.0)
    assert record.epsilon_lower_bound is None and record.method is None and record.consistent_with_claim is None
    assert (record.n_canaries, record.n_included, record.n_guesses, record.n_correct) == (0, 0, 0, 0)
    assert record.statement.startswith("no audit bound: none of the training patients was drawn")
    assert len(arrays["scores"]) == 0
