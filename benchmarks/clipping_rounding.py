"""How far float32 rounds the norm of a patient's summed gradient when the patient's images' gradients cancel: the
figure behind the rounding slack of `dpmed.training.clipping` (GROUP_ROUNDING_SLACK).

One patient holds a film twice, labelled 0 and 1, with the model's two logits 1e-4 apart on it (so the two gradients
nearly cancel), and a third film. The engine's squared norm of the patient's sum, with the slack set to 0, is
compared with the float64 truth; the error is reported relative to (sum_i ||g_i||)^2, the scale the slack is a
multiple of. Worst over seeds, for each of the engine's routes.

    python benchmarks/clipping_rounding.py [--models small_cnn:64:1,resnet9:64:1,resnet18:64:3,resnet18:28:1]
                                           [--seeds 4]
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F

import dpmed.training.clipping as clipping
from dpmed.models import build_model


def _loss(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def worst_rounding(name: str, size: int, channels: int, seeds: int) -> dict[str, float]:
    """{route: the largest |computed - true| squared norm over (sum_i ||g_i||)^2} over ``seeds`` patients."""
    seen = {}
    factors = clipping.clip_factors

    def spy(norms, clip):
        seen["norms"] = norms.detach().clone()
        return factors(norms, clip)

    worst = dict.fromkeys(clipping.ROUTES, 0.0)
    slack, clipping.GROUP_ROUNDING_SLACK, clipping.clip_factors = clipping.GROUP_ROUNDING_SLACK, 0.0, spy
    try:
        for seed in range(seeds):
            torch.manual_seed(seed)
            model = build_model(name, in_channels=channels, num_outputs=2, image_size=size)
            film = torch.rand(1, channels, size, size)
            head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
            with torch.no_grad():
                z = model(film)[0]
                head.bias[0] += z[1] - z[0] + 1e-4
            x = torch.cat([film, film, torch.rand(1, channels, size, size)])          # [3, C, H, W], one patient
            y, groups = torch.tensor([0, 1, 0]), torch.tensor([3, 3, 3])
            exact = copy.deepcopy(model).double()
            grads = [torch.cat([t.flatten() for t in torch.autograd.grad(
                _loss(exact(x[i:i + 1].double()), y[i:i + 1]), list(exact.parameters()))]) for i in range(3)]
            true_sq = sum(grads).norm().item() ** 2
            scale = sum(g.norm().item() for g in grads) ** 2
            for route in clipping.ROUTES:
                clipping.GhostClipper(model, route=route).clipped_sum(x, y, loss_fn=_loss, max_grad_norm=1.0,
                                                                      groups=groups)
                got = seen["norms"].double()[0].item() ** 2
                worst[route] = max(worst[route], abs(got - true_sq) / scale)
    finally:
        clipping.GROUP_ROUNDING_SLACK, clipping.clip_factors = slack, factors
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="small_cnn:64:1,resnet9:64:1,resnet18:64:3,resnet18:28:1",
                   help="MODEL:SIZE:CHANNELS, comma-separated")
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args(argv)
    slack = clipping.GROUP_ROUNDING_SLACK * torch.finfo(torch.float32).eps
    print(f"| model | input | {' | '.join(clipping.ROUTES)} | slack / worst |")
    print("|---|---|" + "---:|" * (len(clipping.ROUTES) + 1))
    for spec in args.models.split(","):
        name, size, channels = spec.split(":")
        worst = worst_rounding(name, int(size), int(channels), args.seeds)
        print(f"| {name} | {size}x{channels} | " + " | ".join(f"{worst[r]:.2g}" for r in clipping.ROUTES)
              + f" | {slack / max(worst.values()):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
