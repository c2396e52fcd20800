"""What computing ScatterNet's scattering of the training set once (`dpmed.training.fixed_features`) gains over
transforming every batch, on the shipped PneumoniaMNIST recipe (configs/pneumoniamnist.yaml: scatternet_cnn, batch 128,
physical batch 256, Adam, EMA 0.999, cosine schedule), without privacy and with DP-SGD (sigma 1, C = 1, q = 128 / N),
on one thread.

"per batch" trains as dpmed did before: the training loop's ``precompute`` replaced by the identity, which is the
parent commit's code path. "once" trains as dpmed does now. The two alternate, ``--repeats`` times each, so that a
machine whose load changes favours neither. Each row: seconds per step after the features, and the seconds of the
features themselves (once per run; none per batch).

    python benchmarks/fixed_features.py --data ../shared/data/pneumoniamnist/pneumoniamnist.npz [--steps 40]
                                        [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from dpmed.config import TrainingConfig
from dpmed.data import ImageSet, Task
from dpmed.models.scatternet import scatternet_cnn
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdPlan, fixed_features, loop, train


def _training_set(path: str) -> ImageSet:
    """The MedMNIST file's training split as [0, 1] float32 images, one patient per image."""
    if not Path(path).is_file():
        raise SystemExit(f"--data {path}: no such file; pass PneumoniaMNIST's pneumoniamnist.npz")
    with np.load(path) as npz:
        images = npz["train_images"][:, None].astype(np.float32) / 255
        labels = npz["train_labels"][:, 0].astype(np.int64)
    n = len(images)
    return ImageSet(images=images, labels=labels, patient_ids=np.array([f"p{i}" for i in range(n)]),
                    sex=np.full(n, "unknown"), age=np.full(n, np.nan))


def time_run(data: ImageSet, *, dp_sgd: bool, once: bool, steps: int) -> tuple[float, float]:
    """(seconds per training step, seconds of the features) of ``steps`` steps of the recipe."""
    spent = {"features": 0.0}

    def precompute(model, x_all, **kwargs):
        if not once:
            return model, x_all
        start = time.perf_counter()
        out = fixed_features.precompute(model, x_all, **kwargs)
        spent["features"] = time.perf_counter() - start
        return out

    cfg = TrainingConfig(steps=steps, batch_size=128, physical_batch_size=256, optimizer="adam",
                         learning_rate=0.002 if dp_sgd else 0.001, ema_decay=0.999,
                         lr_schedule={"kind": "cosine", "warmup_fraction": 0.05})
    dp = (DpSgdPlan(noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=128 / len(data), steps=steps)
          if dp_sgd else None)
    task = Task(kind="binary", label_names=("normal", "pneumonia"))
    torch.manual_seed(0)
    model = scatternet_cnn(1, 2, data.images.shape[-1])
    real, loop.precompute = loop.precompute, precompute
    try:
        seconds = train(model, data, task, cfg, seed=0, dp=dp, progress=False,
                        randomness=PrivacyRandomness.reproducible(seed=0, run_id="benchmark")).seconds
    finally:
        loop.precompute = real
    return (seconds - spent["features"]) / steps, spent["features"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="pneumoniamnist.npz")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = _training_set(args.data)
    print(f"{len(data)} training images, {args.steps} steps a run, one thread; load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.repeats):
        for kind in ("non-private", "DP-SGD"):
            for how in ("per batch", "once"):
                rows.setdefault((kind, how), []).append(
                    time_run(data, dp_sgd=kind == "DP-SGD", once=how == "once", steps=args.steps))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print("| training | scattering | s/step median (range) | steps/s median | features s median (range) |")
    print("|---|---|---|---|---|")
    for (kind, how), got in rows.items():
        per_step, features = [g[0] for g in got], [g[1] for g in got]
        print(f"| {kind} | {how} | {statistics.median(per_step):.3f} ({min(per_step):.3f}-{max(per_step):.3f}) | "
              f"{1 / statistics.median(per_step):.2f} | {statistics.median(features):.1f} "
              f"({min(features):.1f}-{max(features):.1f}) |")


if __name__ == "__main__":
    main()
