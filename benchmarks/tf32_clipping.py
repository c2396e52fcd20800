"""How far one unit's clipped contribution passes C on a GPU when cuDNN's convolutions run in TF32: the figure
behind `dpmed.training.clipping._without_tf32`, which keeps the engine's norms and sums in full float32.

For each unit j of a batch (an example, or with ``--images-per-patient K`` a patient of K examples), the engine's
clip factors are kept for j alone and zeroed for the others, so the clipped sum the batch's own kernels compute is
unit j's contribution c_j g_j; its norm, in float64, is compared with C (set far below every norm, so every unit is
clipped and each contribution should have norm C). Reported: the smallest and the largest norm / C - 1 over the
batch, with TF32 as the engine sets it (off) and with the engine's guard removed (cuDNN's default, on). On a CPU
both are full float32.

    python benchmarks/tf32_clipping.py [--models resnet18:64:3,resnet9:64:3,small_cnn:64:1] [--batch 32]
                                       [--images-per-patient K]
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.nn.functional as F

import dpmed.training.clipping as clipping
from dpmed.models import build_model


def _loss(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def excess(name: str, size: int, channels: int, batch: int, k: int, device: str, tf32: bool) -> tuple[float, float]:
    """(min, max) over units j of ||c_j g_j|| / C - 1 for a batch of random images in patients of k, each unit's
    contribution taken from the batch's own clipped sum."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(name, in_channels=channels, num_outputs=2, image_size=size).to(device).train()
        x = torch.randn(batch, channels, size, size).to(device)
        y = torch.randint(0, 2, (batch,)).to(device)
    groups = None if k == 1 else (torch.arange(batch) // k).to(device)
    clip, factors, guard = 1e-3, clipping.clip_factors, clipping._without_tf32
    keep = {}

    def one(norms, c):
        f = factors(norms, c)
        return torch.where(torch.arange(len(f), device=f.device) == keep["j"], f, torch.zeros_like(f))

    torch.backends.cudnn.allow_tf32 = True        # torch's default: what a caller who never set it has
    clipping.clip_factors = one
    if tf32:
        clipping._without_tf32 = contextlib.nullcontext
    try:
        engine, seen = clipping.GhostClipper(model), []
        for j in range(batch // k):
            keep["j"] = j
            parts = engine.clipped_sum(x, y, loss_fn=_loss, max_grad_norm=clip, groups=groups)
            seen.append(torch.cat([t.flatten().double() for t in parts]).norm().item() / clip - 1)
        return min(seen), max(seen)
    finally:
        clipping.clip_factors, clipping._without_tf32 = factors, guard


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18:64:3,resnet9:64:3,small_cnn:64:1", help="NAME:SIZE:CHANNELS, ...")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--images-per-patient", type=int, default=1)
    args = p.parse_args(argv)
    k = args.images_per_patient
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device: {torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}, torch {torch.__version__}")
    print("| model | input | batch | images per unit | norm / C - 1, TF32 off (the engine) | the same, TF32 on |")
    print("|---|---|---:|---:|---|---|")
    for spec in args.models.split(","):
        name, size, channels = spec.split(":")
        off, on = (excess(name, int(size), int(channels), args.batch, k, device, tf32) for tf32 in (False, True))
        print(f"| {name} | {size}x{size}x{channels} | {args.batch} | {k} | {off[0]:.1e} to {off[1]:.1e} | "
              f"{on[0]:.1e} to {on[1]:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
