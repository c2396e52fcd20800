"""The noise of one DP-SGD step, drawn from the run's secret noise stream in blocks, on several threads at once.

A cryptographic generator (AES-CTR, `dpmed.randomness`) on one core takes several times longer to draw a ResNet-18's
noise than a GPU takes for a whole non-private step (benchmarks/RESULTS.md, "On a GPU"). So a step's noise is cut
into blocks of a fixed number of coordinates, each block drawn by its own AES-CTR generator whose 128-bit key is two
raw words taken, in block order, from the run's noise stream; the blocks are filled in parallel while the clipped
sum is computed. numpy releases the GIL while it fills an array, but a thread that
wants it back can wait a whole switch interval (5 ms) behind the thread that launches the clipped sum's kernels, so
each block is one fill of unit noise and nothing else (the scale is applied where the noise is added, on the
model's device), and the blocks are large: a ResNet-18 has 11 of them.

What this keeps:
* **Secrecy and freshness.** Each block key is output of the secret stream, so it is as unpredictable as the
  stream itself; no key repeats within or across steps (they are successive, non-overlapping stream output).
* **Determinism and resumption.** The draws depend on the stream's state and the parameter count alone, never on
  the number of threads or the machine: a step advances the stream by exactly two raw words per block, so a run
  resumed from a checkpointed stream state makes the very draws an uninterrupted one would.
* **The float64 noise** of `dpmed.training.dp_sgd` (added to the clipped sum before rounding to float32), and the
  four-draws-halved Gaussian of a float64 model (Holohan and Braghin 2021).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from randomgen import AESCounter

__all__ = ["BLOCK", "BlockKeys", "NoiseBuffer", "block_keys", "block_words", "fill_noise", "noise_workers"]

BLOCK = 1 << 20     # coordinates per block: enough blocks to share among threads, few GIL hand-overs


class BlockKeys(list):
    """The keys of one step's noise blocks, as a list whose repr (and str) leaves them out: a traceback that shows
    each frame's locals (IPython's verbose mode, pytest --showlocals, a crash reporter) prints the keys of the step a
    Ctrl-C stopped, and the resumed run draws that very step again from its checkpoint's stream state."""

    def __repr__(self) -> str:
        return f"<{len(self)} secret noise block keys>"


def block_words(size: int) -> int:
    """The raw 64-bit words that the block keys of a noise vector of ``size`` coordinates take: two a block."""
    return 2 * math.ceil(size / BLOCK)


def block_keys(stream: np.random.Generator, size: int) -> BlockKeys:
    """The 128-bit AES keys of the blocks of a noise vector of ``size`` coordinates, taken from ``stream``
    (two raw 64-bit words a block, high word first). The stream moves by exactly :func:`block_words` words."""
    words = stream.bit_generator.random_raw(block_words(size)).tolist()
    return BlockKeys((hi << 64) | lo for hi, lo in zip(words[0::2], words[1::2]))


class NoiseBuffer:
    """The float64 vector a step's noise is drawn into, reused from step to step, behind a repr that leaves its
    values out. Until the run's next checkpoint it holds noise that a resumed run draws again, and a traceback that
    shows each frame's locals (IPython's verbose mode, pytest --showlocals, a crash reporter) prints some entries of
    any array a frame names, a block's thread included where its draw fails: so frames name this, and the vector
    (``values``) or a slice of it only within the expression that writes or reads it."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"<{len(self.values)} secret noise coordinates>"


def _fill_block(out: NoiseBuffer, keys: list[int], b: int, kind: str, four_halved: bool) -> None:
    """Block ``b`` of the noise, from ``keys[b]``. The keys and an index come in, not the key: a key held as an int
    by this frame, or by the one that hands the blocks out (a Ctrl-C lands there as each thread starts), shows in
    a traceback that shows locals; so does the block's slice of the noise, which no name holds here."""
    block = np.random.Generator(AESCounter(key=keys[b]))
    start, stop = b * BLOCK, min((b + 1) * BLOCK, len(out))
    if kind == "laplace":
        out.values[start:stop] = block.laplace(0.0, 1.0, size=stop - start)
    elif four_halved:
        out.values[start:stop] = sum(block.standard_normal(size=stop - start) for _ in range(4)) / 2
    else:                                                                  # one call: one GIL hand-over
        block.standard_normal(size=stop - start, dtype=np.float64, out=out.values[start:stop])


def noise_workers() -> int:
    """Threads that fill blocks: the cores this process may use, at most 8 (more gains little)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                       # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def fill_noise(out: NoiseBuffer, keys: list[int], pool: ThreadPoolExecutor, *, kind: str, four_halved: bool) -> list:
    """Start filling the float64 vector ``out`` with unit noise (Gaussian of std 1, or Laplace of scale 1), block b
    from ``keys[b]``; returns the futures (wait on them before reading ``out``). ``four_halved``: each Gaussian
    coordinate is the sum of four draws halved (a float64 model). The caller multiplies by the std or scale."""
    if len(keys) != math.ceil(len(out) / BLOCK):
        raise ValueError(f"{len(keys)} keys for {len(out)} coordinates in blocks of {BLOCK}")
    return [pool.submit(_fill_block, out, keys, b, kind, four_halved) for b in range(len(keys))]
