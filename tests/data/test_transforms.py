"""Per-image transforms on hand-computed arrays, and the per-image property METHODS.md section 1 requires."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.data import transforms
from dpmed.data.transforms import minmax_per_image, resize, to_channels


def _img(*rows) -> np.ndarray:
    return np.array(rows, dtype=np.float32)[None, None]  # [1, 1, H, W]


def test_resize_identity_returns_the_same_array():
    x = np.zeros((2, 1, 8, 8), np.float32)
    assert resize(x, 8) is x and resize(x, (8, 8)) is x


def test_resize_2x2_to_1x1_is_the_mean():
    # Antialiased bilinear: the triangle filter scaled by 2 weights the four pixels equally.
    np.testing.assert_allclose(resize(_img([0.2, 0.4], [0.6, 1.0]), 1), [[[[0.55]]]], atol=1e-6)


def test_resize_upsampling_is_bilinear_with_half_pixel_centres():
    # Output centres at input x = -0.25, 0.25, 0.75, 1.25 -> clamped, interpolated: 0, 0.25, 0.75, 1.
    out = resize(_img([0.0, 1.0], [0.0, 1.0]), (2, 4))
    np.testing.assert_allclose(out[0, 0], [[0, 0.25, 0.75, 1.0]] * 2, atol=1e-6)


def test_resize_keeps_range_dtype_and_constants():
    rng = np.random.default_rng(0)
    x = rng.random((3, 2, 30, 30), dtype=np.float32)
    y = resize(x, 17)
    assert y.shape == (3, 2, 17, 17) and y.dtype == np.float32 and y.min() >= 0 and y.max() <= 1
    np.testing.assert_allclose(resize(np.full((1, 1, 28, 28), 0.3, np.float32), 64), 0.3, atol=1e-6)


def test_resize_in_chunks_equals_one_block(monkeypatch):
    x = np.random.default_rng(1).random((7, 1, 20, 20), dtype=np.float32)
    whole = resize(x, 9)
    monkeypatch.setattr(transforms, "_CHUNK_BYTES", 4 * 20 * 20 * 2)  # two images per chunk
    np.testing.assert_array_equal(resize(x, 9), whole)


def test_to_channels_grey_to_rgb_repeats():
    x = _img([0.1, 0.9])
    y = to_channels(x, 3)
    assert y.shape == (1, 3, 1, 2)
    for c in range(3):
        np.testing.assert_array_equal(y[0, c], x[0, 0])


def test_to_channels_rgb_to_grey_is_bt601_luma():
    rgb = np.zeros((1, 3, 1, 3), np.float32)
    rgb[0, 0, 0, 0] = 1.0  # pure red
    rgb[0, 1, 0, 1] = 1.0  # pure green
    rgb[0, :, 0, 2] = 0.5  # grey stays grey
    np.testing.assert_allclose(to_channels(rgb, 1)[0, 0, 0], [0.299, 0.587, 0.5], atol=1e-6)


def test_to_channels_identity_and_errors():
    x = np.zeros((1, 3, 2, 2), np.float32)
    assert to_channels(x, 3) is x
    with pytest.raises(ValueError, match="1 \\(grey\\) or 3"):
        to_channels(x, 2)
    with pytest.raises(ValueError, match="1 or 3 channels"):
        to_channels(np.zeros((1, 2, 2, 2), np.float32), 1)


def test_minmax_per_image_hand_values():
    x = np.concatenate([_img([0.2, 0.4], [0.6, 1.0]), _img([0.5, 0.5], [0.5, 0.5])])
    y = minmax_per_image(x)
    np.testing.assert_allclose(y[0, 0], [[0, 0.25], [0.5, 1.0]], atol=1e-6)
    np.testing.assert_array_equal(y[1], 0.0)  # constant image -> 0
    assert y.dtype == np.float32


def test_minmax_spans_all_channels_of_an_image():
    x = np.zeros((1, 2, 1, 1), np.float32)
    x[0, 0], x[0, 1] = 0.25, 0.75
    np.testing.assert_allclose(minmax_per_image(x)[0, :, 0, 0], [0.0, 1.0])


@pytest.mark.parametrize(
    "transform",
    [lambda x: resize(x, 5), lambda x: to_channels(x, 3), minmax_per_image],
    ids=["resize", "to_channels", "minmax"],
)
def test_each_image_depends_only_on_itself(transform):
    """METHODS.md section 1: changing image 1 must not change the output for image 0."""
    rng = np.random.default_rng(2)
    x = rng.random((2, 1, 12, 12), dtype=np.float32)
    other = x.copy()
    other[1] = rng.random((1, 12, 12), dtype=np.float32)
    np.testing.assert_array_equal(transform(x)[0], transform(other)[0])


def test_rejects_non_4d():
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        minmax_per_image(np.zeros((4, 4), np.float32))


# --- histogram equalisation, fixed normalisation, the Preprocessing pipeline ---------------------------------------


def test_equalize_by_hand():
    # cdf of 0, 0.1, 0.2, 0.9 is 1/4, 2/4, 3/4, 1; (cdf - 1/4) / (3/4) = 0, 1/3, 2/3, 1
    out = transforms.equalize_histogram(_img([0.0, 0.1], [0.2, 0.9]))
    np.testing.assert_allclose(out[0, 0], [[0, 1 / 3], [2 / 3, 1]], atol=1e-6)
    # ties share a value: 0, 0, 0.5, 1 -> cdf 2/4, 2/4, 3/4, 1 -> 0, 0, 1/2, 1
    np.testing.assert_allclose(transforms.equalize_histogram(_img([0.0, 0.0], [0.5, 1.0]))[0, 0], [[0, 0], [0.5, 1]])
    assert not transforms.equalize_histogram(np.full((1, 1, 4, 4), 0.3, np.float32)).any()


def test_equalize_is_per_image_and_monotone():
    rng = np.random.default_rng(1)
    x = rng.random((3, 1, 16, 16), dtype=np.float32) ** 3  # skewed towards dark
    out = transforms.equalize_histogram(x)
    np.testing.assert_array_equal(out[1:2], transforms.equalize_histogram(x[1:2]))  # other images do not matter
    order = np.argsort(x[0].ravel(), kind="stable")
    assert np.all(np.diff(out[0].ravel()[order]) >= 0)
    assert x[0].mean() < 0.3 < 0.4 < out[0].mean()  # spread towards uniform (the darkest bin all maps to 0)


def test_normalize_with_fixed_constants():
    x = np.full((2, 3, 2, 2), 0.5, np.float32)
    out = transforms.normalize(x, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    np.testing.assert_allclose(out[0, :, 0, 0], [(0.5 - 0.485) / 0.229, (0.5 - 0.456) / 0.224, (0.5 - 0.406) / 0.225],
                               rtol=1e-6)
    np.testing.assert_allclose(transforms.normalize(x, (0.5,), (0.25,)), 0.0)
    with pytest.raises(ValueError, match="need 1 or 3 values"):
        transforms.normalize(x, (0.5, 0.5), (1.0, 1.0))


def test_preprocessing_runs_resize_minmax_equalize_channels_in_order():
    x = _img([0.2, 0.4], [0.6, 0.8])
    pre = transforms.Preprocessing(size=(2, 2), channels=3, minmax=True, equalize=True)
    out = pre.apply(x)
    assert out.shape == (1, 3, 2, 2)
    np.testing.assert_allclose(out[0, 0], [[0, 1 / 3], [2 / 3, 1]], atol=1e-6)
    record = pre.describe()
    assert record["minmax"] and record["equalize"] and record["channels"] == 3 and record["resize"].startswith("2x2")
    with pytest.raises(ValueError, match="channels must be 1, 3 or None"):
        transforms.Preprocessing(channels=2)


def test_center_crop_keeps_the_central_part_at_the_target_aspect_as_counted_by_hand():
    wide = np.arange(24, dtype=np.float32).reshape(1, 1, 4, 6) / 24      # 4 rows of 6
    assert transforms.center_crop(wide, (2, 2))[0, 0].tolist() == wide[0, 0, :, 1:5].tolist()   # columns 1-4
    tall = wide.transpose(0, 1, 3, 2)                                     # 6 rows of 4
    assert transforms.center_crop(tall, (2, 2))[0, 0].tolist() == tall[0, 0, 1:5].tolist()
    assert transforms.center_crop(wide, (8, 12)) is wide                  # the aspect already matches
    assert transforms.center_crop(wide, (1, 3))[0, 0].tolist() == wide[0, 0, 1:3].tolist()    # rows 1-2 of 4
    # an odd margin: the odd pixel goes from the right (bottom) edge, the same way for every image
    odd = np.arange(28, dtype=np.float32).reshape(1, 1, 4, 7) / 28        # 4 rows of 7: 3 columns to lose
    assert transforms.center_crop(odd, (1, 1))[0, 0].tolist() == odd[0, 0, :, 1:5].tolist()   # columns 1-4
    assert transforms.center_crop(odd.transpose(0, 1, 3, 2), (1, 1))[0, 0].tolist() == \
        odd.transpose(0, 1, 3, 2)[0, 0, 1:5].tolist()


def test_preprocessing_crops_before_it_resizes_only_when_asked():
    wide = np.zeros((1, 1, 4, 8), dtype=np.float32)
    wide[..., 2:6] = 1.0                                                  # a bright central square
    cropped = transforms.Preprocessing(size=(2, 2), aspect="crop").apply(wide)
    stretched = transforms.Preprocessing(size=(2, 2)).apply(wide)
    np.testing.assert_allclose(cropped, 1.0)                              # only the central square remains
    np.testing.assert_array_equal(stretched, transforms.resize(wide, (2, 2)))   # the whole image, squeezed
    assert stretched.max() < 0.7                                          # the dark sides are still in it
    assert transforms.Preprocessing(size=(2, 2), aspect="crop").describe()["aspect"] == "crop"
    with pytest.raises(ValueError, match="aspect must be 'stretch' or 'crop'"):
        transforms.Preprocessing(aspect="pad")


def test_downsampling_averages_over_the_whole_footprint_and_crop_sizes_round_to_nearest():
    """Antialiased: 1 x 4 -> 1 x 1 weighs all four pixels (a triangle filter over the footprint: 5/24 for a bright
    first pixel), where plain bilinear would read the two middle ones only (0). A 10 x 5 film cropped to the aspect
    3 : 2 keeps round(7.5) = 8 rows, from row 1."""
    assert resize(_img([1.0, 0.0, 0.0, 0.0]), (1, 1))[0, 0, 0, 0] == pytest.approx(5 / 24, rel=1e-6)
    tall = np.arange(50, dtype=np.float32).reshape(1, 1, 10, 5) / 50
    assert transforms.center_crop(tall, (3, 2))[0, 0].tolist() == tall[0, 0, 1:9].tolist()


def test_equalisation_bins_values_by_bins_times_value_and_runs_once_after_minmax():
    """0.999 and 1.0 share the top bin of 256 (both become 1). Min-max comes first: 0.5 .. 0.6 stretched to 0 .. 1
    and then equalised gives ranks 0, 1/3, 2/3, 1 (the other order would first lump 0.5-0.502 into one bin); and
    equalisation is applied once (a second pass moves values of a skewed image by up to 0.004)."""
    np.testing.assert_allclose(transforms.equalize_histogram(_img([0.0, 0.5], [0.999, 1.0]))[0, 0],
                               [[0, 1 / 3], [1, 1]], atol=1e-6)
    both = transforms.Preprocessing(minmax=True, equalize=True).apply(_img([0.5, 0.501], [0.502, 0.6]))
    np.testing.assert_allclose(both[0, 0], [[0, 1 / 3], [2 / 3, 1]], atol=1e-6)
    skewed = (np.random.default_rng(0).random((2, 1, 64, 64)) ** 3).astype(np.float32)
    assert np.array_equal(transforms.Preprocessing(equalize=True).apply(skewed), transforms.equalize_histogram(skewed))


def test_a_wide_film_cropped_keeps_the_nearest_whole_number_of_columns():
    """4 rows at the aspect 3 : 5 are 6.67 columns wide: 7 are kept (not 6, as truncation would), from column 1 of
    the 10, so the lost strips are 1 and 2 columns wide."""
    wide = np.arange(40, dtype=np.float32).reshape(1, 1, 4, 10) / 40
    assert transforms.center_crop(wide, (3, 5))[0, 0].tolist() == wide[0, 0, :, 1:8].tolist()


def test_equalisation_bins_by_the_floor_of_value_times_bins():
    """0.099 and 0.1 lie in bin 25 of 256 (25.3 and 25.6, floored), so they share a value; rounded they would fall
    in bins 25 and 26 and be ranked apart."""
    out = transforms.equalize_histogram(_img([0.0, 0.099], [0.1, 1.0]))
    np.testing.assert_allclose(out[0, 0], [[0, 2 / 3], [2 / 3, 1]], atol=1e-6)


def test_a_downsampled_white_image_stays_within_one():
    """The filter's weights sum to 1 only up to float rounding (30 -> 17 px gives 1 + 2e-7 at some pixels): the
    result is clipped, so that the [0, 1] range every local DP mechanism's sensitivity assumes holds exactly."""
    out = resize(np.ones((1, 1, 30, 30), np.float32), 17)
    assert out.max() <= 1.0 and out.min() == pytest.approx(1.0, abs=1e-6)


def test_sizes_and_constants_that_cannot_be_are_refused():
    x = np.full((1, 1, 4, 4), 0.5, np.float32)
    for size in ((0, 4), (4, 0)):
        with pytest.raises(ValueError, match="size must be positive"):
            resize(x, size)
        with pytest.raises(ValueError, match=r"Preprocessing.size must be \(height, width\) >= 1"):
            transforms.Preprocessing(size=size)
    for std in ((0.0,), (-0.25,)):     # a zero std divides by zero; a negative one flips the image's contrast
        with pytest.raises(ValueError, match=r"std > 0"):
            transforms.normalize(x, (0.5,), std)
    with pytest.raises(ValueError, match=r"numpy array \[N, C, H, W\], got list"):
        minmax_per_image(x.tolist())


def test_the_record_gives_height_before_width_and_the_mean_before_the_std():
    record = transforms.Preprocessing(size=(16, 32), normalize=((0.5, 0.4, 0.3), (0.2, 0.1, 0.3))).describe()
    assert record["resize"] == "16x32 (bilinear, antialiased)"
    assert record["normalize"] == {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.1, 0.3]}


def test_an_array_s_channels_convert_after_minmax_so_minmax_sees_the_colours_as_stored():
    """A red pixel beside a black one already spans 0 .. 1 in its channels, so min-max leaves it and the luma is
    0.299; converted first, min-max would stretch that luma to 1."""
    rgb = np.zeros((1, 3, 1, 2), np.float32)
    rgb[0, 0, 0, 0] = 1.0                                                 # pure red, then black
    out = transforms.Preprocessing(channels=1, minmax=True).apply(rgb)
    np.testing.assert_allclose(out[0, 0, 0], [0.299, 0.0], atol=1e-6)


def test_a_crop_to_a_far_other_aspect_keeps_at_least_the_central_pixel():
    """A 1 x 5 strip at the aspect 4 : 1 would keep round(0.25) = 0 columns: it keeps the central one."""
    strip = np.arange(5, dtype=np.float32).reshape(1, 1, 1, 5)
    assert transforms.center_crop(strip, (4, 1)).tolist() == [[[[2.0]]]]
    assert transforms.center_crop(strip.transpose(0, 1, 3, 2), (1, 4)).tolist() == [[[[2.0]]]]
