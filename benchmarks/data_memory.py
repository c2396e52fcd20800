"""How much memory reading a dataset takes: the peak resident set of a fresh process that loads the Kermany folders
(../shared/data/chest_xray) at each image size and channel count, against the bytes of the decoded float32 images.

dpmed holds the decoded images once (`dpmed.data.assembly.in_group_order` splits them in place), so at sizes where
the images dominate the peak should be about the decoded bytes; a copy per split made it about twice those. Each load
runs in its own process, so that one size's peak does not hide the next one's.

    python benchmarks/data_memory.py [--data ../shared/data/chest_xray] [--sizes 64 224] [--channels 1 3]
                                     [--cache-dir DIR] [--synthetic N]

``--cache-dir DIR``: each load twice with that data.cache_dir, the first writing the entry, the second reading it
(rows "write" and "read"; delete DIR afterwards: it holds the decoded images). ``--synthetic N``: first write N grey
320 x 320 PNGs (noise on a ramp, three per patient, Kermany-style names, a third in PNEUMONIA) under --data as
``images/<class>/``, for sizes of the public chest X-ray sets that no folder here has (2 processes; about 9 min for
30,000 on 2 loaded cores, 2.6 GB).

Not a test: the libraries' share depends on the machine and their versions. Linux (ru_maxrss in kB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import json, resource, sys, time
from dpmed.data import load_dataset
path, size, channels, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] or None
start = time.perf_counter()
d = load_dataset(source="folders", path=path, image_size=size, channels=channels, seed=0, n_images=None,
                 cache_dir=cache)
n = d.source["decode"]["images"]
print(json.dumps({"decoded": n * channels * size * size * 4, "kept": sum(len(s) for s in (d.train, d.val, d.test)),
                  "decoded_images": n, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "seconds": time.perf_counter() - start}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO / ".." / "shared" / "data" / "chest_xray")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 224])
    parser.add_argument("--channels", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--synthetic", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if args.synthetic:
        _write_synthetic(args.data, args.synthetic)
    if not args.data.is_dir():
        sys.exit(f"{args.data} not found: pass --data with the Kermany folders (train/, test/)")
    print("| px | channels | cache | images decoded (kept) | decoded float32 | peak resident | peak / decoded "
          "| seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        for channels in args.channels:
            for cache in (["write", "read"] if args.cache_dir else ["none"]):
                out = subprocess.run([sys.executable, "-c", _CHILD, str(args.data), str(size), str(channels),
                                      str(args.cache_dir or "")], check=True, capture_output=True, text=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                print(f"| {size} | {channels} | {cache} | {r['decoded_images']} ({r['kept']}) | "
                      f"{r['decoded'] / 1e9:.2f} GB | {r['peak'] / 1e9:.2f} GB | {r['peak'] / r['decoded']:.2f} | "
                      f"{r['seconds']:.0f} |", flush=True)


def _write_one(job: tuple[Path, int]) -> None:
    import numpy as np
    from PIL import Image

    root, i = job
    rng = np.random.default_rng(i)
    pixels = np.linspace(0, 200, 320, dtype=np.float32)[None, :] + rng.normal(0, 20, (320, 320))
    folder = root / "images" / ("PNEUMONIA" if i % 3 == 0 else "NORMAL")
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / f"IM-{i // 3:05d}-{i % 3 + 1:04d}.png")


def _write_synthetic(root: Path, n: int) -> None:
    from multiprocessing import Pool

    for name in ("NORMAL", "PNEUMONIA"):
        (root / "images" / name).mkdir(parents=True, exist_ok=True)
    with Pool(2) as pool:
        pool.map(_write_one, [(root, i) for i in range(n)], chunksize=256)


if __name__ == "__main__":
    main()
