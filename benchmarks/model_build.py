"""What building ScatterNet costs (`dpmed.models.build_model("scatternet_cnn", ...)`) at several image sizes: kymatio
builds the scattering's filter bank in numpy, and a study builds the model for every run, its timing probe and any
re-evaluation.

"rebuilt" builds as dpmed did before: ``scatternet._scattering`` replaced by kymatio's constructor itself, which is
the parent commit's code path. "first" builds with the per-process filter bank emptied (the first model of a size in
a process, which now pays the bank and a copy of it), "reused" with the bank there (every later model). The three
alternate, ``--repeats`` times each, so that a machine whose load changes favours none. Each build seeds torch the
same way, and the three models' tensors and outputs on one random batch must be the same bits, or this stops.

    python benchmarks/model_build.py [--sizes 28 64 128 224] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from unittest import mock

import torch

from dpmed.models import build_model
from dpmed.models import scatternet


def _build(size: int, way: str) -> tuple[float, torch.nn.Module]:
    """(seconds, model) of one build of scatternet_cnn for size x size grey images, ``way`` as the module says."""
    if way == "first":
        scatternet._scattering_bank.cache_clear()
    scattering = scatternet._scattering_bank.__wrapped__ if way == "rebuilt" else scatternet._scattering
    with mock.patch.object(scatternet, "_scattering", scattering), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        start = time.perf_counter()
        model = build_model("scatternet_cnn", in_channels=1, num_outputs=2, image_size=size)
        seconds = time.perf_counter() - start
    return seconds, model


def _same_bits(models: dict[str, torch.nn.Module], size: int) -> None:
    x = torch.rand(2, 1, size, size, generator=torch.Generator().manual_seed(size))
    ref_name, ref = next(iter(models.items()))
    for name, model in models.items():
        ours, theirs = model.state_dict(), ref.state_dict()
        if ours.keys() != theirs.keys() or not all(torch.equal(ours[k], theirs[k]) for k in ours):
            raise SystemExit(f"{size} px: the {name} model's tensors differ from the {ref_name} one's")
        with torch.no_grad():
            if not torch.equal(model(x), ref(x)):
                raise SystemExit(f"{size} px: the {name} model's output differs from the {ref_name} one's")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[28, 64, 128, 224])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    ways = ("rebuilt", "first", "reused")
    seconds: dict[tuple[int, str], list[float]] = {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s)")
    for repeat in range(args.repeats):
        for size in args.sizes:
            order = ways if repeat % 2 == 0 else ways[::-1]
            models = {}
            for way in order:
                if way == "reused":
                    _build(size, "first")      # the bank there, whatever ran before
                took, models[way] = _build(size, way)
                seconds.setdefault((size, way), []).append(took)
            _same_bits(models, size)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print("| size | way | s median (range) |")
    print("|---|---|---|")
    for size in args.sizes:
        for way in ways:
            s = seconds[(size, way)]
            print(f"| {size} | {way} | {statistics.median(s):.3f} ({min(s):.3f}-{max(s):.3f}) |")


if __name__ == "__main__":
    main()
