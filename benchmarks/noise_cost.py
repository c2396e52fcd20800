"""Where the DP step's secret noise costs time on the host, by the wall clock: the draws alone, and their effect on
the thread that launches the clipped sum.

    python benchmarks/noise_cost.py [--device cuda] [--model resnet18] [--size 64x3] [--batch 64] [--steps 10]
                                    [--threads 1,2,4,8,12,16] [--out noise-cost.json]

On a GPU the DP step is bound by the host (benchmarks/RESULTS.md, "On a GPU"): the time torch takes to launch the
clipped sum's operators, not the kernels, sets its length. A profile of device time does not show what the noise
threads (`dpmed.training.noise`) take from that launch, so this times the phases of the step by the wall clock, with
a synchronisation between them:

* ``draw``: filling the model's noise vector (float64 Gaussians from fresh AES-CTR blocks) on N threads, nothing else
  running;
* for each N, and for the draws made after the launch instead of during it: ``launch`` (the clipped sum's call
  returns), ``wait`` (the draws still running after it), ``busy`` (the device still working after both),
  ``copy_add`` (the noise to the device and added in float64). Each is the median over the timed steps.

This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _median_ms(values: list[float]) -> float:
    return round(1e3 * statistics.median(values), 2)


def measure(device: str, model_name: str, size: str, batch: int, steps: int, threads: list[int]) -> dict:
    import torch
    import torch.nn.functional as F

    from dpmed.models import build_model
    from dpmed.randomness import PrivacyRandomness
    from dpmed.training import DpSgdStep
    from dpmed.training.noise import NoiseBuffer, block_keys, fill_noise

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    pixels, channels = (int(v) for v in size.split("x"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(model_name, in_channels=channels, num_outputs=2, image_size=pixels).to(device).train()
        x = torch.rand(batch, channels, pixels, pixels, device=device)
        y = torch.randint(0, 2, (batch,), device=device)
    step = DpSgdStep(model, loss_fn=lambda z, t: F.cross_entropy(z, t, reduction="sum"), max_grad_norm=1.0,
                     noise_multiplier=1.0, expected_batch_size=float(batch), physical_batch_size=batch,
                     noise_rng=PrivacyRandomness.secure().stream("noise"))
    rng = step.noise_rng
    coordinates = sum(p.numel() for p in step.params)
    flat = torch.empty(coordinates, dtype=torch.float64, pin_memory=device == "cuda")
    buffer = NoiseBuffer(flat.numpy())

    def draw(pool: ThreadPoolExecutor) -> list:
        return fill_noise(buffer, block_keys(rng, coordinates), pool, kind="gaussian", four_halved=False)

    drawing = {}
    for n in threads:
        times = []
        with ThreadPoolExecutor(max_workers=n) as pool:
            for _ in range(steps):
                t0 = time.perf_counter()
                for f in draw(pool):
                    f.result()
                times.append(time.perf_counter() - t0)
        drawing[str(n)] = _median_ms(times)

    phases = {}
    for during, n in [(False, max(threads))] + [(True, n) for n in threads]:
        rows = []
        with ThreadPoolExecutor(max_workers=n) as pool:
            for i in range(steps + 2):                      # two warm-up steps
                sync()
                t0 = time.perf_counter()
                filling = draw(pool) if during else []
                total = step.clipped_sum(x, y)
                t1 = time.perf_counter()
                if not during:
                    filling = draw(pool)
                for f in filling:
                    f.result()
                t2 = time.perf_counter()
                sync()
                t3 = time.perf_counter()
                noise = flat.to(device).split([t.numel() for t in total])
                torch._foreach_add_(total, [v.view(t.shape) for v, t in zip(noise, total)], alpha=1.0)
                sync()
                t4 = time.perf_counter()
                if i >= 2:
                    rows.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3))
        key = f"{n} threads {'during' if during else 'after'} the launch"
        phases[key] = dict(zip(("launch", "wait", "busy", "copy_add"), (_median_ms(list(c)) for c in zip(*rows))))
    return {"device": device, "model": model_name, "size": size, "batch": batch, "steps": steps,
            "coordinates": coordinates, "draw_ms_by_threads": drawing, "phases_ms": phases}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--size", default="64x3", help="SIZExCHANNELS")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", default="1,2,4,8,12,16", help="noise threads to try, comma-separated")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    result = measure(args.device, args.model, args.size, args.batch, args.steps,
                     [int(n) for n in args.threads.split(",")])
    for n, ms in result["draw_ms_by_threads"].items():
        print(f"drawing {result['coordinates']:,} Gaussians on {n} threads: {ms} ms")
    for name, t in result["phases_ms"].items():
        print(f"{name}: " + ", ".join(f"{k} {v} ms" for k, v in t.items()))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
