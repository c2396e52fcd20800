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


def test_each_image_is_drawn_by_the_process_its_label_names():
    """Dead leaves (labels 0, 1) hold at most 401 grey levels, larger discs fewer; the four noise classes have the
    slopes their names give. An image drawn by another class's process, or two classes with one law, fail."""
    d = make_random_processes(seed=0, n_images=240, image_size=64)
    images = np.concatenate([d.train.images, d.val.images, d.test.images])[:, 0]
    labels = np.concatenate([d.train.labels, d.val.labels, d.test.labels])
    levels = np.array([len(np.unique(image)) for image in images])
    assert (levels[labels <= 1] <= 401).all() and (levels[labels >= 2] > 2000).all()
    assert levels[labels == 1].mean() < 0.9 * levels[labels == 0].mean()
    f = np.sqrt(np.fft.fftfreq(64)[:, None] ** 2 + np.fft.fftfreq(64)[None, :] ** 2)
    band = (f > 0.03) & (f < 0.3)
    for k, name in enumerate(PROCESSES):
        if not name.startswith("noise_alpha_"):
            continue
        alpha = float(name.removeprefix("noise_alpha_"))              # the slope the class's name promises
        power = np.mean(np.abs(np.fft.fft2(images[labels == k])) ** 2, axis=0)
        slope = np.polyfit(np.log(f[band]), np.log(power[band]), 1)[0]
        assert abs(slope + 2 * alpha) < 0.3, (k, slope)


def test_the_classes_are_shuffled_across_the_index_split():
    d = make_random_processes(seed=3, n_images=120, image_size=32)
    assert len(np.unique(d.val.labels)) >= 4 and len(np.unique(d.test.labels)) >= 4


def test_a_disc_covers_exactly_the_pixels_within_its_radius_and_the_background_is_drawn():
    """The top disc (the first drawn, painted last), replayed from the same draws: every pixel centre within r of
    its centre has its grey and the ring just outside does not all have it. Each image's background grey is its own."""
    rng = np.random.default_rng(4)
    image = dead_leaves(rng, 64, 1 / 2)
    replay = np.random.default_rng(4)
    u = replay.random(400)
    r = (1.0 - u * (1.0 - 32.0 ** -2)) ** -0.5                 # density r^-3 on [1, 32]
    centre, grey = replay.random((400, 2))[0] * 64, replay.random(400).astype(np.float32)[0]
    axis = np.arange(64) + 0.5
    distance = np.sqrt((axis[:, None] - centre[0]) ** 2 + (axis[None, :] - centre[1]) ** 2)
    assert r[0] > 2 and (image[distance <= r[0]] == grey).all()
    assert not (image[(distance > r[0] + 1) & (distance <= r[0] + 3)] == grey).all()
    backgrounds = [np.unique(im, return_counts=True) for im in (dead_leaves(rng, 224, 1 / 8) for _ in range(5))]
    common = {float(values[counts.argmax()]) for values, counts in backgrounds}
    assert len(common) == 5 and 0.0 not in common
