"""How much memory a training step's inputs take with augmentation multiplicity K: the peak resident set a fresh
process adds while it gathers a batch of B images and takes their K augmented copies slice by slice as a step does
(`dpmed.training.augmentation.Copies`, crop padding ``auto``, slices of training.physical_batch_size), against the
float32 bytes of all K B copies, which a step made at once before 2026-12-07.

    python benchmarks/augmented_copies.py [--size 224] [--channels 1] [--batches 64 256 1024] [--copies 4 16]
        [--physical 128]

Not a test: the allocator's share depends on the machine. Linux (ru_maxrss in kB). Random images, no model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = """
import json, resource, sys
import numpy as np, torch
from dpmed.training.augmentation import Augmentation, image_keys
size, channels, batch, k, physical = map(int, sys.argv[1:6])
images = torch.rand(batch, channels, size, size)
keys = image_keys(images.numpy())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
x = images[np.arange(batch)]                                     # the step's gather, as the training loop makes it
copies, _, _ = Augmentation(multiplicity=k, padding=max(1, round(size / 8)), flip=False, seed=0).expand(
    x, torch.zeros(batch), keys, 1)
for piece in copies.split(physical):                               # each slice as the step takes it, then dropped
    del piece
print(json.dumps({"added": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024,
                  "copies": 4 * k * batch * channels * size * size}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--copies", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--physical", type=int, default=128, help="training.physical_batch_size")
    args = parser.parse_args()
    print("| B | K | copies (MB) | inputs' peak added (MB) | ratio |\n|---|---|---|---|---|")
    for batch in args.batches:
        for k in args.copies:
            sizes = (args.size, args.channels, batch, k, args.physical)
            out = subprocess.run([sys.executable, "-c", _CHILD, *map(str, sizes)], check=True, capture_output=True,
                                 text=True).stdout
            r = json.loads(out)
            print(f"| {batch} | {k} | {r['copies'] / 2**20:.0f} | {r['added'] / 2**20:.0f} | "
                  f"{r['added'] / r['copies']:.2f} |")


if __name__ == "__main__":
    main()
