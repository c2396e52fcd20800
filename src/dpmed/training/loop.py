"""The training loop shared by every arm.

Non-private and local-DP arms train with shuffled minibatches; DP-SGD arms with Poisson batches and `DpSgdStep`,
recording one privacy event per step in the run's ledger (so a ledger is exact even for an interrupted run).
Randomness flows through explicit generators seeded from the run seed; torch's global generator is untouched.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from dpmed.accounting import Ledger, PoissonGaussianEvent
from dpmed.config import TrainingConfig
from dpmed.data import ImageSet, Task
from dpmed.training.dp_sgd import DpSgdStep
from dpmed.training.objectives import OBJECTIVES
from dpmed.training.sampling import poisson_batches, shuffled_batches

__all__ = ["DpSgdPlan", "TrainResult", "train", "dp_sgd_schedule", "resolve_device"]


@dataclass(frozen=True)
class DpSgdPlan:
    """The DP-SGD settings the accountant was given; training follows them exactly."""

    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int


@dataclass
class TrainResult:
    ledger: Ledger
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def dp_sgd_schedule(n_train: int, *, batch_size: int, epochs: int) -> tuple[float, int]:
    """(sample_rate q, steps T) for ``epochs`` passes with expected batch ``batch_size``: q = B / N, and
    T = epochs * round(N / B), so that each example is sampled about ``epochs`` times."""
    if batch_size > n_train:
        raise ValueError(f"batch_size {batch_size} exceeds the {n_train} training images; lower training.batch_size")
    return batch_size / n_train, epochs * max(1, round(n_train / batch_size))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("training.device is 'cuda' but no CUDA device is available; use 'auto' or 'cpu'")
    return torch.device(name)


def _optimizer(model: nn.Module, cfg: TrainingConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=cfg.learning_rate, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay)


def train(model: nn.Module, data: ImageSet, task: Task, cfg: TrainingConfig, *, seed: int,
          dp: DpSgdPlan | None = None, device: torch.device | None = None, progress: bool = True,
          label: str = "train") -> TrainResult:
    """Train ``model`` in place on ``data``; returns the privacy ledger (empty without DP) and per-epoch loss."""
    device = device or torch.device("cpu")
    objective = OBJECTIVES[task.kind]
    x_all = torch.from_numpy(np.ascontiguousarray(data.images))                      # [N, C, H, W]
    y_all = torch.as_tensor(data.labels, dtype=objective.target_dtype)               # [N] or [N, L]
    model.to(device).train()
    optimizer = _optimizer(model, cfg)
    sampler_gen = torch.Generator().manual_seed(seed)
    noise_gen = torch.Generator(device=device).manual_seed(seed + 1_000_003)
    ledger, history, start = Ledger(), [], time.perf_counter()

    if dp is None:
        steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
        total = cfg.epochs * steps_per_epoch
    else:
        total = dp.steps
        steps_per_epoch = max(1, round(1 / dp.sample_rate))
        step_fn = DpSgdStep(model, loss_fn=lambda z, y: objective.loss(z, y, reduction="sum"),
                            max_grad_norm=dp.max_grad_norm, noise_multiplier=dp.noise_multiplier,
                            expected_batch_size=dp.sample_rate * len(data),
                            physical_batch_size=cfg.physical_batch_size, generator=noise_gen)
    bar = tqdm(total=total, desc=label, unit="step", disable=not progress, leave=False)
    if dp is None:
        for epoch in range(cfg.epochs):
            losses = []
            for idx in shuffled_batches(len(data), batch_size=cfg.batch_size, generator=sampler_gen):
                x, y = x_all[idx].to(device), y_all[idx].to(device)
                optimizer.zero_grad(set_to_none=True)
                loss = objective.loss(model(x), y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                bar.update()
            history.append({"epoch": epoch + 1, "loss": float(np.mean(losses))})
            bar.set_postfix(loss=f"{history[-1]['loss']:.3f}")
    else:
        batches = poisson_batches(len(data), sample_rate=dp.sample_rate, steps=dp.steps, generator=sampler_gen)
        sizes = []
        for step, idx in enumerate(batches, start=1):
            optimizer.zero_grad(set_to_none=True)
            step_fn(x_all[idx].to(device), y_all[idx].to(device))
            optimizer.step()
            ledger = ledger.record(PoissonGaussianEvent(noise_multiplier=dp.noise_multiplier,
                                                        sample_rate=dp.sample_rate, steps=1))
            sizes.append(len(idx))
            bar.update()
            if step % steps_per_epoch == 0 or step == dp.steps:
                history.append({"step": step, "mean_batch_size": float(np.mean(sizes))})
                sizes = []
    bar.close()
    return TrainResult(ledger=ledger, history=history, seconds=time.perf_counter() - start)
