"""The command line: parsing and printing only; the work happens in `dpmed.study`, `dpmed.outputs`, `dpmed.states`
and `dpmed.accounting`.

    dpmed run [STUDY] [--out DIR] [--data-path FILE] [--set KEY=VALUE ...] [--device cpu|cuda|auto]
    dpmed plan [STUDY] [the same options]       (every run's plan, the study's privacy, an estimated time; no training)
    dpmed report DIR
    dpmed status DIR
    dpmed privacy epsilon|calibrate|risk ...     (planning without training; imports no torch)
    dpmed --version;  python -m dpmed ...

Exit status (``EXIT_STATUS``, which `dpmed --help` prints): 0 done, 1 some runs failed or an internal error (traceback
saved to dpmed-error-*.txt), 2 bad input (or the output folder is unusable or in use, or torchvision was built for
another torch), 130 interrupted (Ctrl-C, or SIGTERM during `dpmed run`: `timeout`, SLURM, `docker stop`; the same
clean-up runs for both; the command then ends as killed by SIGINT, which a shell shows as 130: `command`).
What runs log goes to the terminal (stderr) and to the study's private log file (`dpmed.log`); progress bars only
where stderr is a terminal, elsewhere a line after each of a run's first two steps and at each tenth of its steps
(each hundredth from 1000 steps).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import sys
import tempfile
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Sequence

from dpmed.errors import ConfigError, DpmedError
from dpmed.interruption import interruptible
from dpmed.log import detach, hold_lines, log_to_console, log_to_file, quiet_known_noise

__all__ = ["command", "main"]

_log = logging.getLogger("dpmed.cli")
INTERRUPTED = 130   # what main returns after Ctrl-C (or SIGTERM during `dpmed run`): 128 + SIGINT
# what `dpmed --help` says of main's statuses, for a script or a batch job that branches on them
EXIT_STATUS = ("exit status: 0 done; 1 some runs failed, or an internal error (its traceback in the "
               "dpmed-error-*.txt file the message names); 2 bad input, an output folder that cannot be written or is "
               "in use, or a torchvision built for another torch (one line, no traceback); 130 interrupted (Ctrl-C, "
               "or SIGTERM during `dpmed run`)")
# dpmed.accounting's ACCOUNTANTS and NOISES, written out so that parsing a command line does not import
# dp_accounting (tests/test_cli_privacy.py holds them equal)
PRIVACY_ACCOUNTANTS = ("pld", "rdp", "rdp-classic", "pure")
PRIVACY_NOISES = ("gaussian", "laplace")


def _version() -> str:
    try:
        return metadata.version("dpmed")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
        return "unknown (not installed)"


def _positive_int(text: str) -> int:
    """An argparse type for a count of at least 1: refused while the command line is parsed, not after the data
    have been read (minutes on a real dataset)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (1 or more), got {text}")
    return value


def _float(text: str) -> float:
    """An argparse type for the privacy commands' real numbers: a nonzero number below the smallest double (about
    5e-324) reads as 0, and the checks after it would refuse a value the user never typed (--delta 1e-400: "got 0")
    or take a noise multiplier of 1e-400 as no noise at all."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None    # argparse's words for it
    mantissa = text.lower().partition("e")[0]
    if value == 0 and any(digit in "123456789" for digit in mantissa):
        raise argparse.ArgumentTypeError(f"{text} underflows to 0 in floating point (the smallest positive double is "
                                         "about 5e-324); give 5e-324 or more")
    if math.isinf(value) and "inf" not in mantissa:     # 1e400: "must be a finite number, got inf" said too little
        raise argparse.ArgumentTypeError(f"{text} overflows to infinity in floating point (the largest double is "
                                         "about 1.8e308); give a smaller number")
    return value


def _path(text: str) -> Path:
    """An argparse type for a path: an empty one (an unset shell variable, dpmed run "$STUDY") is refused, where
    Path("") would read it as the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?); give a path")
    return Path(text)


def _study_arguments(p: argparse.ArgumentParser) -> None:
    """What names a study and its output folder: the same for `run` and `plan`."""
    p.add_argument("study", nargs="?", type=_path, help="study file (default: the embedded phantom quickstart)")
    p.add_argument("--out", type=_path, default=Path("results"), help="output root (default: ./results)")
    p.add_argument("--data-path", type=_path,
                   help="the dataset's file or folder, overriding data.path in the study: a relative --data-path (or "
                        "path given with --set) is read from the current directory (a relative data.path, from the "
                        "study file's folder)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a study key, e.g. --set training.epochs=2 (repeatable, applied in order; a "
                        "section's, e.g. training={...}, replaces the file's whole section)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   help="where runs train, overriding training.device (auto: a CUDA GPU if torch sees one); it "
                        "changes no result, so finished runs are kept")


def _schedule_arguments(p: argparse.ArgumentParser, *, with_delta: bool = True,
                        with_noise: bool = True) -> None:
    p.add_argument("--sample-rate", type=_float, help="Poisson rate q (or give --dataset-size and --batch-size)")
    p.add_argument("--steps", type=int, help="optimiser steps T (or give --epochs with --dataset-size)")
    p.add_argument("--dataset-size", type=int,
                   help="N training units (images, or patients with --unit patient): q = batch / N, T = epochs * "
                        "round(N / batch)")
    p.add_argument("--batch-size", type=int, help="expected Poisson batch size, in units (with --dataset-size)")
    p.add_argument("--unit", choices=("image", "patient"), default="image",
                   help="what one neighbour adds or removes: one image (default) or one patient with all of their "
                        "images, as a study's privacy_unit (the same eps; only what it protects differs)")
    p.add_argument("--epochs", type=int, help="passes over the data (with --dataset-size and --batch-size)")
    if with_delta:
        p.add_argument("--delta", type=_float, help="delta (default min(1e-5, 1/(10 N)) when --dataset-size is given)")
    if with_noise:   # reconstruction bounds hold for Gaussian noise only (METHODS.md s.7): risk offers no choice
        p.add_argument("--noise", choices=PRIVACY_NOISES, default="gaussian",
                       help="gaussian (L2 clipping; default) or laplace (L1 clipping, noise multiplier = b / C1)")


def _privacy_arguments(p: argparse.ArgumentParser) -> None:
    """`dpmed privacy`'s flags; its commands are in `dpmed.privacy_commands`."""
    sub = p.add_subparsers(dest="privacy_command", required=True)
    # no abbreviated flags: --noise would otherwise be read as --noise-multiplier where a command has no --noise
    eps = sub.add_parser("epsilon", help="eps(delta) of a DP-SGD run with given noise", allow_abbrev=False)
    eps.add_argument("--noise-multiplier", type=_float, required=True,
                     help="sigma: the noise std over the clipping norm C (b / C1 for Laplace)")
    _schedule_arguments(eps)
    eps.add_argument("--accountant", choices=(*PRIVACY_ACCOUNTANTS, "all"), default="pld",
                     help="pld (default), rdp, rdp-classic, pure (Laplace only), or all that apply")
    cal = sub.add_parser("calibrate", help="the smallest noise multiplier whose eps is at most a target",
                         allow_abbrev=False)
    cal.add_argument("--target-epsilon", type=_float, required=True, help="the eps budget of the whole run")
    _schedule_arguments(cal)
    cal.add_argument("--accountant", choices=PRIVACY_ACCOUNTANTS, default="pld",
                     help="pld (default), rdp, rdp-classic, pure (Laplace only)")
    risk = sub.add_parser("risk", help="reconstruction and membership-inference bounds (METHODS.md s.7)",
                          allow_abbrev=False)
    risk.add_argument("--noise-multiplier", type=_float, required=True,
                      help="sigma: the noise std over the clipping norm C (Gaussian noise)")
    _schedule_arguments(risk, with_delta=False, with_noise=False)
    risk.add_argument("--kappa", type=_float, help="the attacker's prior success (default 1 / N with --dataset-size)")


def _run_options() -> argparse.ArgumentParser:
    """How `dpmed run` runs a study's runs: a parent parser of `run` and `plan`, so that a `dpmed run` command line
    also plans."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("how `dpmed run` runs the study's runs")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bars (they are drawn only where stderr is a terminal); "
                        "a line after each of a run's first two steps and at each tenth of its steps (each "
                        "hundredth from 1000 steps) instead")
    g.add_argument("--workers", type=_positive_int, metavar="N",
                   help="runs at a time in local processes (default 1; not with --executor ray)")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local (default) or ray: each run a Ray task (pip install 'dpmed[ray]')")
    g.add_argument("--address", help="Ray cluster address, with --executor ray (default: start a local Ray instance)")
    g.add_argument("--fail-fast", action="store_true", help="stop at the first failed run (default: go on)")
    return p


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpmed", description="What does privacy cost a diagnostic imaging model?",
                                epilog=EXIT_STATUS)
    p.add_argument("--version", action="version", version=f"dpmed {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train and evaluate every arm of a study, then write the report",
                         parents=[_run_options()])
    _study_arguments(run)
    plan = sub.add_parser("plan", help="every run's plan (sigma, eps, q, T), the study's privacy and an estimated "
                                       "time; reads the data and calibrates as `run` does, trains nothing",
                          description="Every run's plan (sigma, eps, q, T), the study's privacy and an estimated "
                                      "time: reads the data and calibrates as `run` does, and trains nothing (it "
                                      "does not read pretrain.data's public images: `run` reads them and checks "
                                      "their overlap with the private data before pretraining). It "
                                      "writes one file: where the study has DP-SGD arms and the folder holds none "
                                      "yet, the DP count of the training set they plan from, drawn now (or taken "
                                      "back from the records of finished runs planned from it), in "
                                      "OUT/<study>/private/released_sizes.json (private; `run` reuses that draw, so "
                                      "its plans are the ones shown here).",
                          epilog="`dpmed run`'s options are accepted, so that a `dpmed run` command line plans "
                                 "with `run` swapped for `plan`: --workers N estimates the time with N runs at a "
                                 "time; --no-progress, --fail-fast, --executor and --address do not change the "
                                 "plan (a combination `dpmed run` refuses is refused here too)",
                          parents=[_run_options()])
    _study_arguments(plan)
    plan.add_argument("--no-estimate", action="store_true",
                      help="skip the timing probe (seconds for small models, minutes for ResNets at 224 px on a CPU)")
    status = sub.add_parser("status", help="list the finished, unreadable, failed, interrupted (the step its "
                                           "checkpoint reached), interrupted release (model in runs/, no run.json), "
                                           "pending and unknown (private/ unreadable to this user) runs in DIR",
                            description="List every run of the study in DIR with its state: finished (its "
                                        "run.json exists; and where the next `dpmed run` evaluates it again, or "
                                        "refuses the study as the model.weights file it started from holds other "
                                        "contents now), unreadable, failed (and why), interrupted (the step its "
                                        "checkpoint reached: `dpmed run` continues from there if the training "
                                        "data, which status does not read, are unchanged; or why it cannot), "
                                        "interrupted release "
                                        "(its model and outputs in runs/ without its run.json: not to be shared), "
                                        "pending or unknown; before them, a model.weights file that cannot be "
                                        "read now (gone, a folder), which `dpmed run` refuses the study for. "
                                        "It reads the folder and changes nothing, so it may run while a `dpmed run` "
                                        "works there (and then says so).")
    status.add_argument("dir", type=_path, help="a study output folder (holds study.yaml and runs/)")
    rep = sub.add_parser("report", help="rebuild results.csv and report.html from the finished runs in DIR (and "
                                        "move an older dpmed's DP-SGD wall times from run.json into private/)",
                         description="Rebuild results.csv, comparisons.json, report.html and its figures from the "
                                     "finished runs in DIR (nothing is trained), e.g. after deleting a run's "
                                     "folder. Unfinished runs are "
                                     "left out: `dpmed run` finishes them.")
    rep.add_argument("dir", type=_path, help="a study output folder (holds study.yaml and runs/)")
    _privacy_arguments(sub.add_parser("privacy", help="eps, noise calibration and reconstruction risk, no training"))
    return p


# ---------------------------------------------------------------------------------------------------- studies

def _load(args: argparse.Namespace) -> Any:
    """The study of `run` or `plan`, with the command line's overrides; a problem they cause is blamed on the
    option that set it."""
    from dpmed.config import load_study, parse_override  # imported here: `dpmed privacy` needs no torch

    overrides: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for text in args.overrides:
        key, value = parse_override(text)
        # a key given again applies where it is given again: after a --set of its section between the two
        overrides.pop(key, None)
        overrides[key], origins[key] = value, f"--set {text}"
    if args.data_path is not None and args.study is None:
        raise ConfigError(f"--data-path {args.data_path}: without a study file dpmed runs the embedded phantom "
                          "quickstart, which generates its images and reads no data; pass a study file first "
                          f"(e.g. dpmed {args.command} configs/kermany.yaml --data-path {args.data_path}; see "
                          "configs/)")
    if args.data_path is not None:
        try:
            data_path = args.data_path.resolve()
            exists = data_path.exists()
        except (OSError, ValueError) as exc:    # a name too long for the file system, a NUL byte in it
            raise ConfigError(f"--data-path {args.data_path}: not a usable path ({exc})") from None
        if not exists:   # load_study would see only the absolute path, not what it was read from
            tried = "" if args.data_path.is_absolute() else (f" (tried {data_path}: a relative --data-path is read "
                                                             f"from the current directory, {Path.cwd()})")
            raise ConfigError(f"--data-path {args.data_path}: no such file or folder{tried}; pass the dataset's "
                              "file or folder")
        _give_last(overrides, origins, "data.path", str(data_path), f"--data-path {args.data_path}")
    if args.device is not None:
        _give_last(overrides, origins, "training.device", args.device, f"--device {args.device}")
    return load_study(args.study, overrides, origins=origins)


def _give_last(overrides: dict[str, Any], origins: dict[str, str], key: str, value: Any, option: str) -> None:
    """Set ``key`` as ``option`` (--data-path, --device) gives it: after every --set, so that a --set of its section
    (data={...}) replaces nothing of it. The --set that gave the key last, itself or in its section's value
    (training={device: gpu}), then changes nothing there, and was dropped without a word, a mistake in it (gpu)
    unchecked: told."""
    given = next((k for k in reversed(list(overrides)) if key == k or key.startswith(f"{k}.")), None)
    if given == key:
        _log.warning("%s changes nothing: %s gives %s; leave out one of them", origins[key], option, key)
    elif given is not None:      # a section: what it replaced, it gave, the key or not
        inner: Any = overrides[given]
        for part in key.removeprefix(f"{given}.").split("."):
            inner = inner.get(part) if isinstance(inner, dict) else None
        if inner is not None:
            _log.warning("%s: the %s it gives changes nothing: %s gives %s; leave it out of one of them",
                         origins[given], key, option, key)
    overrides.pop(key, None)
    overrides[key], origins[key] = value, option


def _run(args: argparse.Namespace) -> int:
    bars = not args.no_progress and sys.stderr.isatty()
    handlers = [log_to_console(bars=bars)]   # before Opacus is imported: it configures logging if nobody has
    try:
        with interruptible() as received, _without_core_dumps():
            return _run_logged(args, bars, handlers, received)
    finally:
        detach(*handlers)


@contextlib.contextmanager
def _without_core_dumps() -> Iterator[None]:
    """No core dumps from `dpmed run` or the processes it starts on this machine (workers, a local Ray instance:
    they inherit the limit): a crash's memory image would hold a run's privacy key and noise, its unreleased model
    and the training images, in a file outside ``private/`` that a crash reporter may collect or send. The soft limit
    RLIMIT_CORE is 0 for the block and comes back after (for `main` called from Python). A reporter that ignores the
    limit is beyond it (the kernel's and systemd-coredump's honour it). Nothing to do on Windows (no core files)."""
    try:
        import resource
    except ImportError:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def _run_logged(args: argparse.Namespace, bars: bool, handlers: list[logging.Handler], received: list[int]) -> int:
    held = hold_lines()         # what reading the study file says, for the log file in the folder it names
    try:
        study = _load(args)     # first: a mistake in the study file is told before seconds of importing below
    finally:
        detach(held)
    from dpmed.executors import WORKER_DIED, check_executor_options
    from dpmed.folders import StudyFolder
    from dpmed.numbers import count_text
    from dpmed.reporting import summary_text
    from dpmed.study import run_study

    check_executor_options(args.executor, workers=args.workers, address=args.address)   # before the data are read
    folder = StudyFolder(args.out / study.name)
    handlers.append(log_to_file(folder.log, earlier=held))
    try:
        result = run_study(study, out=args.out, progress=bars, executor=args.executor, workers=args.workers or 1,
                           address=args.address, fail_fast=args.fail_fast, worker_setup=quiet_known_noise)
    except KeyboardInterrupt:
        how = " (SIGTERM; exit status 130, as for Ctrl-C)" if signal.SIGTERM in received else ""
        _log.warning("interrupted%s: finished runs are kept in %s; run the same command to continue", how,
                     folder.root)
        return INTERRUPTED
    if result.records:
        print(summary_text(result.records))
    print(f"\n{count_text(len(result.records), 'run')} ({len(result.resumed)} finished earlier) in "
          f"{result.seconds:.0f} s")
    if result.records:
        print(f"results: {result.results_path}\nreport:  {result.report_path}")
    if folder.log.is_file():
        print(f"log:     {folder.log} (private: it holds what no eps covers)")
    if result.failures or result.pending:
        for failure in result.failures:
            print(f"FAILED {failure.run_id}: {failure.error} ({failure.traceback_note})", file=sys.stderr)
        # runs are left unfinished by a --fail-fast stop after a run's own failure, or by a pool that a dead worker
        # broke (which fails the run it held, if it held one): with --fail-fast or without
        stopped_fast = args.fail_fast and any(failure.error != WORKER_DIED for failure in result.failures)
        why = ("--fail-fast stopped the study; a run stopped mid-way continues from its checkpoint" if stopped_fast
               else "a worker process died, and the pool stopped the others: a run stopped mid-way continues from "
               "its checkpoint, one not started trains")
        stopped = f", {len(result.pending)} not finished ({why})" if result.pending else ""
        print(f"{len(result.failures)} run(s) failed{stopped}; fix the cause and run the same command again: "
              "finished runs are kept", file=sys.stderr)
        return 1
    return 0


def _plan(args: argparse.Namespace) -> int:
    handler = log_to_console()   # before Opacus is imported: it configures logging if nobody has
    try:
        study = _load(args)     # first: a mistake in the study file is told before seconds of importing below
        from dpmed.executors import check_executor_options
        from dpmed.plan_command import print_plan
        from dpmed.pretraining import check_weights, refuse_changed_weights
        from dpmed.study import check_machine, checkpoints_of, estimate_times, prepare_study

        check_executor_options(args.executor, workers=args.workers, address=args.address)   # as `run` would
        check_machine(study)     # as `run_study` does, before the data are read or a folder is made
        prepared = prepare_study(study, out=args.out)
        sha = refuse_changed_weights(study, prepared.folder)     # as `dpmed run` does, before it reads the weights
        check_weights(study, prepared.dataset)
        if not args.no_estimate and prepared.todo:
            _log.info("estimating the study's time: timing a few steps of each kind of run (--no-estimate skips this)")
        told = checkpoints_of(prepared, sha)
        rates, seconds = ((None, {}) if args.no_estimate or not prepared.todo else
                          estimate_times(prepared, told.steps_left))
    finally:
        detach(handler)
    print_plan(prepared, told, rates, seconds, workers=args.workers)
    return 0


def _check_study_folder(study_dir: Path) -> None:
    """`report` and `status` read the study.yaml `dpmed run` writes into a study's folder: without one, say what the
    path is instead (missing, a file, the output root above the study folders, a study folder that lost its
    study.yaml) and what to pass or do."""
    from dpmed.folders import StudyFolder

    folder = StudyFolder(study_dir)
    if folder.resolved_study.is_file():
        return
    what = "pass the folder `dpmed run` wrote for the study (OUT/<study name>, by default results/<study name>)"
    if not study_dir.exists():
        raise ConfigError(f"no such folder {study_dir}; {what}")
    if not study_dir.is_dir():
        raise ConfigError(f"{study_dir} is a file, not a folder; {what}")
    studies = sorted(p.parent for p in study_dir.glob("*/study.yaml"))
    if studies:
        raise ConfigError(f"{study_dir} holds no study.yaml but {len(studies)} study folder(s) do: "
                          f"{', '.join(map(str, studies[:5]))}; pass one of them")
    if folder.runs.is_dir():
        raise ConfigError(f"{folder.resolved_study} is missing: {study_dir} holds runs/ but not the study.yaml `dpmed "
                          f"run` writes beside it; rerun the study file that made them (name: {study_dir.name}) with "
                          f"`dpmed run STUDY --out {study_dir.parent}`: it rewrites study.yaml and keeps the finished "
                          "runs")
    if folder.released_sizes.is_file():      # what `dpmed plan` keeps, so that the run plans from the same count
        raise ConfigError(f"{study_dir} holds no run yet, only the DP count of the training set that `dpmed plan` drew "
                          f"({folder.released_sizes}); `dpmed run STUDY --out {study_dir.parent}` trains the study "
                          "there")
    if folder.log.is_file():                 # the log is opened at the first line: a run refused before it trained
        raise ConfigError(f"{study_dir} holds no run yet: `dpmed run` stopped before it wrote study.yaml; its log "
                          f"{folder.log} (private) says why. Fix that and run the study again with `--out "
                          f"{study_dir.parent}`")
    raise ConfigError(f"{study_dir} is not a dpmed study folder: it holds no study.yaml (nor runs/); {what}")


def _holder_note(study_dir: Path) -> str | None:
    from dpmed.states import folder_holder

    holder = folder_holder(study_dir)
    return None if holder is None else f"a dpmed run ({holder.describe()}) is working in this folder now"


def _report(args: argparse.Namespace) -> int:
    from dpmed.folders import StudyFolder
    from dpmed.reporting import summary_text
    from dpmed.outputs import rebuild_outputs
    from dpmed.states import release_cut_short

    _check_study_folder(args.dir)
    note = _holder_note(args.dir)
    handler = log_to_console()      # what the rebuild says of the folder (e.g. an older run.json it rewrote)
    try:
        resolved, records = rebuild_outputs(args.dir)
    finally:
        detach(handler)
    print(summary_text(records))
    folder = StudyFolder(args.dir)      # both files it rebuilt, named as `dpmed run` names them
    print(f"\nresults: {folder.results}\nreport:  {folder.report} ({len(records)} of {len(resolved.runs)} runs "
          "finished)")
    planned = {plan.run_id for plan in resolved.runs}
    for run_id, left in folder.interrupted_releases().items():     # as the report's top says: before runs/ is shared
        print(f"warning: {run_id}: {release_cut_short(run_id, left, listed=run_id in planned)}", file=sys.stderr)
    if note:
        print(f"note: {note}: this report covers the runs finished so far, and that run rewrites it when it ends",
              file=sys.stderr)
    return 0


def _privacy(args: argparse.Namespace) -> int:
    from dpmed.privacy_commands import privacy_command   # imported here: dp_accounting takes a second to import

    return privacy_command(args)


def _status(args: argparse.Namespace) -> int:
    from dpmed.states import FileState, run_states

    _check_study_folder(args.dir)
    note = _holder_note(args.dir)
    counts: dict[str, int] = {}
    files = []      # study.yaml or model.weights, unreadable: named after the runs' count, not counted as runs
    for row in run_states(args.dir):
        name, kind, detail = row
        if isinstance(row, FileState):
            files.append(f"{name} {kind}")
        else:
            counts[kind] = counts.get(kind, 0) + 1
        print(f"{name:<36} {kind}" + (f": {detail}" if detail else ""))
    runs = ", ".join(f"{counts[k]} {k}" for k in ("finished", "unreadable", "failed", "interrupted",
                                                  "interrupted release", "pending", "unknown") if k in counts)
    print("; ".join([runs, *files] if runs else files))
    if note:
        print(f"{note}: runs shown as interrupted or pending may be in progress")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpmed`` command; returns the exit status `dpmed --help` lists (``EXIT_STATUS``):
    any `DpmedError` gives 2 with its message alone, any other exception 1 with its traceback in a file."""
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
        return INTERRUPTED
    except BrokenPipeError:  # the reader of our output went away (e.g. `dpmed report DIR | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the last resort: a bug in dpmed, told in one line, its traceback kept
        return _internal_error(exc, args.command)


def _internal_error(exc: Exception, command: str) -> int:
    """One line for a failure that is dpmed's own, with its traceback in a file only the user can read (it may name
    a private file or value); after `dpmed run` or `dpmed report` finished runs are on disk already, so the same
    command continues after a fix (the other commands keep nothing to continue from)."""
    fd, path = tempfile.mkstemp(prefix="dpmed-error-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(exc)))
    kept = (" Finished runs are kept and the same command goes on from them." if command in ("run", "report")
            else "")
    print(f"dpmed: internal error: {type(exc).__name__}: {exc}.{kept} Please report this with the traceback in {path} "
          "(read it first: as this line, it may quote a file name or value of your data)", file=sys.stderr)
    return 1


def command() -> None:
    """The ``dpmed`` command (and ``python -m dpmed``): main's status as the process's, except after an interrupt.
    Then, once main has cleaned up and said so in one line, the process ends as killed by SIGINT, as CPython ends one
    after an uncaught Ctrl-C: a shell shows status 130, and a shell script that runs dpmed stops at the Ctrl-C
    instead of going on to its next command, as bash does after a command that exits normally on Ctrl-C. It is also
    the only end that does not depend on where the interrupt landed: CPython ends a process killed by SIGINT, however
    its KeyboardInterrupt was caught, when it was raised inside exec() of a string (every lazily imported dataclass
    runs one), so `sys.exit(130)` ended some interrupted runs with status 130 and others killed by SIGINT. (On
    Windows CPython then exits with STATUS_CONTROL_C_EXIT, which cmd.exe knows as Ctrl-C.)"""
    status = main()
    if status == INTERRUPTED:
        sys.excepthook = _quiet_interrupt   # told already, in one line: no traceback
        raise KeyboardInterrupt
    sys.exit(status)


def _quiet_interrupt(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    if not issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)


if __name__ == "__main__":
    command()
