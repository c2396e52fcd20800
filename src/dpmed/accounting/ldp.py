"""eps of local DP on images: the Laplace mechanism applied to every pixel value (METHODS.md s.1).

Adding iid Laplace(b) noise to a value in [0, R] is (R / b)-DP for that value (Dwork, McSherry, Nissim, Smith 2006:
the L1 sensitivity is R). Two *images* may differ in all d = H * W * C values, so the L1 sensitivity of the whole
image is d * R and the release is (d * R / b)-DP with respect to any two images: 150,528 for a 224x224x3 image
at b = 1, R = 1. That per-image number is the honest one; the per-pixel eps protects only one value at a time.
These are pure (delta = 0) guarantees and do not compose with DP-SGD's eps (a different neighbour relation).
"""

from __future__ import annotations

from dpmed.accounting import _arguments
from dpmed.accounting.events import LaplaceImageEvent

__all__ = ["NEIGHBOUR_LDP_IMAGE", "laplace_pixel_epsilon", "laplace_image_epsilon", "laplace_scale_for"]

NEIGHBOUR_LDP_IMAGE = "any two images (local DP on the released image)"


def laplace_pixel_epsilon(*, scale: float, value_range: float) -> float:
    """eps = R / b of one pixel value in [0, R] released with Laplace(b) noise."""
    scale = _arguments.positive("scale", scale, hint="the Laplace scale b must be positive")
    value_range = _arguments.positive("value_range", value_range, hint="values lie in [0, R]; R = 1 for [0, 1]")
    return value_range / scale


def laplace_image_epsilon(event: LaplaceImageEvent) -> float:
    """eps = d * R / b of one image released with iid Laplace(b) noise on each of its d values."""
    if not isinstance(event, LaplaceImageEvent):
        raise TypeError(f"event must be a LaplaceImageEvent, got {event!r}")
    return event.dimension * event.value_range / event.scale


def laplace_scale_for(*, epsilon_pixel: float, value_range: float) -> float:
    """The Laplace scale b = R / eps_pixel that makes each pixel value eps_pixel-DP (inverse of
    :func:`laplace_pixel_epsilon`)."""
    epsilon_pixel = _arguments.positive("epsilon_pixel", epsilon_pixel, hint="pass the per-pixel-value eps (> 0)")
    value_range = _arguments.positive("value_range", value_range, hint="values lie in [0, R]; R = 1 for [0, 1]")
    return value_range / epsilon_pixel
