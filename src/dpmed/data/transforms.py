"""Per-image preprocessing: central crop to the target aspect, resize, channel conversion, per-image min-max,
histogram equalisation, fixed normalisation.

Why per-image only: METHODS.md section 1 allows preprocessing before a local DP mechanism to use only the image
itself. A statistic computed over the dataset (mean, std, a shared histogram) would carry information about other
people's images into each released image and leak outside the mechanism's accounting. Every function here maps
image i to a function of image i alone, so it can run before a mechanism, and in any chunking.

All functions take and return float32 arrays [N, C, H, W] with values in [0, 1], except :func:`normalize`, whose
output is centred: it runs after any local DP mechanism (which needs pixels in [0, R] = [0, 1]), at the model's input.
:class:`Preprocessing` is the one description of these steps that readers, the cache key and the run record share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["center_crop", "resize", "to_channels", "minmax_per_image", "equalize_histogram", "normalize",
           "Preprocessing"]

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
    import torch   # here: the study file's schema imports this module, and a mistake in it is told before torch
    import torch.nn.functional as F

    out = np.empty((n, c, height, width), dtype=np.float32)  # [N, C, height, width]
    per_chunk = max(1, _CHUNK_BYTES // (4 * c * max(height * width, h * w)))
    for start in range(0, n, per_chunk):
        block = torch.from_numpy(np.ascontiguousarray(images[start : start + per_chunk], dtype=np.float32))
        resized = F.interpolate(block, size=(height, width), mode="bilinear", align_corners=False, antialias=True)
        out[start : start + per_chunk] = resized.numpy()
    return np.clip(out, 0.0, 1.0, out=out)


def center_crop(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The central part of images [N, C, H, W] with the aspect of ``size`` = (height, width): a film wider than that
    loses equal strips at its left and right, a taller one at its top and bottom. A view; ``images`` itself when the
    aspect already matches to the pixel.

    Why: resizing a 1,400 x 1,000 px film to a square stretches it; MedMNIST renders PneumoniaMNIST from the central
    square of each film (Yang et al. 2023), as torchxrayvision's XRayCenterCrop does, so that a film keeps its
    proportions and loses its sides (arms, shoulders, markers) instead.
    """
    _check_images(images)
    height, width = size
    h, w = images.shape[-2:]
    if h * width > w * height:                 # taller than the target aspect: crop rows
        keep_h, keep_w = max(1, round(w * height / width)), w
    else:                                      # wider (or equal): crop columns
        keep_h, keep_w = h, max(1, round(h * width / height))
    if (keep_h, keep_w) == (h, w):
        return images
    top, left = (h - keep_h) // 2, (w - keep_w) // 2
    return images[..., top:top + keep_h, left:left + keep_w]


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


def equalize_histogram(images: np.ndarray, *, bins: int = 256) -> np.ndarray:
    """Histogram-equalise each image on its own: every value becomes its rank in the image's own histogram.

    The per-image equalisation 003_9a91354dc2d7e2df.txt applies after min-max (as Johnson et al. do for
    MIMIC-CXR-JPG). Values are binned into ``bins`` equal bins over [0, 1] (all channels of an image share one
    histogram, so colours keep their relation), and a value in bin k maps to
    ``(cdf[k] - cdf[k_min]) / (1 - cdf[k_min])``, with cdf the image's cumulative share of values and k_min its
    lowest occupied bin: the darkest value becomes 0, the brightest 1, and the rest spread by rank. Example: one
    image with the four values 0, 0.1, 0.2, 0.9 becomes 0, 1/3, 2/3, 1. A constant image becomes all 0.
    Uses only the image itself (METHODS.md section 1); no shared histogram is ever computed. This is OpenCV's
    equalizeHist rule on float images; scikit-image's ``equalize_hist`` differs: it maps the example to 0.25, 0.49,
    0.75, 1 (the darkest value to its own share, not 0).
    """
    _check_images(images)
    n = len(images)
    codes = np.clip((images.reshape(n, -1) * bins).astype(np.int64), 0, bins - 1)  # [N, D] bin of each value
    out = np.empty(codes.shape, dtype=np.float32)
    for i in range(n):  # one histogram per image: never pooled across images
        cdf = np.cumsum(np.bincount(codes[i], minlength=bins)) / codes.shape[1]  # [bins]
        lowest = cdf[codes[i].min()]
        span = 1.0 - lowest
        out[i] = (cdf[codes[i]] - lowest) / span if span > 0 else 0.0
    return out.reshape(images.shape)


def normalize(images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """(x - mean) / std per channel with **fixed** constants (e.g. ImageNet's for a pretrained model).

    Why fixed: a mean and std computed on the training images are statistics of other patients' images and would
    leak outside a mechanism's accounting (METHODS.md section 1). ``mean`` and ``std`` hold one value (all channels)
    or one per channel. The output leaves [0, 1]; apply it after any local DP mechanism, to every split alike.
    """
    _check_images(images)
    c = images.shape[1]
    if len(mean) not in (1, c) or len(std) not in (1, c) or any(not s > 0 for s in std):
        raise ValueError(f"normalize: mean {mean} and std {std} need 1 or {c} values each (std > 0) for {c} channels")
    m = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    out = np.subtract(images, m, dtype=np.float32)     # one new array: the division then works in it
    out /= s
    return out


@dataclass(frozen=True)
class Preprocessing:
    """The per-image steps a study asks for, in the order they run: crop, resize, min-max, equalise, channels.

    size: (height, width) or None (keep the data's size); aspect: how an image of another aspect reaches ``size``,
    "stretch" (resize it whole) or "crop" (:func:`center_crop`, then resize); channels: 1, 3 or None (keep);
    minmax / equalize: the functions above; normalize: fixed (mean, std) applied later, at the model input (see
    :func:`normalize`), so it is carried here only to be recorded and checked. Every step maps image i to a
    function of image i alone. For arrays (MedMNIST, the phantom) channels convert last, so that equalisation and
    min-max see the image as stored; image files are converted as they are decoded (`dpmed.data.cache`: Pillow's
    BT.601 luma, each file opened once), before min-max and equalisation. The two orders agree for grey images; for
    colour images converted to grey they differ (min-max and equalisation then see the luma, not the channels).
    """

    size: tuple[int, int] | None = None
    channels: int | None = None
    aspect: str = "stretch"
    minmax: bool = False
    equalize: bool = False
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    def __post_init__(self) -> None:
        if self.size is not None and (len(self.size) != 2 or min(self.size) < 1):
            raise ValueError(f"Preprocessing.size must be (height, width) >= 1, got {self.size}")
        if self.channels not in (None, 1, 3):
            raise ValueError(f"Preprocessing.channels must be 1, 3 or None, got {self.channels}")
        if self.aspect not in ("stretch", "crop"):
            raise ValueError(f"Preprocessing.aspect must be 'stretch' or 'crop', got {self.aspect!r}")

    def apply(self, images: np.ndarray) -> np.ndarray:
        """images float32 [N, C, H, W] in [0, 1] -> the same after crop, resize, min-max, equalisation, channels."""
        if self.size is not None:
            if self.aspect == "crop":
                images = center_crop(images, self.size)
            images = resize(images, self.size)
        if self.minmax:
            images = minmax_per_image(images)
        if self.equalize:
            images = equalize_histogram(images)
        if self.channels is not None:
            images = to_channels(images, self.channels)
        return images

    def describe(self) -> dict[str, object]:
        """What the run record stores: every step and its setting (JSON-ready)."""
        return {
            "resize": None if self.size is None else f"{self.size[0]}x{self.size[1]} (bilinear, antialiased)",
            "aspect": self.aspect,
            "minmax": self.minmax,
            "equalize": self.equalize,
            "channels": self.channels,
            "normalize": None if self.normalize is None else {"mean": list(self.normalize[0]),
                                                             "std": list(self.normalize[1])},
            "scope": "per image only (METHODS.md section 1); normalize uses fixed constants, after any mechanism",
        }


def _check_images(images: np.ndarray) -> None:
    if not isinstance(images, np.ndarray) or images.ndim != 4:
        shape = getattr(images, "shape", type(images).__name__)
        raise ValueError(f"images must be a numpy array [N, C, H, W], got {shape}")
