"""How much memory public pretraining's overlap check takes where it reads the public set a second time.

    python benchmarks/overlap_memory.py [--public 4000] [--private 200] [--size 128] [--private-size 112]

Where the public set's own preprocessing differs from the private data's, `dpmed.pretraining` reads it again at
the private data's for the overlap check (one file then decodes to the same pixels in both sets). This writes
``--public`` and ``--private`` random grey PNGs of ``--size`` px as two CSV datasets in a temporary folder, reads the
private one at ``--private-size`` px, and runs the pretrain stage up to the start of training (the public set read
at ``--size`` px, checked, then decoded for training). It prints the decoded bytes of each copy of the public set,
the peak of what the stage allocated (tracemalloc: numpy's arrays and Python's objects, not torch's tensors) and the
process's peak resident memory before and after the stage (ru_maxrss). Run it in a fresh process per measurement.
Linux (ru_maxrss in kB).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["main"]


class _Stop(Exception):
    """Raised in place of training: the stage is measured up to it."""


def _write_table(folder: Path, n: int, size: int, seed: int) -> Path:
    """``n`` random grey PNGs of ``size`` px under ``folder`` and the CSV naming them (file, finding)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    rows = ["file,finding"]
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(folder / f"{i}.png")
        rows.append(f"{i}.png,{i % 2}")
    (folder / "labels.csv").write_text("\n".join(rows) + "\n")
    return folder / "labels.csv"


def _peak_rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--public", type=int, default=4000)
    parser.add_argument("--private", type=int, default=200)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--private-size", type=int, default=112)
    args = parser.parse_args(argv)

    import dpmed.pretraining as pretraining
    from dpmed.config import Study
    from dpmed.data import read_dataset
    from dpmed.folders import StudyFolder

    def stop(*_args, **_kwargs):
        raise _Stop

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        table = {"source": "csv", "columns": {"path": "file"}, "labels": ["finding"], "task": "binary",
                 "channels": 1}
        study = Study.model_validate({
            "name": "overlap-memory", "arms": [{"name": "base", "mechanism": "none"}],
            "data": {**table, "path": str(_write_table(root / "private", args.private, args.size, seed=0)),
                     "image_size": args.private_size},
            "pretrain": {"public": "random PNGs", "data": {
                **table, "path": str(_write_table(root / "public", args.public, args.size, seed=1)),
                "image_size": args.size}}})
        private = read_dataset(study.data.to_request())
        real, pretraining.train = pretraining.train, stop
        before = _peak_rss()
        tracemalloc.start()
        begin = time.perf_counter()
        try:
            pretraining.pretrain(study, private, StudyFolder(root / "out"), progress=False)
        except _Stop:
            pass
        finally:
            seconds = time.perf_counter() - begin
            traced = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            pretraining.train = real
    own, checked = (args.public * s * s * 4 / 1e6 for s in (args.size, args.private_size))
    print(f"public set: {args.public} images, {own:.0f} MB decoded at {args.size} px, {checked:.0f} MB at "
          f"{args.private_size} px (the private data's size, for the check); private: {args.private} images")
    print(f"stage up to training: peak allocated {traced:.0f} MB (tracemalloc); peak resident {before:.0f} MB "
          f"before the stage, {_peak_rss():.0f} MB after; {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
