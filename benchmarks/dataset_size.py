"""What grows with the number of images N before training: reading a CSV set and the public/private overlap check.

    python benchmarks/dataset_size.py --out DIR [--sizes 2000 8000 32000] [--px 28] [--every-pair-up-to 8000]
                                      [--crops] [--data ../shared/data]

For each N, a CSV set of N PNGs (`benchmarks/at_scale.py`'s images and table, written once into DIR/nN) is read as
a study reads it (`dpmed.data.load_dataset`: the table, the decoding, the split by patient and the check for copies
under two patient ids), and its images are checked against a public set of N others as the pretrain stage checks
them: perceptual hashes (of the whole images; with ``--crops``, of every crop and zoom too), then the comparison
`find_overlap` makes at 30 bits (by multi-index search where that costs less than comparing every pair) and, up to
``--every-pair-up-to``, by comparing every pair as before. Each row prints seconds per stage, the
process's peak resident memory so far, and the share of hash pairs the search compared. Where the shared
PneumoniaMNIST file is found under ``--data``, its training films are also compared with its validation and test
films, every crop and zoom: chest films' hashes agree on more bits than the synthetic images' do, so the share
compared is larger there.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

import at_scale   # benchmarks/ is on the path of a script run from it

from dpmed.data import load_dataset, overlap

__all__ = ["main"]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _compare(hp: np.ndarray, hq: np.ndarray, max_distance: int | None) -> tuple[float, float, np.ndarray]:
    """(seconds, share of the 51 N M hash pairs whose words were compared, least distances) of the comparison
    `near_duplicates` makes on hashes [V, N, words] and [V, M, words]: within ``max_distance`` (by multi-index
    search where that saves work), or of every pair (None)."""
    counted = [0]
    count = np.bitwise_count

    def counting(x: np.ndarray) -> np.ndarray:
        counted[0] += x.size
        return count(x)

    np.bitwise_count = counting
    try:
        start = time.perf_counter()
        best, _ = overlap._least_distances(hp, hq, max_distance)
        seconds = time.perf_counter() - start
    finally:
        np.bitwise_count = count
    pairs = len(hp) + len(hq) - 1
    return seconds, counted[0] / (pairs * hp.shape[1] * hq.shape[1] * hp.shape[2]), best


def _hashes(images, crops: bool) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    h = overlap.perceptual_hashes(images, crops=overlap.CROP_FRACTIONS if crops else (),
                                  zooms=overlap.ZOOM_FRACTIONS if crops else ())
    return time.perf_counter() - start, h


def _row(what: str, hp: np.ndarray, hq: np.ndarray, every_pair: bool) -> str:
    search, share, best = _compare(hp, hq, overlap.NEAR_DUPLICATE_BITS)
    line = f"{what}: search {search:.1f} s, {share:.2%} of hash pairs compared"
    if every_pair:
        seconds, _, every = _compare(hp, hq, None)
        within = every <= overlap.NEAR_DUPLICATE_BITS
        assert (best[within] == every[within]).all() and (best[~within] > overlap.NEAR_DUPLICATE_BITS).all()
        bits = overlap.NEAR_DUPLICATE_BITS
        line += f"; every pair {seconds:.1f} s, {int(within.sum())} within {bits} bits either way"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the CSV sets (kept for later runs)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 32000], help="images N per set")
    parser.add_argument("--px", type=int, default=28, help="side of the PNGs and of the images read")
    parser.add_argument("--every-pair-up-to", type=int, default=8000,
                        help="also compare every pair (the check before the search) up to this N")
    parser.add_argument("--crops", action="store_true",
                        help="hash every crop and zoom as the check does (51 hash pairs per image pair, each costing "
                             "what the whole images' one does; hashing them takes most of the time)")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="where pneumoniamnist/ lies")
    args = parser.parse_args(argv)
    for n in args.sizes:
        folder = args.out / f"n{n}"
        if not (folder / "labels.csv").exists():
            at_scale.write_csv(np.random.default_rng(n), folder, n=n, px=args.px)
        start = time.perf_counter()
        data = load_dataset(source="csv", path=folder / "labels.csv", image_size=args.px, channels=1, seed=0,
                            n_images=None, labels=("finding",), classes=("normal", "abnormal"), task="binary",
                            columns={"path": "file", "patient": "patient", "sex": "sex", "age": "age"})
        read = time.perf_counter() - start
        public = at_scale.images(np.random.default_rng(n + 1), n, args.px)[0][:, None].astype(np.float32) / 255
        private_seconds, hp = _hashes([data.train.images, data.val.images, data.test.images], args.crops)
        public_seconds, hq = _hashes(public, args.crops)
        hashing = private_seconds + public_seconds
        print(f"N = {n}: read {read:.1f} s (peak {_peak_mb():.0f} MB); hashes {hashing:.1f} s; "
              + _row(f"{n} against {n}", hp, hq, n <= args.every_pair_up_to) + f" (peak {_peak_mb():.0f} MB)",
              flush=True)
    npz = args.data / "pneumoniamnist" / "pneumoniamnist.npz"
    if npz.exists():
        films = np.load(npz)
        _, train = _hashes(films["train_images"][:, None].astype(np.float32) / 255, True)
        _, held = _hashes([films[f"{s}_images"][:, None].astype(np.float32) / 255 for s in ("val", "test")], True)
        print(_row(f"PneumoniaMNIST train ({train.shape[1]}) against val and test ({held.shape[1]})", train, held,
                   True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
