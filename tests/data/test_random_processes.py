"""Images of random processes (`dpmed.data.random_processes`), the data-free prior of Tang et al. 2023: what each
process draws, determinism, and that a study file reads them as a generated source."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.config.schema import DataConfig
from dpmed.data import read_dataset
from dpmed.data.random_processes import PROCESSES, dead_leaves, make_random_processes, spectral_noise


def test_a_generation_is_balanced_deterministic_and_in_range():
    a = make_random_processes(seed=3, n_images=120, image_size=32)
    b = make_random_processes(seed=3, n_images=120, image_size=32)
    assert a.task.kind == "multiclass" and a.task.label_names == tuple(PROCESSES)
    assert a.synthetic and not a.patients_known
    assert (len(a.train), len(a.val), len(a.test)) == (96, 12, 12)
    labels = np.concatenate([a.train.labels, a.val.labels, a.test.labels])
    assert np.bincount(labels).tolist() == [20] * 6
    assert np.array_equal(a.train.images, b.train.images) and a.train.images.shape == (96, 1, 32, 32)
    assert a.train.images.min() >= 0 and a.train.images.max() <= 1
    assert not np.array_equal(make_random_processes(seed=4, n_images=120, image_size=32).train.images,
                              a.train.images)


def test_dead_leaves_are_flat_discs_and_larger_discs_leave_fewer_grey_levels():
    rng = np.random.default_rng(0)
    small = [len(np.unique(dead_leaves(rng, 64, 1 / 8))) for _ in range(5)]
    large = [len(np.unique(dead_leaves(rng, 64, 1 / 2))) for _ in range(5)]
    assert max(small) <= 401 and np.mean(large) < np.mean(small)    # each disc one grey level, fewer seen when large


def _background_share(image: np.ndarray) -> float:
    """The share of the most common grey level: the background's, where no disc is large."""
    return np.unique(image, return_counts=True)[1].max() / image.size


def test_dead_leaves_draw_a_fixed_count_of_discs_not_until_covered():
    """A fixed number of discs (as the module docstring says): a small image is nearly covered, most of a 224 px
    one keeps its background grey."""
    rng = np.random.default_rng(0)
    assert max(_background_share(dead_leaves(rng, 28, 1 / 8)) for _ in range(3)) < 0.2
    assert min(_background_share(dead_leaves(rng, 224, 1 / 8)) for _ in range(3)) > 0.7


@pytest.mark.parametrize("alpha", [1.0, 2.5])
def test_spectral_noise_has_the_asked_for_slope(alpha):
    """The radially averaged power falls as f^(-2 alpha) (fitted on log-log, within 0.3)."""
    rng = np.random.default_rng(1)
    power = np.mean([np.abs(np.fft.fft2(spectral_noise(rng, 64, alpha))) ** 2 for _ in range(20)], axis=0)
    f = np.sqrt(np.fft.fftfreq(64)[:, None] ** 2 + np.fft.fftfreq(64)[None, :] ** 2)
    band = (f > 0.03) & (f < 0.3)
    slope = np.polyfit(np.log(f[band]), np.log(power[band]), 1)[0]
    assert abs(slope + 2 * alpha) < 0.3


def test_a_study_file_reads_them_as_a_generated_source():
    dataset = read_dataset(DataConfig.model_validate({"source": "random_processes", "n_images": 60,
                                                      "image_size": 16}).to_request())
    assert dataset.name == "random_processes" and dataset.train.image_shape == (1, 16, 16)
    with pytest.raises(ValueError, match="is generated, it takes no 'path'"):
        DataConfig.model_validate({"source": "random_processes", "path": "x"})
