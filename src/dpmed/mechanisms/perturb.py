"""Adding noise to released images, shared by the local DP transforms (METHODS.md s.1).

Each image is perturbed in float64, clipped to [0, R] (post-processing, free) and only then rounded to the images'
float32. The noise is privacy randomness: it comes from the run's secret ``local_dp`` stream (`dpmed.randomness`).
A seed-derived noise (as 000_56c2431ae4df8d10.txt and METHODS.md s.1 suggest, "global seed + image index") would let
anyone who knows the seed subtract it, and two arms of one seed would share it.

The sensitivity every local-DP claim is for (R per value) holds only for inputs in [0, R]: a value outside, or NaN,
is refused rather than clipped first, since an input that reaches the mechanism out of range means preprocessing
did not do what the claim assumes.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dpmed.errors import PrivacyError

__all__ = ["perturb"]

# Images perturbed per call of the generator: bounds the float64 noise buffer (256 x 224 x 224 x 3 ~ 300 MB).
_CHUNK = 256


def perturb(images: np.ndarray, *, rng: np.random.Generator, value_range: float,
            draw: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]) -> np.ndarray:
    """clip(image + draw(rng, shape), 0, R) for the images in order, in float64, returned in the images' dtype.
    Drawing chunk after chunk from one stream gives the same values as one draw over the whole array."""
    out = np.empty_like(images)
    for start in range(0, len(images), _CHUNK):
        block = images[start:start + _CHUNK]
        _check_range(block, value_range, start)
        noisy = block.astype(np.float64) + draw(rng, block.shape)
        out[start:start + _CHUNK] = np.clip(noisy, 0.0, value_range)
    return out


def _check_range(block: np.ndarray, value_range: float, start: int) -> None:
    """Refuse a value outside [0, R] (or NaN): the noise's eps is for inputs that differ by at most R per value. A
    PrivacyError, as every refusal of a claim that would not hold: the user sees its message, not a traceback."""
    inside = (block >= 0) & (block <= value_range)      # False for NaN
    if not inside.all():
        index = np.unravel_index(np.argmin(inside), block.shape)
        raise PrivacyError(f"image {start + index[0]} holds the value {block[index]!r} at (channel, row, column) "
                           f"{tuple(int(i) for i in index[1:])}, outside [0, {value_range:g}]: local DP noise is "
                           f"accounted for values in [0, {value_range:g}] only; preprocess the images into that range")
