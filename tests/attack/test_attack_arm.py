"""The attack a study runs on a trained DP-SGD arm (`dpmed.attack.attack_arm`): through the arm's own step (its
noise and clipping norm), and refused before training where the validation split cannot calibrate it."""

from __future__ import annotations

import pytest
import torch

from dpmed.attack import attack_arm
from dpmed.data import make_phantom
from dpmed.errors import ConfigError
from dpmed.mechanisms.dp_sgd import AttackConfig, DpSgdPlan
from dpmed.models.registry import build_model
from dpmed.training import dp_sgd


@pytest.fixture(scope="module")
def phantom():
    return make_phantom(n_images=240, image_size=16, seed=0)


def _model():
    return build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=0)


def test_a_laplace_arm_is_attacked_through_its_own_laplace_step(phantom, monkeypatch):
    seen = []
    original = dp_sgd.DpSgdStep.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append((self.noise, self.norm_order))

    monkeypatch.setattr(dp_sgd.DpSgdStep, "__init__", spy)
    n = len(phantom.train.images)
    plan = DpSgdPlan(noise_multiplier=0.05, max_grad_norm=1.0, sample_rate=8 / n, steps=100, noise="laplace",
                     unit="image", expected_batch_size=8.0, n_units=n, attack=AttackConfig(batches=1))
    attack_arm(_model(), phantom, plan, seed=0)
    assert seen and all(s == ("laplace", 1) for s in seen), seen


def test_a_validation_split_too_small_for_the_attack_is_a_config_error_before_training(phantom, monkeypatch):
    from dpmed import attack

    n = len(phantom.train.images)
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=40 / n, steps=100, unit="image",
                     expected_batch_size=40.0, n_units=n, attack=AttackConfig(batches=1))
    assert len(phantom.val.images) < 40
    with pytest.raises(ConfigError, match="validation"):
        attack.attack_batch_size(phantom, plan)           # what dpmed.run checks before it trains
    with pytest.raises(ConfigError, match="validation"):
        attack_arm(_model(), phantom, plan, seed=0)


def test_the_attacks_validation_error_names_the_arm(phantom):
    """A study with several attacked arms was told "the imprint attack needs more validation images than its batch
    of 40" and not which arm's attack that was."""
    from dpmed import attack

    n = len(phantom.train.images)
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=40 / n, steps=100, unit="image",
                     expected_batch_size=40.0, n_units=n, attack=AttackConfig(batches=1))
    words = (r"^arms\.dp-big\.attack: the imprint attack needs more validation images than its batch of \d+ .*; "
             r"remove arms\.dp-big\.attack, lower its batch_size")
    with pytest.raises(ConfigError, match=words):
        attack.attack_batch_size(phantom, plan, arm="dp-big")
    with pytest.raises(ConfigError, match=words):
        attack_arm(_model(), phantom, plan, seed=0, arm="dp-big")


def test_a_patient_unit_arm_keeps_as_many_guesses_as_the_batch_holds_images(phantom):
    """Under the patient unit the expected batch counts patients (fewer than its images): keeping only that many
    reconstructions capped the per-image success rate at patients / images whatever the noise. The images per
    patient are the test split's: the training set's are a private statistic."""
    n_patients = len(set(phantom.train.patient_ids.tolist()))
    test_patients = len(set(phantom.test.patient_ids.tolist()))
    assert test_patients < len(phantom.test)
    plan = DpSgdPlan(noise_multiplier=1e-4, max_grad_norm=1.0, sample_rate=12 / n_patients, steps=100,
                     unit="patient", expected_batch_size=12.0, n_units=n_patients, attack=AttackConfig(batches=2))
    result = attack_arm(_model(), phantom, plan, seed=0)
    assert result.batch_size == round(12 * len(phantom.test) / test_patients) > 12
    assert result.n_reconstructions == result.n_batches * result.batch_size


def test_a_study_s_fixed_normalisation_sits_in_front_of_the_attacked_copy(phantom, monkeypatch):
    """The data arrive as [0, 1] pixels and the model was trained on normalised ones: the adversary's copy must
    normalise first, or the imprint would act on inputs the model never saw."""
    from dataclasses import replace

    from dpmed.attack import experiment

    factories = []
    monkeypatch.setattr(experiment, "run_imprint_attack", lambda **kwargs: factories.append(kwargs["model_factory"]))
    n = len(phantom.train.images)
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=8 / n, steps=100, unit="image",
                     expected_batch_size=8.0, n_units=n, attack=AttackConfig(batches=1))
    model = _model().eval()
    attack_arm(model, replace(phantom, normalization=((0.25,), (0.5,))), plan, seed=0)
    attack_arm(model, phantom, plan, seed=0)
    x = torch.from_numpy(phantom.test.images[:4])
    normalised, plain = (factory().eval() for factory in factories)
    torch.testing.assert_close(normalised(x), model((x - 0.25) / 0.5))
    torch.testing.assert_close(plain(x), model(x))


def _arm_kwargs(phantom, monkeypatch, plan):
    from dpmed.attack import experiment

    seen = []
    monkeypatch.setattr(experiment, "run_imprint_attack", lambda **kwargs: seen.append(kwargs))
    attack_arm(_model(), phantom, plan, seed=0)
    return seen[0]


def test_the_arm_s_settings_reach_the_attack(phantom, monkeypatch):
    """The plan's structure, threshold quantile, noise, C and expected batch size are what the attack uses; an
    image-unit arm clips image by image, a patient-unit arm patient by patient (the test split's patient ids);
    four bins per attacked image."""
    import numpy as np

    n = len(phantom.train.images)
    config = AttackConfig(batches=2, structure="cumulative", threshold_quantile=0.9)
    plan = DpSgdPlan(noise_multiplier=0.7, max_grad_norm=0.3, sample_rate=4 / n, steps=100, unit="image",
                     expected_batch_size=4.2, n_units=n, attack=config)
    got = _arm_kwargs(phantom, monkeypatch, plan)
    assert got["groups"] is None and got["batch_size"] == 4 and got["n_bins"] == 16
    assert (got["structure"], got["threshold_quantile"], got["n_batches"]) == ("cumulative", 0.9, 2)
    assert (got["noise_multiplier"], got["max_grad_norm"], got["expected_batch_size"]) == (0.7, 0.3, 4.2)

    patients = len(set(phantom.train.patient_ids.tolist()))
    by_patient = plan.model_copy(update=dict(unit="patient", n_units=patients, sample_rate=4 / patients))
    got = _arm_kwargs(phantom, monkeypatch, by_patient)
    np.testing.assert_array_equal(got["groups"], phantom.test.patient_ids)


def test_the_attacked_batch_is_q_n_where_no_expected_batch_was_planned_and_needs_one_more_validation_image(phantom):
    """batch = q N (here 6) without an expected batch size; the validation split must hold more images than the
    batch (the threshold draws one guess against a batch of others): as many is refused, one more is enough."""
    from dpmed import attack

    n = len(phantom.train.images)
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=6 / n, steps=100, unit="image",
                     n_units=n, attack=AttackConfig(batches=1))
    assert attack.attack_batch_size(phantom, plan) == 6
    n_val = len(phantom.val.images)
    assert n_val < len(phantom.test.images)
    exact = plan.model_copy(update=dict(expected_batch_size=float(n_val)))
    with pytest.raises(ConfigError, match="validation"):
        attack.attack_batch_size(phantom, exact)
    assert attack.attack_batch_size(phantom, exact.model_copy(update=dict(expected_batch_size=n_val - 1.0))) \
        == n_val - 1


def test_the_attacked_batch_is_at_most_the_test_split(phantom):
    """A batch can hold no more held-out images than the test split has: with a large validation split (the training
    images standing in for it) and an expected batch above the test split's size, the batch is the whole test split."""
    from dataclasses import replace

    from dpmed import attack

    wide = replace(phantom, val=phantom.train)
    n, n_test = len(phantom.train.images), len(phantom.test.images)
    assert len(wide.val.images) > n_test + 1
    plan = DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=(n_test + 5) / n, steps=100, unit="image",
                     expected_batch_size=n_test + 5.0, n_units=n, attack=AttackConfig(batches=1))
    assert attack.attack_batch_size(wide, plan) == n_test
    assert attack.attack_batch_size(wide, plan.model_copy(update=dict(expected_batch_size=n_test - 1.0))) == n_test - 1
