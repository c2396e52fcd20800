"""Raster files decode to the stored value range mapped onto [0, 1]: 8-bit / 255, 16-bit / 65535 (module docstring of
`dpmed.data.decoding`), each checked against the values written into the file."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dpmed.data.decoding import UnreadableImage, peek_image, read_image

WIDE = np.array([[0, 1000, 32768], [65535, 4095, 12]], dtype=np.uint16)   # 2 x 3: rows and columns not confused


def test_a_16_bit_grey_png_is_divided_by_65535_and_repeated_for_colour(tmp_path):
    path = tmp_path / "wide.png"
    Image.fromarray(WIDE).save(path)            # Pillow writes a 16-bit grey PNG (mode I;16)
    grey = read_image(path, channels=1)
    assert grey.dtype == np.float32 and grey.shape == (1, 2, 3)
    np.testing.assert_allclose(grey[0], WIDE / 65535.0, rtol=1e-6)
    colour = read_image(path, channels=3)
    assert colour.shape == (3, 2, 3)
    np.testing.assert_array_equal(colour, np.repeat(grey, 3, axis=0))
    assert peek_image(path) == (1, (2, 3))


def test_an_8_bit_file_is_divided_by_255_and_colour_keeps_its_channels_in_order(tmp_path):
    rgb = np.zeros((2, 3, 3), dtype=np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 255, 51, 0          # every pixel orange: R, G, B told apart
    rgb[1, 2] = (0, 0, 255)
    path = tmp_path / "colour.png"
    Image.fromarray(rgb).save(path)
    x = read_image(path, channels=3)
    assert x.shape == (3, 2, 3)
    np.testing.assert_allclose(x, rgb.transpose(2, 0, 1) / 255.0, rtol=1e-6)
    grey = read_image(path, channels=1)                            # ITU-R BT.601 luma, Pillow's convert("L")
    np.testing.assert_allclose(grey[0, 0, 0] * 255, round(0.299 * 255 + 0.587 * 51), atol=1)
    np.testing.assert_allclose(grey[0, 1, 2] * 255, round(0.114 * 255), atol=1)
    assert peek_image(path) == (3, (2, 3))
    Image.fromarray(rgb[..., 1]).save(tmp_path / "grey.png")
    assert peek_image(tmp_path / "grey.png") == (1, (2, 3))


def test_a_floating_point_tiff_is_unreadable_naming_its_mode(tmp_path):
    path = tmp_path / "float.tif"
    Image.fromarray(np.array([[0.0, 0.5], [2.0, -1.0]], dtype=np.float32)).save(path)
    with pytest.raises(UnreadableImage, match="mode F"):
        read_image(path, channels=1)
