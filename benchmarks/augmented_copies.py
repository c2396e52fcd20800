"""How much memory a training step's inputs take with augmentation multiplicity K: the peak resident set a fresh
process adds while it gathers a batch of B images and makes their K augmented copies (`dpmed.training.augmentation`,
crop padding ``auto``), against the copies' own float32 bytes, which is all that `dpmed.suitability` counted.

Each step makes the copies of its whole batch at once, before the physical batches slice them, so this part of a
step grows with B K whatever training.physical_batch_size; the model's activations do not (they are sliced).

    python benchmarks/augmented_copies.py [--size 224] [--channels 1] [--batches 64 256 1024] [--copies 4 16]

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
size, channels, batch, k = map(int, sys.argv[1:5])
images = torch.rand(batch, channels, size, size)
keys = image_keys(images.numpy())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
x = images[np.arange(batch)]                                     # the step's gather, as the training loop makes it
Augmentation(multiplicity=k, padding=max(1, round(size / 8)), flip=False, seed=0).expand(x, torch.zeros(batch), keys, 1)
print(json.dumps({"added": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024,
                  "copies": 4 * k * batch * channels * size * size}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--copies", type=int, nargs="+", default=[4, 16])
    args = parser.parse_args()
    print("| B | K | copies (MB) | inputs' peak added (MB) | ratio |\n|---|---|---|---|---|")
    for batch in args.batches:
        for k in args.copies:
            out = subprocess.run([sys.executable, "-c", _CHILD, *map(str, (args.size, args.channels, batch, k))],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out)
            print(f"| {batch} | {k} | {r['copies'] / 2**20:.0f} | {r['added'] / 2**20:.0f} | "
                  f"{r['added'] / r['copies']:.2f} |")


if __name__ == "__main__":
    main()
