"""Does the way the same test films were rendered change what a Kermany study measures? Binary studies of the Kermany
folders at 28 px only, from the saved models; nothing in the study folder is changed.

    python benchmarks/film_rendering.py results/kermany-28px [more study folders]
        --medmnist ../shared/data/pneumoniamnist/pneumoniamnist.npz [--json OUT.json]

The Kermany release's test folder is also PneumoniaMNIST's test split (Yang et al. 2023): the same 624 films,
rendered there from the original files by a central square crop and a resize to 28 px. A copy of the release that
holds every film at one size (the copy in ../shared/data holds 224 x 224 px films) cannot have kept their aspect.

1. Which crop: for each test film of the study's folders, the central crop of its width or of its height whose 28 px
   rendering (antialiased bilinear, as dpmed resizes) correlates best with a PneumoniaMNIST test image, and that
   correlation. A copy made by squashing the films would match at width crops well below 1.
2. Each run's model scores both renderings of the test films. Accuracy at the run's own validation threshold
   (run.json's ``threshold``: Youden's J on the study's validation split, as the study chose it; METHODS.md sec. 4),
   specificity and AUROC, paired by run. The harness first recomputes each run's saved test scores and stops if they
   differ. PneumoniaMNIST's validation split is not used: it is drawn by image from the train folder, so it holds
   other films of the study's training patients.

3. ``--restore OUT`` writes a copy of the folders (train and test) in which each film is cut to the central crop that
   matches its PneumoniaMNIST image best (the train folder's films against PneumoniaMNIST's train and validation
   images, the test folder's against its test images), as lossless PNG under the same names: dpmed's resize then
   stretches that crop back to a square, so a study on OUT sees each film with the aspect MedMNIST gave it, at any
   size. The crops come from the films' content alone, never from a label.

This is a benchmark, not a test: the tables go to stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from dpmed.data import ImageSet
from dpmed.data.transforms import resize
from dpmed.errors import DpmedError
from dpmed.evaluation.inference import predict
from dpmed.evaluation.predictions import load_predictions
from dpmed.evaluation.utility import auroc
from dpmed.models import build_model
from dpmed.records import read_record
from dpmed.states import read_resolved
from dpmed.study import load_study_data

__all__ = ["best_crops", "main"]

FRACTIONS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5)


def _central(images: np.ndarray, width: float, height: float) -> np.ndarray:
    """The central ``width`` and ``height`` (fractions kept) of each side of images [..., H, W]."""
    h_in, w_in = images.shape[-2:]
    h, w = max(1, round(h_in * height)), max(1, round(w_in * width))
    top, left = (h_in - h) // 2, (w_in - w) // 2
    return images[..., top:top + h, left:left + w]


def _render(images: np.ndarray, width: float, height: float, size: int) -> np.ndarray:
    """Images [N, H, W] cut to their central ``width`` and ``height``, then resized to ``size`` px by dpmed's own
    resize (`dpmed.data.transforms.resize`)."""
    crop = _central(np.asarray(images, dtype=np.float32), width, height)[:, None]
    return resize(crop, size)[:, 0]


def _unit(images: np.ndarray) -> np.ndarray:
    flat = images.reshape(len(images), -1).astype(np.float64)
    flat = flat - flat.mean(axis=1, keepdims=True)
    return flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)


def best_crops(films: np.ndarray, reference: np.ndarray, fractions=FRACTIONS
               ) -> tuple[list[tuple[str, float]], np.ndarray, np.ndarray]:
    """Per film of ``films`` [N, H, W]: the central crop (("width" or "height", fraction kept)) whose rendering at
    the size of ``reference`` [M, s, s] correlates best (Pearson, over pixels) with some reference image, that
    correlation, and that image's index."""
    size = reference.shape[-1]
    ref = _unit(reference)
    best = np.full(len(films), -np.inf)
    index = np.zeros(len(films), dtype=np.int64)
    crop: list[tuple[str, float]] = [("width", 1.0)] * len(films)
    for axis in ("width", "height"):
        for f in fractions:
            rendered = _render(films, f if axis == "width" else 1.0, f if axis == "height" else 1.0, size)
            corr = _unit(rendered) @ ref.T
            top, at = corr.max(axis=1), corr.argmax(axis=1)
            better = top > best
            best[better], index[better] = top[better], at[better]
            for i in np.flatnonzero(better):
                crop[i] = (axis, f)
    return crop, best, index


def _grey_films(root: Path, split: str) -> tuple[list[Path], np.ndarray]:
    from PIL import Image

    paths = sorted(p for p in root.glob(f"{split}/*/*") if p.is_file())
    if not paths:       # else numpy's "need at least one array to stack"
        said = "no such folder" if not root.is_dir() else f"no films in {root / split}/<class>/"
        raise SystemExit(f"--films {root}: {said}; pass the Kermany chest_xray folder (train/ and test/ in it)")
    return paths, np.stack([np.asarray(Image.open(p).convert("L"), dtype=np.float32) / 255.0 for p in paths])


def restore(root: Path, medmnist: Path, out: Path) -> None:
    """Part 3 of the module docstring: ``out``/<split>/<class>/<film>.png, each film cut to its matching crop."""
    from PIL import Image

    read = {split: _grey_films(root, split) for split in ("train", "test")}    # first: a wrong path is told at once
    with np.load(medmnist) as z:
        references = {"train": np.concatenate([z["train_images"], z["val_images"]]) / 255.0,
                      "test": z["test_images"] / 255.0}
    for split, reference in references.items():
        paths, films = read[split]
        crop, corr, _ = best_crops(films, reference.astype(np.float32))
        for path, (axis, f), film in zip(paths, crop, films):
            target = out / split / path.parent.name / f"{path.stem}.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            cut = _central(film, f if axis == "width" else 1.0, f if axis == "height" else 1.0)
            Image.fromarray(np.round(cut * 255).astype(np.uint8)).save(target)
        counts = collections.Counter(f for _, f in crop)
        print(f"{split}: {len(paths)} films written to {out / split}; best correlation median {np.median(corr):.3f}, "
              f"{np.mean(corr > 0.95):.0%} above 0.95; crops kept "
              + ", ".join(f"{f:.0%}: {n}" for f, n in sorted(counts.items(), reverse=True)))


def _medmnist_test(path: Path) -> ImageSet:
    with np.load(path) as z:
        images, labels = z["test_images"].astype(np.float32) / 255.0, z["test_labels"].reshape(-1).astype(np.int64)
    n = len(labels)
    return ImageSet(images=images[:, None], labels=labels, patient_ids=np.array([f"m{i}" for i in range(n)]),
                    sex=np.full(n, "unknown"), age=np.full(n, np.nan))


def _measures(labels: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    y = labels.astype(bool)
    return {"test_auroc": auroc(labels, scores, kind="binary")[0],
            "accuracy": float(np.mean((scores >= threshold) == y)),
            "specificity": float(np.mean(scores[~y] < threshold)),
            "sensitivity": float(np.mean(scores[y] >= threshold))}


def _rows(study: Path, medmnist: ImageSet) -> list[dict]:
    try:
        dataset = load_study_data(read_resolved(study).study)
    except DpmedError as exc:           # a mistyped folder, or data moved since the study: one line, no traceback
        raise SystemExit(str(exc)) from None
    shape = dataset.test.image_shape
    if dataset.task.kind != "binary" or dataset.normalization is not None or shape != medmnist.image_shape:
        raise SystemExit(f"{study}: binary studies of {medmnist.image_shape} images without data.preprocessing."
                         f"normalize only (this one: {dataset.task.kind}, {shape})")
    rows = []
    for run in sorted(p.parent for p in study.glob("runs/*/model.pt")):
        record = read_record(run / "run.json")
        model = build_model(record.plan.model, in_channels=shape[0], num_outputs=dataset.task.num_outputs,
                            image_size=shape[-1])
        model.load_state_dict(torch.load(run / "model.pt", map_location="cpu", weights_only=True))
        ours = predict(model, dataset.test, dataset.task)
        saved = load_predictions(run / "predictions.npz").test.scores
        if not np.allclose(ours, saved, rtol=1e-4, atol=1e-5):
            raise SystemExit(f"{run}: the model does not give its saved test scores (max difference "
                             f"{np.max(np.abs(ours - saved)):.2g}); was the folder made by another version?")
        threshold = float(record.metrics["threshold"])
        rows.append({"study": study.name, "run": run.name, "group": run.name.rsplit("_seed", 1)[0],
                     "folders": _measures(dataset.test.labels, ours, threshold),
                     "medmnist": _measures(medmnist.labels, predict(model, medmnist, dataset.task), threshold)})
        print(f"{study.name}/{run.name}: done", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="*", type=Path)
    parser.add_argument("--medmnist", type=Path, required=True, help="pneumoniamnist.npz")
    parser.add_argument("--films", type=Path, help="the release's folders (test/<class>/<film>), for part 1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    parser.add_argument("--restore", type=Path, help="write the aspect-restored copy of --films here (part 3)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not args.medmnist.is_file():
        raise SystemExit(f"--medmnist {args.medmnist}: no such file; pass PneumoniaMNIST's pneumoniamnist.npz")
    if args.restore:
        if not args.films:
            raise SystemExit("--restore needs --films, the folders to restore")
        restore(args.films, args.medmnist, args.restore)
        if not args.studies:
            return
    medmnist = _medmnist_test(args.medmnist)
    films = _grey_films(args.films, "test")[1] if args.films else None     # before the runs: a wrong path at once
    rows: list[dict] = []
    for study in args.studies:
        rows += _rows(study, medmnist)
    if not rows:
        raise SystemExit("no run with model.pt under " + ", ".join(map(str, args.studies)))
    if films is not None:
        crop, corr, index = best_crops(films, medmnist.images[:, 0])
        counts = collections.Counter(crop)
        print(f"{len(films)} test films of {films.shape[1]} x {films.shape[2]} px against {len(medmnist.labels)} "
              f"PneumoniaMNIST test images: median best correlation {np.median(corr):.3f}, {np.mean(corr > 0.95):.0%}"
              f" above 0.95, {len(set(index.tolist()))} distinct images matched")
        print("| central crop kept | films |\n|---|---:|")
        for (axis, f), n in sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            print(f"| {f:.0%} of the {axis} | {n} |")
    print("\n| study | runs | measure | the folders' rendering | PneumoniaMNIST's | difference, paired |  (mean ± sd "
          "over runs; at each run's validation threshold)")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["study"], r["group"]), []).append(r)
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0   # noqa: E731
    for (study, group), members in groups.items():
        for m in ("test_auroc", "accuracy", "specificity", "sensitivity"):
            a, b = [r["folders"][m] for r in members], [r["medmnist"][m] for r in members]
            d = [y - x for x, y in zip(a, b)]
            print(f"| {study} | {group} ({len(members)}) | {m} | {statistics.fmean(a):.3f} ± {sd(a):.3f} | "
                  f"{statistics.fmean(b):.3f} ± {sd(b):.3f} | {statistics.fmean(d):+.3f} ± {sd(d):.3f} "
                  f"({', '.join(f'{x:+.3f}' for x in d)}) |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
