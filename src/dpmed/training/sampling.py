"""Batches for training.

DP-SGD's accountants (Abadi et al. 2016; Mironov et al. 2019; the PLD of dp_accounting) assume *Poisson*
subsampling: at every step each sampling unit (a training image, or a patient with all their images) joins the batch
independently with probability q. A fixed-size shuffled batch is a different mechanism with a different
(weaker-studied) guarantee, so the DP-SGD path draws Poisson batches, including the occasional empty one; the step must
still add noise then, because the accountant counted it. Which units join is privacy randomness: it comes from the
run's secret ``sampling`` stream (`dpmed.randomness`), never from the public study seed.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from dpmed.randomness import poisson_mask

__all__ = ["poisson_batches", "shuffled_batches", "fixed_size_batches"]


def poisson_batches(n: int, *, sample_rate: float, steps: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """``steps`` arrays of unit indices; unit i is in a batch with probability ``sample_rate`` (never more),
    independently of every other unit and step."""
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    for _ in range(steps):
        yield np.flatnonzero(poisson_mask(rng, n, sample_rate))


def fixed_size_batches(n: int, *, batch_size: int, steps: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """``steps`` batches of shuffled epochs, the last of each epoch smaller when ``batch_size`` does not divide n, as a
    default data loader makes them (the DP-SGD reproduction mode ``sampling: shuffle``; not Poisson, and no accountant
    covers it)."""
    done = 0
    while done < steps:
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            if done == steps:
                return
            yield order[start:start + batch_size]
            done += 1


def shuffled_batches(n: int, *, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """One epoch of shuffled batches (arms without DP-SGD, whose batches are not private); the last may be smaller."""
    order = torch.randperm(n, generator=generator)
    yield from order.split(batch_size)
