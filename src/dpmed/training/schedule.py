"""The learning rate over a run: scaled with the batch, warmed up, then constant, cosine or step-decayed.

Large expected batches are the DP-SGD regime that works (De et al. 2022; Sander, Stock, Sablayrolles 2023, "TAN
without a burn: scaling laws of DP-SGD"): the noise on the *mean* gradient is sigma C / B, so at a fixed eps a larger
batch buys a cleaner gradient, and the learning rate has to follow the batch. ``lr_scaling`` does that from one
tuned base rate (`TrainingConfig.scaled_learning_rate`): ``linear``, lr * B / B_ref (Goyal et al. 2017, "Accurate,
large minibatch SGD", for SGD) or ``sqrt``, lr * sqrt(B / B_ref) (the rule for Adam; Malladi, Lyu, Panigrahi, Arora
2022), B the arm's (expected) batch size. The schedule is a function of the step index alone, so a resumed run
takes the same rates.

All of it is a public function of settings, never of the data: it costs no privacy.
"""

from __future__ import annotations

import math

import torch

from dpmed.config import TrainingConfig

__all__ = ["lr_factor", "set_learning_rate"]


def lr_factor(cfg: TrainingConfig, step: int, total: int) -> float:
    """The multiplier of the base rate at optimiser step ``step`` (0-based) of ``total``: linear warm-up from
    1/W to 1 over the first W = round(warmup_fraction * total) steps, then the schedule over the rest."""
    schedule = cfg.lr_schedule
    warmup = round(schedule.warmup_fraction * total)
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)                            # in [0, 1)
    if schedule.kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule.kind == "step":
        return schedule.gamma ** sum(step >= m * total for m in schedule.milestones)
    return 1.0


def set_learning_rate(optimizer: torch.optim.Optimizer, cfg: TrainingConfig, step: int, total: int) -> None:
    """Set every parameter group's rate for optimiser step ``step`` (a no-op for a constant schedule without
    warm-up, so that the default leaves the optimiser exactly as it was built)."""
    if cfg.lr_schedule.kind == "constant" and cfg.lr_schedule.warmup_fraction == 0:
        return
    rate = cfg.scaled_learning_rate * lr_factor(cfg, step, total)
    for group in optimizer.param_groups:
        group["lr"] = rate
