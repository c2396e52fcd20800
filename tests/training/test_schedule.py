"""Training length and learning rate: T planned once for DP-SGD (the accountant's T) and for the other arms alike;
``epochs: auto`` sensible at 500 and at 5000 training images; the rate scaled with the batch, warmed up, decayed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpmed.config import TrainingConfig, plan_runs
from dpmed.config.schema import Study
from dpmed.errors import ConfigError
from dpmed.mechanisms import AUTO_EPOCHS, AUTO_MIN_STEPS, PlanContext, training_steps
from dpmed.training.schedule import lr_factor, set_learning_rate


def test_auto_length_trains_small_and_large_sets_alike():
    """At batch 64: 500 images give 8 steps an epoch, so auto trains 500 steps (62 epochs) where 5 epochs would
    be 40 steps; 5000 images give 78 steps an epoch, and auto trains 10 epochs (780 steps)."""
    assert training_steps(8, epochs="auto", steps=None) == AUTO_MIN_STEPS == 500
    assert training_steps(78, epochs="auto", steps=None) == AUTO_EPOCHS * 78 == 780
    assert training_steps(78, epochs=3, steps=None) == 234
    assert training_steps(78, epochs="auto", steps=1234) == 1234
    with pytest.raises(ValueError, match="positive integer or 'auto'"):
        training_steps(8, epochs=0, steps=None)


def _study(training: dict, arm: dict | None = None) -> Study:
    return Study.model_validate({"name": "s", "training": training,
                                 "arms": [{"name": "dp", "mechanism": "dp_sgd", "target_epsilon": 4.0, **(arm or {})},
                                          {"name": "np", "mechanism": "none"}]})


def _dp_steps(study: Study, n_patients: int = 500) -> int:
    context = PlanContext(images_per_patient=np.ones(n_patients, dtype=np.int64), image_shape=(1, 8, 8))
    return next(p.privacy.steps for p in plan_runs(study, context) if p.mechanism == "dp_sgd")


@pytest.mark.parametrize(("training", "arm", "n", "steps"), [
    ({}, None, 500, 500),                                    # the default: auto
    ({}, None, 5000, 780),
    ({"epochs": 3}, None, 5000, 234),                        # as before: epochs * round(N / B)
    ({"steps": 321}, None, 500, 321),
    ({"steps": 321}, {"epochs": 2}, 500, 16),                # an arm's epochs replace the study's length
    ({"steps": 321, "batch_size": 100}, None, 5000, 321),
])
def test_dp_sgd_plans_the_length_the_study_asks(training, arm, n, steps):
    assert _dp_steps(_study(training, arm), n) == steps


def test_the_length_is_given_once():
    with pytest.raises(ValueError, match="steps .* or epochs"):
        TrainingConfig(steps=100, epochs=3)
    with pytest.raises(ValueError, match="at least 1"):
        TrainingConfig(epochs=0)
    assert TrainingConfig().epochs == "auto" and TrainingConfig(steps=10).epochs == "auto"


def test_the_shipped_quickstart_keeps_its_length():
    """Studies that name their epochs are planned as before (T = epochs * round(N / B))."""
    study = _study({"epochs": 8, "batch_size": 64})
    assert _dp_steps(study, 840) == 8 * round(840 / 64)


def test_learning_rate_scaling_and_schedules():
    cfg = TrainingConfig(learning_rate=0.1, batch_size=1024, reference_batch_size=256)
    assert cfg.scaled_learning_rate == 0.1
    assert cfg.model_copy(update={"lr_scaling": "linear"}).scaled_learning_rate == pytest.approx(0.4)
    assert cfg.model_copy(update={"lr_scaling": "sqrt"}).scaled_learning_rate == pytest.approx(0.2)
    warm_cosine = TrainingConfig.model_validate({"lr_schedule": {"kind": "cosine", "warmup_fraction": 0.1}})
    assert [lr_factor(warm_cosine, s, 100) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert lr_factor(warm_cosine, 10, 100) == 1.0 and lr_factor(warm_cosine, 99, 100) < 1e-3
    assert lr_factor(warm_cosine, 55, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi * 45 / 90)))
    step = TrainingConfig.model_validate({"lr_schedule": {"kind": "step", "milestones": [0.5, 0.8], "gamma": 0.1}})
    assert [lr_factor(step, s, 10) for s in (4, 5, 7, 8, 9)] == pytest.approx([1, 0.1, 0.1, 0.01, 0.01])
    with pytest.raises(ValueError, match="milestones"):
        TrainingConfig.model_validate({"lr_schedule": {"kind": "step", "milestones": [0.8, 0.5]}})


def test_a_constant_schedule_leaves_the_optimiser_alone_and_others_set_every_group():
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([{"params": [param]}, {"params": [torch.nn.Parameter(torch.zeros(1))]}], lr=0.3)
    set_learning_rate(optimizer, TrainingConfig(learning_rate=1.0), 5, 10)
    assert [g["lr"] for g in optimizer.param_groups] == [0.3, 0.3]
    cosine = TrainingConfig.model_validate({"learning_rate": 1.0, "lr_schedule": {"kind": "cosine"}})
    set_learning_rate(optimizer, cosine, 5, 10)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.5, 0.5])
    step = TrainingConfig.model_validate({"learning_rate": 1.0, "lr_schedule": {"kind": "step", "milestones": [0.5],
                                                                             "gamma": 0.1}})
    set_learning_rate(optimizer, step, 5, 10)                   # no warm-up either: decayed all the same
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.1, 0.1])


def test_the_rate_set_carries_the_batch_scaling_and_a_constant_rates_warm_up():
    """A cosine schedule at B = 1024 with linear scaling from B_ref = 256: step 0 of 10 gets 0.1 x 4. A constant
    schedule with a warm-up over half the run: step 0 of 10 is the first of 5 warm-up steps, 1/5 of the rate."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
    scaled = TrainingConfig.model_validate({"learning_rate": 0.1, "batch_size": 1024, "reference_batch_size": 256,
                                            "lr_scaling": "linear", "lr_schedule": {"kind": "cosine"}})
    set_learning_rate(optimizer, scaled, 0, 10)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.4)
    warm = TrainingConfig.model_validate({"learning_rate": 1.0, "lr_schedule": {"warmup_fraction": 0.5}})
    set_learning_rate(optimizer, warm, 0, 10)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.2)


def test_the_warm_up_rounds_to_the_nearest_step_and_milestones_count_from_the_start():
    """W = round(fraction T): 0.14 of 10 steps is 1 step (step 0 at the full rate, not 1/2), 0.26 is 3 (step 0 at
    1/3). Milestones are fractions of all T steps, warm-up included: warm-up 0.2, milestone 0.5, gamma 0.1 over 10
    steps gives 1/2, 1, 1, 1, 1, then 0.1 from step 5."""
    def factors(schedule: dict, total: int = 10) -> list[float]:
        cfg = TrainingConfig.model_validate({"lr_schedule": schedule})
        return [lr_factor(cfg, step, total) for step in range(total)]

    assert factors({"kind": "cosine", "warmup_fraction": 0.14})[0] == 1.0
    assert factors({"kind": "cosine", "warmup_fraction": 0.26})[0] == pytest.approx(1 / 3)
    assert factors({"kind": "step", "warmup_fraction": 0.2, "milestones": [0.5], "gamma": 0.1}) == pytest.approx(
        [0.5, 1, 1, 1, 1, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert factors({"kind": "constant", "warmup_fraction": 0.3}) == pytest.approx(
        [1 / 3, 2 / 3, 1, 1, 1, 1, 1, 1, 1, 1])


def test_a_study_file_reads_the_recipe_keys(tmp_path):
    from dpmed.config import load_study

    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntraining:\n  steps: 200\n  ema_decay: 0.999\n  lr_scaling: sqrt\n"
                    "  augmentation: {multiplicity: 8, flip: true}\n  lr_schedule: {kind: cosine}\n"
                    "arms: [{name: a, mechanism: none}]\n")
    training = load_study(path).training
    assert (training.steps, training.ema_decay, training.augmentation.multiplicity, training.augmentation.flip,
            training.augmentation.crop_padding, training.lr_schedule.kind) == (200, 0.999, 8, True, "auto", "cosine")
    path.write_text("name: s\ntraining: {augmentation: {multiplicty: 8}}\narms: [{name: a, mechanism: none}]\n")
    with pytest.raises(ConfigError, match="multiplicty"):
        load_study(path)
