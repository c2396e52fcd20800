"""What the check for identical images under two patient ids costs (`dpmed.data.duplicates`).

    python benchmarks/private_copies.py [--images 20000] [--size 224] [--channels 1]

Random float32 images held in memory as a study holds them, split 70 / 15 / 15, one patient each, with one image
copied from train into test; prints the seconds ``describe_copies`` takes (the sha256 of every image and the lookup)
and what it tells.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpmed.data import ImageSet
from dpmed.data.duplicates import describe_copies

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--channels", type=int, default=1)
    args = parser.parse_args(argv)
    n = args.images
    images = np.random.default_rng(0).random((n, args.channels, args.size, args.size), dtype=np.float32)
    images[-1] = images[0]
    ends = [0, int(0.7 * n), int(0.85 * n), n]
    sets = {split: ImageSet(images=images[a:b], labels=np.zeros(b - a, np.int64),
                            patient_ids=np.array([f"p{i}" for i in range(a, b)]),
                            sex=np.array(["unknown"] * (b - a)), age=np.full(b - a, np.nan))
            for split, a, b in zip(("train", "val", "test"), ends, ends[1:])}
    start = time.perf_counter()
    lines = describe_copies(sets)
    seconds = time.perf_counter() - start
    print(f"{n} images of {args.channels} x {args.size} x {args.size}: {seconds:.2f} s, "
          f"{seconds / n * 1e4:.2f} s per 10,000")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
