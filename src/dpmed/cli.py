"""The command line: parsing and printing only; the work happens in `dpmed.study`.

    dpmed run [STUDY] [--out DIR] [--data-path FILE] [--set KEY=VALUE ...]
    dpmed report DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from importlib import resources
from pathlib import Path
from typing import Sequence

import yaml

from dpmed.config import load_study, parse_override
from dpmed.errors import DpmedError
from dpmed.reporting import summary_text, write_report, write_results_table
from dpmed.study import run_study

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
    rep = sub.add_parser("report", help="rebuild results.csv and report.html from the finished runs in DIR")
    rep.add_argument("dir", type=Path, help="a study output folder (holds study.yaml and runs/)")
    return p


def _run(args: argparse.Namespace) -> int:
    overrides = dict(parse_override(text) for text in args.overrides)
    if args.data_path is not None:
        overrides["data.path"] = str(args.data_path.resolve())
    study = load_study(args.study or _default_study(), overrides)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        result = run_study(study, out=args.out, progress=not args.no_progress, log=log)
    except KeyboardInterrupt:
        log(f"interrupted: finished runs are kept in {args.out / study.name}; run the same command to continue")
        return 130
    print(summary_text(result.records))
    print(f"\n{len(result.records)} runs ({len(result.resumed)} finished earlier) in {result.seconds:.0f} s")
    print(f"results: {result.results_path}\nreport:  {result.report_path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    study_file = args.dir / "study.yaml"
    if not study_file.is_file():
        raise DpmedError(f"{args.dir} holds no study.yaml; pass the folder `dpmed run` wrote (results/<study>)")
    resolved = yaml.safe_load(study_file.read_text(encoding="utf-8"))
    records = [json.loads(p.read_text(encoding="utf-8")) for run in resolved["runs"]
               if (p := args.dir / "runs" / run["run_id"] / "run.json").exists()]
    if not records:
        raise DpmedError(f"{args.dir} has no finished run (no runs/*/run.json); run the study first")
    write_results_table(records, args.dir / "results.csv")
    write_report(resolved, records, args.dir / "report.html")
    print(summary_text(records))
    print(f"\nreport: {args.dir / 'report.html'} ({len(records)} of {len(resolved['runs'])} runs finished)")
    return 0


class _KnownRdpNoise(logging.Filter):
    """dp_accounting logs a warning whenever one fractional RDP order fails to converge; it then leaves that order
    out, and the eps of the remaining orders is still a valid upper bound. Dozens of these appear during noise
    calibration and bury the output, so the command line drops this one message (the library API is untouched)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpmed`` command; returns the exit status (0 ok, 2 bad input, 130 interrupted)."""
    args = _parser().parse_args(argv)
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _KnownRdpNoise) for f in absl.filters):
        absl.addFilter(_KnownRdpNoise())
    try:
        return {"run": _run, "report": _report}[args.command](args)
    except DpmedError as exc:
        print(f"dpmed: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
