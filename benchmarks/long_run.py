"""What grows over the steps of one long DP-SGD run: memory, the log, the checkpoint, and the accountant's work.

    python benchmarks/long_run.py --out long-run [--steps 3000] [--batch 8] [--images 400] [--size 28]
                                  [--model small_cnn] [--accountant-steps 1000 10000 100000]

A study's runs are short on the shipped sets (hundreds of steps), so something kept once per step (a list of
losses, ledger entries, log lines, old checkpoints) costs nothing there and shows only in runs of thousands of steps.
This runs `dpmed run` in this process on the phantom (one DP-SGD arm at eps 8, one thread, tiny steps) and, at
every progress line the training logs (each hundredth of the steps), reads the process's resident set
(/proc/self/status, Linux), the Python objects the garbage collector tracks (uncollected cycles included: a
collection at each line would take longer than the steps between), and the sizes of the run's checkpoints and of the
private log. Then it counts the log's lines and the files left in the study folder, and times the accountant once per
step count given: the noise calibration (`noise_multiplier_for`) and one eps (`dp_sgd_epsilon`), each called once per
run, never per step, and the recording of that many steps in a ledger, which the loop does at every step.

Prints one JSON object (the run's own summary goes to stderr). Not a test: the figures depend on the machine and its
load. They include the DP-SGD run's step times, which dpmed keeps private (`dpmed.records.Timing`): the study is the
phantom's, of no person, and stays so.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import sys
import time
from pathlib import Path

_STUDY = """name: long
settings_chosen_on: "the synthetic phantom itself (a teaching set of no person)"
seeds: [0]
privacy_randomness: reproducible    # the DP count of patients, and so the steps an epoch takes, the same each time
data: {{source: phantom, n_images: {images}, image_size: {size}, seed: 0}}
model: {{name: {model}}}
training: {{steps: {steps}, batch_size: {batch}, physical_batch_size: 128, optimizer: adam, learning_rate: 0.001,
            threads: 1}}
evaluation: {{bootstrap_resamples: 20, fairness: null}}
arms:
  - {{name: dp-sgd, mechanism: dp_sgd, target_epsilon: 8, max_grad_norm: 1.0}}
"""


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class _Sampler(logging.Handler):
    """At each progress line of the training loop ("step N of T"), one row of what the process holds."""

    def __init__(self, study: Path) -> None:
        super().__init__(logging.INFO)
        self.study, self.rows, self.start = study, [], time.perf_counter()

    def emit(self, record: logging.LogRecord) -> None:
        if "step %d of %d" not in str(record.msg):
            return
        checkpoints = list((self.study / "private").rglob("checkpoint*"))
        log = self.study / "private" / "dpmed.log"
        self.rows.append({
            "step": record.args[1], "seconds": round(time.perf_counter() - self.start, 1),
            "rss_mib": round(_status_kib("VmRSS") / 1024, 1), "gc_objects": len(gc.get_objects()),
            "checkpoint_files": len(checkpoints), "checkpoint_bytes": sum(p.stat().st_size for p in checkpoints),
            "log_bytes": log.stat().st_size if log.is_file() else 0})


def accountant_seconds(steps: list[int], sample_rate: float) -> list[dict]:
    """Per step count: seconds of one calibration to eps 8 at delta 1e-5 and of one eps of the calibrated sigma, and
    the milliseconds a step's recording in the ledger takes over that many steps (the loop records every step)."""
    from dpmed import accounting

    rows = []
    for t in steps:
        start = time.perf_counter()
        sigma = accounting.noise_multiplier_for(target_epsilon=8, delta=1e-5, sample_rate=sample_rate, steps=t)
        calibrated = time.perf_counter() - start
        start = time.perf_counter()
        accounting.dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=sample_rate, steps=t, delta=1e-5)
        epsilon = time.perf_counter() - start
        ledger, start = accounting.Ledger(), time.perf_counter()
        for _ in range(t):
            ledger = ledger.record(accounting.dp_sgd_event(noise="gaussian", noise_multiplier=sigma,
                                                           sample_rate=sample_rate, steps=1))
        rows.append({"steps": t, "calibration_s": round(calibrated, 2), "epsilon_s": round(epsilon, 2),
                     "ledger_ms_per_step": round(1e3 * (time.perf_counter() - start) / t, 3),
                     "ledger_entries": len(ledger.events), "sigma": round(sigma, 4)})
    return rows


def measure(out: Path, *, steps: int, batch: int, images: int, size: int, model: str,
            accountant_steps: list[int]) -> dict:
    """Run the long study in ``out`` (its summary goes to stderr) and return the figures."""
    from dpmed.cli import main as dpmed

    out.mkdir(parents=True, exist_ok=True)
    study_file = out / "long.yaml"
    study_file.write_text(_STUDY.format(images=images, size=size, model=model, steps=steps, batch=batch))
    study = out / "long"
    sampler, loop_log = _Sampler(study), logging.getLogger("dpmed.training.loop")
    loop_log.addHandler(sampler)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            status = dpmed(["run", str(study_file), "--out", str(out), "--no-progress"])
    finally:
        loop_log.removeHandler(sampler)
    log = study / "private" / "dpmed.log"
    lines = log.read_text(encoding="utf-8").splitlines()
    run = json.loads(next((study / "runs").glob("*/run.json")).read_text())
    return {
        "status": status, "steps": steps, "batch": batch, "images": images, "size": size,
        "peak_rss_mib": round(_status_kib("VmHWM") / 1024, 1),
        "log_lines": len(lines), "progress_lines": sum(f" of {steps} (" in line for line in lines),
        "log_bytes": log.stat().st_size,
        "files_left": sorted(str(p.relative_to(study)) for p in study.rglob("*") if p.is_file()),
        "samples": sampler.rows,
        "accountant": accountant_seconds(accountant_steps, run["privacy"]["sample_rate"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--accountant-steps", type=int, nargs="*", default=[1000, 10000, 100000])
    args = parser.parse_args()
    print(json.dumps(measure(args.out, steps=args.steps, batch=args.batch, images=args.images, size=args.size,
                             model=args.model, accountant_steps=args.accountant_steps), indent=1))


if __name__ == "__main__":
    main()
