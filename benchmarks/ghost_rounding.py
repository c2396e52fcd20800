"""How far the clipping engine's norms round where an example's gradient cancels across positions: the figures of
benchmarks/RESULTS.md, "A ghost norm's rounding".

A ghost norm, sum_{t,s} (a_t . a_s)(g_t . g_s), sums position pairs whose terms cancel where the example's gradient
does, so its float32 rounding grows with (sum_t ||a_t|| ||g_t||)^2, not with the norm. Each case runs the engine
once and reads the (a, g) every layer saw; the truth is the float64 norm of each example's exact gradient computed
from those very float32 (a, g), so what the forward and backward rounded is left out and only the engine's rounding
is measured. A row is the largest c_i ||g_i|| / C - 1 over the examples, c_i the engine's clip factor at C = a tenth
of the smallest exact norm (every example clipped): above 0, an example passed C. "before" replaces
`clipping._wide` with the identity, the float32 ghost norms the engine took until 16677c6.

    python benchmarks/ghost_rounding.py [--cases conv,linear,resnet18-ghost,...] [--scale 1]

--scale divides the channels, positions and image sizes (a quick run: --scale 8).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import dpmed.training.clipping as clipping
from dpmed.models import build_model
from dpmed.models.standardized import WSConv2d


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


def _dot(z, u):
    """A loss whose gradient with respect to the layer's output is u itself: the case fixes g."""
    return (z * u).sum()


@contextlib.contextmanager
def _watched(seen: dict) -> Iterator[None]:
    """The engine as it is, with the (a, g) of every layer call kept in ``seen["calls"]`` and the norms it clips by
    in ``seen["norms"]``."""
    on_grad, factors = clipping._Tape._on_output_grad, clipping.clip_factors

    def on_output_grad(tape, call, g):
        seen["calls"].append((tape.layers[call.layer], call.a, g))
        return on_grad(tape, call, g)

    def spy(norms, clip):
        seen["norms"] = norms.detach().double().clone()
        return factors(norms, clip)

    clipping._Tape._on_output_grad, clipping.clip_factors = on_output_grad, spy
    try:
        yield
    finally:
        clipping._Tape._on_output_grad, clipping.clip_factors = on_grad, factors


def _exact_gradients(layer, a: Tensor, g: Tensor) -> Tensor:
    """[B, p] float64: each example's gradient of this layer's trainable parameters from one call's float32 (a, g),
    by autograd of a float64 copy of the layer, one example at a time (no layer rule involved)."""
    wide = copy.deepcopy(layer.module).double()
    params = [p for n, p in wide.named_parameters(recurse=False) if n in layer.names]
    rows = []
    for i in range(len(g)):
        x = a[i:i + 1].double() if a.is_floating_point() else a[i:i + 1]
        out = (wide(x) * g[i:i + 1].double()).sum()
        rows.append(torch.cat([t.flatten() for t in torch.autograd.grad(out, params)]))
    return torch.stack(rows)


def engine_and_exact(model: nn.Module, x: Tensor, y: Tensor, *, loss_fn: Callable, route: str,
                     groups: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(the engine's norms, the exact norms of the same units, each example's exact norm), float64 ([U], [U], [B]):
    one ``clipped_sum`` of the engine, its units the examples or, with ``groups``, their groups; the exact norms from
    the float32 (a, g) that engine call saw (`_exact_gradients`), summed per unit in float64."""
    seen = {"calls": []}
    with _watched(seen):
        clipping.GhostClipper(model, route=route).clipped_sum(x, y, loss_fn=loss_fn, max_grad_norm=1.0, groups=groups)
    per_layer: dict[int, Tensor] = {}
    for layer, a, g in seen["calls"]:                   # a layer called several times: its calls' gradients add up
        grads = _exact_gradients(layer, a, g)
        key = id(layer.module)
        per_layer[key] = per_layer[key] + grads if key in per_layer else grads
    if groups is None:
        index, units = torch.arange(len(x)), len(x)
    else:
        _, index = torch.unique(groups, return_inverse=True)
        units = int(index.max()) + 1
    own = torch.zeros(len(x), dtype=torch.float64)
    unit = torch.zeros(units, dtype=torch.float64)
    for grads in per_layer.values():
        own += grads.square().sum(1)
        unit += grads.new_zeros(units, grads.shape[1]).index_add_(0, index, grads).square().sum(1)
    return seen["norms"], unit.sqrt(), own.sqrt()


def worst_overshoot(model: nn.Module, x: Tensor, y: Tensor, *, loss_fn: Callable, route: str) -> float:
    """max_i c_i ||g_i|| / C - 1, c_i the engine's clip factor at C = a tenth of the smallest exact norm."""
    norms, exact, _ = engine_and_exact(model, x, y, loss_fn=loss_fn, route=route)
    clip = exact.min().item() / 10
    return (clipping.clip_factors(norms, clip) * exact / clip).max().item() - 1


@contextlib.contextmanager
def float32_ghost_norms() -> Iterator[None]:
    """The engine with `clipping._wide` the identity: ghost norms in the layers' float32, as before 16677c6."""
    wide, clipping._wide = clipping._wide, lambda t: t
    try:
        yield
    finally:
        clipping._wide = wide


def _cancelling_conv(g: torch.Generator, scale: int, layer: type = nn.Conv2d):
    """A 3x3 convolution of 512 channels at 7 x 7 (ResNet-18's last stage), fed an input constant across positions
    plus 1e-3 noise, and an output gradient that sums to zero over the inner positions."""
    c = 512 // scale
    x = torch.randn(3, c, 1, 1, generator=g) + 1e-3 * torch.randn(3, c, 7, 7, generator=g)
    inner = torch.randn(3, c, 5, 5, generator=g)
    upstream = F.pad(inner - inner.mean((2, 3), keepdim=True), (1, 1, 1, 1))
    return layer(c, c, 3, padding=1, bias=False), x, upstream, _dot


def _cancelling_linear(g: torch.Generator, scale: int):
    """A Linear 64 -> 64 on [B, 1024, 64] whose output gradient lies in the null space of its input (over the
    positions) plus 1e-3: sum_t g_t a_t^T cancels (no bias: sum_t g_t does not)."""
    t = 1024 // scale
    x = torch.randn(3, t, 64, generator=g)
    r = torch.randn(3, t, 64, generator=g)
    q, _ = torch.linalg.qr(x.double())                                              # [3, t, 64]
    upstream = (r.double() - q @ (q.transpose(1, 2) @ r.double())).float() + 1e-3 * torch.randn(3, t, 64, generator=g)
    return nn.Linear(64, 64, bias=False), x, upstream, _dot


def _resnet18(images: Callable[[torch.Generator, int], Tensor]) -> Callable:
    def case(g: torch.Generator, scale: int):
        size = max(64 // scale, 16)
        model = build_model("resnet18", in_channels=3, num_outputs=2, image_size=size, seed=0)
        return model, images(g, size), torch.tensor([0, 1, 0, 1]), _ce
    return case


def _cancelling_embedding(g: torch.Generator, scale: int):
    """One index at all 512 positions, whose output gradients sum to 1e-4 of one position's."""
    t = 512 // scale
    upstream = torch.randn(3, t, 256, generator=g)
    upstream = upstream - upstream.mean(1, keepdim=True) + 1e-4 * torch.randn(3, 1, 256, generator=g)
    return nn.Embedding(10, 256), torch.zeros(3, t, dtype=torch.long), upstream, _dot


def _one_position(g: torch.Generator, scale: int):
    """Linear 4096 -> 4096 at one position: ||a||^2 ||g||^2, nothing cancels."""
    d = 4096 // scale
    return nn.Linear(d, d, bias=False), torch.randn(3, d, generator=g), torch.randn(3, d, generator=g), _dot


def _near_constant(g, size):
    return 1 + 1e-3 * torch.randn(4, 3, size, size, generator=g)


# name: (what the row says, the case, the route)
CASES = {
    "conv": ("Conv2d 512->512 3x3 at 7x7, positions cancelling to 1e-3 (mixed route = ghost)", _cancelling_conv,
             "mixed"),
    "linear": ("Linear 64->64 on [B, 1024, 64], output gradient in the input's null space + 1e-3, ghost route",
               _cancelling_linear, "ghost"),
    "resnet18-ghost": ("resnet18 64x64x3, images 1 + 1e-3 noise, ghost route on every layer",
                       _resnet18(_near_constant), "ghost"),
    "resnet18-random": ("resnet18 64x64x3, random images, mixed route",
                        _resnet18(lambda g, s: torch.rand(4, 3, s, s, generator=g)), "mixed"),
    "resnet18-zero": ("resnet18 64x64x3, zero images, mixed route", _resnet18(lambda g, s: torch.zeros(4, 3, s, s)),
                      "mixed"),
    "resnet18-constant": ("resnet18 64x64x3, images 1 + 1e-3 noise, mixed route", _resnet18(_near_constant), "mixed"),
    "one-position": ("Linear 4096->4096, one position (nothing cancels), ghost route", _one_position, "ghost"),
    "wsconv": ("WSConv2d 512->512 3x3 at 7x7, the conv case, ghost route",
               lambda g, s: _cancelling_conv(g, s, WSConv2d), "ghost"),
    "embedding": ("Embedding, one index at 512 positions summing to 1e-4 of one, ghost route", _cancelling_embedding,
                  "ghost"),
}


def measure(name: str, scale: int = 1, seed: int = 5) -> tuple[float, float]:
    """(before, after): the case's worst c_i ||g_i|| / C - 1 with float32 ghost norms, then with the engine's."""
    _, case, route = CASES[name]
    torch.manual_seed(seed)                                                 # the layer's initialisation
    model, x, y, loss_fn = case(torch.Generator().manual_seed(seed), scale)
    with float32_ghost_norms():
        before = worst_overshoot(model, x, y, loss_fn=loss_fn, route=route)
    return before, worst_overshoot(model, x, y, loss_fn=loss_fn, route=route)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--scale", type=int, default=1, help="divide channels, positions and image sizes by this")
    args = p.parse_args(argv)
    print("| case | before (float32 ghost norms) | after (the engine's) |")
    print("|---|---:|---:|")
    for name in args.cases.split(","):
        before, after = measure(name, args.scale)
        print(f"| {CASES[name][0]} | {before:+.2g} | {after:+.2g} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
