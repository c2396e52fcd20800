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
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16)


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
