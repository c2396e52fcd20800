"""Whether the mixed route still picks the faster norm per layer now that ghost norms are float64: the figures of
benchmarks/RESULTS.md, "The mixed route after float64 ghost norms".

`dpmed.training.clipping` takes each layer's per-example squared norms by a ghost norm (float64 Gram matrices,
`clipping._wide`) or by materialising the per-example gradients, and the mixed route picks per layer by the rules'
cost models, written when ghost norms were float32. For each model and input, one clipped sum on the mixed route
priced as before (ghost multiply-adds as float32 ones) records the (a, g) of every layer it took ghost; each such
layer's two norms are then timed alone, alternating, in this process: the ghost norm as the engine takes it (widen,
then ``sq_norms``) against the materialised one (``per_example`` and its sum of squares; both routes then book-keep
the same clipped sum from (a, g), so the norm is the whole difference); "now" is the route the mixed route takes at
float64's price. Then whole clipped sums (forward, backward, norms, book-kept sum) on the mixed route, the mixed
route priced as before, and the ghost and materialised routes, in turn. Medians; run with OMP_NUM_THREADS=1 and
say the load.

    python benchmarks/ghost_route_cost.py [--cases resnet18:64,resnet18:128,small_cnn:64,resnet9:64] [--batch 32]
                                          [--repeats 5] [--steps 3] [--routes mixed,mixed-f32,ghost,materialised]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from typing import Iterator

import torch
import torch.nn.functional as F

import dpmed.training.clipping as clipping
from dpmed.models import build_model


def _ce(z, y):
    return F.cross_entropy(z, y, reduction="sum")


@contextlib.contextmanager
def _float32_priced() -> Iterator[None]:
    """The mixed route as it chose before it priced ghost multiply-adds as float64 ones (`clipping._wide_cost`)."""
    wide_cost = clipping._wide_cost
    clipping._wide_cost = lambda device: 1.0
    try:
        yield
    finally:
        clipping._wide_cost = wide_cost


def _ghost_calls(model, x, y) -> list:
    """[(layer, a, g, ghost cost, materialised cost)] of every call the mixed route took ghost when it priced ghost
    multiply-adds as float32 ones (a superset of those it takes now)."""
    seen, use_ghost = [], clipping._Tape._use_ghost

    def spy(tape, index, ghost, a, g):
        taken = use_ghost(tape, index, ghost, a, g)
        if taken:
            layer = tape.layers[index]
            seen.append((layer, a, g, ghost.cost(a, g), layer.rule.materialised_cost(a, g)))
        return taken

    clipping._Tape._use_ghost = spy
    try:
        with _float32_priced():
            clipping.GhostClipper(model).clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1.0)
    finally:
        clipping._Tape._use_ghost = use_ghost
    return seen


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _layer_rows(calls: list, repeats: int) -> list[dict]:
    rows = []
    for layer, a, g, ghost_cost, mat_cost in calls:
        rule, names = layer.rule, layer.names

        def ghost():
            rule.ghost.sq_norms(clipping._wide(a), clipping._wide(g), names)

        def ghost32():
            rule.ghost.sq_norms(a, g, names)

        def materialised():
            per_example = rule.per_example(a, g, names)
            sum(t.reshape(len(g), -1).square().sum(1) for t in per_example.values())

        times = {"ghost": [], "ghost32": [], "materialised": []}
        for fn in (ghost, ghost32, materialised):                               # warm-up
            fn()
        for _ in range(repeats):
            for name, fn in (("ghost", ghost), ("materialised", materialised), ("ghost32", ghost32)):
                times[name].append(_timed(fn))
        rows.append({"layer": layer.name, "a": tuple(a.shape), "g": tuple(g.shape),
                     "cost ratio": mat_cost / ghost_cost,
                     **{k: statistics.median(v) for k, v in times.items()}})
    return rows


def _step_rows(model, x, y, steps: int, routes: list[str]) -> dict:
    """{route: median seconds of a whole clipped sum}; "mixed-f32" is the mixed route priced as before."""
    times = {route: [] for route in routes}
    for _ in range(steps + 1):                                                  # the first round is a warm-up
        for route in routes:
            clipper = clipping.GhostClipper(model, route=route.removesuffix("-f32"))
            with _float32_priced() if route.endswith("-f32") else contextlib.nullcontext():
                times[route].append(_timed(lambda: clipper.clipped_sum(x, y, loss_fn=_ce, max_grad_norm=1.0)))
    return {route: statistics.median(t[1:]) for route, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="resnet18:64,resnet18:128,small_cnn:64,resnet9:64")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--routes", default="mixed,mixed-f32,ghost,materialised",
                        help="the routes of the whole clipped sums, mixed-f32: the mixed route priced as before "
                             "(ghost everywhere takes minutes at 64 px)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}")
    wide = clipping._wide_cost(torch.device("cpu"))
    for case in args.cases.split(","):
        name, size = case.split(":")
        gen = torch.Generator().manual_seed(5)
        model = build_model(name, in_channels=3, num_outputs=2, image_size=int(size), seed=5)
        x = torch.rand(args.batch, 3, int(size), int(size), generator=gen)
        y = torch.randint(0, 2, (args.batch,), generator=gen)
        print(f"\n## {name} {size}x3, batch {args.batch}")
        print("| layer | a | g | materialised / ghost multiply-adds | now | ghost f64 | materialised | ghost f32 |")
        print("|---|---|---|---:|---|---:|---:|---:|")
        for r in _layer_rows(_ghost_calls(model, x, y), args.repeats):
            print(f"| {r['layer']} | {'x'.join(map(str, r['a'][1:]))} | {'x'.join(map(str, r['g'][1:]))} "
                  f"| {r['cost ratio']:.1f} | {'ghost' if r['cost ratio'] > wide else 'materialised'} "
                  f"| {r['ghost'] * 1e3:.1f} ms | {r['materialised'] * 1e3:.1f} ms "
                  f"| {r['ghost32'] * 1e3:.1f} ms |")
        steps = _step_rows(model, x, y, args.steps, args.routes.split(","))
        print("clipped sum: " + ", ".join(f"{route} {t:.2f} s" for route, t in steps.items())
              + f" (load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
