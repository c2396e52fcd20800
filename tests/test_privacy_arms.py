"""Every privacy arm end to end: resolution before training (calibration, fallback, budgets) and honest cards."""

from __future__ import annotations

import json

import pytest

from dpmed import accounting
from dpmed.cli import main
from dpmed.config import load_study
from dpmed.errors import PrivacyError
from dpmed.study import resolve_runs

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
    specs = {s.run_id: s for s in resolve_runs(load_study(write_study(text)), 140, (1, 16, 16))}
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


def test_a_study_over_its_total_budget_stops_before_training(write_study):
    """Two eps-8 runs on the same images compose to more than 8; the declared budget catches it."""
    text = ("name: b\ndata: {source: phantom, n_images: 200, image_size: 16}\nseeds: [0, 1]\n"
            "privacy_budget: {epsilon: 10, delta: 1e-5}\n"
            "arms: [{name: dp, mechanism: dp_sgd, target_epsilon: 8}]\n")
    with pytest.raises(PrivacyError, match=r"2 DP-SGD runs together cost eps = 1\d\.\d+ .* above the budget eps = 10"):
        resolve_runs(load_study(write_study(text)), 140, (1, 16, 16))
    resolve_runs(load_study(write_study(text.replace("epsilon: 10,", "epsilon: 20,"))), 140, (1, 16, 16))


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
    assert "Poisson" in shuffled["statement"]


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
    q, steps, kappa = high["sample_rate"], high["steps"], 1 / 140
    assert high["kappa"] == pytest.approx(kappa)
    assert high["worst_case"] == pytest.approx(1 - (1 - q) ** steps * (1 - kappa), rel=1e-6)
    assert "informed adversary" in high["assumptions"]
    assert records["laplace-sgd_eps8_C1_seed0"]["reconstruction"] is None
    assert records["shuffled_eps8_C1_seed0"]["reconstruction"] is None
    given = records["given_sigma1.1_C1_seed0"]["reconstruction"]
    assert given["kappa"] <= given["relaxed"] <= given["worst_case"] <= 1.0
