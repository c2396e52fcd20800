"""Local DP mechanisms on images: array in, perturbed array out; each describes its privacy event.

``ScalarShift`` is the exception: a reproduction of a flawed mechanism that is not DP and declares no event.
"""

from dpmed.mechanisms.pixel import PixelGaussian, PixelLaplace, ScalarShift

__all__ = ["PixelLaplace", "PixelGaussian", "ScalarShift"]
