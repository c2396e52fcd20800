"""What the near-duplicate refusal of public pretraining finds on the shared chest X-rays, and what it costs.

    python benchmarks/overlap_crops.py [--data ../shared/data] [--films 60] [--skip-full]

`dpmed.data.overlap` refuses a public set holding copies of private images. A copy is often cropped (MedMNIST
centre-crops the Kermany films before shrinking them to 28 px), so each image is also hashed after central crops.
This harness measures, with the default threshold:

1. crafted copies: ``--films`` Kermany training films, each against a copy cut from the original film by a central
   crop of the width (95-60 %) or of both sides (95-80 %), both read at 28 px (PneumoniaMNIST's size) and 64 px;
   found = within the threshold of its own partner; and the least distance between unrelated films;
2. (unless ``--skip-full``) every Kermany image read at 64 px against every PneumoniaMNIST image, the test folder's
   624 films among them, and the least distance between two disjoint halves of the Kermany patients (the first
   chance match) with the pairs within the threshold; each with its seconds.

Skips with a reason where the shared data are absent. The tables go to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]

WIDTHS = (0.95, 0.9, 0.875, 0.8, 0.7, 0.6)
ZOOMS = (0.95, 0.9, 0.875, 0.8)


def _crafted(films: list[Path]) -> None:
    from PIL import Image

    from dpmed.data.overlap import NEAR_DUPLICATE_BITS, near_duplicates

    def read(image, size: int) -> np.ndarray:
        return np.asarray(image.resize((size, size), Image.BILINEAR), np.float32)[None] / 255

    def cut(image, fraction: float, both: bool):
        c = (1 - fraction) / 2
        w, h = image.size
        return image.crop((int(c * w), int(c * h) if both else 0, int((1 - c) * w), int((1 - c) * h) if both else h))

    images = [Image.open(f).convert("L") for f in films]
    print(f"| size | {' | '.join(f'width {f:.1%}' for f in WIDTHS)} | {' | '.join(f'both {f:.1%}' for f in ZOOMS)} "
          "| unrelated, least bits |")
    print("|---|" + "---:|" * (len(WIDTHS) + len(ZOOMS) + 1))
    for size in (28, 64):
        private = np.stack([read(im, size) for im in images])
        cells = []
        for both, fractions in ((False, WIDTHS), (True, ZOOMS)):
            for f in fractions:
                public = np.stack([read(cut(im, f, both), size) for im in images])
                d, j = near_duplicates(private, public)
                cells.append(f"{int(((d <= NEAR_DUPLICATE_BITS) & (j == np.arange(len(images)))).sum())}/{len(images)}")
        half = len(images) // 2
        d, _ = near_duplicates(private[:half], private[half:])
        print(f"| {size} px | {' | '.join(cells)} | {int(d.min())} |", flush=True)


def _full(data: Path) -> None:
    from dpmed.data import load_dataset
    from dpmed.data.cohorts import PatientSelection, select_patients
    from dpmed.data.overlap import NEAR_DUPLICATE_BITS, find_overlap, near_duplicates

    kermany = load_dataset(source="folders", path=data / "chest_xray", image_size=64, channels=1, seed=0,
                           n_images=None, labels=("NORMAL", "PNEUMONIA"))
    mnist = load_dataset(source="medmnist", path=data / "pneumoniamnist" / "pneumoniamnist.npz", image_size=None,
                         channels=None, seed=0, n_images=None)
    start = time.perf_counter()
    overlap = find_overlap(mnist, kermany)
    seconds = time.perf_counter() - start
    test = sum(1 for p in overlap.near_duplicates if p.private.startswith("test["))
    print(f"Kermany (64 px) against PneumoniaMNIST: {len(overlap.near_duplicates)} of {overlap.n_private} images have "
          f"a near-duplicate among {overlap.n_public} (<= {NEAR_DUPLICATE_BITS} bits), {test} of "
          f"{len(kermany.test)} test-folder films; {seconds:.0f} s", flush=True)
    for seed in range(5):
        halves = [select_patients(kermany, PatientSelection(fraction=0.5, part=k, seed=seed)) for k in (0, 1)]
        images = [np.concatenate([s.train.images, s.val.images, s.test.images]) for s in halves]
        d, _ = near_duplicates(images[1], images[0])
        print(f"disjoint patient halves, seed {seed}: {int((d <= NEAR_DUPLICATE_BITS).sum())} within the threshold, "
              f"least distance above it {int(d[d > NEAR_DUPLICATE_BITS].min())} bits", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
    parser.add_argument("--films", type=int, default=60)
    parser.add_argument("--skip-full", action="store_true")
    args = parser.parse_args(argv)
    folder = args.data / "chest_xray" / "train"
    if not folder.is_dir():
        print(f"skipped: the Kermany folders are absent ({folder}); the shared data sit beside the repo")
        return 0
    per_class = args.films // 2
    films = [f for cls, step in (("PNEUMONIA", 97), ("NORMAL", 41))
             for f in sorted((folder / cls).iterdir())[::step][:per_class]]
    print(f"{os.cpu_count()} CPUs; {len(films)} films")
    _crafted(films)
    if not args.skip_full:
        _full(args.data.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
