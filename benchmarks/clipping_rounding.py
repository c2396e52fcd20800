"""How far float32 rounds the norm of a patient's summed gradient when the patient's images' gradients cancel: the
figure behind the rounding slack of `dpmed.training.clipping` (GROUP_ROUNDING_SLACK).

One patient holds a film twice, labelled 0 and 1, with the model's two logits 1e-4 apart on it in the batch's forward
(so the two gradients nearly cancel), and a third film. The engine's squared norm of the patient's sum, with the
slack set to 0, is compared with the float64 norm of the sum of the patient's exact per-image gradients, computed
from the very float32 layer inputs and output gradients the engine saw (`ghost_rounding.engine_and_exact`): the
forward's and backward's own rounding is left out, so a row measures what the slack must cover. The error is
reported relative to (sum_i ||g_i||)^2, the scale the slack is a multiple of. Worst over seeds, for each of the
engine's routes. (Until 2026-12-07 the truth was a float64 model's gradient of each image alone, which also
measured how far the batch's float32 forward moved the 1e-4 margin.)

    python benchmarks/clipping_rounding.py [--models small_cnn:64:1,resnet9:64:1,resnet18:64:3,resnet18:28:1]
                                           [--seeds 4] [--routes mixed,ghost,materialised]

--routes leaves routes out (their columns read "not run"): the ghost route forced onto ResNet-18's 7x7 stem at
224 px takes the Gram matrix of the padded input's 230^2 pixels, 21 GiB in float64 for one image.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import dpmed.training.clipping as clipping
from dpmed.models import build_model
from ghost_rounding import engine_and_exact     # benchmarks/ is on the path of a script run from it


def _loss(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def worst_rounding(name: str, size: int, channels: int, seeds: int,
                   routes: tuple[str, ...] = clipping.ROUTES) -> dict[str, float]:
    """{route: the largest |computed - true| squared norm over (sum_i ||g_i||)^2} over ``seeds`` patients."""
    worst = dict.fromkeys(routes, 0.0)
    slack, clipping.GROUP_ROUNDING_SLACK = clipping.GROUP_ROUNDING_SLACK, 0.0
    try:
        for seed in range(seeds):
            torch.manual_seed(seed)
            model = build_model(name, in_channels=channels, num_outputs=2, image_size=size)
            film = torch.rand(1, channels, size, size)
            x = torch.cat([film, film, torch.rand(1, channels, size, size)])          # [3, C, H, W], one patient
            y, groups = torch.tensor([0, 1, 0]), torch.tensor([3, 3, 3])
            head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
            with torch.no_grad():
                z = model(x)[0]                                                       # the engine's batch
                head.bias[0] += z[1] - z[0] + 1e-4
            for route in routes:
                norms, exact, own = engine_and_exact(model, x, y, loss_fn=_loss, route=route, groups=groups)
                err = abs(norms[0].item() ** 2 - exact[0].item() ** 2) / own.sum().item() ** 2
                worst[route] = max(worst[route], err)
    finally:
        clipping.GROUP_ROUNDING_SLACK = slack
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="small_cnn:64:1,resnet9:64:1,resnet18:64:3,resnet18:28:1",
                   help="MODEL:SIZE:CHANNELS, comma-separated")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--routes", default=",".join(clipping.ROUTES), help="the engine's routes, comma-separated")
    args = p.parse_args(argv)
    routes = tuple(args.routes.split(","))
    if not set(routes) <= set(clipping.ROUTES):
        p.error(f"--routes takes some of {','.join(clipping.ROUTES)}, got {args.routes!r}")
    slack = clipping.GROUP_ROUNDING_SLACK * torch.finfo(torch.float32).eps
    print(f"| model | input | {' | '.join(clipping.ROUTES)} | slack / worst |")
    print("|---|---|" + "---:|" * (len(clipping.ROUTES) + 1))
    for spec in args.models.split(","):
        name, size, channels = spec.split(":")
        worst = worst_rounding(name, int(size), int(channels), args.seeds, routes)
        print(f"| {name} | {size}x{channels} | "
              + " | ".join(f"{worst[r]:.2g}" if r in worst else "not run" for r in clipping.ROUTES)
              + f" | {slack / max(worst.values()):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
