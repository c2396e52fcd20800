"""The training loop shared by every arm.

Non-private and local-DP arms train with shuffled minibatches; DP-SGD arms with Poisson batches and `DpSgdStep`,
recording one privacy event per step in the run's ledger (so a ledger is exact even for an interrupted run).

Two kinds of randomness, kept apart (`dpmed.randomness`): the shuffling of arms without DP-SGD comes from the public
run seed; DP-SGD's sampling and noise come from the run's secret privacy randomness. Torch's global generator is
untouched. What training returns besides the model is either accounted (the ledger) or private (`statistics`:
training losses, computed from the training images without noise, for the run's private folder only).

The sampling unit is an image, or a patient with all their images (``DpSgdPlan.unit``; user-level DP-SGD, McMahan
et al. 2018): patients are Poisson-sampled, and each sampled patient's gradients are summed over their images and
clipped together, so one patient moves the noisy sum by at most C however many images they have.

The private training recipe of De et al. 2022 (METHODS.md s.9), each part a setting of ``TrainingConfig``:
augmentation multiplicity (`augmentation`: K copies per image in the unit's clipping group), parameter averaging
(`averaging`: the released model is the EMA of the iterates), the learning rate scaled and scheduled (`schedule`),
and the training length in steps (T: the DP-SGD plan's; for the other arms `dpmed.mechanisms.training_steps`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from dpmed.accounting import Ledger, dp_sgd_event, dp_sgd_schedule, shuffled_event  # noqa: F401 (re-exported)
from dpmed.config import TrainingConfig
from dpmed.data import ImageSet, Task
from dpmed.folders import write_torch_atomic
from dpmed.interruption import check as check_interrupt
from dpmed.mechanisms import DpSgdPlan, training_steps
from dpmed.randomness import PrivacyRandomness, poisson_mask_words, public_seed
from dpmed.training.augmentation import Augmentation, Copies, image_keys
from dpmed.training.averaging import ParameterAverage
from dpmed.training.dp_sgd import DpSgdStep, physical_chunks
from dpmed.training.fixed_features import precompute
from dpmed.training.objectives import Objective, objective_for
from dpmed.training.process_setting import ProcessSetting
from dpmed.training.sampling import fixed_size_batches, poisson_batches, shuffled_batches
from dpmed.training.schedule import set_learning_rate

__all__ = ["DpSgdPlan", "TrainResult", "train", "dp_sgd_schedule", "resolve_device", "run_threads", "torch_threads",
           "sampling_units", "checkpoint_review"]

_log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """ledger: every privacy event of the run, including those before a resume. statistics: per-epoch training
    loss of arms without DP-SGD, noiseless statistics of the training images: private, never in run.json.
    features_seconds: the part of ``seconds`` that computed the model's fixed features of every training image before
    the first step (0 where it has none): once per run, so a cost per step taken from a few steps must leave it out.
    resumed_from: the step a checkpoint continued from, as the log says it ("at step 28 of 112"), for every kind of
    run (a checkpoint without DP-SGD counts epochs, which the report would show beside DP-SGD's steps); 0 for one
    go."""

    ledger: Ledger
    statistics: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0
    features_seconds: float = 0.0


def sampling_units(data: ImageSet, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 [U + 1], images int64 [N]): unit u owns images[offsets[u]:offsets[u + 1]]. An image is its own
    unit, or a patient is, in the order patients first appear."""
    if unit == "image":
        return np.arange(len(data) + 1, dtype=np.int64), np.arange(len(data), dtype=np.int64)
    if unit != "patient":
        raise ValueError(f"unit must be 'image' or 'patient', got {unit!r}")
    _, first, inverse = np.unique(data.patient_ids.astype(str), return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))                     # patient number in order of first appearance
    owner = rank[inverse]                                     # [N] unit of each image
    images = np.argsort(owner, kind="stable").astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(first)))]).astype(np.int64)
    return offsets, images


def _expand(units: np.ndarray, offsets: np.ndarray, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The images of the sampled ``units`` and the unit index of each (the group the clipper sums over)."""
    counts = offsets[units + 1] - offsets[units]                                      # [b]
    first = np.repeat(offsets[units] - (np.cumsum(counts) - counts), counts)          # [n]
    return images[first + np.arange(len(first))], np.repeat(units, counts)


def run_threads(setting: int | str) -> int:
    """The CPU threads of a run: the study's ``training.threads``, "auto" = min(4, cores) whatever the executor."""
    return min(4, os.cpu_count() or 1) if setting == "auto" else int(setting)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count for the run, restored afterwards (float sums depend on it).

    The count is the process's: runs that threads of one process train at once (two `run_study` calls of a web
    service) share it, each leaving the count of the runs still inside, and the last restores the count from before
    the first (each saving and restoring its own left the caller's count changed; `ProcessSetting`)."""
    with _THREADS.held(n):
        yield


_THREADS = ProcessSetting(torch.get_num_threads, torch.set_num_threads)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("training.device is 'cuda' but no CUDA device is available; use 'auto' or 'cpu'")
    return torch.device(name)


def _optimizer(model: nn.Module, cfg: TrainingConfig) -> torch.optim.Optimizer:
    lr = cfg.scaled_learning_rate
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def _augmentation(cfg: TrainingConfig, data: ImageSet, seed: int) -> tuple[Augmentation, np.ndarray] | None:
    """The run's augmentation (public randomness from the run seed; see `dpmed.training.augmentation` for why that
    is sound) and the key of each training image, or None without ``training.augmentation``."""
    aug = cfg.augmentation
    if aug is None:
        return None
    padding = aug.padding(min(data.images.shape[2:]))
    return (Augmentation(multiplicity=aug.multiplicity, padding=padding, flip=aug.flip,
                         seed=public_seed(seed, "augmentation")), image_keys(data.images))


def _fingerprint(data: ImageSet, cfg: TrainingConfig, seed: int, dp: DpSgdPlan | None) -> dict:
    """What a checkpoint must match to be continued: the same data size, settings, seed and DP plan."""
    training = cfg.computed_settings(dp_sgd=dp is not None)
    return {"n": len(data), "training": training, "seed": seed,
            "dp": None if dp is None else dp.model_dump(mode="json")}


def _mean_loss_backward(model: nn.Module, objective: Objective, x: torch.Tensor | Copies, y: torch.Tensor,
                        chunk: int, device: torch.device) -> float:
    """The batch's mean loss, its gradient accumulated in ``model`` over slices of at most ``chunk`` images
    (``physical_batch_size``), moved to ``device`` one at a time: the gradient of one pass over the whole batch, up to
    float rounding (every model normalises per image, GroupNorm, never across the batch), in memory bounded as
    DP-SGD's is. Without it a non-private arm with augmentation multiplicity K held K times its batch's activations
    at once (at 224 px, ResNet-18, batch 64 and K = 16: 1024 images), where its DP-SGD arms held 128."""
    total = torch.zeros((), device=device)
    for xs, ys in physical_chunks(x, y, chunk):
        loss = objective.loss(model(xs.to(device)), ys.to(device), reduction="sum") / y.numel()   # the mean's terms
        loss.backward()
        total += loss.detach()
    return total.item()


def _save_checkpoint(path: Path, **state) -> None:
    """Model, optimiser, generator positions, the raw words a step takes from each privacy stream (so that `dpmed
    status` checks the positions without building the model) and the privacy ledger, written atomically
    (`write_atomic`). It holds the privacy streams' positions (no key: `PrivacyRandomness.state`) and an unreleased
    model: a private file, created readable by its owner only."""
    write_torch_atomic(path, state, owner_only=True)


class _Progress:
    """How far a run is: a bar on a terminal, or (``log`` and no bar: a batch job's log file, a worker process) log
    lines with the time left: after each of the first two steps of the session, then at each tenth of the steps, or
    each hundredth in runs of 1000 steps or more (at 224 px a tenth of 4000 steps is an hour on a CPU); none at the
    last step, which the caller's "trained in" line follows. Which steps log depends on the step counts alone, never
    on the time steps took: a DP-SGD step's time grows with the units Poisson sampling drew, and lines paced by it
    would tell when the batches were large. Step counts and wall time only: nothing of the images, the losses or
    which units were sampled.

    The time so far counts from ``began``, the training's start, as the "trained in" line does: the fixed features
    computed before the first step (minutes at 224 px) are part of it. The time left is the steps' own rate times the
    steps left (the features are done by then), of training only: the evaluation follows it. The rate leaves out the
    session's first step, which pays one-off costs (the first allocations and passes): extrapolated from it alone, the
    first line of a phantom run said up to 4.6 times the training left (benchmarks/RESULTS.md, "The first step's
    time"), so the first line tells no time left, and the second the rate of the second step."""

    def __init__(self, total: int, done: int, label: str, *, bar: bool, log: bool, began: float) -> None:
        self.total, self.done, self.first, self.label = total, done, done, label
        self.began = self.start = began     # start: reset at the end of the session's first step (`step`)
        parts = 100 if total >= 1000 else 10
        marks = {done + 1, done + 2} | {math.ceil(total * k / parts) for k in range(1, parts)}
        self.marks = set() if bar or not log else marks - {total}
        # none at all where no bar is drawn: even a disabled tqdm starts a monitor thread that outlives the run and
        # fixes the caller's multiprocessing start method
        self.bar = tqdm(total=total, initial=done, desc=label, unit="step", leave=False) if bar else None

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update()
        self.done += 1
        if self.done == self.first + 1:
            self.start = time.perf_counter()       # the one-off costs end with the session's first step
        if self.done in self.marks:
            now = time.perf_counter()
            left = (f"time left known after step {self.done + 1}" if self.done == self.first + 1 else
                    f"about {(now - self.start) / (self.done - self.first - 1) * (self.total - self.done):.0f} s of "
                    "training left")
            _log.info("%s: step %d of %d (%d %%), %.0f s so far, %s", self.label, self.done, self.total,
                      100 * self.done // self.total, now - self.began, left)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# What torch.load raises for a checkpoint cut short or not a checkpoint at all (its weights-only unpickler meets
# arbitrary bytes with an IndexError, "pop from empty list", or a ValueError, KeyError or TypeError).
_UNREADABLE = (OSError, RuntimeError, EOFError, pickle.UnpicklingError, IndexError, ValueError, KeyError, TypeError)


def _load_checkpoint(path: Path, fingerprint: dict, label: str) -> dict | None:
    """The checkpoint at ``path`` if it continues this very training; None if absent or made with other settings
    (`dpmed.run` gave this attempt a fresh key and deleted what the earlier one left; a caller of `train` may not
    have, so the log says the checkpoint is not continued: `dpmed status` had shown it as continuing)."""
    if not path.is_file():
        return None
    state = _read_checkpoint(path)
    if state.get("fingerprint") == fingerprint:
        return state
    _log.info("%s: its checkpoint %s was made for other training settings or data: not continued, training starts "
              "at step 0 and overwrites it", label, path)
    return None


def _resume(path: Path | None, fingerprint: dict, *, model: nn.Module, optimizer: torch.optim.Optimizer,
            shuffle_gen: torch.Generator, randomness: PrivacyRandomness | None, per_step: dict[str, int],
            average: ParameterAverage | None, label: str) -> tuple[Ledger, list, int] | None:
    """Continue from the checkpoint at ``path`` where it continues this training (`_load_checkpoint`): restore the
    model, optimiser, generators and average in place, and return (ledger, statistics, done); None where there is
    none. ``per_step``: the raw words each DP-SGD step takes from each privacy stream it draws from (empty without
    DP-SGD). RuntimeError where the checkpoint's privacy streams are another key's, lack one of those, or stand
    elsewhere than its step count leaves them, or where its ledger counts other steps than it took (`_mixed`). The
    checkpoint's dict stays in this frame: one an earlier dpmed wrote holds each privacy stream's state, AES key
    included, and as a local of the training loop it was printed by every traceback that shows locals (IPython's
    verbose mode, pytest --showlocals, a crash reporter) of a resumed run stopped mid-way, which keeps that key to
    resume again."""
    if path is None:
        return None
    state = _load_checkpoint(path, fingerprint, label)
    if state is None:
        return None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    shuffle_gen.set_state(state["shuffle_state"])
    if randomness is not None and (problem := _refusal(state, randomness, per_step)):
        raise RuntimeError(_refused(path, problem))
    if average is not None:
        average.load_state_dict(state["average"])
    reached = _progress(state)         # as `dpmed status` tells it (`checkpoint_review`)
    _log.info("%s: continues from its checkpoint%s", label, f" at step {reached[0]} of {reached[1]}" if reached else "")
    return Ledger.from_dict(state["ledger"]), state["statistics"], state["done"]


def _refusal(state: dict, randomness: PrivacyRandomness, per_step: dict[str, int]) -> str | None:
    """Why the checkpoint ``state`` cannot continue under the run's ``randomness`` (its privacy streams restored
    there where it can): the one check of `train` and of `dpmed status` (`checkpoint_review`). ``per_step``: the raw
    words each step takes from each stream it draws from, as the run's plan sets them. The checkpoint's own (absent
    from an earlier dpmed's) must be the same: status, which has no model to count them, checks the positions against
    those, and an edit there is refused here even where status cannot see it. Damaged parts (a position or ledger
    that is not one) are a refusal too, not a KeyError that names no file."""
    if state.get("per_step", per_step) != per_step:    # no counts told: the sampling stream's is the training units'
        return "the words a step takes from its privacy streams are not this run's (edited)"
    try:
        randomness.restore(state.get("privacy_randomness", {}), needed=tuple(per_step))
        return _mixed(state, randomness, per_step)
    except ValueError as exc:          # another key's, or damaged: its draws would replace or repeat counted ones
        return str(exc)
    except (KeyError, TypeError) as exc:
        return f"it is damaged ({type(exc).__name__}: {exc})"


def _refused(path: Path, problem: str) -> str:
    """What `train` fails with, and `dpmed status` says, of the checkpoint at ``path`` that `_refusal` refuses."""
    return (f"the checkpoint {path} cannot continue this run: {problem}; delete it and the privacy key beside it to "
            "train this run afresh under a new key")


def _mixed(state: dict, randomness: PrivacyRandomness, per_step: dict[str, int]) -> str | None:
    """Why a DP-SGD checkpoint's parts do not belong to one step (its privacy streams restored in ``randomness``),
    None where they do. Every step takes ``per_step[name]`` raw words from each stream, so step ``done`` leaves
    stream ``name`` at ``done * per_step[name]`` words: a position from an earlier checkpoint of the run (its own key)
    would draw again, for the steps to come, the batches and noise of steps already taken and counted, and a ledger
    from one would count fewer steps than were taken."""
    if not per_step:        # a run without DP-SGD, or a checkpoint of an earlier dpmed that saved no words per step
        return None
    done = int(state["done"])
    for name, words in per_step.items():
        drawn, half_used = randomness.drawn(name)
        if (drawn, half_used) != (done * words, False):
            behind = drawn - half_used / 2 < done * words      # a half-drawn word is half handed out
            # no word counts: the sampling stream's is the exact number of training units, which a secure run
            # releases only as a DP count (`dpmed.released_size`)
            return (f"its privacy stream {name!r} stands {'behind' if behind else 'ahead of'} where step {done} "
                    f"leaves it{', its last word half drawn' if half_used else ''} (a position from another "
                    "checkpoint, or edited): continuing would " + (
                        "draw again batches or noise of steps already taken" if behind
                        else f"skip batches or noise that follow step {done}"))
    counted = Ledger.from_dict(state["ledger"]).dp_sgd_steps
    if counted != done:
        return (f"its ledger counts {counted} DP-SGD steps, where it was written at step {done} (a ledger from "
                "another checkpoint, or edited)")
    return None


def _read_checkpoint(path: Path, *, mmap: bool = False) -> dict:
    """The checkpoint at ``path``; RuntimeError naming it, and what to do, where it cannot be read or is none.
    FileNotFoundError where it is gone (a run that finished as `dpmed status` looked: its caller looks again)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise
    except _UNREADABLE as exc:        # an empty file's EOFError has no message: its first line would be an IndexError
        detail = str(exc).partition("\n")[0] or "the file ends before its first record"
        raise RuntimeError(f"the checkpoint {path} cannot be read ({type(exc).__name__}: {detail}); "
                           "delete it to train this run afresh") from None
    if not isinstance(state, dict):     # tensors, but not a checkpoint dpmed wrote (a file put in its place)
        raise RuntimeError(f"the checkpoint {path} holds a {type(state).__name__}, not a dpmed checkpoint; delete it "
                           "to train this run afresh")
    return state


def _progress(state: dict) -> tuple[int, int] | None:
    """(steps done, steps in all) of the training a checkpoint holds; None where it was written before checkpoints
    recorded their progress (such a one still continues its run)."""
    progress = state.get("progress")
    return None if progress is None else (int(progress["steps"]), int(progress["of"]))


def checkpoint_review(path: Path, randomness: PrivacyRandomness) -> tuple[tuple[int, int] | None, str | None]:
    """(its progress (`_progress`), why `train` would refuse to continue it) of the checkpoint at ``path`` under its
    run's ``randomness`` (the key beside it), for ``dpmed status``: the refusal is `train`'s own (`_refusal`), None
    where it continues. Read once, mapped (weights and optimiser state stay on disk), where that read succeeds; else
    whole, to tell what is wrong: a mapped read of a file cut short fails on the mapping, which would hide it.
    FileNotFoundError where it is gone. The positions are checked against the words per step the checkpoint saved
    (none in one of an earlier dpmed: its key alone is checked), so that no model is built."""
    try:
        state = _read_checkpoint(path, mmap=True)
    except RuntimeError:
        try:
            state = _read_checkpoint(path)
        except RuntimeError as exc:
            return None, str(exc)
    problem = _refusal(state, randomness, state.get("per_step", {}))
    return _progress(state), None if problem is None else _refused(path, problem)


def train(model: nn.Module, data: ImageSet, task: Task, cfg: TrainingConfig, *, seed: int,
          dp: DpSgdPlan | None = None, randomness: PrivacyRandomness | None = None,
          device: torch.device | None = None, progress: bool = True, log_progress: bool = False,
          label: str = "train", checkpoint: Path | None = None, released: tuple = (), at_once: int = 1) -> TrainResult:
    """Train ``model`` in place on ``data``; returns the privacy ledger (empty without DP) and private statistics.

    ``seed`` drives the (public) shuffling of arms without DP-SGD; DP-SGD needs ``randomness``, the run's privacy
    randomness, for its sampling and noise. With ``checkpoint`` (a path in the run's private folder), the state is
    saved there after every epoch (DP-SGD: every round(1/q) steps) and at the end; a later call with the same
    arguments and the same randomness continues from it, and ends with exactly the model and ledger of an
    uninterrupted run (METHODS.md s.3). Shuffle-mode DP-SGD (a reproduction mode) restarts from scratch instead.
    ``released``: privacy events of what was released before training (a local DP release of the training images),
    which open the ledger. ``progress`` draws a bar; ``log_progress`` logs a line now and then where no bar
    is drawn (a batch job's log, a worker process; see `_Progress`). ``at_once``: the runs that may train at the
    same time on this machine, this one included, which share the memory a model's fixed features may take
    (`precompute`).
    """
    if dp is not None and randomness is None:
        raise ValueError("DP-SGD needs the run's privacy randomness (dpmed.randomness.PrivacyRandomness)")
    device = device or torch.device("cpu")
    # Multilabel BCE weighted by training-label frequency, except under DP-SGD (the weights would be an
    # unaccounted statistic of the private labels; see objective_for).
    objective = objective_for(task.kind, train_labels=data.labels if dp is None else None)
    x_all = torch.from_numpy(np.ascontiguousarray(data.images))                      # [N, C, H, W]
    y_all = torch.as_tensor(data.labels, dtype=objective.target_dtype)               # [N] or [N, L]
    model.to(device).train()
    optimizer = _optimizer(model, cfg)
    augmenting = _augmentation(cfg, data, seed)             # (the augmentation, each image's key) or None
    average = None if cfg.ema_decay is None else ParameterAverage(model, decay=cfg.ema_decay)
    start = time.perf_counter()            # the training time counts the fixed features computed for it
    trained, x_all = (model, x_all) if augmenting is not None else precompute(     # trained: ``model`` or its tail
        model, x_all, device=device, chunk=cfg.physical_batch_size, at_once=at_once, label=label)
    features_seconds = time.perf_counter() - start if trained is not model else 0.0
    shuffle_gen = torch.Generator().manual_seed(seed)
    ledger, done = Ledger(tuple(released)), 0
    statistics: list[dict] = []
    fingerprint = _fingerprint(data, cfg, seed, dp)
    if dp is not None and dp.sampling != "poisson":
        checkpoint = None
    if dp is None:
        steps_per_epoch = max(1, math.ceil(len(data) / cfg.batch_size))   # 1 for an empty set: no batch, no step
        total = training_steps(steps_per_epoch, epochs=cfg.epochs, steps=cfg.steps)
        per_step = {}
    else:
        assert randomness is not None       # refused on entry otherwise
        noise_rng, sampler = randomness.stream("noise"), randomness.stream("sampling")
        offsets, owned = sampling_units(data, dp.unit)
        n_units = len(offsets) - 1
        total = dp.steps
        steps_per_epoch = max(1, round(1 / dp.sample_rate))
        weight = 1.0 if augmenting is None else augmenting[0].loss_weight   # 1/K per copy: a group sums to the mean
        step_fn = DpSgdStep(trained, loss_fn=lambda z, y: objective.loss(z, y, reduction="sum") * weight,
                            max_grad_norm=dp.max_grad_norm, noise_multiplier=dp.noise_multiplier,
                            expected_batch_size=(dp.expected_batch_size if dp.expected_batch_size is not None
                                                 else dp.sample_rate * n_units),
                            physical_batch_size=cfg.physical_batch_size, noise_rng=noise_rng,
                            noise=dp.noise, engine=cfg.dp_engine)
        # the raw words a step takes from each privacy stream (Poisson sampling: only where a checkpoint is kept)
        per_step = {"sampling": poisson_mask_words(n_units, dp.sample_rate), "noise": step_fn.stream_words}
    restored = _resume(checkpoint, fingerprint, model=model, optimizer=optimizer, shuffle_gen=shuffle_gen,
                       randomness=randomness, per_step=per_step, average=average, label=label)
    if restored is not None:
        ledger, statistics, done = restored

    def save(done_now: int) -> None:
        if checkpoint is not None:
            _save_checkpoint(checkpoint, fingerprint=fingerprint, done=done_now, model=model.state_dict(),
                             optimizer=optimizer.state_dict(), shuffle_state=shuffle_gen.get_state(),
                             privacy_randomness={} if randomness is None else randomness.state(),
                             ledger=ledger.to_dict(), statistics=statistics,
                             average=None if average is None else average.state_dict(),
                             progress={"steps": shown.done, "of": total}, per_step=per_step)

    def after_step() -> None:
        optimizer.step()
        if average is not None:
            average.update()

    resumed = done if dp is not None else min(done * steps_per_epoch, total)   # without DP-SGD ``done`` counts epochs
    shown = _Progress(total, resumed, label, bar=progress, log=log_progress, began=start)
    if dp is None:
        for epoch in range(done, math.ceil(total / steps_per_epoch)):      # done counts finished epochs here
            losses = []
            for i, idx in enumerate(shuffled_batches(len(data), batch_size=cfg.batch_size, generator=shuffle_gen)):
                step = epoch * steps_per_epoch + i                             # 0-based
                if step >= total or not len(idx):       # training.steps ends mid-epoch; an empty set has no batch
                    break
                check_interrupt()
                x, y = x_all[idx], y_all[idx]
                inputs: torch.Tensor | Copies = x
                if augmenting is not None:             # the mean loss over K copies: each copy weighs 1/K
                    augment, keys = augmenting
                    inputs, y, _ = augment.expand(x, y, keys[idx.numpy()], step)
                optimizer.zero_grad(set_to_none=True)
                losses.append(_mean_loss_backward(trained, objective, inputs, y, cfg.physical_batch_size, device))
                set_learning_rate(optimizer, cfg, step, total)
                after_step()
                shown.step()
            statistics.append({"epoch": epoch + 1, "training_loss": float(np.mean(losses)) if losses else None})
            save(epoch + 1)
    else:
        remaining = dp.steps - done                   # done counts finished steps here
        batches = (poisson_batches(n_units, sample_rate=dp.sample_rate, steps=remaining, rng=sampler)
                   if dp.sampling == "poisson" else
                   fixed_size_batches(n_units, batch_size=max(1, round(dp.sample_rate * n_units)), steps=remaining,
                                      rng=sampler))
        for step, units in enumerate(batches, start=done + 1):
            check_interrupt()
            images, groups = _expand(units, offsets, owned)
            x, y = x_all[images], y_all[images]
            inputs = x
            unit_ids = torch.from_numpy(groups) if dp.unit == "patient" else None     # image unit: no grouping
            if augmenting is not None:         # K copies of each image join its unit's clipping group
                augment, keys = augmenting
                inputs, y, unit_ids = augment.expand(x, y, keys[images], step, unit_ids)
            optimizer.zero_grad(set_to_none=True)
            step_fn(inputs.to(device), y.to(device), groups=None if unit_ids is None else unit_ids.to(device))
            set_learning_rate(optimizer, cfg, step - 1, dp.steps)
            after_step()
            record = dp_sgd_event if dp.sampling == "poisson" else shuffled_event    # what ran, as it ran
            ledger = ledger.record(record(noise=dp.noise, noise_multiplier=dp.noise_multiplier,
                                          sample_rate=dp.sample_rate, steps=1))
            shown.step()
            if step % steps_per_epoch == 0 or step == dp.steps:
                save(step)
    shown.close()
    if average is not None:                    # the released (and evaluated) model is the average of the iterates
        average.copy_to(model)
    return TrainResult(ledger=ledger, statistics=statistics, seconds=time.perf_counter() - start, resumed_from=resumed,
                       features_seconds=features_seconds)
