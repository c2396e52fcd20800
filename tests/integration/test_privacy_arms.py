"""Every privacy arm end to end: the cards a trained study writes are honest."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dpmed import accounting
from dpmed.cli import main

STUDY = """
name: arms
data: {source: phantom, n_images: 200, image_size: 16}
training: {epochs: 1, batch_size: 20}
evaluation: {bootstrap_resamples: 20}
arms:
  - {name: base, mechanism: none}
  - {name: lap, mechanism: pixel_laplace, target_epsilon_image: 512}
  - {name: gauss, mechanism: pixel_gaussian, target_epsilon_image: 100}
  - {name: shift, mechanism: scalar_shift, scale: 1}
  - {name: high, mechanism: dp_sgd, target_epsilon: [1e6, 1e15]}
  - {name: laplace-sgd, mechanism: dp_sgd, target_epsilon: 8, noise: laplace}
  - {name: given, mechanism: dp_sgd, noise_multiplier: 1.1, accountant: rdp-classic}
  - {name: shuffled, mechanism: dp_sgd, target_epsilon: 8, sampling: shuffle}
"""


@pytest.fixture(scope="module")
def study_out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("arms")
    (folder / "s.yaml").write_text(STUDY)
    assert main(["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--no-progress"]) == 0
    return folder / "out" / "arms"


@pytest.fixture(scope="module")
def records(study_out):
    return {p.parent.name: json.loads(p.read_text()) for p in (study_out / "runs").glob("*/run.json")}


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
    """A local-DP card's eps is its own epsilon_image, so it is checked against the budget the study asked for (read
    from STUDY itself): at most that, and calibrated to it (the std or scale was solved for it, not set far below);
    a DP-SGD card's eps, training plus the released size, against its arm's target where one was given."""
    local_targets = {arm["name"]: float(arm["target_epsilon_image"]) for arm in yaml.safe_load(STUDY)["arms"]
                     if "target_epsilon_image" in arm}
    checked = set()
    for run_id, record in records.items():
        card = record["privacy"]
        if not card["is_dp"]:
            continue
        assert card["delta"] is not None and card["accountant"] and card["neighbour_relation"], run_id
        if record["arm"] in local_targets:
            target = local_targets[record["arm"]]
            assert card["epsilon"] == card["epsilon_image"], run_id
            assert card["epsilon"] <= target and card["epsilon"] == pytest.approx(target, rel=1e-6), run_id
            checked.add(record["arm"])
        elif card["target_epsilon"] is not None:
            assert card["epsilon"] <= card["target_epsilon"], run_id
    assert checked == set(local_targets) == {"lap", "gauss"}
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
    # one patient among the released count N; where that count fell below the batch (released_units, about one
    # study in eight here: 200 phantom images, count noise at eps 0.02), N is the batch, and the prior the count
    card = records["high_eps1e15_C1_seed0"]["privacy"]
    kappa = 1 / (card["n_units"] if card["released_units"] is None else max(2, card["released_units"]))
    assert high["kappa"] == pytest.approx(kappa) and high["unit"] == "patient"
    count = math.exp(records["high_eps1e15_C1_seed0"]["privacy"]["size_epsilon"])   # the released N beside it
    assert high["worst_case"] == pytest.approx(min(1.0, count * (1 - (1 - q) ** steps * (1 - kappa))), rel=1e-6)
    assert "eps_N" in high["assumptions"]
    assert "informed adversary" in high["assumptions"]
    assert records["laplace-sgd_eps8_C1_seed0"]["reconstruction"] is None
    assert records["shuffled_eps8_C1_seed0"]["reconstruction"] is None
    given = records["given_sigma1.1_C1_seed0"]["reconstruction"]
    assert given["kappa"] <= given["relaxed"] <= given["worst_case"] <= 1.0


def test_results_csv_epsilon_holds_what_the_readme_says_for_each_kind_of_run(study_out, records):
    """README said results.csv leaves `epsilon` empty for every run without a central eps, but local-DP rows hold
    their eps per image there (e.g. 8192 at delta 0 for the quickstart's Laplace arm). Each kind of run's `epsilon`
    is checked against what README's "Privacy arms" says of it."""
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"results\.csv's `epsilon` is (.*?) \* Every study", readme).group(1)
    per_image = set(re.findall(r"`(\w+)`", re.search(r"\* ([^*]*?): eps \*\*per image", said).group(1)))
    empty = re.search(r"\* empty for (.*?)\.", said).group(1)
    assert per_image == {"pixel_laplace", "pixel_gaussian"} and "`dp_sgd` with `sampling: shuffle`" in empty
    empty_mechanisms = set(re.findall(r"`(\w+)`", empty)) - {"dp_sgd"}
    frame = pd.read_csv(study_out / "results.csv")
    assert set(frame["mechanism"]) == per_image | empty_mechanisms | {"dp_sgd"}
    for row in frame.itertuples():
        card = records[row.run_id]["privacy"]
        if row.mechanism in per_image:
            assert row.epsilon == pytest.approx(card["epsilon_image"]) and "any two images" in row.neighbour_relation
            assert (row.delta == 0) == (row.mechanism == "pixel_laplace"), row.run_id
        elif row.mechanism in empty_mechanisms or card["sampling"] == "shuffle":
            assert math.isnan(row.epsilon), row.run_id
        else:                                       # DP-SGD with Poisson sampling: central, the released count included
            assert row.epsilon == pytest.approx(card["epsilon"]) and row.epsilon > row.size_epsilon > 0, row.run_id
            assert row.unit in ("patient", "image")
            # eps 1e6 needs noise one unit outruns: the accounted eps, is_dp false (README says so, with sampler_voids)
            assert row.is_dp == (not card["sampler_voids"]) and row.sampler_voids == bool(card["sampler_voids"])
            assert bool(card["sampler_voids"]) == (row.epsilon > 1e5), row.run_id


def test_the_plan_names_laplace_noise_and_why_a_delta_is_above_the_arms(tmp_path, capsys):
    """Before, a Laplace DP-SGD arm's noise read "sigma = 0.3122" (it is b / C, L1) and its delta 1.01e-05 beside
    the others' 1e-05 with no word why (the noise sampler's bounded draws, paid in delta)."""
    (tmp_path / "s.yaml").write_text(STUDY)
    assert main(["plan", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-estimate"]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()}
    laplace, gaussian = rows["laplace-sgd_eps8_C1_seed0"], rows["given_sigma1.1_C1_seed0"]
    assert re.search(r" b = [\d.]+ C \(Laplace\) ", laplace) and "sigma" not in laplace
    assert "sigma = 1.1 " in gaussian and "(delta 1e-05, " in gaussian
    assert "(delta 1.01e-05, PLD, add/remove one patient)" in laplace
    assert ("delta: where it is above the arm's, it includes what the noise sampler's bounded draws cost (each run's "
            "privacy card says how much)") in text
