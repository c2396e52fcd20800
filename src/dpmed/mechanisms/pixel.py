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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmed.accounting import GaussianImageEvent, LaplaceImageEvent

__all__ = ["PixelLaplace", "PixelGaussian", "ScalarShift"]


def _perturb(images: np.ndarray, *, seed: int, first_index: int, value_range: float, draw) -> np.ndarray:
    """image_i + draw(rng_i, shape), clipped to [0, R], with rng_i = default_rng([seed, first_index + i])."""
    out = np.empty_like(images)
    for i, image in enumerate(images):
        rng = np.random.default_rng([seed, first_index + i])
        noise = np.asarray(draw(rng, image.shape), dtype=images.dtype)
        np.clip(image + noise, 0.0, value_range, out=out[i])
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

    def apply(self, images: np.ndarray, *, seed: int, first_index: int = 0) -> np.ndarray:
        """images: float32 [N, C, H, W] in [0, R] -> a perturbed copy, clipped to [0, R].

        Image i draws its noise from ``default_rng([seed, first_index + i])``: the perturbed dataset is reproducible
        and does not depend on batch order or on which other images are released with it.
        """
        return _perturb(images, seed=seed, first_index=first_index, value_range=self.value_range,
                        draw=lambda rng, shape: rng.laplace(0.0, self.scale, size=shape))

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

    def apply(self, images: np.ndarray, *, seed: int, first_index: int = 0) -> np.ndarray:
        """images: float32 [N, C, H, W] in [0, R] -> a perturbed copy, clipped to [0, R]; per-image seeded noise."""
        return _perturb(images, seed=seed, first_index=first_index, value_range=self.value_range,
                        draw=lambda rng, shape: rng.normal(0.0, self.std, size=shape))

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

    def apply(self, images: np.ndarray, *, seed: int, first_index: int = 0) -> np.ndarray:
        """images [N, C, H, W] -> each image plus one scalar Laplace draw, clipped to [0, R]."""
        return _perturb(images, seed=seed, first_index=first_index, value_range=self.value_range,
                        draw=lambda rng, shape: np.full(shape, rng.laplace(0.0, self.scale)))

    def event(self, image_shape: tuple[int, ...]) -> None:
        return None  # not DP: there is nothing an accountant could certify
