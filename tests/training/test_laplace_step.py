"""Laplace-noise DP-SGD (METHODS.md s.2): L1 clipping to C, Laplace(sigma C) noise on the clipped sum."""

from __future__ import annotations

import pytest
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.training import DpSgdStep


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2), nn.ReLU(), nn.Flatten(), nn.Linear(72, 3)).double()


def _loss(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _data(n=5):
    g = torch.Generator().manual_seed(3)
    return torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


@pytest.mark.parametrize("engine", ["dpmed", "opacus"])
@pytest.mark.parametrize("clipped", ["every", "some", "no"])
def test_l1_clipping_matches_an_explicit_per_example_loop(engine, clipped):
    """The clip is read from the examples' own L1 norms (35 to 55 here), so that "some" puts a clipped and an
    unclipped example in one physical batch: a fixed clip of 1 clipped all five, and a step that left a batch
    unclipped unless every example in it exceeded C passed every case."""
    x, y = _data()
    model = _model()
    grads = []
    for i in range(len(x)):
        model.zero_grad()
        _loss(model(x[i:i + 1]), y[i:i + 1]).backward()
        grads.append([p.grad.detach().clone() for p in model.parameters()])
    l1 = np.array([sum(g.abs().sum() for g in example).item() for example in grads])
    clip = {"every": 1e-2, "some": float(l1.mean()), "no": 1e4}[clipped]
    above = int((l1 > clip).sum())
    assert {"every": above == len(l1), "some": 0 < above < len(l1), "no": above == 0}[clipped], l1
    expected = [torch.zeros_like(p) for p in model.parameters()]
    for example, norm in zip(grads, l1, strict=True):
        factor = min(1.0, clip / (norm + 1e-6))
        for e, g in zip(expected, example, strict=True):
            e.add_(factor * g)
    model.zero_grad()
    step = DpSgdStep(model, loss_fn=_loss, max_grad_norm=clip, noise_multiplier=0.0, expected_batch_size=1.0,
                     physical_batch_size=2, noise_rng=np.random.default_rng(0), noise="laplace",
                     engine=engine)
    step(x, y)
    for p, e in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, e, rtol=1e-6, atol=1e-10)
    assert sum(p.grad.abs().sum() for p in model.parameters()) <= len(x) * clip * (1 + 1e-6)


def test_laplace_noise_has_scale_sigma_times_c_and_no_clipped_signal_on_an_empty_batch():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 80)).double()   # 5,200 noise draws
    step = DpSgdStep(model, loss_fn=_loss, max_grad_norm=2.0, noise_multiplier=1.5, expected_batch_size=1.0,
                     physical_batch_size=4, noise_rng=np.random.default_rng(0), noise="laplace")
    x, y = torch.zeros(0, 1, 8, 8, dtype=torch.float64), torch.zeros(0, dtype=torch.long)
    step(x, y)   # empty Poisson batch: pure noise, still added
    noise = torch.cat([p.grad.flatten() for p in model.parameters()])
    b = 1.5 * 2.0
    assert noise.abs().mean().item() == pytest.approx(b, rel=0.05)   # E|Laplace(b)| = b; std error 1.4%
    assert noise.var().item() == pytest.approx(2 * b * b, rel=0.12)   # Var = 2 b^2; std error ~3.4%
    assert abs(noise.mean().item()) < 0.1 * b
