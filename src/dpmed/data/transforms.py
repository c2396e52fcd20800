"""Per-image preprocessing: resize, channel conversion, per-image min-max.

Why per-image only: METHODS.md section 1 allows preprocessing before a local DP mechanism to use only the image
itself. A statistic computed over the dataset (mean, std, a shared histogram) would carry information about other
people's images into each released image and leak outside the mechanism's accounting. Every function here maps
image i to a function of image i alone, so it can run before a mechanism, and in any chunking.

All functions take and return float32 arrays [N, C, H, W] with values in [0, 1].
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["resize", "to_channels", "minmax_per_image"]

_CHUNK_BYTES = 64 * 2**20  # resize works through at most ~64 MiB of output at a time

# ITU-R BT.601 luma weights (R, G, B): the conversion PIL's convert("L") uses.
_LUMA_601 = np.array([0.299, 0.587, 0.114], dtype=np.float32)


def resize(images: np.ndarray, size: int | tuple[int, int]) -> np.ndarray:
    """Resize images [N, C, H, W] to [N, C, size, size] (or ``size = (height, width)``).

    Bilinear with antialiasing (``torch.nn.functional.interpolate(..., mode="bilinear", antialias=True)``): without
    the antialias filter, downsampling (224 -> 64) aliases fine texture into moire. The filter weights are
    non-negative, so values stay in [0, 1] up to rounding, which a final clip removes. Works in chunks so that
    memory stays bounded on large datasets. Returns ``images`` itself when the size already matches.
    """
    _check_images(images)
    height, width = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
    if height < 1 or width < 1:
        raise ValueError(f"resize: size must be positive, got {size}")
    n, c, h, w = images.shape
    if (h, w) == (height, width):
        return images
    out = np.empty((n, c, height, width), dtype=np.float32)  # [N, C, height, width]
    per_chunk = max(1, _CHUNK_BYTES // (4 * c * max(height * width, h * w)))
    for start in range(0, n, per_chunk):
        block = torch.from_numpy(np.ascontiguousarray(images[start : start + per_chunk], dtype=np.float32))
        resized = F.interpolate(block, size=(height, width), mode="bilinear", align_corners=False, antialias=True)
        out[start : start + per_chunk] = resized.numpy()
    return np.clip(out, 0.0, 1.0, out=out)


def to_channels(images: np.ndarray, channels: int) -> np.ndarray:
    """Convert images [N, C, H, W] to ``channels`` channels (1 or 3).

    Grey -> RGB repeats the grey channel (what ImageNet-pretrained models expect of X-rays, as in
    000_56c2431ae4df8d10.txt); RGB -> grey is ITU-R BT.601 luma, 0.299 R + 0.587 G + 0.114 B. Returns ``images``
    itself when the channel count already matches.
    """
    _check_images(images)
    c = images.shape[1]
    if channels not in (1, 3):
        raise ValueError(f"to_channels: channels must be 1 (grey) or 3 (RGB), got {channels}")
    if c not in (1, 3):
        raise ValueError(f"to_channels: images must have 1 or 3 channels, got {c}")
    if c == channels:
        return images
    if channels == 3:
        return np.repeat(images, 3, axis=1).astype(np.float32, copy=False)  # [N, 3, H, W]
    grey = np.einsum("nchw,c->nhw", images.astype(np.float32, copy=False), _LUMA_601)[:, None]  # [N, 1, H, W]
    return np.clip(grey, 0.0, 1.0, out=grey)


def minmax_per_image(images: np.ndarray) -> np.ndarray:
    """Stretch each image (over all its channels) to span [0, 1]: (x - min) / (max - min).

    The per-image normalisation of Johnson et al. (MIMIC-CXR-JPG) that 003_9a91354dc2d7e2df.txt applies before
    histogram equalisation. A constant image has no range to stretch and becomes all 0.
    """
    _check_images(images)
    x = images.astype(np.float32, copy=False)
    lo = x.min(axis=(1, 2, 3), keepdims=True)  # [N, 1, 1, 1]
    span = x.max(axis=(1, 2, 3), keepdims=True) - lo  # [N, 1, 1, 1]
    safe = np.where(span > 0, span, np.float32(1.0))
    return np.where(span > 0, (x - lo) / safe, np.float32(0.0)).astype(np.float32)


def _check_images(images: np.ndarray) -> None:
    if not isinstance(images, np.ndarray) or images.ndim != 4:
        shape = getattr(images, "shape", type(images).__name__)
        raise ValueError(f"images must be a numpy array [N, C, H, W], got {shape}")
