"""Would a threshold chosen at the test site close the accuracy gap? Binary studies only, from saved predictions.

    python benchmarks/site_calibration.py results/kermany [more study folders] [--fractions 0.1,0.25,0.5]
        [--draws 200] [--seed 0] [--json OUT.json]

A study picks each run's threshold on its validation split (Youden's J, METHODS.md sec. 4). When the test set comes
from elsewhere (the Kermany release's test folder does: the report's threshold-shift warning), that threshold can
sit in the wrong place however good the model. A hospital deploying a model would re-choose it on a small labelled
sample of its own patients. This harness measures what that would give, without touching the study's evaluation:
it draws a fraction of the test set's *patients* at random (all their images together), chooses Youden's threshold
on them and scores accuracy on the remaining patients only, over many draws. Beside it: accuracy at the study's
validation threshold, and the best accuracy any threshold reaches on the whole test set (the test-label oracle, an
upper bound no honest evaluation may use). The split of the test set is for this analysis alone; no study reads it.

Reads ``runs/<run>/predictions.npz`` (test scores, labels and patient ids; validation scores and labels) and groups
runs by folder name without its ``_seed<N>``. This is a benchmark, not a test: the table goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

from dpmed.evaluation.predictions import load_predictions
from dpmed.evaluation.utility import youden_threshold

__all__ = ["calibrated_accuracy", "oracle_accuracy", "main"]


def _accuracy(labels: np.ndarray, scores: np.ndarray, threshold: float) -> float:
    return float(np.mean((scores >= threshold) == labels.astype(bool)))


def oracle_accuracy(labels: np.ndarray, scores: np.ndarray) -> float:
    """The best accuracy of ``score >= t`` over every t (each observed score, and above them all)."""
    candidates = np.append(np.unique(scores), np.inf)
    return max(_accuracy(labels, scores, t) for t in candidates)


def calibrated_accuracy(labels: np.ndarray, scores: np.ndarray, patients: np.ndarray, *, fraction: float,
                        draws: int, rng: np.random.Generator) -> list[float]:
    """Accuracy on the patients not drawn, at Youden's threshold on a random ``fraction`` of the patients; one
    value per draw (a draw whose sample holds one class only has no Youden threshold and is skipped)."""
    unique = np.unique(patients)
    size = max(1, round(fraction * unique.size))
    if size >= unique.size:
        raise ValueError(f"fraction {fraction} leaves no patient to evaluate on ({unique.size} patients)")
    out = []
    for _ in range(draws):
        sample = np.isin(patients, rng.choice(unique, size, replace=False))
        try:
            threshold = youden_threshold(labels[sample], scores[sample])
        except ValueError:
            continue
        out.append(_accuracy(labels[~sample], scores[~sample], threshold))
    return out


def _rows(study: Path, fractions: list[float], draws: int, seed: int) -> list[dict]:
    rows = []
    for path in sorted(study.glob("runs/*/predictions.npz")):
        z = load_predictions(path)
        if z.val is None or z.test.scores.ndim != 1:
            print(f"{path}: skipped (not a binary run with validation predictions)", file=sys.stderr)
            continue
        y, s, p = z.test.labels, z.test.scores, z.test.patient_ids
        rng = np.random.default_rng(seed)     # the same draws for every run: differences are paired
        row = {"study": study.name, "run": path.parent.name,
               "group": re.sub(r"_seed\d+$", "", path.parent.name),
               "validation": _accuracy(y, s, youden_threshold(z.val.labels, z.val.scores)),
               "oracle": oracle_accuracy(y, s)}
        for f in fractions:
            accs = calibrated_accuracy(y, s, p, fraction=f, draws=draws, rng=rng)
            row[f"site_{f:g}"] = statistics.fmean(accs)
            row[f"site_{f:g}_p5"] = float(np.percentile(accs, 5))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="+", type=Path)
    parser.add_argument("--fractions", default="0.1,0.25,0.5", help="share of the test patients drawn (comma list)")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    args = parser.parse_args(argv)
    fractions = [float(f) for f in args.fractions.split(",")]
    rows = [r for study in args.studies for r in _rows(study, fractions, args.draws, args.seed)]
    if not rows:
        raise SystemExit("no binary run with predictions.npz under " + ", ".join(map(str, args.studies)))
    columns = ["validation", *(f"site_{f:g}" for f in fractions), "oracle"]
    print("| study | runs | " + " | ".join(columns) + " |  (accuracy: mean over seeds, per seed in brackets)")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["study"], r["group"]), []).append(r)
    for (study, group), members in groups.items():
        cells = [f"{statistics.fmean(m[c] for m in members):.3f} ("
                 + ", ".join(f"{m[c]:.3f}" for m in members) + ")" for c in columns]
        print(f"| {study} | {group} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
