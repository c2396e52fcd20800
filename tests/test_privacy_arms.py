"""Every privacy arm end to end: resolution before training (calibration, fallback, budgets) and honest cards."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpmed import accounting
from dpmed.budget import check_budget, study_privacy
from dpmed.cli import main
from dpmed.config import load_study
from dpmed.errors import PrivacyError
from dpmed.study import resolve_runs


def _patients(n: int) -> np.ndarray:
    """Training patient ids of n images, one image each."""
    return np.array([f"p{i}" for i in range(n)])

STUDY = """
name: arms
data: {source: phantom, n_images: 200, image_size: 16}
training: {epochs: 1, batch_size: 20}
evaluation: {bootstrap_resamples: 20}
arms:
  - {name: lap, mechanism: pixel_laplace, target_epsilon_image: 512}
  - {name: gauss, mechanism: pixel_gaussian, target_epsilon_image: 100}
  - {name: shift, mechanism: scalar_shift, scale: 1}
  - {name: high, mechanism: dp_sgd, target_epsilon: [1e6, 1e15]}
  - {name: laplace-sgd, mechanism: dp_sgd, target_epsilon: 8, noise: laplace}
  - {name: given, mechanism: dp_sgd, noise_multiplier: 1.1, accountant: rdp-classic}
  - {name: shuffled, mechanism: dp_sgd, target_epsilon: 8, sampling: shuffle}
"""


def test_every_derived_value_is_resolved_before_training(write_study):
    text = STUDY.replace("[1e6, 1e15]", "[1e6, 1e9, 1e12, 1e15]")
    specs = {s.run_id: s for s in resolve_runs(load_study(write_study(text)), _patients(140), (1, 16, 16))}
    assert specs["lap_epsimg512_seed0"].derived["scale"] == pytest.approx(256 / 512)
    gauss = specs["gauss_epsimg100_seed0"].derived
    eps = accounting.gaussian_image_epsilon(accounting.GaussianImageEvent(std=gauss["std"], value_range=1.0,
                                                                          dimension=256), delta=gauss["delta"])
    assert eps <= 100 and eps == pytest.approx(100, rel=1e-5)
    for target in (1e6, 1e9, 1e12, 1e15):
        d = specs[f"high_eps{target:g}_C1_seed0".replace("+", "")].derived
        assert d["accountant"] == "rdp" and "PLD cannot resolve" in d["accountant_note"]
        assert accounting.dp_sgd_epsilon(noise_multiplier=d["noise_multiplier"], sample_rate=d["sample_rate"],
                                         steps=d["steps"], delta=d["delta"], accountant="rdp") <= target
    assert specs["given_sigma1.1_C1_seed0"].derived["noise_given"] is True
    assert specs["laplace-sgd_eps8_C1_seed0"].derived["accountant"] == "pld"


BUDGET = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
          "privacy_budget: {epsilon: 10, delta: 1e-5}\n"
          "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 8}]\n")


def _privacy(study, finished=()):
    specs = resolve_runs(study, _patients(140), (1, 16, 16))
    return study_privacy(specs, finished, budget=study.privacy_budget)


def test_a_study_over_its_total_budget_stops_before_training(write_study):
    """Two eps-8 runs on the same images compose to more than 8; the declared budget catches it."""
    study = load_study(write_study(BUDGET))
    with pytest.raises(PrivacyError, match=r"2 DP-SGD runs together cost eps = 1\d\.\d+ .* above the budget eps = 10"):
        check_budget(study.privacy_budget, _privacy(study))
    wider = load_study(write_study(BUDGET.replace("epsilon: 10,", "epsilon: 20,")))
    privacy = _privacy(wider)
    check_budget(wider.privacy_budget, privacy)
    assert 8 < privacy.dp_sgd_epsilon < 16 and privacy.accountant == "pld" and privacy.unit == "patient"


def test_the_budget_counts_every_run_on_the_same_patients(write_study):
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
    spec = resolve_runs(one, _patients(140), (1, 16, 16))[0]
    left = {"run_id": "dp_eps8_C1_seed7", "spec": spec.to_dict(), "ledger": accounting.Ledger().record(
        accounting.dp_sgd_event(noise="gaussian", noise_multiplier=spec.derived["noise_multiplier"],
                                sample_rate=spec.derived["sample_rate"], steps=spec.derived["steps"])).to_dict()}
    both = _privacy(one, [left])
    assert both.dp_sgd_runs == ("dp_eps8_C1_seed0", "dp_eps8_C1_seed7")
    assert both.dp_sgd_epsilon > alone.dp_sgd_epsilon


def test_runs_with_different_units_have_no_single_total(write_study):
    text = BUDGET.replace("arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 8}]",
                          "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 1}, "
                          "{name: img, mechanism: dp_sgd, target_epsilon: 1, privacy_unit: image}]")
    study = load_study(write_study(text))
    privacy = _privacy(study)
    assert privacy.dp_sgd_epsilon is None and "do not compose" in privacy.statement
    with pytest.raises(PrivacyError, match="do not compose"):
        check_budget(study.privacy_budget, privacy)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    folder = tmp_path_factory.mktemp("arms")
    (folder / "s.yaml").write_text(STUDY)
    assert main(["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--no-progress"]) == 0
    return {p.parent.name: json.loads(p.read_text()) for p in (folder / "out" / "arms" / "runs").glob("*/run.json")}


def test_not_dp_modes_never_print_a_finite_eps(records):
    shift = records["shift_b1_seed0"]["privacy"]
    assert shift["is_dp"] is False and shift["epsilon"] is None and shift["statement"].startswith("NOT DP")
    shuffled = records["shuffled_eps8_C1_seed0"]["privacy"]
    assert shuffled["is_dp"] is False and shuffled["epsilon"] is None and "NOT DP" in shuffled["statement"]
    assert "Poisson" in shuffled["statement"] and 0 < shuffled["epsilon_if_poisson"] <= 8
    # the ledger says what ran, so eps recomputed from run.json is refused, not a Poisson eps
    ledger = accounting.Ledger.from_dict(records["shuffled_eps8_C1_seed0"]["ledger"])
    assert [e["type"] for e in records["shuffled_eps8_C1_seed0"]["ledger"]["events"]] == ["shuffled_batches"]
    with pytest.raises(ValueError, match="shuffled"):
        accounting.ledger_epsilon(ledger, delta=shuffled["delta"])


def test_dp_cards_name_delta_accountant_and_neighbours(records):
    for run_id, record in records.items():
        card = record["privacy"]
        if not card["is_dp"]:
            continue
        assert card["delta"] is not None and card["accountant"] and card["neighbour_relation"], run_id
        assert card["epsilon"] <= (card.get("target_epsilon") or card.get("epsilon_image") or float("inf"))
    high = records["high_eps1e15_C1_seed0"]["privacy"]
    assert high["accountant"] == "rdp" and "PLD cannot resolve" in high["accountant_note"]
    assert records["laplace-sgd_eps8_C1_seed0"]["privacy"]["clipping"] == "L1"
    given = records["given_sigma1.1_C1_seed0"]["privacy"]
    assert given["noise_given"] and given["accountant"] == "rdp-classic" and given["target_epsilon"] is None


def test_reconstruction_bounds_ride_with_gaussian_poisson_runs_only(records):
    """High budgets give no protection against reconstruction by the bound (METHODS.md s.7); Laplace noise and
    shuffled batches are outside the bound's assumptions, so none is printed for them."""
    high = records["high_eps1e15_C1_seed0"]["reconstruction"]
    # sigma ~ 0: the attacker wins whenever the target was sampled at least once in T steps
    q, steps = high["sample_rate"], high["steps"]
    kappa = 1 / records["high_eps1e15_C1_seed0"]["privacy"]["n_units"]      # one patient among N
    assert high["kappa"] == pytest.approx(kappa) and high["unit"] == "patient"
    assert high["worst_case"] == pytest.approx(1 - (1 - q) ** steps * (1 - kappa), rel=1e-6)
    assert "informed adversary" in high["assumptions"]
    assert records["laplace-sgd_eps8_C1_seed0"]["reconstruction"] is None
    assert records["shuffled_eps8_C1_seed0"]["reconstruction"] is None
    given = records["given_sigma1.1_C1_seed0"]["reconstruction"]
    assert given["kappa"] <= given["relaxed"] <= given["worst_case"] <= 1.0
