"""One DP-SGD step (Abadi et al. 2016, Algorithm 1) on per-example gradients from Opacus.

Opacus's GradSampleModule computes per-example gradients with backward hooks; clipping, summing and noise are done
here so that the step is explicit and exactly what the accountant assumes:

    g_sum = sum_i  g_i * min(1, C / ||g_i||_2)            (per-example L2 clip to C, over all parameters)
    g     = (g_sum + N(0, (sigma C)^2 I)) / (q N)          (noise on the sum, divided by the expected batch size)

Dividing by the *expected* batch size q N, not the realised one, keeps the sensitivity of each step at C / (q N);
dividing by the realised size would make the update depend on whether an example is present in two ways. The
physical batch size only chunks the forward and backward passes for memory; the clipped sum is the same.

Noise comes from a seeded ``torch.Generator`` so runs reproduce. That is not a cryptographically secure source;
deployments that release models should use a CSPRNG (Opacus ``secure_mode``), which changes no eps.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable

import torch
from opacus import GradSampleModule
from torch import Tensor, nn

__all__ = ["DpSgdStep"]


class DpSgdStep:
    """Clip, sum and noise per-example gradients of ``model``; leaves the noisy mean gradient in ``p.grad``.

    max_grad_norm may be ``math.inf`` (no clipping) and noise_multiplier 0 (no noise): then the step is plain
    minibatch SGD on the sum divided by q N, which the tests check against ordinary autograd.
    """

    def __init__(self, model: nn.Module, *, loss_fn: Callable[[Tensor, Tensor], Tensor], max_grad_norm: float,
                 noise_multiplier: float, expected_batch_size: float, physical_batch_size: int,
                 generator: torch.Generator) -> None:
        if not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        if noise_multiplier < 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
        if noise_multiplier > 0 and math.isinf(max_grad_norm):
            raise ValueError("noise needs a finite max_grad_norm: the noise std is noise_multiplier * max_grad_norm")
        self.module = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.loss_fn = loss_fn          # must sum over the batch (reduction="sum")
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.expected_batch_size = expected_batch_size
        self.physical_batch_size = physical_batch_size
        self.generator = generator

    def clipped_sum(self, x: Tensor, y: Tensor) -> list[Tensor]:
        """sum_i clip(g_i) for the examples x [B, C, H, W], y [B, ...]; zeros for an empty batch."""
        total = [torch.zeros_like(p) for p in self.params]
        for xs, ys in zip(x.split(self.physical_batch_size), y.split(self.physical_batch_size)):
            loss = self.loss_fn(self.module(xs), ys)
            with warnings.catch_warnings():
                # Opacus's hooks on the first layer fire although the images need no gradient; torch warns about
                # that case, which is expected here and changes nothing. Scoped to this call, this message only.
                warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
                loss.backward()
            grads = [p.grad_sample for p in self.params]                        # each [b, *p.shape]
            norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads], dim=1).norm(dim=1)   # [b]
            factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)      # Opacus's clip factor
            for acc, g in zip(total, grads):
                acc.add_(torch.einsum("b,b...->...", factor, g))
            for p in self.params:
                p.grad_sample = None
                p.grad = None
        return total

    def __call__(self, x: Tensor, y: Tensor) -> None:
        """Compute the noisy gradient of one Poisson batch into ``p.grad`` (the optimizer steps afterwards)."""
        total = self.clipped_sum(x, y)
        std = self.noise_multiplier * self.max_grad_norm
        for p, acc in zip(self.params, total):
            if std > 0:
                acc.add_(torch.normal(0.0, std, size=acc.shape, generator=self.generator,
                                      device=acc.device, dtype=acc.dtype))
            p.grad = acc / self.expected_batch_size
