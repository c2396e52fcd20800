"""Run plans are typed and frozen, survive JSON exactly, and say which settings make a run the same run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from dpmed.config import RunPlan, load_study, plan_runs
from dpmed.mechanisms import DpSgdPlan, PixelLaplacePlan, PlanContext

STUDY = """
name: s
seeds: [0, 1]
training: {epochs: 2, batch_size: 10}
arms:
  - {name: base, mechanism: none}
  - {name: ldp, mechanism: pixel_laplace, target_epsilon_image: 512}
  - {name: dp, mechanism: dp_sgd, target_epsilon: [1, 8], max_grad_norm: [0.5, 1]}
  - {name: img, mechanism: dp_sgd, target_epsilon: 8, privacy_unit: image, max_images_per_patient: 2}
"""
# 60 patients, 100 images: 30 with one image, 20 with two, 10 with three
CONTEXT = PlanContext(images_per_patient=np.array([1] * 30 + [2] * 20 + [3] * 10), image_shape=(1, 16, 16))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("s") / "s.yaml"
    path.write_text(STUDY)
    return load_study(path)


@pytest.fixture(scope="module")
def plans(study):
    return {p.run_id: p for p in plan_runs(study, CONTEXT)}


def test_each_mechanism_plans_its_own_kind(plans):
    assert isinstance(plans["ldp_epsimg512_seed0"].privacy, PixelLaplacePlan)
    assert plans["ldp_epsimg512_seed0"].privacy.scale == pytest.approx(256 / 512)
    dp = plans["dp_eps1_C0.5_seed0"].privacy
    assert isinstance(dp, DpSgdPlan) and dp.unit == "patient" and dp.n_units == 60
    assert dp.sample_rate == pytest.approx(10 / 60) and dp.steps == 2 * 6
    assert dp.expected_batch_size == pytest.approx(10)
    image = plans["img_eps8_C1_seed0"].privacy
    assert image.unit == "image" and image.n_units == 30 + 2 * 30 and image.patient_guarantee.k == 2
    assert "group-privacy formula" in image.patient_guarantee.statement


def test_plans_round_trip_through_json_exactly(plans):
    for plan in plans.values():
        again = RunPlan.model_validate_json(plan.model_dump_json())
        assert again == plan and type(again.privacy) is type(plan.privacy)


def test_plans_are_frozen_and_strict(plans):
    plan = plans["base_seed0"]
    with pytest.raises(ValidationError, match="frozen"):
        plan.seed = 3
    data = json.loads(plan.model_dump_json())
    data["privacy"]["mechanism"] = "pixel_magic"
    with pytest.raises(ValidationError, match="pixel_magic"):
        RunPlan.model_validate(data)


def test_where_a_run_executes_is_not_a_setting_of_the_run(plans):
    plan = plans["dp_eps8_C1_seed1"]
    moved = plan.model_copy(update={"training": plan.training.model_copy(update={"device": "cpu", "threads": 1,
                                                                                 "physical_batch_size": 3})})
    assert moved.settings() == plan.settings()
    for changed in ({"epochs": 3}, {"learning_rate": 0.5}, {"batch_size": 11}, {"optimizer": "sgd"}):
        other = plan.model_copy(update={"training": plan.training.model_copy(update=changed)})
        assert other.settings() != plan.settings(), changed     # a finished run of other settings is not reused


@pytest.mark.parametrize("run_id", ["base_seed0", "ldp_epsimg512_seed1", "dp_eps8_C1_seed1"])
def test_the_dp_engine_is_a_setting_of_dp_sgd_runs_only(plans, study, run_id):
    """dp_engine chooses how DP-SGD clips: another engine trains a DP-SGD run differently (float rounding, Opacus's
    own layer rules), so it tells such runs apart, and changes nothing a run without a DP-SGD step computes. Compared
    there, switching the engine retrained every finished non-private and local-DP run of the folder, a local-DP run
    drawing its images' noise again. An interrupted one continues, and `dpmed status` says so from the settings'
    fingerprint its key file keeps."""
    from dpmed.training.loop import _fingerprint

    plan = plans[run_id]
    other = plan.model_copy(update={"training": plan.training.model_copy(update={"dp_engine": "opacus"})})
    dp_sgd = plan.mechanism == "dp_sgd"
    assert (other.settings() != plan.settings()) == dp_sgd
    assert (other.fingerprint(study) != plan.fingerprint(study)) == dp_sgd
    dp = plan.privacy if dp_sgd else None
    data = type("Data", (), {"__len__": lambda self: 100})()          # a checkpoint's fingerprint reads the size only
    assert (_fingerprint(data, other.training, 0, dp) != _fingerprint(data, plan.training, 0, dp)) == dp_sgd


def _trained(plan: RunPlan, settings: dict) -> RunPlan:
    """``plan`` trained with ``settings`` (nested sections given whole) in place of its own."""
    training = type(plan.training).model_validate(plan.training.model_dump() | settings)
    return plan.model_copy(update={"training": training})


@pytest.mark.parametrize("run_id", ["base_seed0", "ldp_epsimg512_seed1", "dp_eps8_C1_seed1"])
@pytest.mark.parametrize("recipe, changed, read", [
    ({}, {"reference_batch_size": 512}, False),                                      # lr_scaling none
    ({"lr_scaling": "linear"}, {"lr_scaling": "linear", "reference_batch_size": 512}, True),
    ({"lr_scaling": "sqrt"}, {"lr_scaling": "sqrt", "reference_batch_size": 512}, True),
    ({"lr_schedule": {"kind": "cosine"}}, {"lr_schedule": {"kind": "cosine", "milestones": [0.3], "gamma": 0.5}},
     False),
    ({}, {"lr_schedule": {"gamma": 0.5}}, False),                                     # constant
    ({"lr_schedule": {"kind": "step"}}, {"lr_schedule": {"kind": "step", "milestones": [0.3]}}, True),
    ({"lr_schedule": {"kind": "step"}}, {"lr_schedule": {"kind": "step", "gamma": 0.5}}, True),
    ({"lr_schedule": {"kind": "cosine"}}, {"lr_schedule": {"kind": "cosine", "warmup_fraction": 0.2}}, True),
])
def test_a_setting_another_setting_turns_off_is_no_setting_of_the_run(plans, run_id, recipe, changed, read):
    """The reference batch beside lr_scaling none, and a schedule's milestones and gamma beside a kind other than
    step, change no learning rate of any step: a run finished or interrupted with one of them is the run of the
    study file that drops it (or gives another), reused rather than trained again (a DP-SGD run retrained is a second
    release, a local-DP run's images are perturbed again). Where they are read they still tell runs apart."""
    from dpmed.training.loop import _fingerprint
    from dpmed.training.schedule import lr_factor

    plan, other = _trained(plans[run_id], recipe), _trained(plans[run_id], changed)
    rates = [[t.scaled_learning_rate * lr_factor(t, step, 20) for step in range(20)]
             for t in (plan.training, other.training)]
    assert (rates[0] != rates[1]) == read                                 # what training reads, step by step
    assert (other.settings() != plan.settings()) == read                  # a finished run
    dp = plan.privacy if plan.mechanism == "dp_sgd" else None
    data = type("Data", (), {"__len__": lambda self: 100})()
    assert (_fingerprint(data, other.training, 0, dp) != _fingerprint(data, plan.training, 0, dp)) == read


@pytest.mark.parametrize("run_id", ["base_seed0", "ldp_epsimg512_seed1", "dp_eps8_C1_seed1"])
def test_sgd_s_momentum_tells_runs_apart_as_adam_s_does_not(plans, run_id):
    """SGD reads its momentum, Adam none: shown at its default beside SGD too, a run finished with momentum 0.9
    would be reused by a study file that asks for 0.5, and its model and figures reported as trained so."""
    from dpmed.training.loop import _fingerprint

    plan, other = _trained(plans[run_id], {"optimizer": "sgd"}), _trained(plans[run_id], {"optimizer": "sgd",
                                                                                       "momentum": 0.5})
    assert other.settings() != plan.settings()
    dp = plan.privacy if plan.mechanism == "dp_sgd" else None
    data = type("Data", (), {"__len__": lambda self: 100})()
    assert _fingerprint(data, other.training, 0, dp) != _fingerprint(data, plan.training, 0, dp)


def test_labels_and_sweeps_come_from_typed_fields(plans):
    a, b = plans["dp_eps1_C1_seed0"], plans["dp_eps8_C1_seed1"]
    assert (a.label, b.label) == ("dp_eps1_C1", "dp_eps8_C1")
    assert a.swept_value("max_grad_norm") == 1.0 and a.swept_value("noise_multiplier") is None


def test_the_count_a_card_states_below_the_batch_is_not_a_setting_of_the_run(plans):
    """A run an older dpmed finished from a DP count below the batch has no released_units; planned now it has the
    count. Before, the finished run was refused as made with other settings (and retraining it would release the
    same patients again). What trains (N, q, T, sigma) is still compared."""
    plan = plans["dp_eps8_C1_seed1"]
    stated = plan.model_copy(update={"privacy": plan.privacy.model_copy(update={"released_units": 35})})
    assert stated.settings() == plan.settings()
    other = plan.model_copy(update={"privacy": plan.privacy.model_copy(update={"sample_rate": 1.0})})
    assert other.settings() != plan.settings()


OVERRIDES = """
name: o
training: {batch_size: 10, steps: 7, learning_rate: 0.002}
arms:
  - {name: own, mechanism: dp_sgd, target_epsilon: 8, epochs: 5, batch_size: 20, learning_rate: 0.1,
     audit: {canaries: 50}}
  - {name: study, mechanism: dp_sgd, target_epsilon: 8}
"""


def test_an_arms_training_settings_reach_both_its_training_and_its_accountant(tmp_path):
    """An arm's epochs, batch size and learning rate replace the study's (its epochs also replace the study's
    steps), in the run's training and in what its eps is accounted from: T = 5 epochs of 60 patients at an expected
    batch of 20 is 15 steps at q = 20/60, not the study's 7 at 10/60. Its audit goes with it."""
    path = tmp_path / "o.yaml"
    path.write_text(OVERRIDES)
    study = load_study(path)
    own, other = plan_runs(study, CONTEXT)
    assert (own.training.epochs, own.training.steps, own.training.batch_size, own.training.learning_rate) == (
        5, None, 20, 0.1)
    assert own.privacy.steps == 15 and own.privacy.sample_rate == pytest.approx(20 / 60)
    assert own.audit == study.arms[0].audit and own.audit.canaries == 50 and other.audit is None
    assert (other.training.steps, other.training.batch_size, other.training.learning_rate) == (7, 10, 0.002)
    assert other.privacy.steps == 7 and other.privacy.sample_rate == pytest.approx(10 / 60)


def test_a_section_set_on_one_side_only_is_told_as_set_and_not_set(tmp_path):
    """A rerun that drops an arm's audit (or adds one) was told "audit: (not set) in the finished run, None now"
    beside a line per audit key: an audit set on one side is one line, "not set" on the other, either way; a setting
    that another mechanism's plan has no place for reads "absent"."""
    from dpmed.resumption import setting_differences

    def planned(arm: str) -> dict:
        path = tmp_path / "a.yaml"
        path.write_text(f"name: a\ntraining: {{epochs: 2, batch_size: 10}}\narms:\n  - {arm}\n")
        return plan_runs(load_study(path), CONTEXT)[0].settings()

    audited = planned("{name: a, mechanism: none, audit: {canaries: 10}}")
    plain = planned("{name: a, mechanism: none}")
    told = "{canaries: 10, kind: mislabelled, confidence: 0.95}"
    assert setting_differences(audited, plain) == [f"audit: {told} in the finished run, not set now"]
    assert setting_differences(plain, audited) == [f"audit: not set in the finished run, {told} now"]
    ldp = planned("{name: a, mechanism: pixel_laplace, scale: 0.5}")
    lines = setting_differences(plain, ldp)
    assert "privacy.mechanism: none in the finished run, pixel_laplace now" in lines
    assert "privacy.scale: absent in the finished run, 0.5 now" in lines
    assert not [line for line in lines if "None" in line or "(not set)" in line], lines


def test_a_list_of_another_length_differs_whole_and_an_empty_section_one_side_lacks_not_at_all():
    """The differences decide which finished runs are reused: a list grown by an item (fairness attributes) is a
    difference, told whole, not cut to the shorter list's items; a section one side lacks and the other holds empty
    sets nothing that differs, so a record without it is reused. A None inside a section reads as the study file
    writes it."""
    from dpmed.resumption import setting_differences

    assert setting_differences({"attributes": ["sex"]}, {"attributes": ["sex", "age"]}) == [
        "attributes: [sex] in the finished run, [sex, age] now"]
    assert setting_differences({"lr": 0.1}, {"lr": 0.1, "augmentation": {}}) == []
    assert setting_differences({"audit": None}, {"audit": {"seed": None}}) == [
        "audit: not set in the finished run, {seed: null} now"]
