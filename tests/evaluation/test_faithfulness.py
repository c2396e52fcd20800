"""The faithfulness metrics of a CAM (METHODS.md sec. 6), each against hand-worked values, and their means with a
percentile bootstrap interval over the explained images."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.evaluation.bootstrap import bootstrap_indices, percentile_interval
from dpmed.evaluation.faithfulness import (average_drop, deletion_insertion, increase_in_confidence,
                                           mask_area_share, mask_energy, masked_input_score, mean_with_interval,
                                           pointing_game)


def test_confidence_metrics_by_hand():
    y, o = np.array([0.8, 0.5]), np.array([0.4, 0.6])
    assert average_drop(y, o).mean() == pytest.approx(100 * (0.4 / 0.8 + 0) / 2)          # 25
    assert increase_in_confidence(y, o).mean() == pytest.approx(50.0)
    assert masked_input_score(y, o).mean() == pytest.approx(100 * (0.5 + 1.2) / 2)         # 85
    # unchanged confidence is no increase: a model that ignores its input would score 100 % otherwise
    np.testing.assert_array_equal(increase_in_confidence(np.full(3, 0.5), np.array([0.5, 0.6, 0.4])), [0, 100, 0])
    with pytest.raises(ValueError, match=r"Y \(the class score on the unmasked image\) must be > 0"):
        average_drop(np.array([0.0]), np.array([0.1]))


def test_mask_energy_of_a_cam_whose_energy_is_known():
    cams = np.full((3, 4, 4), 0.5)
    cams[0, :2, :2] = 1.0                # 4 px of 1 inside the mask, 12 px of 0.5 outside: 4 / (4 + 6)
    cams[1] = 0.0                        # all-zero CAM: no energy in the lesion
    masks = np.zeros((3, 4, 4), bool)
    masks[:2, :2, :2] = True             # images 0 and 1: top-left 2x2; image 2: no lesion
    np.testing.assert_allclose(mask_energy(cams, masks), [0.4, 0.0, np.nan])
    np.testing.assert_allclose(mask_energy(np.full((1, 4, 4), 0.3), masks[:1]), [0.25])   # uniform = area share
    np.testing.assert_allclose(mask_area_share(masks), [0.25, 0.25, np.nan])


def test_pointing_game_by_hand():
    masks = np.zeros((5, 5, 5), bool)
    masks[:, :2, :2] = True
    cams = np.zeros((5, 5, 5))
    cams[0, 1, 1] = 1.0                  # peak inside
    cams[1, 4, 4] = 1.0                  # peak far outside
    cams[2, 3, 3] = 1.0                  # peak sqrt(2^2 + 2^2) = 2.83 px from the nearest mask pixel (1, 1)
    cams[3] = 1.0                        # flat: the peak is the centre (2, 2), outside
    # cams[4] all zero: misses
    np.testing.assert_array_equal(pointing_game(cams, masks), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(pointing_game(cams[2:3], masks[2:3], tolerance=2.8), [0])
    np.testing.assert_array_equal(pointing_game(cams[2:3], masks[2:3], tolerance=2.9), [1])
    exact = np.zeros((1, 5, 5))
    exact[0, 1, 3] = 1.0                 # exactly 2 px from (1, 1): within a tolerance of 2, not of 1.99
    np.testing.assert_array_equal(pointing_game(exact, masks[:1], tolerance=2.0), [1])
    np.testing.assert_array_equal(pointing_game(exact, masks[:1], tolerance=1.99), [0])
    assert np.isnan(pointing_game(cams[:1], np.zeros((1, 5, 5), bool))[0])
    # a mask over the centre: a flat map points at the centre and hits; an all-zero map points nowhere and misses,
    # at any tolerance (above, both missed only because the corner mask lies away from the centre)
    central = np.zeros((2, 5, 5), bool)
    central[:, 1:4, 1:4] = True
    blank = np.stack([np.ones((5, 5)), np.zeros((5, 5))])
    np.testing.assert_array_equal(pointing_game(blank, central), [1, 0])
    np.testing.assert_array_equal(pointing_game(blank, central, tolerance=10.0), [1, 0])


def test_deletion_and_insertion_auc_by_hand():
    image = np.array([[[[1.0, 0.5], [0.25, 0.0]]]], np.float32)
    cam = np.array([[[4.0, 3.0], [2.0, 1.0]]])         # pixels removed / restored in reading order

    def score(batch):                                  # class 1 = mean pixel value
        m = batch.reshape(len(batch), -1).mean(axis=1)
        return np.stack([1 - m, m], axis=1)

    dele, ins, dcurve, icurve = deletion_insertion(score, image, cam, [1], steps=4)
    np.testing.assert_allclose(dcurve[0], [0.4375, 0.1875, 0.0625, 0.0, 0.0])
    np.testing.assert_allclose(icurve[0], [0.0, 0.25, 0.375, 0.4375, 0.4375])
    assert dele[0] == pytest.approx((0.3125 + 0.125 + 0.03125 + 0.0) / 4)      # trapezoids, width 1/4
    assert ins[0] == pytest.approx((0.125 + 0.3125 + 0.40625 + 0.4375) / 4)


def test_mean_with_interval_is_a_percentile_bootstrap_over_images():
    v = np.array([1.0, 2.0, np.nan, 4.0, 8.0])
    out = mean_with_interval(v, n_resamples=100, seed=3)
    defined = v[np.isfinite(v)]
    redraws = np.array([defined[idx].mean() for idx in bootstrap_indices(4, n_resamples=100, seed=3)])
    assert out.value == pytest.approx(3.75) and out.n == 4
    assert (out.low, out.high) == pytest.approx(percentile_interval(redraws))


def test_metrics_refuse_arrays_that_are_not_one_value_or_one_map_per_image():
    """A table of scores, or one map without its image axis, would otherwise be scored element by element."""
    with pytest.raises(ValueError, match=r"Y and O must both be \[N\], got \(1, 1\) and \(1, 1\)"):
        average_drop([[0.5]], [[0.4]])
    one_map = np.ones((4, 4))
    with pytest.raises(ValueError, match=r"cams and masks must both be \[N, H, W\], got \(4, 4\)"):
        mask_energy(one_map, one_map > 0)
    with pytest.raises(ValueError, match=r"cams and masks must both be \[N, H, W\], got \(4, 4\)"):
        pointing_game(one_map, one_map > 0)


def test_a_mean_of_no_defined_value_has_no_value_and_no_interval():
    """Images none of which carries a lesion mask: their mask energy is nan each, so the mean is undefined (None,
    n = 0) rather than an error or a number."""
    est = mean_with_interval(np.full(3, np.nan), n_resamples=20)
    assert (est.value, est.low, est.high, est.n) == (None, None, None, 0)
    est = mean_with_interval(np.full(2, np.nan), n_resamples=20, patient_ids=["p1", "p2"])
    assert (est.value, est.n) == (None, 0)


def test_a_mean_refuses_patient_ids_that_are_not_one_per_value():
    with pytest.raises(ValueError, match="2 patient ids for 3 values"):
        mean_with_interval([0.1, 0.2, 0.3], patient_ids=["p1", "p2"], n_resamples=20)
