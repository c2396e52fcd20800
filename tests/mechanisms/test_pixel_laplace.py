"""pixel_laplace: the noise law, reproducibility per image, and the privacy fields it declares."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.accounting import laplace_image_epsilon
from dpmed.mechanisms import PixelLaplace


def test_noise_has_laplace_scale_b():
    """On a mid-grey image with b small enough that clipping is rare, the mean absolute deviation of Laplace(b)
    is b and its variance 2 b^2."""
    images = np.full((20, 1, 32, 32), 0.5, dtype=np.float32)
    out = PixelLaplace(scale=0.05).apply(images, seed=0)
    noise = (out - images).ravel()
    assert np.abs(noise).mean() == pytest.approx(0.05, rel=0.03)
    assert noise.var() == pytest.approx(2 * 0.05 ** 2, rel=0.05)


def test_output_is_clipped_to_the_value_range():
    out = PixelLaplace(scale=2.0).apply(np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32), seed=1)
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert ((out == 0.0) | (out == 1.0)).mean() > 0.3      # heavy noise saturates many values


def test_each_image_noise_depends_only_on_seed_and_index():
    images = np.random.default_rng(0).random((6, 1, 8, 8), dtype=np.float32)
    mech = PixelLaplace(scale=0.3)
    whole = mech.apply(images, seed=5)
    np.testing.assert_array_equal(whole[3:], mech.apply(images[3:], seed=5, first_index=3))
    assert not np.array_equal(whole, mech.apply(images, seed=6))
    assert not np.array_equal(whole[0] - images[0], whole[1] - images[1])   # per pixel, per image: not one shift


def test_event_records_the_honest_image_epsilon():
    event = PixelLaplace(scale=1.0).event((3, 224, 224))
    assert (event.scale, event.value_range, event.dimension) == (1.0, 1.0, 150528)
    assert laplace_image_epsilon(event) == pytest.approx(150528)
    assert laplace_image_epsilon(PixelLaplace(scale=0.5).event((1, 64, 64))) == pytest.approx(8192)


def test_rejects_non_positive_scale():
    with pytest.raises(ValueError, match="scale"):
        PixelLaplace(scale=0.0)
