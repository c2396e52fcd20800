"""How much memory reading a dataset takes: the peak resident set of a fresh process that loads the Kermany folders
(../shared/data/chest_xray) at each image size and channel count, against the bytes of the decoded float32 images.

dpmed holds the decoded images once (`dpmed.data.assembly.in_group_order` splits them in place), so at sizes where
the images dominate the peak should be about the decoded bytes; a copy per split made it about twice those. Each load
runs in its own process, so that one size's peak does not hide the next one's.

    python benchmarks/data_memory.py [--data ../shared/data/chest_xray] [--sizes 64 224] [--channels 1 3]

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
path, size, channels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
d = load_dataset(source="folders", path=path, image_size=size, channels=channels, seed=0, n_images=None)
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
    args = parser.parse_args()
    if not args.data.is_dir():
        sys.exit(f"{args.data} not found: pass --data with the Kermany folders (train/, test/)")
    print("| px | channels | images decoded (kept) | decoded float32 | peak resident | peak / decoded | seconds |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        for channels in args.channels:
            out = subprocess.run([sys.executable, "-c", _CHILD, str(args.data), str(size), str(channels)],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"| {size} | {channels} | {r['decoded_images']} ({r['kept']}) | {r['decoded'] / 1e9:.2f} GB | "
                  f"{r['peak'] / 1e9:.2f} GB | {r['peak'] / r['decoded']:.2f} | {r['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
