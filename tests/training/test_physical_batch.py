"""physical_batch_size bounds the memory of every arm's step and changes no result (beyond float rounding).

Before, only DP-SGD's step was sliced: a non-private arm with augmentation multiplicity K pushed K times its batch
through the model at once (at 224 px, ResNet-18, batch 64 and K = 16: 1024 images), and ran out of GPU memory where
its DP-SGD arms, at 128 images a slice, did not."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.config import TrainingConfig
from dpmed.data.synthetic import make_phantom
from dpmed.models import build_model
from dpmed.training import DpSgdStep, train
from dpmed.training.augmentation import Augmentation, image_keys
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


# ----------------------------------------------------------------- a unit larger than the physical batch, in slices

def _frozen_first_model() -> torch.nn.Module:
    """float64, its first layer frozen: a frozen parameter must come out of a step as it went in, with no gradient."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.GroupNorm(1, 2), torch.nn.Tanh(),
                                torch.nn.Flatten(), torch.nn.Linear(2 * 8 * 8, 3)).double()
    model[0].requires_grad_(False)
    return model


def _units_batch(sizes, k: int, seed: int = 1, nan: bool = False):
    """Images [n, 1, 8, 8], labels, their copies, the copies' labels and groups, and each image's unit: units of
    ``sizes`` images, shuffled, under ids that are neither contiguous nor sorted. ``nan``: one image of the first
    unit (id ``units.min()``) all nan, so that its gradient is."""
    g = torch.Generator().manual_seed(seed)
    units = torch.repeat_interleave(torch.arange(len(sizes)) * 7 - 3, torch.tensor(sizes))
    units = units[torch.randperm(len(units), generator=g)]
    x = torch.randn(len(units), 1, 8, 8, generator=g, dtype=torch.float64)
    if nan:
        x[torch.nonzero(units == units.min())[0, 0]] = torch.nan
    y = torch.randint(0, 3, (len(units),), generator=g)
    augment = Augmentation(multiplicity=k, padding=2, flip=True, seed=3)
    keys = image_keys(x.numpy())
    copies, labels, groups = augment.expand(x, y, keys, step=2, groups=units)
    return augment.apply(x, keys, 2), labels, copies, groups, units


def _ce_mean_over(k: int):
    return lambda z, t: torch.nn.functional.cross_entropy(z, t, reduction="sum") / k


def _unit_truth(model, all_copies, y, units, k):
    """The definition, the slow way: per unit, one backward of the loss summed over all its copies (each weighted
    1/k), over the trainable parameters; {unit: (gradient, its norm)}."""
    params = [p for p in model.parameters() if p.requires_grad]
    n, out = len(units), {}
    for u in torch.unique(units).tolist():
        rows = torch.cat([torch.nonzero(units == u).flatten() + c * n for c in range(k)])
        g = torch.autograd.grad(_ce_mean_over(k)(model(all_copies[rows]), y[rows]), params)
        out[u] = g, torch.cat([t.flatten() for t in g]).norm().item()
    return out


def _dp_step(model, k, clip, physical, engine):
    return DpSgdStep(model, loss_fn=_ce_mean_over(k), max_grad_norm=clip, noise_multiplier=0.0,
                     expected_batch_size=1.0, physical_batch_size=physical, noise_rng=np.random.default_rng(0),
                     engine=engine)


# Units of 7, 4, 2, 1 and 1 images; with K copies each and a physical batch of 4 K, the first unit's copies are more
# than a slice holds, the second's exactly a slice, the others' fewer (several share a slice). With the image as
# unit and K = 3 > physical 2, each image's copies are more than a slice.
@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
@pytest.mark.parametrize("unit, k, physical", [("patient", 1, 4), ("patient", 3, 12), ("image", 3, 2)])
def test_a_unit_larger_than_the_physical_batch_is_summed_in_slices_and_clipped_once(engine, unit, k, physical):
    """Before, a unit whose copies outnumbered physical_batch_size went through the model in one piece (a patient
    of 300 images at K = 8: 2,400 images at once, out of memory on the GPU the user had sized the slices for)."""
    sizes = (7, 4, 2, 1, 1) if unit == "patient" else (1,) * 5
    all_copies, labels, copies, groups, units = _units_batch(sizes, k)
    model = _frozen_first_model()
    frozen = model[0].weight.detach().clone()
    truth = _unit_truth(model, all_copies, labels, units, k)
    norms = sorted(norm for _, norm in truth.values())
    seen = _largest_forward(model)
    step = _dp_step(model, k, 1.0, physical, engine)            # Opacus hooks a model once: one step, 3 clips
    for clip in (norms[0] / 2, norms[len(norms) // 2], 2 * norms[-1]):      # all, some, none of the units clipped
        step.max_grad_norm = clip
        got = step.clipped_sum(copies, labels, groups=groups)
        expected = [sum(min(1.0, clip / (norm + 1e-6)) * g[i] for g, norm in truth.values())
                    for i in range(len(got))]
        for a, b in zip(got, expected, strict=True):
            assert (a - b).norm().item() <= 1e-10 * b.norm().item()
    assert seen[0] <= physical, f"a forward pass took {seen[0]} rows, physical_batch_size {physical}"
    assert model[0].weight.grad is None and torch.equal(model[0].weight, frozen)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=5), k=st.sampled_from([1, 3]),
       physical=st.integers(1, 8), engine=st.sampled_from(["dpmed", "opacus"]))
def test_no_forward_pass_exceeds_the_physical_batch_and_a_unit_moves_the_sum_by_at_most_c(sizes, k, physical,
                                                                                          engine):
    """Whatever the units' sizes against physical_batch_size (copies counted), no forward pass takes more rows, and
    adding a unit (the first, of any size) to the batch moves the clipped sum by at most C: the sensitivity that the
    accountant assumes."""
    _, labels, copies, groups, units = _units_batch(sizes, k)
    model = _frozen_first_model()
    seen = _largest_forward(model)
    clip = 1e-2                         # far below every unit's norm here: each one is clipped
    step = _dp_step(model, k, clip, physical, engine)
    with_unit = step.clipped_sum(copies, labels, groups=groups)
    others = torch.nonzero(groups != units.min()).flatten()    # units.min(): the id of the first of ``sizes``
    without = step.clipped_sum(copies[others], labels[others], groups=groups[others]) if len(others) else [
        torch.zeros_like(t) for t in with_unit]
    assert seen[0] <= physical
    moved = torch.cat([(a - b).flatten() for a, b in zip(with_unit, without, strict=True)]).norm().item()
    assert moved <= clip * (1 + 1e-9)


@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
@pytest.mark.parametrize("unit, k", [("patient", 1), ("patient", 3), ("image", 3)])
def test_the_clipped_sum_is_the_same_whatever_the_physical_batch_size_and_a_non_finite_unit_adds_nothing(
        engine, unit, k):
    """physical_batch_size is for memory only, and is not in the privacy analysis. Before, an example whose gradient
    was nan, in a unit larger than the physical batch, was left out of its slice's sum and the rest of its unit still
    counted (moving the sum by up to C), while the same unit through a chunk, or through the engines at a larger
    physical batch size, contributed nothing."""
    sizes = (7, 4, 2, 1, 1) if unit == "patient" else (1,) * 5
    _, labels, copies, groups, units = _units_batch(sizes, k, nan=True)
    model = _frozen_first_model()
    step = _dp_step(model, k, 0.05, len(copies), engine)       # Opacus hooks a model once: one step, every size
    others = torch.nonzero(groups != units.min()).flatten()
    expected = step.clipped_sum(copies[others], labels[others], groups=groups[others])
    assert all(torch.isfinite(t).all() for t in expected) and sum(t.norm() for t in expected) > 0
    for physical in (1, 2, 3, 5, k * 4, len(copies)):
        step.physical_batch_size = physical
        got = step.clipped_sum(copies, labels, groups=groups)
        for a, b in zip(got, expected, strict=True):
            assert (a - b).norm().item() <= 1e-10 * b.norm().item(), physical


@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
def test_a_unit_in_slices_is_summed_without_tf32_and_the_flag_comes_back(engine, monkeypatch):
    """cuDNN may run float32 convolutions in TF32 (torch's default on GPUs that have it): a unit summed over slices
    would then carry TF32's rounding (about 5e-4 of a gradient) where the same unit through a chunk, at a larger
    physical_batch_size, is summed in full float32, and physical_batch_size would change the result."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    _, labels, copies, groups, _ = _units_batch((3,), 1)
    model = _frozen_first_model()
    seen = []

    def told(module, inputs, out):       # the flag as the backward through this output runs
        out.register_hook(lambda g: seen.append(torch.backends.cudnn.allow_tf32))
    model.register_forward_hook(told)
    _dp_step(model, 1, 1.0, 1, engine).clipped_sum(copies, labels, groups=groups)   # slices of 1: the unit's 3
    assert len(seen) == 3 and not any(seen)
    assert torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
@pytest.mark.parametrize("unit, physical", [("image", 8), ("patient", 8), ("patient", 1)],
                         ids=["image", "patient in a chunk", "patient in slices"])
def test_a_unit_of_millions_of_float32_coordinates_moves_the_sum_by_at_most_c(engine, noise, unit, physical):
    """torch's float32 norm of 2.6 million coordinates falls short of the true one by up to 3e-5 (L2) and 9e-4 (L1):
    a unit summed over slices, normed so, passed C by as much, and so did an image or a patient through the Opacus
    engine. Normed in float64, a unit moves the sum by C up to float32's rounding of one product."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 40_000))           # 2.6 M parameters
    x, y = torch.rand(3, 1, 8, 8), torch.randint(0, 40_000, (3,))
    if unit == "image":
        x, y = x[:1], y[:1]
    clip = 1e-3                                                                  # far below the unit's norm
    step = DpSgdStep(model, loss_fn=_ce_mean_over(1), max_grad_norm=clip, noise_multiplier=0.0,
                     expected_batch_size=1.0, physical_batch_size=physical, noise_rng=np.random.default_rng(0),
                     noise=noise, engine=engine)
    got = step.clipped_sum(x, y, groups=None if unit == "image" else torch.zeros(3, dtype=torch.long))
    moved = torch.cat([t.double().flatten() for t in got]).norm(p=step.norm_order).item()
    assert clip * 0.999 <= moved <= clip * (1 + 1e-6)      # a patient in dpmed's chunk: its rounding slack, below C
