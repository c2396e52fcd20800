"""physical_batch_size bounds the memory of every arm's step and changes no result (beyond float rounding).

Before, only DP-SGD's step was sliced: a non-private arm with augmentation multiplicity K pushed K times its batch
through the model at once (at 224 px, ResNet-18, batch 64 and K = 16: 1024 images), and ran out of GPU memory where
its DP-SGD arms, at 128 images a slice, did not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpmed.config import TrainingConfig
from dpmed.data.synthetic import make_phantom
from dpmed.models import build_model
from dpmed.training import train
from dpmed.training.loop import _mean_loss_backward
from dpmed.training.objectives import objective_for

AUGMENTED = {"epochs": 2, "batch_size": 16, "optimizer": "adam", "learning_rate": 1e-3,
             "augmentation": {"multiplicity": 3, "crop_padding": 2}}


def _model(outputs: int = 2) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("small_cnn", in_channels=1, num_outputs=outputs, image_size=16)


def _largest_forward(model: torch.nn.Module) -> list[int]:
    seen = [0]
    model.register_forward_pre_hook(lambda _, args: seen.__setitem__(0, max(seen[0], len(args[0]))))
    return seen


def test_a_non_private_arm_trains_in_slices_of_the_physical_batch_to_the_same_model():
    ds = make_phantom(n_images=100, image_size=16, seed=0)
    models, losses = {}, {}
    for physical in (5, 64):
        model = _model()
        seen = _largest_forward(model)
        result = train(model, ds.train, ds.task, TrainingConfig.model_validate({**AUGMENTED,
                                                                                "physical_batch_size": physical}),
                       seed=1, progress=False)
        assert seen[0] == min(physical, 16 * 3), physical          # 16 images x 3 copies a step, in slices
        models[physical] = [p.detach() for p in model.parameters()]
        losses[physical] = [s["training_loss"] for s in result.statistics]
    for sliced, whole in zip(models[5], models[64], strict=True):
        torch.testing.assert_close(sliced, whole, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses[5], losses[64], rtol=1e-5)


@pytest.mark.parametrize("kind, outputs", [("binary", 2), ("multiclass", 3), ("multilabel", 3)])
def test_the_sliced_mean_loss_and_its_gradient_are_the_whole_batch_s(kind, outputs):
    """The mean over slices divides by the whole batch's element count: images for cross-entropy, images x labels
    for BCE (here weighted by the labels' frequency, as for non-private multilabel arms)."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(11, 1, 16, 16, generator=g)
    if kind == "multilabel":
        y = (torch.rand(11, outputs, generator=g) < 0.3).float()
        objective = objective_for(kind, train_labels=y.numpy())
    else:
        y = torch.randint(0, outputs, (11,), generator=g)
        objective = objective_for(kind)
    whole = _model(outputs)
    expected = objective.loss(whole(x), y)
    expected.backward()
    sliced = _model(outputs)
    loss = _mean_loss_backward(sliced, objective, x, y, 4, torch.device("cpu"))
    assert loss == pytest.approx(expected.item(), rel=1e-6)
    for a, b in zip(sliced.parameters(), whole.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)


def test_a_physical_batch_larger_than_any_integer_torch_takes_is_the_whole_batch():
    """physical_batch_size only bounds memory, so any count above the batch is the batch; before, 10**23 ended every
    run in "ValueError: Overflow when unpacking long long" from torch.split, after the data had been read."""
    from dpmed.training import DpSgdStep

    ds = make_phantom(n_images=60, image_size=16, seed=0)
    trained = {}
    for physical in (64, 10**23):
        model = _model()
        train(model, ds.train, ds.task, TrainingConfig.model_validate({**AUGMENTED, "epochs": 1,
                                                                       "physical_batch_size": physical}),
              seed=1, progress=False)
        trained[physical] = [p.detach() for p in model.parameters()]
    for huge, whole in zip(trained[10**23], trained[64], strict=True):
        torch.testing.assert_close(huge, whole)
    x, y = torch.as_tensor(ds.train.images[:6]), torch.as_tensor(ds.train.labels[:6])
    groups = torch.tensor([0, 0, 1, 2, 2, 2])
    for by in (None, groups):
        sums = {}
        for physical in (64, 10**23):
            step = DpSgdStep(_model(), loss_fn=lambda z, t: torch.nn.functional.cross_entropy(z, t, reduction="sum"),
                             max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=6.0,
                             physical_batch_size=physical, noise_rng=np.random.default_rng(0))
            sums[physical] = step.clipped_sum(x, y, groups=by)
        for huge, whole in zip(sums[10**23], sums[64], strict=True):
            torch.testing.assert_close(huge, whole)
