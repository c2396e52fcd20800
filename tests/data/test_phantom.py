"""The phantom dataset: determinism, anatomy of the masks, patients, and the age effect measured on the arrays."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dpmed.data import Dataset, PhantomDifficulty, make_phantom

CLEAN = PhantomDifficulty(lesion_contrast=0.0, noise_sd=0.0, rib_contrast=0.0, clutter_sd=0.0)


def _arrays(dataset: Dataset) -> list[np.ndarray]:
    return [getattr(split, name) for split in (dataset.train, dataset.val, dataset.test)
            for name in ("images", "labels", "patient_ids", "sex", "age", "masks")]


def test_same_seed_gives_byte_identical_arrays():
    a, b = make_phantom(n_images=90, seed=3), make_phantom(n_images=90, seed=3)
    for x, y in zip(_arrays(a), _arrays(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def test_different_seed_gives_different_images(concat):
    """Not the same images in another split: no image of one seed is among the other's."""
    a, b = make_phantom(n_images=90, seed=3), make_phantom(n_images=90, seed=4)
    assert not np.array_equal(concat(a).images, concat(b).images)
    assert not {x.tobytes() for x in concat(a).images} & {x.tobytes() for x in concat(b).images}


def test_the_patient_split_is_drawn_from_the_seed(concat):
    from dpmed.data.splits import split_stratified

    d = make_phantom(n_images=300, seed=4)
    full = concat(d)
    order = np.argsort(full.patient_ids, kind="stable")      # the generation order: patients sorted, then images
    train, _, _ = split_stratified(full.patient_ids[order], full.labels[order], fractions=(0.7, 0.15, 0.15), seed=4)
    assert set(full.patient_ids[order][train]) == set(d.train.patient_ids)


def test_a_patients_two_images_have_independent_labels(phantom, concat):
    """Labels are drawn per image (a follow-up may differ): about half of the two-image patients have two labels."""
    full = concat(phantom)
    by_patient: dict[str, list[int]] = {}
    for pid, label in zip(full.patient_ids.tolist(), full.labels.tolist(), strict=True):
        by_patient.setdefault(pid, []).append(label)
    pairs = [labels for labels in by_patient.values() if len(labels) == 2]
    assert len(pairs) > 100 and 0.35 < np.mean([a != b for a, b in pairs]) < 0.65


def test_shapes_types_and_value_range(phantom, concat):
    full = concat(phantom)
    assert len(full) == 1200
    assert full.images.shape == (1200, 1, 64, 64) and full.images.dtype == np.float32
    assert full.images.min() >= 0.0 and full.images.max() <= 1.0
    assert full.labels.dtype == np.int64 and set(np.unique(full.labels)) == {0, 1}
    assert full.masks.shape == (1200, 64, 64) and full.masks.dtype == bool
    assert phantom.task.kind == "binary" and phantom.task.label_names == ("normal", "opacity")
    assert phantom.synthetic is True
    assert "not medical evidence" in phantom.description
    assert abs(full.labels.mean() - 0.5) < 0.01


@pytest.mark.parametrize("size", [28, 128])
def test_other_sizes_keep_masks_for_every_positive(size, concat):
    d = make_phantom(n_images=120, image_size=size, seed=1)
    full = concat(d)
    assert full.images.shape == (120, 1, size, size)
    assert full.masks.shape == (120, size, size)
    assert np.array_equal(full.masks.any(axis=(1, 2)), full.labels == 1)


def test_masks_are_nonempty_exactly_for_positives(phantom, concat):
    full = concat(phantom)
    assert np.array_equal(full.masks.any(axis=(1, 2)), full.labels == 1)


def test_masks_lie_inside_the_dark_lung_fields(concat):
    """Render the same seed without lesions, noise, ribs or clutter: the anatomy alone. Masked pixels must be
    aerated lung there: darker than the soft tissue above the lungs, inside the body, off the midline."""
    noisy = concat(make_phantom(n_images=240, seed=5))
    clean = concat(make_phantom(n_images=240, seed=5, difficulty=CLEAN))
    assert np.array_equal(noisy.masks, clean.masks)  # the mask does not depend on contrast or noise
    anatomy = clean.images[:, 0]  # [N, 64, 64]
    # Row 6 (y = -0.80) and column 41 (x = +0.30) lie in the soft tissue above the right lung for every phantom.
    soft_tissue = anatomy[:, 6, 41][:, None, None]  # [N, 1, 1]
    darker = anatomy < soft_tissue - 0.02
    assert clean.masks.sum() > 0
    assert np.all(darker[clean.masks])
    assert np.all(anatomy[clean.masks] > 0.1)  # not the air outside the body (0.06)
    columns = np.nonzero(clean.masks)[2]
    assert np.all(np.abs(columns + 0.5 - 32) > 3)  # never on the spine / mediastinum


def test_opacities_brighten_only_masked_neighbourhoods(concat):
    """The lesion signal (default minus lesion-free render, same seed, same noise) is positive in every mask."""
    with_lesions = concat(make_phantom(n_images=120, seed=2))
    without = concat(make_phantom(n_images=120, seed=2, difficulty=PhantomDifficulty(lesion_contrast=0.0)))
    signal = (with_lesions.images - without.images)[:, 0]  # [N, H, W]
    negatives = with_lesions.labels == 0
    assert np.all(signal[negatives] == 0)
    positives = np.flatnonzero(~negatives)
    masked_mean = np.array([signal[i][with_lesions.masks[i]].mean() for i in positives])
    assert np.all(masked_mean > 0)
    # multiplied by the lung field: nothing outside the body (the outer columns) or on the spine between the lungs
    assert signal.max() > 0.1
    assert not signal[:, :, :4].any() and not signal[:, :, -4:].any() and not signal[:, :, 31:33].any()


def test_some_patients_have_two_images_that_share_sex_and_age(phantom, concat):
    full = concat(phantom)
    counts = Counter(full.patient_ids.tolist())
    assert set(counts.values()) == {1, 2}
    share_two = sum(c == 2 for c in counts.values()) / len(counts)
    assert 0.15 < share_two < 0.25
    for pid in [p for p, c in counts.items() if c == 2]:
        rows = np.flatnonzero(full.patient_ids == pid)
        assert len(set(full.sex[rows])) == 1 and len(set(full.age[rows])) == 1


def test_patients_never_cross_splits(phantom):
    sets = [set(s.patient_ids.tolist()) for s in (phantom.train, phantom.val, phantom.test)]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])


def test_splits_are_70_15_15_and_stratified(phantom):
    sizes = np.array([len(phantom.train), len(phantom.val), len(phantom.test)])
    assert np.all(np.abs(sizes / 1200 - [0.7, 0.15, 0.15]) < 0.02)
    for split in (phantom.train, phantom.val, phantom.test):
        assert abs(split.labels.mean() - 0.5) < 0.06


def test_attributes_female_minority_and_adult_ages(phantom, concat):
    full = concat(phantom)
    assert set(full.sex.tolist()) == {"female", "male"}
    patients = dict(zip(full.patient_ids.tolist(), zip(full.sex.tolist(), full.age.tolist(), strict=True), strict=True))
    female = np.mean([sex == "female" for sex, _ in patients.values()])
    assert 0.28 < female < 0.42  # the smaller group, as in 003_9a91354dc2d7e2df.txt
    assert full.age.min() >= 18 and full.age.max() <= 95
    assert np.sum(full.age < 30) > 20 and np.sum(full.age >= 80) > 100  # every age bin of METHODS.md is populated


def _noise_sd(images: np.ndarray) -> np.ndarray:
    """Per-image noise estimate: std of (pixel - mean of its 3x3 neighbourhood) over a smooth soft-tissue patch
    above the lungs (rows 3-9, columns 24-40 at 64 px), where the anatomy varies slowly."""
    x = images[:, 0].astype(np.float64)  # [N, H, W]
    patch = x[:, 2:11, 23:42]
    local_mean = sum(patch[:, 1 + dy : patch.shape[1] - 1 + dy, 1 + dx : patch.shape[2] - 1 + dx]
                     for dy in (-1, 0, 1) for dx in (-1, 0, 1)) / 9.0
    return (patch[:, 1:-1, 1:-1] - local_mean).std(axis=(1, 2))


def test_older_patients_are_noisier(phantom, concat):
    full = concat(phantom)
    noise = _noise_sd(full.images)
    young, old = noise[full.age < 40].mean(), noise[full.age >= 75].mean()
    assert old > 1.3 * young  # defaults: sd x (1 + t), t = (age - 18) / 77


def test_older_patients_have_lower_lesion_contrast(concat):
    """Lesion contrast measured as the peak of (default render - lesion-free render of the same seed)."""
    with_lesions = concat(make_phantom(n_images=600, seed=7))
    without = concat(make_phantom(n_images=600, seed=7, difficulty=PhantomDifficulty(lesion_contrast=0.0)))
    peak = (with_lesions.images - without.images).max(axis=(1, 2, 3))  # [N]
    pos = with_lesions.labels == 1
    young, old = peak[pos & (with_lesions.age < 40)].mean(), peak[pos & (with_lesions.age >= 75)].mean()
    assert old < 0.8 * young  # defaults: contrast x (1 - 0.6 t)


def test_lesion_contrast_is_a_parameter(concat):
    weak = concat(make_phantom(n_images=60, seed=1, difficulty=PhantomDifficulty(lesion_contrast=0.05)))
    strong = concat(make_phantom(n_images=60, seed=1, difficulty=PhantomDifficulty(lesion_contrast=0.30)))
    pos = weak.labels == 1
    gain = lambda d: (d.images[pos, 0][d.masks[pos]]).mean()  # noqa: E731
    assert gain(strong) > gain(weak) + 0.05
    recorded = make_phantom(n_images=60, seed=1).source["difficulty"]
    assert recorded["lesion_contrast"] == PhantomDifficulty().lesion_contrast


def test_anatomy_females_narrower_the_heart_not_aerated_and_the_clutter_drawn(concat):
    """Row 32 of a clean render (no lesions, noise, ribs or clutter): the body is narrower for females (scale 0.94).
    The heart shadow (row 41, column 40 at 64 px) is soft tissue, not dark lung. The clutter field is drawn."""
    clean = concat(make_phantom(n_images=200, seed=0, difficulty=CLEAN))
    width = (clean.images[:, 0, 32, :] > 0.3).sum(axis=1)
    female = clean.sex == "female"
    assert width[female].mean() < 0.99 * width[~female].mean()
    assert clean.images[:, 0, 41, 40].mean() > 0.55 > clean.images[:, 0, 20, 16].mean()
    quiet = PhantomDifficulty(noise_sd=0.0)
    assert not np.array_equal(concat(make_phantom(n_images=30, seed=0, difficulty=quiet)).images,
                              concat(make_phantom(n_images=30, seed=0, difficulty=PhantomDifficulty(
                                  noise_sd=0.0, clutter_sd=0.0))).images)


def test_lesions_number_one_to_three_lie_outside_the_heart_and_span_their_sizes():
    """A positive has 1 + [u1 > 0.6] + [u2 > 0.85] lesions: P(1) = 0.6 * 0.85 = 0.51, P(3) = 0.4 * 0.15 = 0.06;
    centres behind the heart are mirrored up, away from it; each radius uniform over lesion_sigma, both axes."""
    from dpmed.data.synthetic import _draw_anatomy, _draw_lesions, _heart_distance

    n = 20_000
    rng = np.random.default_rng(0)
    anatomy = _draw_anatomy(rng, np.zeros(n, bool))
    lesions = _draw_lesions(rng, np.ones(n, int), np.zeros(n), PhantomDifficulty(), anatomy)
    count = lesions["lesion_present"].sum(axis=1)
    assert abs((count == 1).mean() - 0.51) < 0.015 and abs((count == 3).mean() - 0.06) < 0.008
    distance = _heart_distance(lesions["lesion_x"], lesions["lesion_y"], anatomy["heart_x"][:, None],
                               anatomy["scale"][:, None])
    assert (distance[lesions["lesion_present"]] >= 1.0).all()
    for axis in ("lesion_sx", "lesion_sy"):
        radii = lesions[axis]
        assert radii.min() >= 0.25 and radii.max() <= 0.45 and abs(radii.mean() - 0.35) < 0.005


def test_the_clutter_is_upsampled_bilinearly():
    """Bilinear interpolation reproduces a linear ramp exactly."""
    from dpmed.data.synthetic import _upsample

    ramp = np.tile(np.arange(7, dtype=np.float32), (1, 7, 1))          # [1, 7, 7], rising along x
    up = _upsample(ramp, 64)[0]
    np.testing.assert_allclose(up, np.tile((np.arange(64) + 0.5) / 64 * 6, (64, 1)), atol=1e-5)


def test_smallest_dataset_and_bad_arguments():
    d = make_phantom(n_images=3, seed=0)
    assert min(len(d.train), len(d.val), len(d.test)) == 1
    with pytest.raises(ValueError, match="n_images"):
        make_phantom(n_images=2)
    with pytest.raises(ValueError, match="positive_fraction"):
        make_phantom(positive_fraction=1.5)
    with pytest.raises(ValueError, match="age_contrast_loss"):
        PhantomDifficulty(age_contrast_loss=1.0)


def test_multilabel_task_labels_each_lung_by_where_its_masks_lie(concat):
    """The multi-label phantom's findings agree with the ground-truth masks: a lung labelled 1 has mask pixels on its
    side of the image, and nearly all mask pixels lie on labelled sides (a large opacity near the mediastinum may
    spill a few pixels over the midline)."""
    multi = make_phantom(n_images=300, image_size=32, seed=5, task="multilabel")
    binary = make_phantom(n_images=300, image_size=32, seed=5)
    m, b = concat(multi), concat(binary)
    assert multi.task.kind == "multilabel" and len(multi.task.label_names) == 2
    assert m.labels.dtype == np.float32 and m.labels.shape == (300, 2)
    assert np.array_equal(m.images, b.images)  # the same images, only the labels differ
    assert np.array_equal(m.labels.max(axis=1) == 1, b.labels == 1)
    half = m.masks.shape[-1] // 2
    sides = np.stack([m.masks[:, :, :half].sum(axis=(1, 2)), m.masks[:, :, half:].sum(axis=(1, 2))], axis=1)
    assert np.all(sides[m.labels == 1] > 0)
    assert sides[m.labels == 0].sum() < 0.02 * sides.sum()
    assert 0.1 < m.labels.mean(axis=0).min() and m.labels.mean(axis=0).max() < 0.5
    with pytest.raises(ValueError, match="task"):
        make_phantom(n_images=30, task="multiclass")
