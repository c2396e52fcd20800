"""How fast images reach the model: decode (first epoch) versus the cached tensors (later epochs).

dpmed decodes and preprocesses every image once per study (dpmed.data.cache) and every epoch of every arm then
gathers batches from the in-memory float32 tensor; with ``data.cache_dir`` later studies memory-map the decoded
tensor instead of decoding again. This harness measures, on the Kermany folders (../shared/data/chest_xray), at each
image size:

* decode:       files -> preprocessed tensor, in threads (what the first epoch of a study pays once), images/s;
* cache write / cache read: the same into a memory-mapped .npy, and reading it back on a later study;
* gather:       batches of ``--batch`` random images from the tensor (the data cost of every later epoch), images/s;
* train step:   small_cnn forward + backward + Adam on those batches (non-private), images/s, for scale.

Then first epoch = N / (decode + N / gather + N / train) and later epochs = N / (N / gather + N / train).

    python benchmarks/data_loading.py [--data ../shared/data/chest_xray] [--sizes 64 224] [--train-batches 8]

Not a test: numbers depend on the machine and its load; print ``uptime`` beside them.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / ".." / "shared" / "data" / "chest_xray")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 224])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--train-batches", type=int, default=8)
    args = parser.parse_args()
    manifest = read_image_folders(args.data)
    n = len(manifest)
    print(f"{n} images from {args.data}; torch threads {torch.get_num_threads()}; cpus {os.cpu_count()}; "
          f"load average {os.getloadavg()}")
    for size in args.sizes:
        pre = Preprocessing(size=(size, size), channels=1)
        decoded = decode_images(manifest.paths, pre)
        assert not decoded.failures
        cache = Path(tempfile.mkdtemp(prefix="dpmed-cache-"))
        try:
            written = decode_images(manifest.paths, pre, cache_dir=cache)
            start = time.perf_counter()
            read = decode_images(manifest.paths, pre, cache_dir=cache)  # key: stats every file, then maps the entry
            cached_images = np.asarray(read.images[np.arange(n)])  # what assembly copies out of the memory map
            read_seconds = time.perf_counter() - start  # the OS page cache is warm here: an optimistic figure
            assert read.cached
            np.testing.assert_array_equal(cached_images, decoded.images)
        finally:
            shutil.rmtree(cache)
        gather = _gather_rate(decoded.images, args.batch)
        train = _train_rate(decoded.images, args.batch, args.train_batches)
        decode_rate = n / decoded.seconds
        first = n / (decoded.seconds + n / gather + n / train)
        later = n / (n / gather + n / train)
        print(f"{size:>4} px: decode {decode_rate:7.0f} img/s ({decoded.seconds:.1f} s) | cache write "
              f"{n / written.seconds:7.0f} img/s | cache read {n / read_seconds:8.0f} img/s | gather "
              f"{gather:9.0f} img/s | small_cnn train step {train:6.0f} img/s")
        share = decoded.seconds / (decoded.seconds + n / gather + n / train)
        print(f"{size:>4} px: first epoch {first:6.0f} img/s (decoding is {share:.0%} of it), later epochs "
              f"{later:6.0f} img/s")


if __name__ == "__main__":
    main()
