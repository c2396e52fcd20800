"""One DP-SGD step (Abadi et al. 2016, Algorithm 1): per-example clipping, then noise on the clipped sum.

An *engine* computes the clipped sum: ``dpmed`` (default; `dpmed.training.clipping`, ghost norms and book-keeping,
no per-example gradients where they are not needed) or ``opacus`` (Opacus's GradSampleModule materialises every
per-example gradient with backward hooks). Both give the same sum up to float rounding (tests/training). Summing and
noise are done here, once for both, so that the step is explicit and exactly what the accountant assumes:

    g_sum = sum_i  g_i * min(1, C / ||g_i||_2)            (per-example L2 clip to C, over all parameters)
    g     = (g_sum + N(0, (sigma C)^2 I)) / (q N)          (noise on the sum, divided by the expected batch size)

Dividing by the *expected* batch size q N, not the realised one, keeps the sensitivity of each step at C / (q N);
dividing by the realised size would make the update depend on whether an example is present in two ways. The
physical batch size only chunks the forward and backward passes for memory; the clipped sum is the same.

With ``noise="laplace"`` (the "Laplacian" DP-SGD of 001_d0483fd35863b74c.txt, METHODS.md s.2) each example is
clipped in L1 to C and iid Laplace(sigma C) noise is added per coordinate: the L1 sensitivity of the sum is C, so
each step is the Laplace mechanism with scale sigma in units of C.

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

from dpmed.training.clipping import GhostClipper, clip_factors

__all__ = ["DpSgdStep", "OpacusClipper", "CLIPPING_ENGINES"]


class OpacusClipper:
    """sum_i clip(g_i) for one physical batch from per-example gradients materialised by Opacus's hooks.

    Wrapping ``model`` in a GradSampleModule registers hooks on it for the clipper's lifetime (Opacus's design)."""

    def __init__(self, model: nn.Module, *, norm_order: int = 2) -> None:
        self.module = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.norm_order = norm_order

    def clipped_sum(self, x: Tensor, y: Tensor, *, loss_fn: Callable[[Tensor, Tensor], Tensor],
                    max_grad_norm: float) -> list[Tensor]:
        loss = loss_fn(self.module(x), y)
        with warnings.catch_warnings():
            # Opacus's hooks on the first layer fire although the images need no gradient; torch warns about
            # that case, which is expected here and changes nothing. Scoped to this call, this message only.
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            loss.backward()
        grads = [p.grad_sample for p in self.params]                            # each [b, *p.shape]
        o = self.norm_order   # per-example L2 (Gaussian) or L1 (Laplace) norm over all parameters
        norms = torch.stack([g.flatten(1).norm(p=o, dim=1) for g in grads], dim=1).norm(p=o, dim=1)   # [b]
        factor = clip_factors(norms, max_grad_norm)
        sums = [torch.einsum("b,b...->...", factor, g) for g in grads]
        for p in self.params:
            p.grad_sample = None
            p.grad = None
        return sums


# name -> clipper class; every engine takes (model, *, norm_order) and offers clipped_sum(x, y, *, loss_fn,
# max_grad_norm). The study file picks one with training.dp_engine.
CLIPPING_ENGINES: dict[str, Callable[..., GhostClipper | OpacusClipper]] = {
    "dpmed": GhostClipper,
    "opacus": OpacusClipper,
}


class DpSgdStep:
    """Clip, sum and noise per-example gradients of ``model``; leaves the noisy mean gradient in ``p.grad``.

    max_grad_norm may be ``math.inf`` (no clipping) and noise_multiplier 0 (no noise): then the step is plain
    minibatch SGD on the sum divided by q N, which the tests check against ordinary autograd.
    """

    def __init__(self, model: nn.Module, *, loss_fn: Callable[[Tensor, Tensor], Tensor], max_grad_norm: float,
                 noise_multiplier: float, expected_batch_size: float, physical_batch_size: int,
                 generator: torch.Generator, noise: str = "gaussian", engine: str = "dpmed") -> None:
        if not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        if noise_multiplier < 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
        if noise_multiplier > 0 and math.isinf(max_grad_norm):
            raise ValueError("noise needs a finite max_grad_norm: the noise std is noise_multiplier * max_grad_norm")
        if noise not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' (L2 clipping) or 'laplace' (L1 clipping), got {noise!r}")
        if engine not in CLIPPING_ENGINES:
            raise ValueError(f"engine must be one of {sorted(CLIPPING_ENGINES)}, got {engine!r}")
        self.noise = noise
        self.norm_order = 1 if noise == "laplace" else 2
        self.engine = engine
        self.clipper = CLIPPING_ENGINES[engine](model, norm_order=self.norm_order)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.loss_fn = loss_fn          # must sum over the batch (reduction="sum")
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.expected_batch_size = expected_batch_size
        self.physical_batch_size = physical_batch_size
        self.generator = generator

    def clipped_sum(self, x: Tensor, y: Tensor) -> list[Tensor]:
        """sum_i clip(g_i) for the examples x [B, C, H, W], y [B, ...]; zeros for an empty batch."""
        total = None
        for xs, ys in zip(x.split(self.physical_batch_size), y.split(self.physical_batch_size)):
            if len(xs) == 0:                # an empty Poisson batch: the clipped sum is zero, the noise still comes
                continue
            sums = self.clipper.clipped_sum(xs, ys, loss_fn=self.loss_fn, max_grad_norm=self.max_grad_norm)
            if total is None:               # the engines return fresh tensors: own them, no extra copy
                total = sums
                continue
            for acc, g in zip(total, sums):
                acc.add_(g)
        return total if total is not None else [torch.zeros_like(p) for p in self.params]

    def __call__(self, x: Tensor, y: Tensor) -> None:
        """Compute the noisy gradient of one Poisson batch into ``p.grad`` (the optimizer steps afterwards)."""
        total = self.clipped_sum(x, y)
        scale = self.noise_multiplier * self.max_grad_norm   # Gaussian std, or Laplace scale b
        for p, acc in zip(self.params, total):
            if scale > 0:
                acc.add_(self._noise(scale, acc))
            p.grad = acc.div_(self.expected_batch_size)

    def _noise(self, scale: float, like: Tensor) -> Tensor:
        if self.noise == "gaussian":
            return torch.normal(0.0, scale, size=like.shape, generator=self.generator, device=like.device,
                                dtype=like.dtype)
        # Laplace(b) = b (E1 - E2) for iid Exp(1) draws: torch's Laplace sampler takes no generator.
        e = torch.empty((2, *like.shape), device=like.device, dtype=like.dtype).exponential_(generator=self.generator)
        return scale * (e[0] - e[1])
