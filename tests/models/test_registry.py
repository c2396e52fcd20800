"""Every registered model is DP-compatible: no BatchNorm, no in-place ops, a working DP-SGD step."""

from __future__ import annotations

import pytest
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.models import MODELS, build_model, list_models
from dpmed.training import DpSgdStep


@pytest.mark.parametrize("name", list_models())
@pytest.mark.parametrize("size, channels, outputs", [(28, 1, 2), (64, 3, 5)])
def test_dp_sgd_step_runs_on_every_model(name, size, channels, outputs):
    model = build_model(name, in_channels=channels, num_outputs=outputs, image_size=size, seed=0)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert not any(getattr(m, "inplace", False) for m in model.modules())
    before = [p.detach().clone() for p in model.parameters()]
    step = DpSgdStep(model, loss_fn=lambda z, y: F.cross_entropy(z, y, reduction="sum"), max_grad_norm=1.0,
                     noise_multiplier=1.0, expected_batch_size=3.0, physical_batch_size=2,
                     noise_rng=np.random.default_rng(0))
    x = torch.rand(3, channels, size, size)
    step(x, torch.tensor([0, 1, 1]))
    assert model(x).shape == (3, outputs)
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert dotted(model, MODELS[name].cam_layer) is not None


def dotted(model: nn.Module, name: str) -> nn.Module:
    return model.get_submodule(name)


def _equal(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.parametrize("name", ["small_cnn", "resnet9_ws", "scatternet_cnn"])
def test_a_seeded_build_leaves_the_global_generator_alone_and_gives_the_same_weights_wherever_it_is_built(name):
    """Built from a seed, a model is the same whatever the global generator's state, and building it leaves that
    state as it was: a later draw of the caller's does not depend on whether a model was built before it."""
    kwargs = dict(in_channels=1, num_outputs=2, image_size=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        before = torch.get_rng_state()
        first = build_model(name, **kwargs, seed=7)
        assert torch.equal(torch.get_rng_state(), before)
        torch.rand(5)
        again, other = build_model(name, **kwargs, seed=7), build_model(name, **kwargs, seed=8)
    assert _equal(first, again) and not _equal(first, other)


def test_a_seeded_build_has_the_weights_of_the_global_generator_seeded_alike():
    """The seed means what it meant to the callers that seeded torch before building: a study's models (its runs',
    its pretraining's) keep the weights they were built with before the seed was build_model's."""
    kwargs = dict(in_channels=3, num_outputs=5, image_size=28)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        seeded_globally = build_model("small_cnn", **kwargs)
    assert _equal(build_model("small_cnn", **kwargs, seed=11), seeded_globally)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_seeded_build_leaves_the_cuda_generators_alone():
    """Models are built on the CPU, so only its generator is seeded: torch.manual_seed, which the callers used
    before, also reseeded every CUDA generator, outside the fork that restored the CPU one."""
    before = torch.cuda.get_rng_state_all()
    build_model("small_cnn", in_channels=1, num_outputs=2, image_size=16, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(before, torch.cuda.get_rng_state_all(), strict=True))


def test_an_unseeded_build_draws_from_the_global_generator():
    """Without a seed the initialisation is the global generator's (tests seed it themselves), and moves it."""
    kwargs = dict(in_channels=1, num_outputs=2, image_size=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        first = build_model("small_cnn", **kwargs)
        moved = torch.get_rng_state()
        torch.manual_seed(3)
        assert _equal(first, build_model("small_cnn", **kwargs))
        assert not torch.equal(moved, torch.manual_seed(3).get_state())


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(KeyError, match="small_cnn"):
        build_model("resnet1000", in_channels=1, num_outputs=2, image_size=28)
