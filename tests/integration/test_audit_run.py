"""The one-run privacy audit through the real run path (issue 4, item 6): with DP off it must find a large eps, with
DP-SGD on its lower bound must stay below the accountant's eps.

One study, two arms with the same draw of canary patients (seed 0; each patient drawn at rate 100 / N, where the
DP-SGD arm's N is the study's DP count and the other's the exact count; each run draws its own secret inclusion
bits): ``flat_cnn`` on 32 px phantom images, about 100 mislabelled canaries, 40 epochs. Without DP the
model memorises the canaries it trained on, and the audit's 95% lower bound clears 1 (about 2 here; 100 canaries cap
it near 3.5). With DP-SGD at eps = 1 the same audit must not exceed 1: a bound above the claim would prove the run is
not DP. The audit's result depends on the secret bits, so it lives in the study's private folder only.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dpmed import accounting
from dpmed.audit import AuditRecord
from dpmed.cli import main
from dpmed.config import load_study
from dpmed.errors import ConfigError
from dpmed.folders import StudyFolder
from dpmed.numbers import epsilon_text, number_text
from dpmed.states import read_resolved
from dpmed.study import load_study_data, plan_study

# Reproducible privacy randomness: the audit is a 95 % test, so with fresh bits it would fail now and then by design;
# the test needs the same bits every time (each run still draws its own, from its run id).
STUDY = """
name: audit
privacy_randomness: reproducible
data: {source: phantom, n_images: 400, image_size: 32}
model: {name: flat_cnn}
training: {epochs: 40, batch_size: 32, learning_rate: 0.003, threads: 1}
evaluation: {bootstrap_resamples: 20, fairness: null}
arms:
  - {name: non-private, mechanism: none, audit: {canaries: 100}}
  - {name: dp-sgd, mechanism: dp_sgd, target_epsilon: 1, audit: {canaries: 100, kind: mislabelled}}
"""


@pytest.fixture(scope="module")
def study_out(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit")
    (folder / "s.yaml").write_text(STUDY)
    # threads: 1 in the study, not the process's count: the runs set their own (training.threads), and "auto" would
    # make the bounds depend on the machine's cores (two cores gave 20 guesses, one and four gave 38)
    assert main(["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--no-progress"]) == 0
    return folder / "out" / "audit"


@pytest.fixture(scope="module")
def records(study_out):
    return {r["arm"]: r for r in (json.loads(p.read_text()) for p in (study_out / "runs").glob("*/run.json"))}


@pytest.fixture(scope="module")
def audits(study_out, records):
    """The audits' results, from the private folder."""
    folder = StudyFolder(study_out)
    return {arm: AuditRecord.model_validate_json(folder.run(r["run_id"]).audit.read_bytes())
            for arm, r in records.items()}


def test_the_audit_result_is_private(study_out, records, audits):
    """The count of correct guesses depends on the secret inclusion bits: run.json, results.csv and the report say
    only that a run was audited; the private report holds the bound."""
    for arm, r in records.items():
        assert r["audit"] == {"n_canaries": 100, "kind": "mislabelled", "result": r["audit"]["result"]}
        assert "private" in r["audit"]["result"]
        assert not (study_out / "runs" / r["run_id"] / "audit_scores.npz").exists()
    public = (study_out / "report.html").read_text() + (study_out / "results.csv").read_text()
    assert "empirical lower bound" not in public and "audit_epsilon_lower_bound" not in public
    private = (study_out / "private" / "report.html").read_text()
    for a in audits.values():
        bound = number_text(a.epsilon_lower_bound, down=True)      # a lower bound is never shown larger
        assert f"empirical lower bound eps &gt;= {bound} at delta = {number_text(a.delta, down=True)}" in private
    assert "NOT COVERED BY EPS" in private
    # the non-private run claims no eps but states a bound at its confidence: both bounds are read together
    assert ("2 audit bounds, each at its own confidence (95%, 95%). Read together, all 2 bounds hold with "
            "probability at least 90% (union bound)") in private


def test_without_dp_the_audit_finds_a_large_eps(audits):
    audit = audits["non-private"]
    assert audit.epsilon_lower_bound >= 1.0
    assert audit.n_correct >= 0.9 * audit.n_guesses and audit.n_guesses >= 20
    assert abs(audit.n_canaries - 100) < 40         # Binomial(N, 100 / N): sd about 10
    assert audit.kind == "mislabelled" and audit.confidence == 0.95
    assert audit.delta == 1e-5 and audit.claimed_epsilon is None and audit.consistent_with_claim is None
    assert "Steinke" in audit.citation and "Bonferroni" in audit.method


def test_with_dp_sgd_the_lower_bound_stays_below_the_claimed_eps(records, audits):
    card, audit = records["dp-sgd"]["privacy"], audits["dp-sgd"]
    assert card["epsilon"] <= 1.0 and "NOT DP against anyone who knows the seed" in card["statement"]
    # the audit tests training: its claim leaves out what the released training-set size costs
    assert audit.claimed_epsilon == pytest.approx(card["epsilon"] - card["size_epsilon"]) and card["size_epsilon"]
    assert audit.delta == card["delta"]
    assert audit.epsilon_lower_bound < audit.claimed_epsilon
    assert audit.consistent_with_claim is True and "consistent" in audit.statement
    # never a bare eps: the claim is stated with its delta, accountant and neighbours, and says what it leaves out
    assert (f"claims eps = {epsilon_text(audit.claimed_epsilon)} (the same delta, PLD, add/remove one patient; "
            f"training alone: the card's {epsilon_text(card['epsilon'])} adds {card['size_epsilon']:g} for the "
            "released training-set size; not DP: seed known): consistent (a lower bound can refute the claim, not "
            "prove it;") in audit.statement     # the card's label goes with its eps, as everywhere it is stated
    # the audit has the power to catch a run that claims eps = 1 but behaves like the non-private one
    assert audits["non-private"].epsilon_lower_bound > card["epsilon"]


def test_each_arm_audits_its_canaries_with_its_own_secret_bits(study_out, records, audits):
    folder = StudyFolder(study_out)
    saved = {arm: np.load(folder.run(r["run_id"]).audit_scores) for arm, r in records.items()}
    if os.name != "nt":      # the secret bits and the verdict, owner-only file by file
        assert {folder.run(r["run_id"]).audit_scores.stat().st_mode & 0o777 for r in records.values()} == {0o600}
        assert {folder.run(r["run_id"]).audit.stat().st_mode & 0o777 for r in records.values()} == {0o600}
    # the bits are privacy randomness, each run's own (equal for ~100 fair coins with probability 2^-100)
    assert not np.array_equal(saved["non-private"]["included"], saved["dp-sgd"]["included"])
    for arm, f in saved.items():
        assert f["scores"].shape == (audits[arm].n_canaries,) and np.all(np.isfinite(f["scores"]))
        assert int(f["included"].sum()) == audits[arm].n_included
    # without DP, the canaries it trained on fit their wrong labels better than those it never saw
    off = saved["non-private"]
    assert np.median(off["scores"][off["included"]]) > np.median(off["scores"][~off["included"]])


def test_canaries_leave_the_claim_unchanged(write_study, records, study_out):
    """q, T and sigma come from the split before canaries, so the accountant's eps is that of the same arm without an
    audit (with Poisson sampling it depends on q, T and sigma only)."""
    d = records["dp-sgd"]["plan"]["privacy"]
    plain = load_study(write_study(STUDY.replace(", audit: {canaries: 100, kind: mislabelled}", "")))
    sizes = read_resolved(study_out).dataset.released_sizes          # the DP count the study planned from
    again = {s.arm: s for s in plan_study(plain, load_study_data(plain), sizes)}["dp-sgd"]
    assert again.audit is None and records["dp-sgd"]["plan"]["audit"]["canaries"] == 100
    for key in ("noise_multiplier", "sample_rate", "steps", "delta"):
        assert getattr(again.privacy, key) == d[key]
    eps = accounting.dp_sgd_epsilon(noise_multiplier=d["noise_multiplier"], sample_rate=d["sample_rate"],
                                    steps=d["steps"], delta=d["delta"], accountant=d["accountant"])
    assert records["dp-sgd"]["privacy"]["epsilon"] == pytest.approx(eps + d["size_epsilon"], rel=1e-9)


# ----------------------------------------------------------------------------------------------- the study file


@pytest.mark.parametrize(("arm", "match"), [
    ("{name: a, mechanism: pixel_laplace, scale: 1, audit: {canaries: 10}}", "local DP protects the released images"),
    ("{name: a, mechanism: scalar_shift, scale: 1, audit: {canaries: 10}}", "audit applies to arms without privacy or"),
    ("{name: a, mechanism: none, audit: {canaries: 1}}", "canaries"),
    ("{name: a, mechanism: none, audit: {canaries: 10, kind: poison}}", "kind"),
    ("{name: a, mechanism: none, audit: {canaries: 10, canary: 3}}", "canary"),
    ("{name: a, mechanism: dp_sgd, target_epsilon: 1, audit: {canaries: '10'}}", "canaries"),
])
def test_a_wrong_audit_option_is_an_error_that_names_it(write_study, arm, match):
    with pytest.raises(ConfigError, match=match):
        load_study(write_study(f"name: s\narms: [{arm}]\n"))


def test_too_many_canaries_for_the_training_split_is_a_clear_error(write_study, tmp_path):
    path = write_study("name: s\ndata: {source: phantom, n_images: 40, image_size: 16}\ntraining: {epochs: 1}\n"
                       "evaluation: {bootstrap_resamples: 10, fairness: null}\n"
                       "arms: [{name: a, mechanism: none, audit: {canaries: 500}}]\n")
    from dpmed.study import run_study
    with pytest.raises(ConfigError, match=r"arm 'a': audit.canaries = 500 .* lower audit.canaries below \d+"):
        run_study(load_study(path), out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "s" / "runs").exists()     # refused before any run started


def test_canaries_are_checked_against_the_count_as_released_also_below_the_batch(write_study):
    """A DP count drawn below the expected batch plans N = B (q = 1); the audit's canaries were checked against B,
    so 30 canaries passed beside a released count of 20."""
    study = load_study(write_study(
        "name: s\ndata: {source: phantom, n_images: 120, image_size: 16}\ntraining: {epochs: 1, batch_size: 64}\n"
        "evaluation: {bootstrap_resamples: 10, fairness: null}\n"
        "arms: [{name: a, mechanism: dp_sgd, target_epsilon: 8, audit: {canaries: 30}}]\n"))
    dataset = load_study_data(study)
    with pytest.raises(ConfigError, match=r"arm 'a': audit.canaries = 30 needs more training patients than the 20 "
                                          r"of the DP count it plans from .* lower audit.canaries below 20"):
        plan_study(study, dataset, {"patients": 20})
    (plan,) = plan_study(study, dataset, {"patients": 40})
    assert plan.privacy.released_units == 40 and plan.privacy.n_units == 64 and plan.audit.canaries == 30


def test_a_dp_count_too_small_for_any_audit_says_so_rather_than_a_negative_bound(write_study):
    """A count drawn at eps 0.02 can be 1, 0 or below for a small set: before, "lower audit.canaries below -20"."""
    study = load_study(write_study(
        "name: s\ndata: {source: phantom, n_images: 120, image_size: 16}\ntraining: {epochs: 1, batch_size: 64}\n"
        "evaluation: {bootstrap_resamples: 10, fairness: null}\n"
        "arms: [{name: a, mechanism: dp_sgd, target_epsilon: 8, audit: {canaries: 30}}]\n"))
    dataset = load_study_data(study)
    for count in (1, 2):
        with pytest.raises(ConfigError, match=rf"than the {count} of the DP count it plans from, which leave none to "
                                              r"audit with .*; remove the arm's audit, or use more images$"):
            plan_study(study, dataset, {"patients": count})
    for count in (-20, 0):           # no count of patients: said to be the count's noise
        with pytest.raises(ConfigError, match=rf"than the DP count it plans from, {count} \(its noise, scale 1 / "
                                              r"size_epsilon, took it below one: .*remove the arm's audit, or use "
                                              r"more images$"):
            plan_study(study, dataset, {"patients": count})


def test_canaries_are_drawn_against_the_count_as_released_also_below_the_batch(write_study, monkeypatch):
    """Each patient is drawn at rate m / N: with N the batch (q = 1), about m times count / B canaries came out, not
    the m asked for."""
    import dpmed.run
    from dpmed.randomness import PrivacyRandomness

    study = load_study(write_study(
        "name: s\ndata: {source: phantom, n_images: 120, image_size: 16}\ntraining: {epochs: 1, batch_size: 64}\n"
        "evaluation: {bootstrap_resamples: 10, fairness: null}\n"
        "arms: [{name: a, mechanism: dp_sgd, target_epsilon: 8, audit: {canaries: 30}}]\n"))
    dataset = load_study_data(study)
    (plan,) = plan_study(study, dataset, {"patients": 40})
    told = []

    def stop(train_set, task, config, *, seed, n_patients, rng, unit):
        told.append((n_patients, unit))
        raise ValueError("stopped here")

    monkeypatch.setattr(dpmed.run.audit, "insert_canaries_for", stop)
    with pytest.raises(ConfigError, match="stopped here"):
        dpmed.run._training_set(plan, dataset, PrivacyRandomness.secure(), None)
    assert told == [(40, "patient")] and plan.privacy.n_units == 64


@pytest.mark.parametrize("canaries, count, drawn", [(2, 10 ** 6, "none"), (9_999, 10 ** 4, "all")])
def test_a_draw_that_finds_no_canary_patient_or_every_one_still_trains_and_says_so_privately(
        write_study, tmp_path, canaries, count, drawn):
    """Whether a patient is a canary source is a public function of its id, so a run that failed where the draw found
    no training patient (or all of them) told whoever knows one patient's id whether that patient trained: with the
    others undrawn, the run finished exactly where the drawn patient was in the training set. Now neither fails: with
    none the run trains on its whole set, unaudited; with all it trains on the included canaries alone."""
    import dpmed.run
    from dpmed.audit import hold_out_canary_sources
    from dpmed.randomness import public_seed

    study = load_study(write_study(
        "name: s\nprivacy_randomness: reproducible\ndata: {source: phantom, n_images: 120, image_size: 16}\n"
        "training: {steps: 5, batch_size: 16, threads: 1}\nevaluation: {bootstrap_resamples: 10, fairness: null}\n"
        f"arms: [{{name: a, mechanism: dp_sgd, target_epsilon: 8, audit: {{canaries: {canaries}}}}}]\n"))
    dataset = load_study_data(study)
    (plan,) = plan_study(study, dataset, {"patients": count})
    rest, sources = hold_out_canary_sources(dataset.train, canaries, seed=public_seed(plan.seed, "canary_sources"),
                                            n_patients=count)
    assert len(rest if drawn == "all" else sources) == 0          # the case this test is about
    folder = StudyFolder(tmp_path / "out").run(plan.run_id)
    context = dpmed.run.RunContext(dataset=dataset, evaluation=study.evaluation, progress=False,
                                   privacy_randomness="reproducible")
    record = dpmed.run.run_one(plan, context, folder)
    assert record.audit.n_canaries == canaries                    # the public summary: the nominal m, as always
    verdict = AuditRecord.model_validate_json(folder.audit.read_bytes())
    if drawn == "none":
        assert verdict.n_canaries == 0 and verdict.epsilon_lower_bound is None
        assert verdict.statement.startswith("no audit bound: none of the training patients was drawn")
    else:
        assert verdict.n_canaries == len(sources) and verdict.epsilon_lower_bound is not None


@pytest.mark.parametrize("mechanism", ["none", "dp_sgd"])
def test_a_draw_of_every_patient_with_no_canary_included_trains_on_nothing_and_finishes(
        write_study, tmp_path, monkeypatch, mechanism):
    """Every training patient drawn and every secret bit 0 leaves an empty training set: the non-private arm
    divided by zero batches, and the training-set metrics bootstrapped zero images. Whether a run finishes must not
    turn on the draw or the secret bits."""
    import numpy as np

    import dpmed.run
    from dpmed.audit import procedure

    study = load_study(write_study(
        "name: s\nprivacy_randomness: reproducible\ndata: {source: phantom, n_images: 120, image_size: 16}\n"
        "training: {steps: 3, batch_size: 16, threads: 1}\n"
        "evaluation: {bootstrap_resamples: 10, fairness: null, training_metrics: true}\n"
        f"arms: [{{name: a, mechanism: {mechanism}, audit: {{canaries: 4}}}}]\n"
        .replace("mechanism: dp_sgd,", "mechanism: dp_sgd, target_epsilon: 8,")))
    dataset = load_study_data(study)
    (plan,) = plan_study(study, dataset, {"patients": 100} if mechanism == "dp_sgd" else None)
    monkeypatch.setattr(procedure, "hold_out_canary_sources",
                        lambda train, m, **kw: (train.subset(np.zeros(0, int)), train.subset(np.arange(4))))
    monkeypatch.setattr(procedure, "choose_canaries", lambda m, rng: np.zeros(m, bool))
    folder = StudyFolder(tmp_path / "out").run(plan.run_id)
    context = dpmed.run.RunContext(dataset=dataset, evaluation=study.evaluation, progress=False,
                                   privacy_randomness="reproducible")
    record = dpmed.run.run_one(plan, context, folder)
    assert record.audit.n_canaries == 4 and (folder.public / "model.pt").is_file()
    import torch

    weights = torch.load(folder.public / "model.pt", weights_only=True)
    assert all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point())   # no step on no image


def test_an_audited_run_without_dp_sgd_draws_its_canary_sources_at_m_over_its_training_patients(write_study,
                                                                                               monkeypatch):
    """Without a DP count, the draw's N is the training set's patients, counted by distinct id (nothing of it leaves
    a run without DP-SGD's claim): counted as images, a study whose patients have two images each drew about m times
    patients / images canaries, fewer than the m asked for."""
    import dpmed.run
    from dpmed.randomness import PrivacyRandomness

    study = load_study(write_study(
        "name: s\ndata: {source: phantom, n_images: 120, image_size: 16}\ntraining: {epochs: 1, batch_size: 16}\n"
        "evaluation: {bootstrap_resamples: 10, fairness: null}\n"
        "arms: [{name: a, mechanism: none, audit: {canaries: 10}}]\n"))
    dataset = load_study_data(study)
    (plan,) = plan_study(study, dataset, {})
    told = []

    def stop(train_set, task, config, *, seed, n_patients, rng, unit):
        told.append(n_patients)
        raise ValueError("stopped here")

    monkeypatch.setattr(dpmed.run.audit, "insert_canaries_for", stop)
    with pytest.raises(ConfigError, match="stopped here"):
        dpmed.run._training_set(plan, dataset, PrivacyRandomness.secure(), None)
    patients = len(set(dataset.train.patient_ids.astype(str).tolist()))
    assert patients < len(dataset.train)         # the case this test is about
    assert told == [patients]
