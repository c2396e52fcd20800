"""The privacy ledger: merging, exact serialisation, and resume gives the eps of an uninterrupted run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.accounting import (LaplaceImageEvent, Ledger, PoissonGaussianEvent, PoissonLaplaceEvent,
                              ShuffledBatchesEvent, dp_sgd_epsilon, event_from_dict, event_to_dict, ledger_epsilon,
                              poisson_counterpart, shuffled_event)

Q, SIGMA, DELTA = 128 / 5218, 5.002, 1e-4


def step(sigma=SIGMA, q=Q, steps=1):
    return PoissonGaussianEvent(noise_multiplier=sigma, sample_rate=q, steps=steps)


def run(ledger: Ledger, n: int, **kwargs) -> Ledger:
    for _ in range(n):
        ledger = ledger.record(step(**kwargs))
    return ledger


def json_round_trip(ledger: Ledger) -> Ledger:
    return Ledger.from_dict(json.loads(json.dumps(ledger.to_dict())))


def test_steps_of_one_mechanism_merge_into_one_entry():
    ledger = run(Ledger(), 10_000)
    assert ledger.events == (step(steps=10_000),)
    assert ledger.dp_sgd_steps == 10_000


def test_a_change_of_sigma_or_q_or_a_local_release_starts_a_new_entry():
    image = LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=3 * 224 * 224)
    ledger = run(Ledger(), 3)
    ledger = run(ledger, 2, sigma=2.0)
    ledger = run(ledger, 2, sigma=2.0, q=0.5)
    ledger = ledger.record(image)
    ledger = run(ledger, 4, sigma=2.0, q=0.5)
    assert ledger.events == (step(steps=3), step(sigma=2.0, steps=2), step(sigma=2.0, q=0.5, steps=2), image,
                             step(sigma=2.0, q=0.5, steps=4))
    assert ledger.dp_sgd_steps == 11


def test_record_returns_a_new_ledger():
    empty = Ledger()
    assert empty.record(step()) is not empty and empty.events == ()


def test_ledger_holds_only_events():
    with pytest.raises(TypeError, match="PoissonGaussianEvent"):
        Ledger().record({"noise_multiplier": 1.0})
    with pytest.raises(TypeError, match=r"a Ledger holds privacy events \(.*PoissonGaussianEvent.*\), got 'not an"):
        Ledger(events=("not an event",))


@settings(max_examples=50, deadline=None)
@given(sigma=st.floats(0.0, 1e6), q=st.floats(1e-12, 1.0), steps=st.integers(0, 10**9),
       scale=st.floats(1e-300, 1e300), dimension=st.integers(1, 10**8))
def test_serialisation_round_trips_exactly(sigma, q, steps, scale, dimension):
    ledger = Ledger((step(sigma=sigma, q=q, steps=steps),
                     LaplaceImageEvent(scale=scale, value_range=0.1 + 0.2, dimension=dimension)))
    assert json_round_trip(ledger) == ledger


def test_numpy_fields_serialise_to_plain_json():
    event = PoissonGaussianEvent(noise_multiplier=np.float64(1.1), sample_rate=np.float32(0.5), steps=np.int64(3))
    assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event


@pytest.mark.parametrize("d, message", [
    ({"type": "gaussian_sgd", "noise_multiplier": 1.0}, "gaussian_sgd"),
    ({"noise_multiplier": 1.0}, "'type'"),
    ({"type": "poisson_gaussian", "noise_multiplier": 1.0, "sample_rate": 0.1}, "missing \\['steps'\\]"),
    ({"type": "poisson_gaussian", "noise_multiplier": 1.0, "sample_rate": 0.1, "steps": 1, "seed": 3}, "seed"),
    ({"type": "poisson_gaussian", "noise_multiplier": 1.0, "sample_rate": 0.0, "steps": 1}, "sample_rate"),
])
def test_malformed_event_dicts_are_explained(d, message):
    with pytest.raises(ValueError, match=message):
        event_from_dict(d)


def test_malformed_ledger_dict_is_explained():
    with pytest.raises(ValueError, match="events"):
        Ledger.from_dict({"steps": []})


@pytest.mark.parametrize("accountant", ["pld", "rdp", "rdp-classic"])
def test_ledger_epsilon_is_that_of_the_merged_event(accountant):
    ledger = run(Ledger(), 2039)
    expected = dp_sgd_epsilon(noise_multiplier=SIGMA, sample_rate=Q, steps=2039, delta=DELTA, accountant=accountant)
    assert ledger_epsilon(ledger, delta=DELTA, accountant=accountant) == expected


@pytest.mark.parametrize("accountant", ["pld", "rdp", "rdp-classic"])
def test_a_resumed_run_ends_with_the_eps_of_an_uninterrupted_one(accountant):
    whole = run(Ledger(), 2039)
    first_half = json_round_trip(run(Ledger(), 1000))  # saved with the checkpoint, loaded on resume
    resumed = run(first_half, 1039)
    assert resumed == whole
    assert (ledger_epsilon(resumed, delta=DELTA, accountant=accountant)
            == ledger_epsilon(whole, delta=DELTA, accountant=accountant))


@pytest.mark.parametrize("accountant", ["pld", "rdp", "rdp-classic"])
def test_composing_two_phases_costs_more_than_either(accountant):
    phase_a, phase_b = step(sigma=2.0, q=0.01, steps=500), step(sigma=1.0, q=0.02, steps=300)
    eps = {name: ledger_epsilon(Ledger(events), delta=1e-5, accountant=accountant)
           for name, events in {"a": (phase_a,), "b": (phase_b,), "ab": (phase_a, phase_b)}.items()}
    assert max(eps["a"], eps["b"]) < eps["ab"] <= eps["a"] + eps["b"]


def test_the_poisson_counterpart_keeps_each_entry_s_noise_and_leaves_poisson_entries_alone():
    """A shuffled Laplace entry becomes a Poisson Laplace one (L1 clipping, b / C1), not a Gaussian one; a Poisson
    entry before it is kept as it was; so the hypothetical eps is the Laplace run's."""
    first = step(steps=3)
    ledger = Ledger((first, shuffled_event(noise="laplace", noise_multiplier=4.0, sample_rate=0.1, steps=7)))
    assert poisson_counterpart(ledger).events == (first, PoissonLaplaceEvent(noise_multiplier=4.0, sample_rate=0.1,
                                                                             steps=7))


@pytest.mark.parametrize("noise", ["uniform", "Gaussian", ""])
def test_a_shuffled_batch_event_names_one_of_the_two_noises(noise):
    """Its noise decides what poisson_counterpart builds; an unknown one would fail only there, or never."""
    with pytest.raises(ValueError, match="noise must be 'gaussian' or 'laplace'"):
        ShuffledBatchesEvent(noise=noise, noise_multiplier=SIGMA, sample_rate=Q, steps=1)


def test_empty_and_noiseless_ledgers():
    assert ledger_epsilon(Ledger(), delta=1e-5) == 0.0
    assert ledger_epsilon(run(Ledger(), 5, sigma=0.0), delta=1e-5) == float("inf")


@pytest.mark.parametrize("accountant", ["pld", "rdp", "rdp-classic"])
def test_one_noiseless_phase_makes_the_whole_ledger_non_private(accountant):
    """Steps released without noise publish exact gradient sums: eps is inf, whatever noise the other phases had
    (and not an error about an eps 'above what the accountant certifies')."""
    ledger = run(run(Ledger(), 3, sigma=0.0), 5)
    assert len(ledger.events) == 2
    assert ledger_epsilon(ledger, delta=1e-5, accountant=accountant) == float("inf")
    assert ledger_epsilon(Ledger(tuple(reversed(ledger.events))), delta=1e-5, accountant=accountant) == float("inf")


def test_local_releases_are_not_mixed_into_dp_sgd_epsilon():
    ledger = Ledger().record(LaplaceImageEvent(scale=1.0, value_range=1.0, dimension=10))
    with pytest.raises(ValueError, match="laplace_image_epsilon"):
        ledger_epsilon(ledger, delta=1e-5)


@pytest.mark.parametrize("accountant", ["pld", "rdp", "rdp-classic", "pure"])
def test_shuffled_batches_are_recorded_as_such_and_every_accountant_refuses_them(accountant):
    """sampling: shuffle is recorded as what ran; recomputing eps from run.json must not give a Poisson eps."""
    shuffled = Ledger()
    for _ in range(5):
        shuffled = shuffled.record(shuffled_event(noise="gaussian", noise_multiplier=SIGMA, sample_rate=Q, steps=1))
    assert shuffled.events == (ShuffledBatchesEvent("gaussian", SIGMA, Q, 5),) and shuffled.dp_sgd_steps == 5
    assert json_round_trip(shuffled) == shuffled
    with pytest.raises(ValueError, match="shuffled fixed-size batches"):
        ledger_epsilon(shuffled, delta=DELTA, accountant=accountant)
    # the labelled hypothetical: what a Poisson run at the same rate would have cost, exactly
    counterpart = poisson_counterpart(shuffled)
    assert counterpart == run(Ledger(), 5) and not counterpart.has_shuffled_batches
    assert ledger_epsilon(counterpart, delta=DELTA) == dp_sgd_epsilon(noise_multiplier=SIGMA, sample_rate=Q, steps=5,
                                                                     delta=DELTA)


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_the_chance_of_being_drawn_counts_every_entry_of_a_ledger(accountant):
    """Two entries, one step each at q = 0.5 and 0.4 with sigma = 0.05: an example drawn in either step shifts that
    step's output by 20 std, so 'some output above 1/2' has probability about 1 - 0.5 * 0.6 = 0.7 with it and 1e-23
    without: the total variation, delta at eps = 0, is above 0.6, and at delta = 0.6 eps is not 0. An eps of 0 there
    would mean the chance of being drawn was taken from one entry alone (0.5 or 0.4)."""
    from scipy.stats import norm
    ledger = Ledger((step(sigma=0.05, q=0.5), step(sigma=0.05, q=0.4)))
    shifted = norm.sf(0.5 / 0.05 - 1 / 0.05)                           # P(z > 1/2) for a drawn step, ~1
    total_variation_at_least = 1 - (1 - 0.5 * shifted) * (1 - 0.4 * shifted) - 2 * norm.sf(0.5 / 0.05)
    assert total_variation_at_least > 0.69
    assert ledger_epsilon(ledger, delta=0.6, accountant=accountant) > 0
    # while at a delta above the chance of being drawn at all, 0.7, nothing is distinguishable (PLD says so; RDP's
    # bound, valid but loose, does not)
    assert accountant != "pld" or ledger_epsilon(ledger, delta=0.71, accountant=accountant) == 0.0


def test_ledger_epsilon_takes_a_ledger_only():
    """A bare list of events has none of the ledger's checks (shuffled batches, image releases): it is refused."""
    with pytest.raises(TypeError, match="ledger must be a dpmed.accounting.Ledger, got list"):
        ledger_epsilon([PoissonGaussianEvent(1.0, 0.01, 100)], delta=1e-5)


def test_event_to_dict_refuses_what_is_not_an_event():
    with pytest.raises(TypeError, match="event must be one of PoissonGaussianEvent.*got 'step'"):
        event_to_dict("step")
