"""What an image decoder is: the info object every decoder registers, the one error it may signal, the notes it
may return with a file it read all the same, and the stretch of samples whose range the file does not say.

Below both :mod:`dpmed.data.decoding` (the registry by file suffix, and the raster decoder) and
:mod:`dpmed.data.dicom` (the DICOM decoder, with :mod:`dpmed.data.codestreams`, which sizes its compressed pixel
data), so that the arrows between them run one way: the registry imports the decoders, and every decoder imports only
this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["UnreadableImage", "ImageNote", "Decoder", "stretched"]


class UnreadableImage(Exception):
    """This file cannot be decoded (truncated, corrupt, not an image, an unsupported variant): the row is flagged."""


@dataclass(frozen=True)
class ImageNote:
    """Something the user should hear about a file that was read all the same (it is too large to decode quickly, its
    transparency hides pixels). ``what`` completes "N of M images ..." in the same words for every file that has it,
    so that `dpmed.data.cache` tells each note once, with how many files have it and the first of them, rather than a
    line per file."""

    what: str


@dataclass(frozen=True)
class Decoder:
    """read(path, channels, size_hint) -> (float32 [C, H, W] in [0, 1] (channels None: as stored), the file's notes);
    peek(path) ->
    (channels, (H, W)) from the header alone. size_hint is the size a later resize will produce (a decoder may
    decode at >= that size)."""

    name: str
    read: Callable[[Path, int | None, tuple[int, int] | None], tuple[np.ndarray, tuple[ImageNote, ...]]]
    peek: Callable[[Path], tuple[int, tuple[int, int]]]


def stretched(samples: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
    """``samples`` from the image's own min and max onto [0, 1], in float64; zeros where all are equal (no range to
    stretch). What a grey DICOM without a window and a 16-bit grey PNG or TIFF get alike: neither says which of its
    values are black and white, and only the image itself may say it (METHODS.md section 1). ``among``: a mask of the
    samples whose range sets black and white (a DICOM's pixels that are not padding); the others are clipped."""
    x = np.asarray(samples, dtype=np.float64)
    ranged = x if among is None else x[among]
    lo, hi = (float(ranged.min()), float(ranged.max())) if ranged.size else (0.0, 0.0)
    return np.clip((x - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.zeros_like(x)
