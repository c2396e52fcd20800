"""A three-class MedMNIST-format file from the Kermany folders, to try the shipped studies on a task they were never
tuned on. This writes a dataset for a benchmark; no study reads it unless given it with --data-path.

    python benchmarks/kermany_three_class.py ../shared/data/chest_xray kermany3.npz [--size 28] [--train-images N]

The release names every pneumonia film's cause (``person1_bacteria_1.jpeg``, ``person3_virus_11.jpeg``), so the
published folders carry a three-class task, normal / bacterial / viral (Kermany, Zhang, Goldbaum 2018 report it
beside the binary one). The file is laid out as MedMNIST's are, so ``configs/pneumoniamnist.yaml`` reads it with only
the data path changed, as a new user with a small MedMNIST set would run it. Splits: test is the published test
folder; the train folder's patients who also appear in test are dropped (the release shares 170), a seeded tenth of
the rest by patient is validation, and training takes the remaining patients in a seeded order, whole, until it holds
at least ``--train-images`` images (all of them when 0). Images: grey, resized with PIL's box filter, uint8.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from dpmed.data.formats.folders import KERMANY_PATIENT

CLASSES = ("normal", "bacterial", "viral")


def label_of(path: Path) -> int:
    """0 normal, 1 bacterial, 2 viral pneumonia, from the class folder and the file name."""
    if path.parent.name.upper() == "NORMAL":
        return 0
    if "_bacteria_" in path.name:
        return 1
    if "_virus_" in path.name:
        return 2
    raise ValueError(f"{path}: a PNEUMONIA file whose name says neither bacteria nor virus")


def patient_of(path: Path) -> str:
    match = re.match(KERMANY_PATIENT, path.name)
    if match is None:
        raise ValueError(f"{path}: no Kermany patient key in the file name")
    return match.group(1) or match.group(2)


def split(root: Path, *, train_images: int, seed: int = 0) -> dict[str, list[Path]]:
    """train / val / test file lists as the module docstring says, by patient."""
    test = sorted((root / "test").glob("*/*.jpeg"))
    held_out = {patient_of(p) for p in test}
    by_patient: dict[str, list[Path]] = {}
    for p in sorted((root / "train").glob("*/*.jpeg")):
        if (patient := patient_of(p)) not in held_out:
            by_patient.setdefault(patient, []).append(p)
    patients = sorted(by_patient)
    np.random.default_rng(seed).shuffle(patients)
    n_val = len(patients) // 10
    val = [p for q in sorted(patients[:n_val]) for p in by_patient[q]]
    train: list[Path] = []
    for q in patients[n_val:]:
        if train_images and len(train) >= train_images:
            break
        train += by_patient[q]
    return {"train": train, "val": val, "test": test}


def write(root: Path, out: Path, *, size: int, train_images: int) -> dict[str, np.ndarray]:
    arrays = {}
    for name, paths in split(root, train_images=train_images).items():
        if not paths:
            raise SystemExit(f"{root}: no {name} images (expected train/ and test/ with NORMAL and PNEUMONIA)")
        arrays[f"{name}_images"] = np.stack([np.asarray(Image.open(p).convert("L").resize((size, size), Image.BOX))
                                             for p in paths]).astype(np.uint8)
        arrays[f"{name}_labels"] = np.array([[label_of(p)] for p in paths], dtype=np.uint8)
        counts = np.bincount(arrays[f"{name}_labels"][:, 0], minlength=len(CLASSES))
        print(f"{name}: {len(paths)} images, " + ", ".join(f"{c} {n}" for c, n in zip(CLASSES, counts)))
    np.savez_compressed(out, **arrays)
    return arrays


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the Kermany chest_xray folder (train/, test/)")
    parser.add_argument("out", type=Path, help="the .npz to write")
    parser.add_argument("--size", type=int, default=28, help="image side in px (MedMNIST v2: 28)")
    parser.add_argument("--train-images", type=int, default=0, help="stop adding training patients at this many "
                                                                    "images (0: all)")
    args = parser.parse_args(argv)
    write(args.root, args.out, size=args.size, train_images=args.train_images)
    return 0


if __name__ == "__main__":
    sys.exit(main())
