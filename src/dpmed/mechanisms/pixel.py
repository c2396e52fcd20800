"""Local DP on images: noise added to every released pixel value before anyone trains (METHODS.md s.1).

`PixelLaplace` adds iid Laplace(b) noise to each of the d values of the released tensor (after resize and channel
conversion), then clips to [0, R]. Clipping is post-processing and costs no privacy. Changing one value by at most R
changes the density ratio by at most e^(R/b), so each value is (R/b)-DP and, since any two images differ in at most
all d values, the image is (d R / b)-DP under the relation "any two images are neighbours" (Dwork & Roth 2014,
Thm 3.6, composed over d coordinates). That eps_image is large; we print it, because it is the honest number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmed.accounting import LaplaceImageEvent

__all__ = ["PixelLaplace"]


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
        out = np.empty_like(images)
        for i, image in enumerate(images):
            rng = np.random.default_rng([seed, first_index + i])
            noise = rng.laplace(0.0, self.scale, size=image.shape).astype(images.dtype)
            np.clip(image + noise, 0.0, self.value_range, out=out[i])
        return out

    def event(self, image_shape: tuple[int, ...]) -> LaplaceImageEvent:
        """What one release of an image of ``image_shape`` (C, H, W) costs, for the accountant."""
        return LaplaceImageEvent(scale=self.scale, value_range=self.value_range, dimension=int(np.prod(image_shape)))
