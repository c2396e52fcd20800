"""How far one unit's clipped contribution passes C on a GPU when cuDNN's convolutions run in TF32: the figure
behind `dpmed.training.clipping._without_tf32`, which keeps the engine's norms and sums in full float32.

For each example j of a batch, the engine's clip factors are kept for j alone and zeroed for the others, so the
clipped sum the batch's own kernels compute is example j's contribution c_j g_j; its norm, in float64, is compared
with C (set far below every norm, so every example is clipped and each contribution should have norm C). Reported:
the largest norm / C - 1 over the batch, with TF32 as the engine sets it (off) and with the engine's guard removed
(cuDNN's default, on). On a CPU both rows are full float32.

    python benchmarks/tf32_clipping.py [--models resnet18:64:3,resnet9:64:3,small_cnn:64:1] [--batch 32]
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


def worst_excess(name: str, size: int, channels: int, batch: int, device: str, tf32: bool) -> float:
    """max_j ||c_j g_j|| / C - 1 over a batch of random images, each contribution taken from the batch's sum."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(name, in_channels=channels, num_outputs=2, image_size=size).to(device).train()
        x = torch.randn(batch, channels, size, size).to(device)
        y = torch.randint(0, 2, (batch,)).to(device)
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
        engine, worst = clipping.GhostClipper(model), -1.0
        for j in range(batch):
            keep["j"] = j
            parts = engine.clipped_sum(x, y, loss_fn=_loss, max_grad_norm=clip)
            norm = torch.cat([t.flatten().double() for t in parts]).norm().item()
            worst = max(worst, norm / clip - 1)
        return worst
    finally:
        clipping.clip_factors, clipping._without_tf32 = factors, guard


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18:64:3,resnet9:64:3,small_cnn:64:1", help="NAME:SIZE:CHANNELS, ...")
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device: {torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}, torch {torch.__version__}")
    print("| model | input | batch | largest norm / C - 1, TF32 off (the engine) | the same, TF32 on |")
    print("|---|---|---:|---:|---:|")
    for spec in args.models.split(","):
        name, size, channels = spec.split(":")
        off, on = (worst_excess(name, int(size), int(channels), args.batch, device, tf32) for tf32 in (False, True))
        print(f"| {name} | {size}x{size}x{channels} | {args.batch} | {off:.1e} | {on:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
