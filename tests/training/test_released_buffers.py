"""What a DP-SGD step may write into the model: nothing but the noised update, whatever the engine.

Buffers are released with the model (METHODS.md s.2b) but receive no noise, so a module that writes a statistic of
the private batch into one (InstanceNorm or BatchNorm running statistics) releases it without privacy; and BatchNorm
mixes the examples of a batch, so per-example clipping bounds nothing. Both engines refuse both, with the reason.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.errors import PrivacyError
from dpmed.training import DpSgdStep
from dpmed.training.clipping import GhostClipper
from dpmed.training.dp_sgd import OpacusClipper

ENGINES = ("dpmed", "opacus")


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _step(model, engine, **kwargs) -> DpSgdStep:
    """A DpSgdStep with noise."""
    return DpSgdStep(model, loss_fn=_ce, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                     physical_batch_size=3, engine=engine, noise_rng=np.random.default_rng(0), **kwargs)


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(5, 2, 6, 6, generator=g, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])


def _net(norm: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), norm, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, 3)).double()


@pytest.mark.parametrize("engine", ENGINES)
def test_instance_norm_with_running_statistics_is_refused(engine):
    """InstanceNorm2d(track_running_stats=True) in train mode moves its running mean by a statistic of the batch."""
    model = _net(nn.InstanceNorm2d(4, track_running_stats=True))
    step = _step(model, engine)
    with pytest.raises(PrivacyError, match=r"module '1' \(InstanceNorm2d\) changed its buffer 'running_mean'.*"
                                           r"receive no noise"):
        step(*_data())


@pytest.mark.parametrize("engine", ENGINES)
def test_a_buffer_written_behind_autograds_back_is_refused(engine):
    """A write through ``.data`` leaves the buffer's version counter alone (as BatchNorm's kernel does for its
    running statistics): the check compares values."""

    class Leaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x):
            self.seen.data.add_(x.detach().mean())
            return x

    model = _net(Leaky())
    with pytest.raises(PrivacyError, match=r"module '1' \(Leaky\) changed its buffer 'seen'"):
        _step(model, engine)(*_data())


@pytest.mark.parametrize("engine", ENGINES)
def test_a_buffer_moved_by_one_unit_in_the_last_place_is_refused(engine):
    """Any change is a release without noise, however small: a running statistic at a momentum of 1e-7 moves its
    buffer by about that much; here the least a float can move, towards a value read off the batch."""

    class Nudge(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.ones((), dtype=torch.float64))

        def forward(self, x):
            with torch.no_grad():
                self.seen.copy_(torch.nextafter(self.seen, x.detach().mean() + 2))
            return x

    model = _net(Nudge())
    with pytest.raises(PrivacyError, match=r"module '1' \(Nudge\) changed its buffer 'seen'"):
        _step(model, engine)(*_data())


def test_frozen_batch_norm_in_train_mode_is_refused_by_the_opacus_engine_as_by_dpmeds():
    """Opacus accepts a BatchNorm without trainable parameters; dpmed refuses it in either engine, with one message."""
    bn = nn.BatchNorm2d(4).requires_grad_(False)
    model = _net(bn).train()
    with pytest.raises(PrivacyError, match="BatchNorm.*GroupNorm") as opacus:
        _step(model, "opacus")
    with pytest.raises(PrivacyError) as dpmed:
        GhostClipper(model)
    assert str(opacus.value) == str(dpmed.value)
    with pytest.raises(PrivacyError, match="BatchNorm"):
        OpacusClipper(_net(nn.BatchNorm2d(4)))


@pytest.mark.parametrize("engine", ENGINES)
def test_constant_buffers_are_accepted(engine):
    """A buffer the forward only reads (a fixed scale here; InstanceNorm's frozen statistics in eval mode) is
    released unchanged: the step runs and leaves it as it was."""

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=torch.float64).view(1, 4, 1, 1))

        def forward(self, x):
            return x * self.scale

    for norm in (Scale(), nn.InstanceNorm2d(4, track_running_stats=True).double().eval()):
        model = _net(norm)
        before = {name: b.clone() for name, b in model.named_buffers()}
        _step(model, engine)(*_data())
        assert all(p.grad is not None for p in model.parameters())
        for name, b in model.named_buffers():
            assert torch.equal(b, before[name])
