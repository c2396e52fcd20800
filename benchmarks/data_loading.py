"""How fast images reach the model: decode (first epoch) versus the cached tensors (later epochs).

dpmed decodes and preprocesses every image once per study (dpmed.data.cache) and every epoch of every arm then
gathers batches from the in-memory float32 tensor; with ``data.cache_dir`` later studies read the decoded
tensor instead of decoding again. This harness measures, on the Kermany folders (../shared/data/chest_xray), at each
image size:

* decode:       files -> preprocessed tensor in memory, in threads (no cache_dir), images/s;
* decode + cache write: the same into a memory-mapped .npy in a temporary cache_dir (what the first epoch of a study
                with data.cache_dir pays once); cache read: a later study mapping that entry and copying it out;
* gather:       batches of ``--batch`` random images from the tensor (the data cost of every later epoch), images/s;
* train step:   small_cnn forward + backward + Adam on those batches (non-private), images/s, for scale.

Then first epoch = N / (decode + cache write + N / gather + N / train), later epochs = N / (N / gather + N / train),
and a later study reading the cache = N / (cache read + N / gather + N / train).

    python benchmarks/data_loading.py [--data ../shared/data/chest_xray] [--sizes 64 224] [--train-batches 8]
                                      [--channels 1 | 3 | 0 (as stored)]

Not a test: numbers depend on the machine and its load; the load average is printed before and after each size.
The files are read once before timing, so decoding is measured with the OS page cache warm (no disk reads).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dpmed.data.cache import decode_images
from dpmed.data.formats.folders import read_image_folders
from dpmed.data.transforms import Preprocessing
from dpmed.errors import DataError
from dpmed.models import build_model

REPO = Path(__file__).resolve().parents[1]


def _gather_rate(images: np.ndarray, batch: int, rounds: int = 30) -> float:
    x_all = torch.from_numpy(np.ascontiguousarray(images))  # what the training loop holds
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(rounds):
        idx = torch.randperm(len(x_all), generator=gen)[:batch]
        x_all[idx].contiguous()
    return rounds * batch / (time.perf_counter() - start)


def _train_rate(images: np.ndarray, batch: int, batches: int) -> float:
    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=images.shape[1], num_outputs=2, image_size=images.shape[2])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_all = torch.from_numpy(np.ascontiguousarray(images))
    y = torch.zeros(batch, dtype=torch.int64)
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        idx = torch.randperm(len(x_all), generator=gen)[:batch]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x_all[idx]), y).backward()
        opt.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(batches):
        step()
    return batches * batch / (time.perf_counter() - start)


def _rate(x: float) -> str:
    """Images per second, to 3 significant figures (a 224 px train step on a loaded CPU runs at a few per second)."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def _load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / ".." / "shared" / "data" / "chest_xray")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 224])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--train-batches", type=int, default=8)
    parser.add_argument("--channels", type=int, choices=(0, 1, 3), default=1,
                        help="1 grey, 3 colour, 0 as stored (data.channels unset: every file must match the first)")
    args = parser.parse_args()
    if not args.data.is_dir():      # dpmed's own message names a study's data.path, not this flag
        raise SystemExit(f"--data {args.data}: no such folder; pass the Kermany chest_xray folder (train/ and test/ "
                         "in it)")
    try:
        manifest = read_image_folders(args.data)
    except DataError as exc:
        raise SystemExit(f"--data: {exc}") from None
    n = len(manifest)
    for path in manifest.paths:  # warm the OS page cache: decoding is timed, not the disk
        path.read_bytes()
    print(f"{n} images from {args.data}, channels {args.channels or 'as stored'}; torch threads "
          f"{torch.get_num_threads()}; cpus {os.cpu_count()}; load average (1/5/15 min) {_load()}")
    rows = []
    for size in args.sizes:
        load_before = _load()
        pre = Preprocessing(size=(size, size), channels=args.channels or None)
        decoded = decode_images(manifest.paths, pre)
        assert not decoded.failures
        cache = Path(tempfile.mkdtemp(prefix="dpmed-cache-"))
        try:
            written = decode_images(manifest.paths, pre, cache_dir=cache)
            assert not written.cached
            start = time.perf_counter()
            read = decode_images(manifest.paths, pre, cache_dir=cache)  # key: stats every file, then reads the entry
            cached_images = read.images  # what assembly holds: read into memory, split in place
            read_seconds = time.perf_counter() - start  # the OS page cache is warm here: an optimistic figure
            assert read.cached
            np.testing.assert_array_equal(cached_images, decoded.images)
        finally:
            shutil.rmtree(cache)
        gather = _gather_rate(decoded.images, args.batch)
        train = _train_rate(decoded.images, args.batch, args.train_batches)
        epoch = n / gather + n / train  # seconds of one epoch once the tensor is in memory
        first = n / (written.seconds + epoch)
        later = n / epoch
        from_cache = n / (read_seconds + epoch)
        share = written.seconds / (written.seconds + epoch)
        load_after = _load()
        print(f"{size:>4} px: decode {_rate(n / decoded.seconds)} img/s ({decoded.seconds:.1f} s) | decode + cache "
              f"write {_rate(n / written.seconds)} img/s ({written.seconds:.1f} s) | cache read "
              f"{_rate(n / read_seconds)} img/s | gather {_rate(gather)} img/s | small_cnn train step "
              f"{_rate(train)} img/s")
        print(f"{size:>4} px: first epoch {_rate(first)} img/s (decoding is {share:.1%} of it), later epochs "
              f"{_rate(later)} img/s, a later study's first epoch from the cache {_rate(from_cache)} img/s "
              f"(load average {load_before} before, {load_after} after)")
        rows.append(f"| {size} | {_rate(n / decoded.seconds)} | {_rate(n / written.seconds)} | "
                    f"{_rate(n / read_seconds)} | {_rate(gather)} | {_rate(train)} | {_rate(first)} "
                    f"({share:.1%} decoding) | {_rate(later)} | {_rate(from_cache)} | {load_before} / {load_after} |")
    print("\n| px | decode | decode + cache write | cache read | gather | train step | first epoch | later epochs "
          "| later study, from cache | load avg before / after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
