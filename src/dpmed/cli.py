"""The command line: parsing and printing only; the work happens in `dpmed.study` and `dpmed.accounting`.

    dpmed run [STUDY] [--out DIR] [--data-path FILE] [--set KEY=VALUE ...]
    dpmed report DIR
    dpmed status DIR
    dpmed privacy epsilon|calibrate|risk ...     (planning without training; imports no torch)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Sequence

from dpmed import accounting
from dpmed.errors import DpmedError

__all__ = ["main"]


def _default_study() -> Path:
    return Path(str(resources.files("dpmed") / "configs" / "quickstart.yaml"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpmed", description="What does privacy cost a diagnostic imaging model?")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train and evaluate every arm of a study, then write the report")
    run.add_argument("study", nargs="?", type=Path, help="study file (default: the embedded phantom quickstart)")
    run.add_argument("--out", type=Path, default=Path("results"), help="output root (default: ./results)")
    run.add_argument("--data-path", type=Path, help="the dataset file, overriding data.path in the study")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a study key, e.g. --set training.epochs=2 (repeatable)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.add_argument("--workers", type=int, default=1, help="runs at a time in local processes (default 1)")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="local (default) or ray: each run a Ray task (pip install 'dpmed[ray]')")
    run.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    run.add_argument("--fail-fast", action="store_true", help="stop at the first failed run (default: go on)")
    status = sub.add_parser("status", help="list the finished, failed, interrupted and pending runs in DIR")
    status.add_argument("dir", type=Path, help="a study output folder (holds study.yaml and runs/)")
    rep = sub.add_parser("report", help="rebuild results.csv and report.html from the finished runs in DIR")
    rep.add_argument("dir", type=Path, help="a study output folder (holds study.yaml and runs/)")
    _privacy_parser(sub.add_parser("privacy", help="eps, noise calibration and reconstruction risk, no training"))
    return p


def _schedule_arguments(p: argparse.ArgumentParser, *, with_delta: bool = True) -> None:
    p.add_argument("--sample-rate", type=float, help="Poisson rate q (or give --dataset-size and --batch-size)")
    p.add_argument("--steps", type=int, help="optimiser steps T (or give --epochs with --dataset-size)")
    p.add_argument("--dataset-size", type=int, help="N training images: q = batch / N, T = epochs * round(N / batch)")
    p.add_argument("--batch-size", type=int, help="expected Poisson batch size (with --dataset-size)")
    p.add_argument("--epochs", type=int, help="passes over the data (with --dataset-size and --batch-size)")
    if with_delta:
        p.add_argument("--delta", type=float, help="delta (default min(1e-5, 1/(10 N)) when --dataset-size is given)")
    p.add_argument("--noise", choices=accounting.NOISES, default="gaussian",
                   help="gaussian (L2 clipping; default) or laplace (L1 clipping, noise multiplier = b / C1)")


def _privacy_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="privacy_command", required=True)
    eps = sub.add_parser("epsilon", help="eps(delta) of a DP-SGD run with given noise")
    eps.add_argument("--noise-multiplier", type=float, required=True, help="sigma (or b / C1 for Laplace)")
    _schedule_arguments(eps)
    eps.add_argument("--accountant", choices=(*accounting.ACCOUNTANTS, "all"), default="pld",
                     help="pld (default), rdp, rdp-classic, pure (Laplace only), or all that apply")
    cal = sub.add_parser("calibrate", help="the smallest noise multiplier whose eps is at most a target")
    cal.add_argument("--target-epsilon", type=float, required=True)
    _schedule_arguments(cal)
    cal.add_argument("--accountant", choices=accounting.ACCOUNTANTS, default="pld")
    risk = sub.add_parser("risk", help="reconstruction and membership-inference bounds (METHODS.md s.7)")
    risk.add_argument("--noise-multiplier", type=float, required=True)
    _schedule_arguments(risk, with_delta=False)
    risk.add_argument("--kappa", type=float, help="the attacker's prior success (default 1 / N with --dataset-size)")


def _run(args: argparse.Namespace) -> int:
    from dpmed.config import load_study, parse_override  # imported here: `dpmed privacy` needs no torch
    from dpmed.reporting import summary_text
    from dpmed.study import run_study

    overrides = dict(parse_override(text) for text in args.overrides)
    if args.data_path is not None:
        overrides["data.path"] = str(args.data_path.resolve())
    study = load_study(args.study or _default_study(), overrides)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        result = run_study(study, out=args.out, progress=not args.no_progress, log=log, executor=args.executor,
                           workers=args.workers, address=args.address, fail_fast=args.fail_fast)
    except KeyboardInterrupt:
        log(f"interrupted: finished runs are kept in {args.out / study.name}; run the same command to continue")
        return 130
    if result.records:
        print(summary_text(result.records))
    print(f"\n{len(result.records)} runs ({len(result.resumed)} finished earlier) in {result.seconds:.0f} s")
    if result.records:
        print(f"results: {result.results_path}\nreport:  {result.report_path}")
    if result.failures or result.pending:
        for failure in result.failures:
            print(f"FAILED {failure.run_id}: {failure.error} (see {failure.error_file})", file=sys.stderr)
        print(f"{len(result.failures)} run(s) failed, {len(result.pending)} not started; fix the cause and run the "
              f"same command again: finished runs are kept", file=sys.stderr)
        return 1
    return 0


def _report(args: argparse.Namespace) -> int:
    from dpmed.folders import StudyFolder
    from dpmed.reporting import summary_text
    from dpmed.study import rebuild_outputs

    resolved, records = rebuild_outputs(args.dir)
    print(summary_text(records))
    print(f"\nreport: {StudyFolder(args.dir).report} ({len(records)} of {len(resolved.runs)} runs finished)")
    return 0


def _schedule(args: argparse.Namespace) -> tuple[float, int, int | None]:
    """(q, T, N or None) from --sample-rate/--steps, or from --dataset-size/--batch-size/--epochs as studies do."""
    if args.dataset_size is not None and args.batch_size is not None:
        if args.sample_rate is not None or (args.steps is not None and args.epochs is not None):
            raise DpmedError("give either --sample-rate and --steps, or --dataset-size, --batch-size and --epochs")
        if args.epochs is None and args.steps is None:
            raise DpmedError("with --dataset-size and --batch-size, give --epochs (or --steps)")
        q, steps = accounting.dp_sgd_schedule(args.dataset_size, batch_size=args.batch_size, epochs=args.epochs or 1)
        return q, (args.steps if args.epochs is None else steps), args.dataset_size
    if args.sample_rate is None or args.steps is None:
        raise DpmedError("give --sample-rate and --steps (or --dataset-size, --batch-size and --epochs)")
    return args.sample_rate, args.steps, args.dataset_size


def _delta(args: argparse.Namespace, n: int | None) -> float:
    if args.delta is not None:
        return args.delta
    if n is None:
        raise DpmedError("give --delta (or --dataset-size, for the default min(1e-5, 1/(10 N)))")
    return accounting.default_delta(n)


def _assumptions(args: argparse.Namespace, q: float, steps: int, sigma: float) -> str:
    noise = ("Laplace noise b = sigma C1, L1 clipping" if args.noise == "laplace"
             else "Gaussian noise N(0, (sigma C)^2), L2 clipping")
    return (f"assumes: Poisson sampling at q = {q:.6g} for T = {steps} steps, noise multiplier sigma = {sigma:.6g} "
            f"({noise}); neighbours: {accounting.NEIGHBOUR_DP_SGD}")


def _privacy(args: argparse.Namespace) -> int:
    try:
        return _PRIVACY[args.privacy_command](args)
    except ValueError as exc:  # accounting checks its arguments and explains; show that as a usage error
        raise DpmedError(str(exc)) from None


def _privacy_epsilon(args: argparse.Namespace) -> int:
    q, steps, n = _schedule(args)
    delta = _delta(args, n)
    names = ([a for a in accounting.ACCOUNTANTS if args.noise in accounting.accountant_info(a).noises]
             if args.accountant == "all" else [args.accountant])
    for name in names:
        eps = accounting.dp_sgd_epsilon(noise_multiplier=args.noise_multiplier, sample_rate=q, steps=steps,
                                        delta=delta, accountant=name, noise=args.noise)
        print(f"eps = {eps:.6g} at delta = {delta:.3g}  [{name}: {accounting.describe_accountant(name)}]")
    print(_assumptions(args, q, steps, args.noise_multiplier))
    return 0


def _privacy_calibrate(args: argparse.Namespace) -> int:
    q, steps, n = _schedule(args)
    delta = _delta(args, n)
    name, note = accounting.effective_accountant(args.accountant, target_epsilon=args.target_epsilon,
                                                 noise=args.noise)
    sigma = accounting.noise_multiplier_for(target_epsilon=args.target_epsilon, delta=delta, sample_rate=q,
                                            steps=steps, accountant=name, noise=args.noise)
    eps = accounting.dp_sgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta,
                                    accountant=name, noise=args.noise)
    print(f"noise_multiplier = {sigma:.6g}  (eps = {eps:.6g} <= target {args.target_epsilon:g} at delta = "
          f"{delta:.3g}) [{name}: {accounting.describe_accountant(name)}]")
    if note:
        print(f"note: {note}")
    print(_assumptions(args, q, steps, sigma))
    return 0


def _privacy_risk(args: argparse.Namespace) -> int:
    q, steps, n = _schedule(args)
    if args.noise != "gaussian":
        raise DpmedError("reconstruction bounds are implemented for Gaussian noise only (METHODS.md s.7)")
    if args.kappa is None and n is None:
        raise DpmedError("give --kappa (or --dataset-size, for the uniform prior kappa = 1/N)")
    kappa = args.kappa if args.kappa is not None else 1.0 / n
    risk = accounting.reconstruction_risk(noise_multiplier=args.noise_multiplier, sample_rate=q, steps=steps,
                                          kappa=kappa)
    print(f"reconstruction success, upper bounds (prior kappa = {kappa:.4g}), and how each was obtained:")
    print(f"  worst case                {risk.worst_case:9.4%}   {risk.worst_case_via}")
    print(f"  worst case (Edgeworth)    {risk.worst_case_edgeworth:9.4%}   cross-check of the line above: "
          f"{risk.worst_case_edgeworth_via}")
    print(f"  relaxed (sign unknown)    {risk.relaxed:9.4%}   {risk.relaxed_via}")
    print(f"  GDP/CLT shortcut          {risk.gdp:9.4%}   sanity value only: {risk.gdp_via}")
    print("membership inference, best possible attack:")
    for fpr, tpr in risk.tpr_at_fpr.items():
        print(f"  TPR at FPR {fpr:<5.1%}          {tpr:9.4%}   {risk.tpr_at_fpr_via[fpr]}")
    print(f"assumptions: {risk.assumptions}")
    return 0


_PRIVACY = {"epsilon": _privacy_epsilon, "calibrate": _privacy_calibrate, "risk": _privacy_risk}


def _status(args: argparse.Namespace) -> int:
    from dpmed.study import run_states

    counts: dict[str, int] = {}
    for run_id, kind, detail in run_states(args.dir):
        counts[kind] = counts.get(kind, 0) + 1
        print(f"{run_id:<36} {kind}" + (f": {detail}" if detail else ""))
    print(", ".join(f"{counts[k]} {k}" for k in ("finished", "failed", "interrupted", "pending") if k in counts))
    return 0


class _KnownRdpNoise(logging.Filter):
    """dp_accounting logs a warning whenever one fractional RDP order fails to converge; it then leaves that order
    out, and the eps of the remaining orders is still a valid upper bound. Dozens of these appear during noise
    calibration and bury the output, so the command line drops this one message (the library API is untouched)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpmed`` command; returns the exit status (0 ok, 1 some runs failed, 2 bad input,
    130 interrupted)."""
    args = _parser().parse_args(argv)
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _KnownRdpNoise) for f in absl.filters):
        absl.addFilter(_KnownRdpNoise())
    try:
        return {"run": _run, "report": _report, "status": _status, "privacy": _privacy}[args.command](args)
    except DpmedError as exc:
        print(f"dpmed: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of our output went away (e.g. `dpmed report DIR | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
