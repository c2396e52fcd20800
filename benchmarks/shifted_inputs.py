"""Does averaging a model's scores over shifted copies of each image (test-time augmentation) change what a study
measures? Binary studies only, from the saved models; nothing in the study folder is changed.

    python benchmarks/shifted_inputs.py results/kermany [more study folders] [--shift 4] [--json OUT.json]

Test-time augmentation is post-processing of the released model, so it costs no privacy; the question is whether
it is worth a recipe setting. It would be if it raised *validation* AUROC, on which a user chooses, and test
accuracy at the threshold chosen on validation (Youden's J, METHODS.md sec. 4, on the averaged validation scores).
Variants: ``shifts`` averages P(class 1) over the image and its four reflect-padded shifts by ``--shift`` pixels
(default S / 16, the scale of a study's crop augmentation, S / 8, halved), ``flip`` over the image and its mirror
image. The harness first recomputes each run's saved test scores from its model (``none``) and stops if they
differ: then it would be measuring something other than the study's model.

Reads the folder's study.yaml (the data, as the runs saw them) and ``runs/<run>/model.pt``, ``run.json``,
``predictions.npz``. This is a benchmark, not a test: the table goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from dpmed.data import ImageSet
from dpmed.errors import DpmedError
from dpmed.evaluation.inference import predict
from dpmed.evaluation.predictions import load_predictions
from dpmed.evaluation.utility import auroc, youden_threshold
from dpmed.models import build_model
from dpmed.records import read_record
from dpmed.states import read_resolved
from dpmed.study import load_study_data

__all__ = ["shifted", "transforms", "main"]


def shifted(images: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """Each image [N, C, H, W] moved by (dx, dy) pixels, the uncovered edge filled by reflection."""
    pad = max(abs(dx), abs(dy))
    if pad == 0:
        return images
    h, w = images.shape[-2:]
    padded = F.pad(torch.from_numpy(images), (pad, pad, pad, pad), mode="reflect")
    return padded[..., pad - dy:pad - dy + h, pad - dx:pad - dx + w].contiguous().numpy()


def transforms(variant: str, shift: int) -> list:
    if variant == "none":
        return [lambda x: x]
    if variant == "shifts":
        return [lambda x: x] + [lambda x, d=d: shifted(x, *d) for d in ((shift, 0), (-shift, 0), (0, shift),
                                                                            (0, -shift))]
    if variant == "flip":
        return [lambda x: x, lambda x: np.ascontiguousarray(x[..., ::-1])]
    raise ValueError(f"unknown variant {variant!r}")


def _scores(model: torch.nn.Module, data: ImageSet, task, variant: str, shift: int) -> np.ndarray:
    """P(class 1), the mean over the variant's copies of every image (each scored as the study scored it)."""
    return np.mean([predict(model, data.with_images(f(data.images)), task) for f in transforms(variant, shift)], axis=0)


def _rows(study: Path, variants: list[str], shift: int | None) -> list[dict]:
    try:
        resolved = read_resolved(study)
        dataset = load_study_data(resolved.study)
    except DpmedError as exc:           # a mistyped folder, or data moved since the study: one line, no traceback
        raise SystemExit(str(exc)) from None
    if dataset.task.kind != "binary" or dataset.normalization is not None:
        raise SystemExit(f"{study}: binary studies without data.preprocessing.normalize only")
    size = dataset.test.image_shape[-1]
    shift = shift if shift is not None else max(1, round(size / 16))
    rows = []
    for run in sorted(p.parent for p in study.glob("runs/*/model.pt")):
        record = read_record(run / "run.json")
        model = build_model(record.plan.model, in_channels=dataset.test.image_shape[0],
                            num_outputs=dataset.task.num_outputs, image_size=size)
        model.load_state_dict(torch.load(run / "model.pt", map_location="cpu", weights_only=True))
        saved = load_predictions(run / "predictions.npz").test.scores
        y = dataset.test.labels.astype(bool)
        row = {"study": study.name, "run": run.name, "group": run.name.rsplit("_seed", 1)[0], "shift_px": shift}
        for variant in ["none", *variants]:
            val, test = (_scores(model, s, dataset.task, variant, shift) for s in (dataset.val, dataset.test))
            if variant == "none" and not np.allclose(test, saved, rtol=1e-4, atol=1e-5):
                raise SystemExit(f"{run}: the model does not give its saved test scores (max difference "
                                 f"{np.max(np.abs(test - saved)):.2g}); was the folder made by another version?")
            threshold = youden_threshold(dataset.val.labels, val)
            row[variant] = {"val_auroc": auroc(dataset.val.labels, val, kind="binary")[0],
                            "test_auroc": auroc(dataset.test.labels, test, kind="binary")[0],
                            "accuracy": float(np.mean((test >= threshold) == y)),
                            "specificity": float(np.mean(test[~y] < threshold))}
        rows.append(row)
        print(f"{study.name}/{run.name}: done", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="+", type=Path)
    parser.add_argument("--variants", default="shifts,flip", help="comma list of shifts, flip")
    parser.add_argument("--shift", type=int, help="pixels (default: image size / 16)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    rows = [r for study in args.studies for r in _rows(study, variants, args.shift)]
    if not rows:
        raise SystemExit("no run with model.pt under " + ", ".join(map(str, args.studies)))
    metrics = ("test_auroc", "val_auroc", "accuracy")
    print("| study | runs | variant | " + " | ".join(f"{m} (minus none, paired)" for m in metrics) + " |  (mean ± sd "
          "over seeds)")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["study"], r["group"]), []).append(r)
    for (study, group), members in groups.items():
        for variant in ["none", *variants]:
            cells = []
            for m in metrics:
                values = [r[variant][m] for r in members]
                cell = f"{statistics.fmean(values):.3f}"
                if variant != "none":
                    diffs = [r[variant][m] - r["none"][m] for r in members]
                    spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
                    cell += f" ({statistics.fmean(diffs):+.3f} ± {spread:.3f})"
                cells.append(cell)
            print(f"| {study} | {group} ({len(members)}) | {variant} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
