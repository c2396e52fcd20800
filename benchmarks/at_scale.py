"""Synthetic datasets of realistic size and their study files, for what grows with the dataset outside training.

    python benchmarks/at_scale.py --out at-scale [--train 60000 --val 6000 --test 10000 --size 28]
                                                 [--csv-images 20000 --csv-size 64] [--seed 0]

The shipped datasets here are small (PneumoniaMNIST's 4,708 training images, Kermany's 5,840 films), so a part of
`dpmed run` or `dpmed plan` that grows faster than the data (a duplicate check, the bootstrap, the plan's evaluation
probe) costs little on them and shows only at the sizes users bring. This writes two sets that stand in for those:
a MedMNIST-layout npz (source medmnist: train/val/test, 28 px by default) and a folder of PNGs with a CSV of
file, label, patient id (some patients with two images), sex and age (source csv, split by patient). Every image is
noise with a Gaussian blob on the positives, so none is a duplicate of another and a model has something to learn.
Sex and age are drawn per row, so a patient's two rows may disagree: `dpmed` says so on reading, as it would for a
real table with such mistakes. Beside them go `study28.yaml` and `study64.yaml`, named for the sizes measured
(small_cnn, 5 steps of 256, non-private and DP-SGD at eps 8, explanations on 64 images), whose data paths are
relative to the study file, and the `dpmed` commands that measure them are printed. One generator (--seed) draws
everything in a fixed order, so the same flags write the same files. Nothing here is real patient data and nothing
is read from the network.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["images", "write_npz", "write_csv", "write_studies", "main"]

_STUDY = """name: {name}
seeds: [0]
data:
{data}
model:
  name: small_cnn
training:
  steps: 5
  batch_size: {batch}
  physical_batch_size: {batch}
evaluation:
  bootstrap_resamples: 1000
  explanations: {{n_images: 64}}
arms:
  - {{name: non-private, mechanism: none}}
  - {{name: dp-sgd, mechanism: dp_sgd, target_epsilon: [8], max_grad_norm: 1.0}}
"""


def images(rng: np.random.Generator, n: int, px: int) -> tuple[np.ndarray, np.ndarray]:
    """n uint8 images of px x px and their 0/1 labels: Gaussian noise (mean 110, sd 25) everywhere, and on each
    positive a blob of radius px / 8 at a random place in the central half, bright enough to be learnt."""
    y = rng.integers(0, 2, n)
    base = rng.normal(110, 25, (n, px, px))
    yy, xx = np.mgrid[:px, :px]
    cx = rng.integers(px // 4, 3 * px // 4, n)
    cy = rng.integers(px // 4, 3 * px // 4, n)
    r = px / 8
    blob = np.exp(-((xx[None] - cx[:, None, None]) ** 2 + (yy[None] - cy[:, None, None]) ** 2) / (2 * r * r))
    base += 60 * blob * y[:, None, None]
    return np.clip(base, 0, 255).astype(np.uint8), y


def write_npz(rng: np.random.Generator, path: Path, *, train: int, val: int, test: int, px: int) -> None:
    """The three splits in MedMNIST's layout (images N x px x px uint8, labels N x 1)."""
    splits = {name: images(rng, n, px) for name, n in (("train", train), ("val", val), ("test", test))}
    np.savez(path, **{f"{name}_{part}": array for name, (x, y) in splits.items()
                      for part, array in (("images", x), ("labels", y[:, None].astype(np.uint8)))})


def write_csv(rng: np.random.Generator, folder: Path, *, n: int, px: int) -> None:
    """n PNGs under folder/images and folder/labels.csv; every seventh image (from the second) is its predecessor's
    patient's second image, so the split by patient has patients of two images to keep together."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    pictures, y = images(rng, n, px)
    with open(folder / "labels.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["file", "finding", "patient", "sex", "age"])
        patient = 0
        for i in range(n):
            if i % 7 != 1:
                patient += 1
            Image.fromarray(pictures[i]).save(folder / "images" / f"{i:05d}.png")
            out.writerow([f"images/{i:05d}.png", int(y[i]), f"P{patient:06d}", "F" if rng.random() < .4 else "M",
                          int(rng.integers(20, 90))])


def write_studies(out: Path, *, npz: str, csv_file: str, csv_px: int, train: int, csv_images: int) -> tuple[Path, Path]:
    """study28.yaml and study64.yaml in out, each reading its set by a path relative to out. Batches are 256 images
    at the sizes measured; a smaller set, to try the commands quickly, gets a batch of half its training images (npz)
    or a quarter of its rows (CSV, whose training split is about 70 % of them), so that DP-SGD still samples."""
    medmnist = f"  source: medmnist\n  path: {npz}"
    table = (f"  source: csv\n  path: {csv_file}\n  columns: {{path: file, patient: patient, sex: sex, age: age}}\n"
             f"  labels: [finding]\n  classes: [normal, abnormal]\n  task: binary\n  image_size: {csv_px}\n"
             f"  channels: 1\n  split: {{val_fraction: 0.15, test_fraction: 0.15, seed: 0}}")
    studies = out / "study28.yaml", out / "study64.yaml"
    studies[0].write_text(_STUDY.format(name="big28", data=medmnist, batch=min(256, train // 2)))
    studies[1].write_text(_STUDY.format(name="big64", data=table, batch=min(256, csv_images // 4)))
    return studies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the sets and study files into")
    parser.add_argument("--train", type=int, default=60000, help="npz training images")
    parser.add_argument("--val", type=int, default=6000, help="npz validation images")
    parser.add_argument("--test", type=int, default=10000, help="npz test images")
    parser.add_argument("--size", type=int, default=28, help="npz image side in px")
    parser.add_argument("--csv-images", type=int, default=20000, help="PNGs listed in the CSV")
    parser.add_argument("--csv-size", type=int, default=64, help="PNG side in px (also the study's image_size)")
    parser.add_argument("--seed", type=int, default=0, help="one generator draws both sets, the npz first")
    args = parser.parse_args(argv)
    if min(args.train // 2, args.val, args.test, args.csv_images // 4) < 1 or min(args.size, args.csv_size) < 8:
        parser.error("--val and --test need at least 1 image, --train 2, --csv-images 4, and each side at least 8 px")
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    write_npz(rng, args.out / "images28.npz", train=args.train, val=args.val, test=args.test, px=args.size)
    write_csv(rng, args.out / "images64", n=args.csv_images, px=args.csv_size)
    studies = write_studies(args.out, npz="images28.npz", csv_file="images64/labels.csv", csv_px=args.csv_size,
                            train=args.train, csv_images=args.csv_images)
    print(f"wrote {args.out}/images28.npz ({args.train}/{args.val}/{args.test} images of {args.size} px), "
          f"{args.out}/images64 ({args.csv_images} PNGs of {args.csv_size} px) and their studies; measure with")
    for study in studies:
        print(f"  dpmed plan {study}\n  /usr/bin/time -v dpmed run {study} --no-progress")
    return 0


if __name__ == "__main__":
    sys.exit(main())
