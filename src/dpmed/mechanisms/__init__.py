"""Local DP mechanisms on images: array in, perturbed array out; each describes its privacy event."""

from dpmed.mechanisms.pixel import PixelLaplace

__all__ = ["PixelLaplace"]
