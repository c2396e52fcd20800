"""Local DP on images: noise added to every released pixel value before anyone trains (METHODS.md s.1).

`PixelGaussian` does the same with N(0, s^2) noise: the Gaussian mechanism with L2 sensitivity sqrt(d) R, an
(eps, delta) guarantee. `ScalarShift` reproduces 000_56c2431ae4df8d10.txt's code, which drew *one* Laplace value per
image and added it to every pixel (a brightness shift). The image content is released unchanged up to a shift, so it
carries no DP guarantee at all: it is labelled "not DP" and has no eps.

`PixelLaplace` adds iid Laplace(b) noise to each of the d values of the released tensor (after resize and channel
conversion), then clips to [0, R]. Clipping is post-processing and costs no privacy. Changing one value by at most R
changes the density ratio by at most e^(R/b), so each value is (R/b)-DP and, since any two images differ in at most
all d values, the image is (d R / b)-DP under the relation "any two images are neighbours" (Dwork & Roth 2014,
Thm 3.6, composed over d coordinates). That eps_image is large; we print it, because it is the honest number.

The guarantee is per image, and only the pixels are protected: the labels (and the patient's other images, each a
release of its own) go out in the clear. The noise is privacy randomness: it comes from the run's secret
``local_dp`` stream (`dpmed.randomness`), drawn in float64, added in float64 and clipped before the result is
rounded to float32. A seed-derived noise (as 000_56c2431ae4df8d10.txt and METHODS.md s.1 suggest, "global seed +
image index") would let anyone who knows the seed subtract it, and two arms of one seed share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmed.accounting import GaussianImageEvent, LaplaceImageEvent

__all__ = ["PixelLaplace", "PixelGaussian", "ScalarShift"]


# Images perturbed per call of the generator: bounds the float64 noise buffer (256 x 224 x 224 x 3 ~ 300 MB).
_CHUNK = 256


def _perturb(images: np.ndarray, *, rng: np.random.Generator, value_range: float, draw) -> np.ndarray:
    """clip(image + draw(rng, shape), 0, R) for the images in order, in float64, returned in the images' dtype.
    Drawing chunk after chunk from one stream gives the same values as one draw over the whole array."""
    out = np.empty_like(images)
    for start in range(0, len(images), _CHUNK):
        block = images[start:start + _CHUNK]
        noisy = block.astype(np.float64) + draw(rng, block.shape)
        out[start:start + _CHUNK] = np.clip(noisy, 0.0, value_range)
    return out


@dataclass(frozen=True)
class PixelLaplace:
    """scale: Laplace scale b in the units of value_range R (images are in [0, 1], so R = 1)."""

    scale: float
    value_range: float = 1.0

    name = "pixel_laplace"

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"pixel_laplace scale must be > 0, got {self.scale}")

    def apply(self, images: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """images: float32 [N, C, H, W] in [0, R] -> a perturbed copy, clipped to [0, R]; ``rng`` is the run's
        secret local-DP stream (N * C * H * W Laplace draws, in image order)."""
        return _perturb(images, rng=rng, value_range=self.value_range,
                        draw=lambda g, shape: g.laplace(0.0, self.scale, size=shape))

    def event(self, image_shape: tuple[int, ...]) -> LaplaceImageEvent:
        """What one release of an image of ``image_shape`` (C, H, W) costs, for the accountant."""
        return LaplaceImageEvent(scale=self.scale, value_range=self.value_range, dimension=int(np.prod(image_shape)))


@dataclass(frozen=True)
class PixelGaussian:
    """std: noise standard deviation s in the units of value_range R; eps_image from the analytic Gaussian."""

    std: float
    value_range: float = 1.0

    name = "pixel_gaussian"

    def __post_init__(self) -> None:
        if not self.std > 0:
            raise ValueError(f"pixel_gaussian std must be > 0, got {self.std}")

    def apply(self, images: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """images: float32 [N, C, H, W] in [0, R] -> a perturbed copy, clipped to [0, R]; noise from ``rng``."""
        return _perturb(images, rng=rng, value_range=self.value_range,
                        draw=lambda g, shape: g.normal(0.0, self.std, size=shape))

    def event(self, image_shape: tuple[int, ...]) -> GaussianImageEvent:
        return GaussianImageEvent(std=self.std, value_range=self.value_range, dimension=int(np.prod(image_shape)))


@dataclass(frozen=True)
class ScalarShift:
    """NOT DP. One Laplace(scale) value per image added to all its pixels, then clipped: the mechanism of
    000_56c2431ae4df8d10.txt's code, offered only to reproduce its numbers.

    Two images that differ anywhere but in brightness stay distinguishable with certainty, so no finite eps holds;
    at scale 1 about 37% of images saturate to all-white or all-black. It declares no privacy event.
    """

    scale: float
    value_range: float = 1.0

    name = "scalar_shift"

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scalar_shift scale must be > 0, got {self.scale}")

    def apply(self, images: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """images [N, C, H, W] -> each image plus one scalar Laplace draw, clipped to [0, R]."""
        return _perturb(images, rng=rng, value_range=self.value_range,
                        draw=lambda g, shape: g.laplace(0.0, self.scale, size=(shape[0], 1, 1, 1)))

    def event(self, image_shape: tuple[int, ...]) -> None:
        return None  # not DP: there is nothing an accountant could certify
