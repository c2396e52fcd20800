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
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = build_model(name, in_channels=channels, num_outputs=outputs, image_size=size)
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


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(KeyError, match="small_cnn"):
        build_model("resnet1000", in_channels=1, num_outputs=2, image_size=28)
