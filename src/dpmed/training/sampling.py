"""Batches for training.

DP-SGD's accountants (Abadi et al. 2016; Mironov et al. 2019; the PLD of dp_accounting) assume *Poisson*
subsampling: at every step each training example joins the batch independently with probability q. A fixed-size
shuffled batch is a different mechanism with a different (weaker-studied) guarantee, so the DP-SGD path draws Poisson
batches, including the occasional empty one; the step must still add noise then, because the accountant counted it.
"""

from __future__ import annotations

from typing import Iterator

import torch

__all__ = ["poisson_batches", "shuffled_batches"]


def poisson_batches(n: int, *, sample_rate: float, steps: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """``steps`` index tensors; index i is in a batch with probability ``sample_rate``, independently."""
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    for _ in range(steps):
        mask = torch.rand(n, generator=generator) < sample_rate
        yield mask.nonzero(as_tuple=True)[0]


def shuffled_batches(n: int, *, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """One epoch of shuffled batches (non-private arms only); the last batch may be smaller."""
    order = torch.randperm(n, generator=generator)
    yield from order.split(batch_size)
