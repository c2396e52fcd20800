"""The command line: parsing and printing only; the work happens in `dpmed.study` and `dpmed.accounting`.

    dpmed run [STUDY] [--out DIR] [--data-path FILE] [--set KEY=VALUE ...] [--device cpu|cuda|auto]
    dpmed plan [STUDY] [the same options]       (every run's plan, the study's privacy, an estimated time; no training)
    dpmed report DIR
    dpmed status DIR
    dpmed privacy epsilon|calibrate|risk ...     (planning without training; imports no torch)
    dpmed --version;  python -m dpmed ...

Exit status: 0 done, 1 some runs failed, 2 bad input (or the output folder is unusable or in use), 130 interrupted.
What runs log goes to the terminal (stderr) and to the study's private log file (`dpmed.log`); progress bars only
where stderr is a terminal.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import sys
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Sequence

from dpmed import accounting
from dpmed.errors import DpmedError
from dpmed.log import detach, log_to_console, log_to_file, quiet_known_noise

__all__ = ["main"]

_log = logging.getLogger("dpmed.cli")


def _default_study() -> Path:
    return Path(str(resources.files("dpmed") / "configs" / "quickstart.yaml"))


def _version() -> str:
    try:
        return metadata.version("dpmed")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
        return "unknown (not installed)"


def _study_arguments(p: argparse.ArgumentParser) -> None:
    """What names a study and its output folder: the same for `run` and `plan`."""
    p.add_argument("study", nargs="?", type=Path, help="study file (default: the embedded phantom quickstart)")
    p.add_argument("--out", type=Path, default=Path("results"), help="output root (default: ./results)")
    p.add_argument("--data-path", type=Path, help="the dataset file, overriding data.path in the study")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a study key, e.g. --set training.epochs=2 (repeatable)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   help="where runs train, overriding training.device (auto: a CUDA GPU if torch sees one); it "
                        "changes no result, so finished runs are kept")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpmed", description="What does privacy cost a diagnostic imaging model?")
    p.add_argument("--version", action="version", version=f"dpmed {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train and evaluate every arm of a study, then write the report")
    _study_arguments(run)
    run.add_argument("--no-progress", action="store_true",
                     help="no progress bars (they are drawn only where stderr is a terminal)")
    run.add_argument("--workers", type=int, default=1, help="runs at a time in local processes (default 1)")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="local (default) or ray: each run a Ray task (pip install 'dpmed[ray]')")
    run.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    run.add_argument("--fail-fast", action="store_true", help="stop at the first failed run (default: go on)")
    plan = sub.add_parser("plan", help="every run's plan (sigma, eps, q, T), the study's privacy and an estimated "
                                       "time; reads the data and calibrates as `run` does, trains nothing")
    _study_arguments(plan)
    plan.add_argument("--no-estimate", action="store_true", help="skip the timing probe (a few seconds)")
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


# ---------------------------------------------------------------------------------------------------- studies

def _load(args: argparse.Namespace) -> Any:
    """The study of `run` or `plan`, with the command line's overrides; a problem they cause is blamed on the
    option that set it."""
    from dpmed.config import load_study, parse_override  # imported here: `dpmed privacy` needs no torch
    from dpmed.study import check_device

    overrides: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for text in args.overrides:
        key, value = parse_override(text)
        overrides[key], origins[key] = value, f"--set {text}"
    if args.data_path is not None:
        overrides["data.path"] = str(args.data_path.resolve())
        origins["data.path"] = f"--data-path {args.data_path}"
    if args.device is not None:
        overrides["training.device"], origins["training.device"] = args.device, f"--device {args.device}"
    study = load_study(args.study or _default_study(), overrides, origins=origins)
    check_device(study, given_as=origins.get("training.device"))    # before the data are read or a folder is made
    return study


def _run(args: argparse.Namespace) -> int:
    bars = not args.no_progress and sys.stderr.isatty()
    handlers = [log_to_console(bars=bars)]   # before Opacus is imported: it configures logging if nobody has
    try:
        return _run_logged(args, bars, handlers)
    finally:
        detach(*handlers)


def _run_logged(args: argparse.Namespace, bars: bool, handlers: list[logging.Handler]) -> int:
    from dpmed.folders import StudyFolder
    from dpmed.reporting import summary_text
    from dpmed.study import run_study

    study = _load(args)
    folder = StudyFolder(args.out / study.name)
    handlers.append(log_to_file(folder.log))
    try:
        result = run_study(study, out=args.out, progress=bars, executor=args.executor, workers=args.workers,
                           address=args.address, fail_fast=args.fail_fast, worker_setup=quiet_known_noise)
    except KeyboardInterrupt:
        _log.warning("interrupted: finished runs are kept in %s; run the same command to continue", folder.root)
        return 130
    if result.records:
        print(summary_text(result.records))
    print(f"\n{len(result.records)} runs ({len(result.resumed)} finished earlier) in {result.seconds:.0f} s")
    if result.records:
        print(f"results: {result.results_path}\nreport:  {result.report_path}")
    if folder.log.is_file():
        print(f"log:     {folder.log} (private: it holds audit results)")
    if result.failures or result.pending:
        for failure in result.failures:
            print(f"FAILED {failure.run_id}: {failure.error} (see {failure.error_file})", file=sys.stderr)
        print(f"{len(result.failures)} run(s) failed, {len(result.pending)} not started; fix the cause and run the "
              f"same command again: finished runs are kept", file=sys.stderr)
        return 1
    return 0


def _number(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def _noise_text(card: Any) -> str:
    if card.noise_multiplier is not None:
        return f"sigma = {card.noise_multiplier:.4g}"
    if card.scale_b is not None:
        return f"b = {card.scale_b:g}"
    if card.std is not None:
        return f"std = {card.std:g}"
    return "-"


def _eps_text(card: Any) -> str:
    """eps with delta, accountant and unit, or why there is none."""
    if card.epsilon is None:
        if card.epsilon_if_poisson is not None:
            return f"not DP: shuffled batches (a Poisson run would have eps {card.epsilon_if_poisson:.4g})"
        return "infinity (no privacy)" if card.mechanism == "none" else "not DP"
    accountant = card.accountant or ""
    accountant = accountant.upper() if accountant in accounting.ACCOUNTANTS else accountant.split(" (")[0]
    per = " per image" if card.epsilon_image is not None else ""
    text = f"{card.epsilon:,.4g}{per} (delta {card.delta:.3g}; {accountant}; one {card.unit})"
    if not card.is_dp:
        text += " [not DP: seed known]"
    return text


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _plan(args: argparse.Namespace) -> int:
    handler = log_to_console()   # before Opacus is imported: it configures logging if nobody has
    try:
        from dpmed.study import estimate_times, planned_card, prepare_study
        from dpmed.timing import clock, run_steps
        from dpmed.workspace import folder_holder

        study = _load(args)
        prepared = prepare_study(study, out=args.out)
        rates, seconds = (None, {}) if args.no_estimate or not prepared.todo else estimate_times(prepared)
    finally:
        detach(handler)
    ds, folder = prepared.dataset, prepared.folder
    shape = "x".join(map(str, ds.train.image_shape))
    n_train = len(ds.train)
    print(f"study {study.name}: {len(prepared.plans)} runs planned as `dpmed run` would; nothing is trained")
    print(f"data: {ds.name}, {n_train}/{len(ds.val)}/{len(ds.test)} train/val/test images of shape {shape}, task "
          f"{ds.task.kind}, {len(set(ds.train.patient_ids.tolist()))} training patients "
          f"(read and prepared in {prepared.load_seconds:.0f} s)")
    finished = (f"{len(prepared.finished)} of {len(prepared.plans)} runs finished earlier, not retrained"
                if prepared.finished else "no finished runs")
    print(f"output: {folder.root}: {finished}")
    holder = folder_holder(folder.root)
    if holder is not None:
        print(f"note: a dpmed run is working in that folder now ({holder.describe()})")
    rows = [["run", "mechanism", "noise", "q", "T", "eps (delta; accountant; unit)", "time"]]
    for plan in prepared.plans:
        card = planned_card(plan, ds.train.image_shape, study.privacy_randomness)
        time_text = ("done" if plan.run_id in prepared.finished else
                     "-" if rates is None else clock(seconds[plan.run_id]))
        rows.append([plan.run_id, plan.mechanism, _noise_text(card), _number(card.sample_rate),
                     str(run_steps(plan, n_train)), _eps_text(card), time_text])
    print()
    print(_table(rows))
    print(f"\nT: optimiser steps (DP-SGD: Poisson-sampled at rate q; other runs: shuffled batches of "
          f"{study.training.batch_size} unless the arm says otherwise)")
    print(f"study privacy: {prepared.privacy.statement}")
    budget = study.privacy_budget
    if budget is not None:
        print(f"privacy budget: eps = {budget.epsilon:g} at delta = {budget.delta:g} ({budget.accountant.upper()}); "
              f"the study's runs together use eps = {_number(prepared.privacy.dp_sgd_epsilon)} of it")
    else:
        print("privacy budget: none set (privacy_budget in the study file refuses, before training, a study whose runs "
              "together exceed it)")
    if rates is not None:
        total = sum(seconds.values())
        training = total - rates.evaluation * len(seconds)
        print(f"estimated time: about {clock(total + prepared.load_seconds)} for `dpmed run`: "
              f"{clock(prepared.load_seconds)} to read the data, then {clock(total)} for the {len(seconds)} run(s) "
              f"to train one after the other ({clock(training)} training, {clock(total - training)} evaluation); "
              f"--workers N divides the runs' part by up to N where there are cores for them")
        print(f"  how: {rates.how}; the probe took {rates.probe_seconds:.0f} s. Not included: audits, attacks, "
              f"writing the report, and a machine that gets busier or quieter meanwhile")
    elif not prepared.todo:
        print("estimated time: nothing to train (every run is finished); `dpmed run` would only rewrite the report")
    return 0


def _holder_note(study_dir: Path) -> str | None:
    from dpmed.workspace import folder_holder

    holder = folder_holder(study_dir)
    return None if holder is None else f"a dpmed run ({holder.describe()}) is working in this folder now"


def _report(args: argparse.Namespace) -> int:
    from dpmed.folders import StudyFolder
    from dpmed.reporting import summary_text
    from dpmed.study import rebuild_outputs

    note = _holder_note(args.dir)
    resolved, records = rebuild_outputs(args.dir)
    print(summary_text(records))
    print(f"\nreport: {StudyFolder(args.dir).report} ({len(records)} of {len(resolved.runs)} runs finished)")
    if note:
        print(f"note: {note}: this report covers the runs finished so far, and that run rewrites it when it ends",
              file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    from dpmed.study import run_states

    note = _holder_note(args.dir)
    counts: dict[str, int] = {}
    for run_id, kind, detail in run_states(args.dir):
        counts[kind] = counts.get(kind, 0) + 1
        print(f"{run_id:<36} {kind}" + (f": {detail}" if detail else ""))
    print(", ".join(f"{counts[k]} {k}" for k in ("finished", "failed", "interrupted", "pending") if k in counts))
    if note:
        print(f"{note}: runs shown as interrupted or pending may be in progress")
    return 0


# ---------------------------------------------------------------------------------------------------- privacy

def _schedule(args: argparse.Namespace) -> tuple[float, int, int | None]:
    """(q, T, N or None) from --sample-rate/--steps, or from --dataset-size/--batch-size/--epochs as studies do."""
    if args.dataset_size is not None and args.batch_size is not None:
        if args.sample_rate is not None or (args.steps is not None and args.epochs is not None):
            raise DpmedError("give either --sample-rate and --steps, or --dataset-size, --batch-size and --epochs")
        if args.epochs is None and args.steps is None:
            raise DpmedError("with --dataset-size and --batch-size, give --epochs (or --steps)")
        if args.batch_size > args.dataset_size:
            raise DpmedError(f"--batch-size {args.batch_size} exceeds --dataset-size {args.dataset_size}; lower "
                             "--batch-size")
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


def _check_flags(args: argparse.Namespace) -> None:
    """Each number where it enters, in the command's own words (the library's checks speak of its arguments)."""
    def finite(flag: str, value: float) -> None:
        if not math.isfinite(value):
            raise DpmedError(f"{flag} must be a finite number, got {value:g}")

    value = getattr(args, "noise_multiplier", None)
    if value is not None:
        finite("--noise-multiplier", value)
        if value < 0:
            raise DpmedError(f"--noise-multiplier must be >= 0, got {value:g}")
    value = getattr(args, "target_epsilon", None)
    if value is not None:
        finite("--target-epsilon", value)
        if value <= 0:
            raise DpmedError(f"--target-epsilon must be > 0 (the eps budget of the whole run), got {value:g}")
    if args.sample_rate is not None:
        finite("--sample-rate", args.sample_rate)
        if not 0 < args.sample_rate <= 1:
            raise DpmedError(f"--sample-rate must be in (0, 1] (the Poisson rate q = batch / N), got "
                             f"{args.sample_rate:g}")
    for flag, name in (("--steps", "steps"), ("--dataset-size", "dataset_size"), ("--batch-size", "batch_size"),
                       ("--epochs", "epochs")):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise DpmedError(f"{flag} must be at least 1, got {value}")
    value = getattr(args, "delta", None)
    if value is not None:
        finite("--delta", value)
        if not 0 < value < 1:
            raise DpmedError(f"--delta must be in (0, 1), got {value:g}; leave it out and give --dataset-size N for "
                             "the usual min(1e-5, 1/(10 N))")
    value = getattr(args, "kappa", None)
    if value is not None:
        finite("--kappa", value)
        if not 0 < value <= 1:
            raise DpmedError(f"--kappa must be in (0, 1] (a prior probability of success), got {value:g}")


# The library's names for what these commands take as flags: a message that reaches the user still speaks of flags.
_FLAG_NAMES = [
    (r"default_delta\(n_train\)", "--dataset-size N (delta = min(1e-5, 1/(10 N)))"),
    (r"training\.batch_size", "--batch-size"), (r"\bn_train\b", "--dataset-size"),
    (r"\btarget_epsilon\b", "--target-epsilon"), (r"\bnoise_multiplier\b", "--noise-multiplier"),
    (r"\bsample_rate\b", "--sample-rate"), (r"\bbatch_size\b", "--batch-size"),
    (r"accountant\s*=\s*'([a-z-]+)'", r"--accountant \1"), (r"accountant '([a-z-]+)'", r"--accountant \1"),
]


def _in_flags(message: str) -> str:
    for pattern, flag in _FLAG_NAMES:
        message = re.sub(pattern, flag, message)
    return message


def _privacy(args: argparse.Namespace) -> int:
    try:
        _check_flags(args)
        return _PRIVACY[args.privacy_command](args)
    except (ValueError, DpmedError) as exc:  # accounting checks its arguments and explains: in the flags' words
        raise DpmedError(_in_flags(str(exc))) from None


def _assumptions(args: argparse.Namespace, q: float, steps: int, sigma: float) -> str:
    noise = ("Laplace noise b = sigma C1, L1 clipping" if args.noise == "laplace"
             else "Gaussian noise N(0, (sigma C)^2), L2 clipping")
    return (f"assumes: Poisson sampling at q = {q:.6g} for T = {steps} steps, noise multiplier sigma = {sigma:.6g} "
            f"({noise}); neighbours: {accounting.NEIGHBOUR_DP_SGD}")


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpmed`` command; returns the exit status (0 ok, 1 some runs failed, 2 bad input or an
    unusable output folder, 130 interrupted)."""
    args = _parser().parse_args(argv)
    quiet_known_noise()
    commands = {"run": _run, "plan": _plan, "report": _report, "status": _status, "privacy": _privacy}
    try:
        return commands[args.command](args)
    except DpmedError as exc:
        print(f"dpmed: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpmed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (e.g. `dpmed report DIR | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
