"""What one PLD eps and one noise calibration cost: dpmed's one-step PLD against dp_accounting's own construction.

    python benchmarks/accounting_cost.py [--settings reference,large] [--targets 1,8] [--repeats 3]
                                         [--out benchmarks/results-accounting-<machine>.json]

dpmed's PLD accountant (`dpmed.accounting.epsilon`) builds one DP-SGD step's PLD with
`dpmed.accounting._pld.subsampled_gaussian_pld`, the PMF that dp_accounting's ``from_gaussian_mechanism`` builds
(the tests check they are equal) without its Python loop over the grid. For each setting and target eps this runs,
in one process: noise calibration (`noise_multiplier_for`) with dpmed's step and with dp_accounting's
``from_gaussian_mechanism`` in its place, then one eps at the calibrated sigma both ways; each is the median of
``--repeats`` wall times, and the two calibrations must return the same sigma. Settings (delta at or just below a
study's default for such an N, min(1e-5, 1 / (10 N))):

* reference: q = 128 / 5218, T = 2039 (000_56c2431ae4df8d10.txt), delta 1e-5;
* pneumoniamnist: the shipped study's expected batch 128 of 4708 images for 500 steps, delta 1e-5;
* mid: q = 1e-3 for T = 1e4 (a set of 64 k images at batch 64, 10 epochs), delta 1e-6;
* large: q = 8.5e-5 for T = 1.2e5 (MIMIC-CXR's 377 k images at batch 32, about 10 epochs), delta 1e-7.

This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from dp_step import _cpu_model   # benchmarks/ is on the path of a script run from it

SETTINGS = {
    "reference": dict(sample_rate=128 / 5218, steps=2039, delta=1e-5),
    "pneumoniamnist": dict(sample_rate=128 / 4708, steps=500, delta=1e-5),
    "mid": dict(sample_rate=1e-3, steps=10_000, delta=1e-6),
    "large": dict(sample_rate=8.5e-5, steps=120_000, delta=1e-7),
}


def _library_step(sigma: float, q: float, h: float):
    from dp_accounting.pld import privacy_loss_distribution
    return privacy_loss_distribution.from_gaussian_mechanism(sigma, value_discretization_interval=h, sampling_prob=q)


def _timed(fn, repeats: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def measure(name: str, target: float, repeats: int) -> dict:
    from dpmed.accounting import epsilon, noise_multiplier_for
    from dpmed.accounting._pld import subsampled_gaussian_pld
    setting = SETTINGS[name]
    row = {"setting": name, "target_epsilon": target, **setting}
    for builder_name, builder in (("dpmed", subsampled_gaussian_pld), ("dp_accounting", _library_step)):
        epsilon.subsampled_gaussian_pld = builder   # this harness's own process only
        try:
            seconds, sigma = _timed(lambda: noise_multiplier_for(target_epsilon=target, **setting), repeats)
            eps_seconds, eps = _timed(lambda: epsilon.dp_sgd_epsilon(noise_multiplier=sigma, **setting), repeats)
        finally:
            epsilon.subsampled_gaussian_pld = subsampled_gaussian_pld
        row[builder_name] = {"calibration_s": seconds, "noise_multiplier": sigma, "epsilon_s": eps_seconds,
                             "epsilon": eps}
    if row["dpmed"]["noise_multiplier"] != row["dp_accounting"]["noise_multiplier"]:
        row["mismatch"] = "the two constructions calibrated different noise multipliers"
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    p.add_argument("--targets", default="1,8", help="target eps values, comma-separated")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    unknown = [s for s in args.settings.split(",") if s not in SETTINGS]
    if unknown:
        p.error(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
    from importlib.metadata import version
    info = {"cpu": _cpu_model(), "logical_cpus": os.cpu_count(), "python": platform.python_version(),
            "dp_accounting": version("dp-accounting"), "load_before": os.getloadavg()}
    rows = [measure(s, float(t), args.repeats) for s in args.settings.split(",") for t in args.targets.split(",")]
    info["load_after"] = os.getloadavg()
    print("| setting | target eps | sigma | calibration s, dpmed | dp_accounting | one eps s, dpmed | dp_accounting |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        d, lib = r["dpmed"], r["dp_accounting"]
        print(f"| {r['setting']} | {r['target_epsilon']:g} | {d['noise_multiplier']:.5g} | {d['calibration_s']:.2f} | "
              f"{lib['calibration_s']:.2f} | {d['epsilon_s']:.2f} | {lib['epsilon_s']:.2f} |"
              + (f" {r['mismatch']}" if "mismatch" in r else ""))
    out = args.out or Path(__file__).parent / f"results-accounting-{platform.node() or 'machine'}.json"
    out.write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    print(f"load average before {info['load_before'][0]:.2f}, after {info['load_after'][0]:.2f}; wrote {out}")
    return 1 if any("mismatch" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
