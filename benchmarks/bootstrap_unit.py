"""How much wider are a study's test-set intervals when the bootstrap redraws patients instead of images?

    python benchmarks/bootstrap_unit.py results/kermany [more study folders] [--resamples 1000]

A patient's images are not independent draws, so the percentile bootstrap of METHODS.md sec. 4 redraws patients,
each with all of their images, where the test set records patient ids (`dpmed.evaluation.bootstrap`; Davison and
Hinkley 1997, sec. 3.8). Runs trained before that change hold image-level intervals. This harness recomputes every
binary run's utility from its saved ``predictions.npz`` both ways, with the run's own bootstrap seed, and prints the
widths of the AUROC and accuracy intervals and their ratio. Point values are the same both ways. Nothing in the study
folder is changed; the table goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from dpmed.evaluation.predictions import load_predictions
from dpmed.evaluation.utility import evaluate_utility

__all__ = ["widths", "main"]

METRICS = ("test_auroc", "test_accuracy")


def widths(run_dir: Path, resamples: int) -> dict[str, tuple[float, float]] | None:
    """{metric: (image-level width, patient-level width)} of one binary run; None for other tasks."""
    record = json.loads((run_dir / "run.json").read_text())    # plain JSON: records of older versions too
    p = load_predictions(run_dir / "predictions.npz")
    if p.test.scores.ndim != 1 or p.val is None:
        return None
    seed = int(record["metrics"].get("bootstrap_seed", 0))
    common = dict(kind="binary", label_names=["negative", "positive"], val_labels=p.val.labels,
                  val_scores=p.val.scores, test_labels=p.test.labels, test_scores=p.test.scores,
                  n_resamples=resamples, seed=seed)
    images = evaluate_utility(**common)
    patients = evaluate_utility(**common, test_patient_ids=p.test.patient_ids)
    return {m: (images[f"{m}_high"] - images[f"{m}_low"], patients[f"{m}_high"] - patients[f"{m}_low"])
            for m in METRICS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("studies", nargs="+", type=Path)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args(argv)
    print("| study | runs | test patients / images | metric | width, images redrawn | width, patients redrawn | "
          "ratio (mean, range) |")
    print("|---|---:|---|---|---:|---:|---|")
    for study in args.studies:
        runs = sorted(p.parent for p in study.glob("runs/*/predictions.npz"))   # none where study is no study
        found = [w for w in (widths(d, args.resamples) for d in runs) if w is not None]
        if not found:
            print(f"{study}: no binary run with predictions", file=sys.stderr)
            continue
        ids = load_predictions(runs[0] / "predictions.npz").test.patient_ids
        for m in METRICS:
            image = [w[m][0] for w in found]
            patient = [w[m][1] for w in found]
            ratios = [b / a for a, b in zip(image, patient)]
            print(f"| {study.name} | {len(found)} | {len(set(ids.tolist()))} / {len(ids)} | {m} | "
                  f"{statistics.mean(image):.3f} | {statistics.mean(patient):.3f} | {statistics.mean(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
