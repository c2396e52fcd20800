"""The training loop shared by every arm.

Non-private and local-DP arms train with shuffled minibatches; DP-SGD arms with Poisson batches and `DpSgdStep`,
recording one privacy event per step in the run's ledger (so a ledger is exact even for an interrupted run).
Randomness flows through explicit generators seeded from the run seed; torch's global generator is untouched.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from dpmed.accounting import Ledger, dp_sgd_event, dp_sgd_schedule  # noqa: F401 (re-exported)
from dpmed.config import TrainingConfig
from dpmed.data import ImageSet, Task
from dpmed.training.dp_sgd import DpSgdStep
from dpmed.training.objectives import objective_for
from dpmed.training.sampling import poisson_batches, shuffled_batches

__all__ = ["DpSgdPlan", "TrainResult", "train", "dp_sgd_schedule", "resolve_device"]


@dataclass(frozen=True)
class DpSgdPlan:
    """The DP-SGD settings the accountant was given; training follows them exactly."""

    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    noise: str = "gaussian"      # or "laplace": L1 clipping and Laplace noise (METHODS.md s.2)
    sampling: str = "poisson"    # or "shuffle": fixed-size shuffled batches, a reproduction mode the accountants
                                 # do not cover (its privacy card says so)
    # The divisor of the noisy sum, fixed when the study was planned (q * N_train of the plan). Under the
    # add/remove-one relation the size of the private set is itself private, so the divisor must not be recomputed
    # from the data handed to training (canaries or a neighbouring set would change it). None: q * len(data), for
    # callers that plan and train on the same set.
    expected_batch_size: float | None = None


@dataclass
class TrainResult:
    """ledger: every privacy event of the run, including those before a resume. resumed_from: the epoch
    (non-private) or step (DP-SGD) a checkpoint continued from; 0 for a run trained in one go."""

    ledger: Ledger
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0


def _fixed_size_batches(n: int, *, batch_size: int, steps: int, generator: torch.Generator):
    """``steps`` full batches of shuffled epochs (the reproduction mode ``sampling: shuffle``; not Poisson)."""
    done = 0
    while done < steps:
        for idx in shuffled_batches(n, batch_size=batch_size, generator=generator):
            if done == steps:
                return
            yield idx
            done += 1


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


def _fingerprint(data: ImageSet, cfg: TrainingConfig, seed: int, dp: DpSgdPlan | None) -> dict:
    """What a checkpoint must match to be continued: the same data size, settings, seed and DP plan."""
    return {"n": len(data), "training": cfg.model_dump(mode="json"), "seed": seed,
            "dp": None if dp is None else dataclasses.asdict(dp)}


def _save_checkpoint(path: Path, *, fingerprint: dict, done: int, model: nn.Module,
                     optimizer: torch.optim.Optimizer, generators: tuple[torch.Generator, torch.Generator],
                     ledger: Ledger, history: list[dict]) -> None:
    """Model, optimiser, both generators and the privacy ledger, written atomically (tmp file, then rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save({"fingerprint": fingerprint, "done": done, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "sampler_state": generators[0].get_state(),
                "noise_state": generators[1].get_state(), "ledger": ledger.to_dict(), "history": history}, tmp)
    os.replace(tmp, path)


def _load_checkpoint(path: Path | None, fingerprint: dict) -> dict | None:
    """The checkpoint at ``path`` if it continues this very training; None if absent or made with other settings
    (that partial run released nothing, so starting afresh loses no privacy accounting)."""
    if path is None or not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state if state.get("fingerprint") == fingerprint else None


def train(model: nn.Module, data: ImageSet, task: Task, cfg: TrainingConfig, *, seed: int,
          dp: DpSgdPlan | None = None, device: torch.device | None = None, progress: bool = True,
          label: str = "train", checkpoint: Path | None = None) -> TrainResult:
    """Train ``model`` in place on ``data``; returns the privacy ledger (empty without DP) and per-epoch history.

    With ``checkpoint``, the state (model, optimiser, sampler and noise generators, ledger) is saved there after
    every epoch (DP-SGD: every round(1/q) steps) and at the end; a later call with the same arguments continues
    from it, and ends with exactly the model and ledger of an uninterrupted run (METHODS.md s.3). Shuffle-mode
    DP-SGD (a reproduction mode) restarts from scratch instead.
    """
    device = device or torch.device("cpu")
    # Multilabel BCE weighted by training-label frequency, except under DP-SGD (the weights would be an
    # unaccounted statistic of the private labels; see objective_for).
    objective = objective_for(task.kind, train_labels=data.labels if dp is None else None)
    x_all = torch.from_numpy(np.ascontiguousarray(data.images))                      # [N, C, H, W]
    y_all = torch.as_tensor(data.labels, dtype=objective.target_dtype)               # [N] or [N, L]
    model.to(device).train()
    optimizer = _optimizer(model, cfg)
    sampler_gen = torch.Generator().manual_seed(seed)
    noise_gen = torch.Generator(device=device).manual_seed(seed + 1_000_003)
    ledger, history, done, start = Ledger(), [], 0, time.perf_counter()
    fingerprint = _fingerprint(data, cfg, seed, dp)
    if dp is not None and dp.sampling != "poisson":
        checkpoint = None
    state = _load_checkpoint(checkpoint, fingerprint)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        sampler_gen.set_state(state["sampler_state"])
        noise_gen.set_state(state["noise_state"])
        ledger, history, done = Ledger.from_dict(state["ledger"]), state["history"], state["done"]

    def save(done_now: int) -> None:
        if checkpoint is not None:
            _save_checkpoint(checkpoint, fingerprint=fingerprint, done=done_now, model=model, optimizer=optimizer,
                             generators=(sampler_gen, noise_gen), ledger=ledger, history=history)

    if dp is None:
        steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
        total = cfg.epochs * steps_per_epoch
    else:
        total = dp.steps
        steps_per_epoch = max(1, round(1 / dp.sample_rate))
        step_fn = DpSgdStep(model, loss_fn=lambda z, y: objective.loss(z, y, reduction="sum"),
                            max_grad_norm=dp.max_grad_norm, noise_multiplier=dp.noise_multiplier,
                            expected_batch_size=(dp.expected_batch_size if dp.expected_batch_size is not None
                                                 else dp.sample_rate * len(data)),
                            physical_batch_size=cfg.physical_batch_size, generator=noise_gen, noise=dp.noise,
                            engine=cfg.dp_engine)
    bar = tqdm(total=total, initial=done * (steps_per_epoch if dp is None else 1), desc=label, unit="step",
               disable=not progress, leave=False)
    if dp is None:
        for epoch in range(done, cfg.epochs):         # done counts finished epochs here
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
            save(epoch + 1)
    else:
        remaining = dp.steps - done                   # done counts finished steps here
        batches = (poisson_batches(len(data), sample_rate=dp.sample_rate, steps=remaining, generator=sampler_gen)
                   if dp.sampling == "poisson" else
                   _fixed_size_batches(len(data), batch_size=max(1, round(dp.sample_rate * len(data))),
                                       steps=remaining, generator=sampler_gen))
        sizes = []
        for step, idx in enumerate(batches, start=done + 1):
            optimizer.zero_grad(set_to_none=True)
            step_fn(x_all[idx].to(device), y_all[idx].to(device))
            optimizer.step()
            ledger = ledger.record(dp_sgd_event(noise=dp.noise, noise_multiplier=dp.noise_multiplier,
                                                sample_rate=dp.sample_rate, steps=1))
            sizes.append(len(idx))
            bar.update()
            if step % steps_per_epoch == 0 or step == dp.steps:
                history.append({"step": step, "mean_batch_size": float(np.mean(sizes))})
                sizes = []
                save(step)
    bar.close()
    return TrainResult(ledger=ledger, history=history, seconds=time.perf_counter() - start, resumed_from=done)
