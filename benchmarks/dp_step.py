"""What one DP-SGD step costs against a non-private step: dpmed's engine, Opacus (hooks, ghost) and no privacy.

    python benchmarks/dp_step.py [--sizes 28x1,64x3,224x3] [--models small_cnn,resnet9,resnet18]
                                 [--engines nonprivate,opacus-hooks,opacus-ghost,dpmed[,dpmed-no-noise]]
                                 [--device cpu|cuda]
                                 [--batch 64] [--threads N] [--rounds R] [--profile STEPS] [--count-ops]
                                 [--images-per-patient K]
                                 [--out benchmarks/results-<machine>.json]

Each engine x model x size runs in its own subprocess, so peak memory is that configuration's alone: on CPU the
growth of ``ru_maxrss`` over the worker's high-water mark after setup (model, data and optimizer built, imports
done); on CUDA ``torch.cuda.max_memory_allocated`` minus what was allocated after setup. A step is what training
does per batch: forward, backward (with clipping and noise for the DP engines) and ``optimizer.step`` (plain SGD,
which keeps no state). After warm-up steps the median of the timed steps is reported, with the machine, the library
versions and the load average before and after each configuration: the CPU may be shared, and contended numbers
must be visible as such. ``--threads`` fixes torch's intra-op threads in every worker (default: torch's own choice,
one per core). On a CPU shared with other busy processes use ``--threads 1``: with more threads than free cores
every operator ends in a barrier that waits for a descheduled thread, which slows each step 5 to 15 times and
penalises the engines with more, smaller operators most, so the ratios measure the contention, not the engines.
``--rounds R`` runs every engine R times, interleaved, and pools their steps, so that a load that drifts during
the run weighs on every engine alike. ``--profile S`` profiles S more steps of each configuration after the timed
ones (torch.profiler; the timings are taken without it) and prints, per step, the dpmed step's phases (clipped sum,
waiting for the noise, adding it) and the operators with the most self time, on the GPU where there is one.
``--count-ops`` counts the operators torch dispatches in one more step (views included: each costs host time).
``--images-per-patient K`` makes the batch patients of K images each, whose summed gradients dpmed clips (the patient
as the unit of privacy: the pairs' ghost dot products or the grouped per-example gradients, and the rounding slack of
`dpmed.training.clipping`); Opacus clips examples only, so its engines are left out of such a run.

The engines:
* nonprivate: ``loss.backward()`` on the batch;
* opacus-hooks / opacus-ghost: Opacus's own ``PrivacyEngine.make_private`` with ``grad_sample_mode`` "hooks"
  (per-example gradients materialised) or "ghost" (ghost clipping with two backward passes, Li et al. 2021);
* dpmed: ``dpmed.training.DpSgdStep(engine="dpmed")``, mixed ghost clipping with book-keeping (Bu et al. 2022,
  2023), one backward pass, and float64 noise from a secret AES-CTR stream (Opacus's engines draw torch's own);
* dpmed-no-noise (not in the default ``--engines``): the same step with sigma = 0, so that a run can split the
  dpmed step's cost into clipping and noise;
* dpmed-tf32 (not in the default ``--engines``, and not private): the dpmed step with cuDNN's convolutions left in
  TF32, as before the engine turned TF32 off for its norms and sums (`dpmed.training.clipping._without_tf32`), so
  that a GPU run can say what full float32 costs. Its units may pass C by TF32's rounding: never train with it.
This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENGINES = ("nonprivate", "opacus-hooks", "opacus-ghost", "dpmed")
EXTRA_ENGINES = ("dpmed-no-noise",     # dpmed with sigma = 0: the clipping alone, to split a step's cost
                 "dpmed-tf32")         # dpmed with cuDNN's TF32 left on: what full float32 costs (not private)
DEFAULT_MODELS = ("small_cnn", "resnet9", "resnet18")
DEFAULT_SIZES = ("28x1", "64x3", "224x3")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: str) -> dict:
    from importlib.metadata import version    # Opacus's own import takes seconds, and only its workers need it

    import torch

    info = {
        "cpu": _cpu_model(), "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(), "torch": torch.__version__, "opacus": version("opacus"),
        "platform": platform.platform(), "device": device,
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


# ----------------------------------------------------------------------------------------------------- worker side

def _step_function(engine: str, model, x, y, device: str, groups=None):
    """A closure running one training step of ``engine`` on the batch (x, y); ``groups``: the patient of each
    example [B], or None (the image as the unit)."""
    import torch
    import torch.nn.functional as F

    def loss_sum(z, t):
        return F.cross_entropy(z, t, reduction="sum")

    if engine == "nonprivate":
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            loss_sum(model(x), y).backward()
            opt.step()
        return step

    if engine in ("dpmed", "dpmed-no-noise", "dpmed-tf32"):
        from dpmed.randomness import PrivacyRandomness
        from dpmed.training import DpSgdStep

        if engine == "dpmed-tf32":                     # this worker process only: a benchmark, never a run
            import contextlib

            from dpmed.training import clipping
            clipping._without_tf32 = contextlib.nullcontext

        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        dp = DpSgdStep(model, loss_fn=loss_sum, max_grad_norm=1.0,
                       noise_multiplier=0.0 if engine == "dpmed-no-noise" else 1.0,
                       expected_batch_size=float(len(x)), physical_batch_size=len(x),
                       noise_rng=PrivacyRandomness.secure().stream("noise"), engine="dpmed")   # as a run draws it

        def step():
            opt.zero_grad(set_to_none=True)
            dp(x, y, groups=groups)
            opt.step()
        return step

    if groups is not None:
        raise SystemExit(f"{engine}: Opacus clips each example, and has no patient-level (user-level) clipping")

    import warnings

    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    mode = engine.split("-", 1)[1]
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(TensorDataset(x, y), batch_size=len(x))
    criterion = torch.nn.CrossEntropyLoss(reduction="sum")
    made = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader, criterion=criterion,
                                        noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=False,
                                        loss_reduction="sum", grad_sample_mode=mode)
    module, dp_opt = made[0], made[1]
    criterion = made[2] if mode == "ghost" else criterion

    def step():
        dp_opt.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            criterion(module(x), y).backward()
        dp_opt.step()
    return step


def worker(args: argparse.Namespace) -> dict:
    import torch

    from dpmed.models import build_model

    if args.threads:
        torch.set_num_threads(args.threads)

    size, channels = (int(v) for v in args.size.split("x"))
    device = args.device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(args.model, in_channels=channels, num_outputs=2, image_size=size).to(device).train()
        x = torch.rand(args.batch, channels, size, size, device=device)          # [B, C, H, W]
        y = torch.randint(0, 2, (args.batch,), device=device)                    # [B]
        k = args.images_per_patient
        groups = None if k == 1 else torch.arange(args.batch) // k               # [B], patients of k images
        step = _step_function(args.engine, model, x, y, device, groups)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024          # bytes (Linux: KiB)
    for _ in range(args.warmup):
        step()
    sync()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    row = {"median_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times),
           "times_ms": [1e3 * t for t in times], "peak_mib": peak / 2**20,
           "parameters": sum(p.numel() for p in model.parameters()), "torch_threads": torch.get_num_threads()}
    if args.profile:
        row["profile"] = _profile(step, sync, args.profile, device)
    if args.count_ops:
        row["dispatched_ops"] = _count_ops(step)
    return row


def _count_ops(step) -> int:
    """Operators torch dispatches in one step, views included: on a GPU each costs host time whether or not it
    launches a kernel, so where kernels are short this count, not their work, sets the step's time."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counter.count += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        step()
    return Counter.count


def _profile(step, sync, steps: int, device: str, top: int = 12) -> dict:
    """Where a step's time goes, per step over ``steps`` profiled steps (after the timed ones, so the profiler's
    overhead touches no timing): the phases the dpmed step labels (``dpmed.*``: clipped sum, waiting for the
    noise, adding it) and the operators with the most self time, on the GPU where there is one."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync()
    events = prof.key_averages()
    own = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    ranked = sorted((e for e in events if not e.key.startswith("dpmed.")), key=lambda e: -getattr(e, own))
    return {"steps": steps, "ranked_by": own.replace("_total", ""),
            "phases": {e.key: {"cpu_ms": e.cpu_time_total / 1e3 / steps, "device_ms": e.device_time_total / 1e3 / steps}
                       for e in events if e.key.startswith("dpmed.")},
            "top": [{"op": e.key, "calls": e.count // steps, "self_ms": getattr(e, own) / 1e3 / steps}
                    for e in ranked[:top]]}


# ----------------------------------------------------------------------------------------------------- parent side

def _run_one(args: argparse.Namespace, model: str, size: str, engine: str, steps: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--model", model, "--size", size, "--engine", engine,
           "--device", args.device, "--batch", str(args.batch), "--steps", str(steps), "--warmup", str(args.warmup),
           "--threads", str(args.threads), "--profile", str(args.profile),
           "--images-per-patient", str(args.images_per_patient)] + (["--count-ops"] if args.count_ops else [])
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    row = {"model": model, "size": size, "engine": engine, "batch": args.batch, "steps": steps,
           "images_per_patient": args.images_per_patient,
           "warmup": args.warmup, "load_before": load_before, "load_after": os.getloadavg(),
           "wall_s": time.perf_counter() - t0}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return row
    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return row


def _table(rows: list[dict]) -> str:
    """Markdown: one line per model x size x engine, with ratios to the non-private step."""
    base = {(r["model"], r["size"]): r for r in rows if r["engine"] == "nonprivate" and "error" not in r}
    lines = ["| model | input | engine | ms/step (median) | x non-private | peak MiB | x non-private | load (1 min) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = base.get((r["model"], r["size"]))
        k = r.get("images_per_patient", 1)
        engine = r["engine"] if k == 1 or r["engine"] == "nonprivate" else f"{r['engine']}, patients of {k}"
        if "error" in r:
            lines.append(f"| {r['model']} | {r['size']} | {engine} | failed: {r['error'][:80]} | | | | |")
            continue
        t_ratio = f"{r['median_ms'] / b['median_ms']:.2f}" if b else "-"
        m_ratio = f"{r['peak_mib'] / b['peak_mib']:.2f}" if b and b["peak_mib"] > 0 else "-"
        load = max(r["load_before"][0], r["load_after"][0])
        lines.append(f"| {r['model']} | {r['size']} | {engine} | {r['median_ms']:.0f} | {t_ratio} | "
                     f"{r['peak_mib']:.0f} | {m_ratio} | {load:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(DEFAULT_SIZES), help="SIZExCHANNELS, comma-separated")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10, help="timed steps (at 224 px on CPU: --steps-large)")
    p.add_argument("--steps-large", type=int, default=3, help="timed steps for inputs >= 128 px on CPU")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads per worker (0: torch's default); 1 on a CPU shared with other jobs")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every engine this many times, interleaved (a fresh worker each), and pool the steps")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per configuration")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--profile", type=int, default=0,
                   help="also profile this many steps after the timed ones (torch.profiler; phases and top operators)")
    p.add_argument("--count-ops", action="store_true",
                   help="also count the operators torch dispatches in one step (views included)")
    p.add_argument("--images-per-patient", type=int, default=1,
                   help="patients of this many images each, clipped as one unit (dpmed only; 1: the image)")
    # worker mode (one configuration, JSON on stdout)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--size", help=argparse.SUPPRESS)
    p.add_argument("--engine", choices=ENGINES + EXTRA_ENGINES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args)))
        return 0

    info = machine(args.device)
    if args.threads:
        info["torch_threads"] = args.threads
    out = args.out or Path(__file__).parent / f"results-{platform.node() or 'machine'}-{args.device}.json"
    rows: list[dict] = []
    runs: list[dict] = []
    print(json.dumps(info))
    engines = args.engines.split(",")
    for model in args.models.split(","):
        for size in args.sizes.split(","):
            large = int(size.split("x")[0]) >= 128 and args.device == "cpu"
            done: dict[str, list[dict]] = {engine: [] for engine in engines}
            for _ in range(args.rounds):                     # engines interleaved: load drift hits each alike
                for engine in engines:
                    run = _run_one(args, model, size, engine, args.steps_large if large else args.steps)
                    runs.append(run)
                    done[engine].append(run)
                    print(json.dumps({k: v for k, v in run.items() if k != "times_ms"}), flush=True)
                    out.write_text(json.dumps({"machine": info, "rows": rows, "runs": runs}, indent=1))
            rows.extend(_merge(done[engine]) for engine in engines)
            out.write_text(json.dumps({"machine": info, "rows": rows, "runs": runs}, indent=1))
    print(_table(rows))
    for row in rows:
        if "profile" in row:
            print(_profile_lines(row))
        if "dispatched_ops" in row:
            print(f"dispatched operators per step, {row['model']} {row['size']} {row['engine']}: "
                  f"{row['dispatched_ops']}")
    return 0


def _profile_lines(row: dict) -> str:
    """A profiled configuration in a few lines: its phases, then its operators with the most self time, per step."""
    prof = row["profile"]
    lines = [f"profile {row['model']} {row['size']} {row['engine']} (ms per step, {prof['steps']} steps):"]
    lines += [f"  {name}: {t['cpu_ms']:.2f} on the CPU, {t['device_ms']:.2f} on the device"
              for name, t in sorted(prof["phases"].items())]
    lines += [f"  {op['self_ms']:8.2f} {prof['ranked_by']}  {op['calls']:5d} calls  {op['op']}" for op in prof["top"]]
    return "\n".join(lines)


def _merge(runs: list[dict]) -> dict:
    """One row from an engine's rounds: the median over all their timed steps, the largest peak memory, and the
    load average's extremes. A failed round fails the row."""
    failed = [r for r in runs if "error" in r]
    if failed or len(runs) == 1:
        return failed[0] if failed else runs[0]
    times = [t for r in runs for t in r["times_ms"]]
    row = dict(runs[0])
    row.update(steps=len(times), rounds=len(runs), times_ms=times, median_ms=statistics.median(times),
               min_ms=min(times), peak_mib=max(r["peak_mib"] for r in runs),
               load_before=[max(r["load_before"][i] for r in runs) for i in range(3)],
               load_after=[max(r["load_after"][i] for r in runs) for i in range(3)],
               wall_s=sum(r["wall_s"] for r in runs))
    return row


if __name__ == "__main__":
    sys.exit(main())
