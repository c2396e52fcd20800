"""split_by_patient and cap_images_per_patient: partitions, no patient in two splits, stratified, seeded, and a cap
that maps neighbours to neighbours; property tests with hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.data import cap_images_per_patient, split_by_patient


def _check_partition(ids: np.ndarray, parts) -> None:
    joined = np.sort(np.concatenate(parts))
    np.testing.assert_array_equal(joined, np.arange(len(ids)))  # every image exactly once
    for part in parts:
        assert len(part) > 0 and part.dtype == np.int64
        assert np.all(np.diff(part) > 0)  # sorted
    owners = [set(ids[p].tolist()) for p in parts]
    assert not (owners[0] & owners[1]) and not (owners[0] & owners[2]) and not (owners[1] & owners[2])


@settings(max_examples=150, deadline=None)
@given(
    patients=st.lists(st.integers(0, 40), min_size=3, max_size=200),
    classes=st.integers(2, 4),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_partition_and_no_patient_crosses(patients, classes, seed, data):
    ids = np.array([f"p{p}" for p in patients])
    labels = np.array(data.draw(st.lists(st.integers(0, classes - 1), min_size=len(ids), max_size=len(ids))))
    if len(set(patients)) < 3:
        with pytest.raises(ValueError, match="at least 3 patients"):
            split_by_patient(ids, labels, seed=seed)
        return
    _check_partition(ids, split_by_patient(ids, labels, seed=seed))


@settings(max_examples=60, deadline=None)
@given(patients=st.lists(st.integers(0, 30), min_size=3, max_size=120), seed=st.integers(0, 1000), data=st.data())
def test_multilabel_partition(patients, seed, data):
    ids = np.array([str(p) for p in patients])
    flat = data.draw(st.lists(st.integers(0, 1), min_size=3 * len(ids), max_size=3 * len(ids)))
    labels = np.array(flat, dtype=np.float32).reshape(len(ids), 3)
    if len(set(patients)) < 3:
        return
    _check_partition(ids, split_by_patient(ids, labels, seed=seed))


def test_fractions_and_stratification_on_a_large_cohort():
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(2000), rng.integers(1, 3, 2000)).astype(str)  # 1 or 2 images per patient
    labels = (rng.random(len(ids)) < 0.3).astype(np.int64)
    parts = split_by_patient(ids, labels, seed=1)
    for part, target in zip(parts, (0.7, 0.15, 0.15)):
        assert abs(len(part) / len(ids) - target) < 0.02
        assert abs(labels[part].mean() - labels.mean()) < 0.03


def test_rare_class_lands_in_every_split():
    """20 patients of a rare class: systematic sampling gives each split its share (14/3/3) up to one patient."""
    ids = np.arange(1000).astype(str)
    labels = np.zeros(1000, np.int64)
    labels[:20] = 2
    labels[20:500] = 1
    for seed in range(10):
        counts = [np.sum(labels[p] == 2) for p in split_by_patient(ids, labels, seed=seed)]
        assert all(abs(c - e) <= 1 for c, e in zip(counts, (14, 3, 3))), counts


def test_any_positive_image_makes_the_patient_positive():
    """Patients with one negative and one positive image are positive: they spread like the positives."""
    ids = np.repeat(np.arange(400), 2).astype(str)
    labels = np.zeros(800, np.int64)
    labels[1:200:2] = 1  # the second image of the first 100 patients is positive
    for part in split_by_patient(ids, labels, seed=3):
        patients_positive = np.unique(ids[part][labels[part] == 1]).size
        patients = np.unique(ids[part]).size
        assert abs(patients_positive / patients - 0.25) < 0.03


def test_seeded():
    ids = np.arange(300).astype(str)
    labels = np.arange(300) % 2
    a, b, c = (split_by_patient(ids, labels, seed=s) for s in (5, 5, 6))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], c[1])


def test_three_patients_fill_three_splits():
    parts = split_by_patient(np.array(["a", "a", "b", "c"]), np.array([0, 1, 0, 1]), seed=0)
    assert sorted(len(p) for p in parts) == [1, 1, 2]


def test_bad_arguments():
    ids, labels = np.arange(10).astype(str), np.zeros(10)
    with pytest.raises(ValueError, match="fractions"):
        split_by_patient(ids, labels, fractions=(0.8, 0.2, 0.0))
    with pytest.raises(ValueError, match="fractions"):
        split_by_patient(ids, labels, fractions=(0.5, 0.2, 0.2))
    with pytest.raises(ValueError, match="9 labels for 10"):
        split_by_patient(ids, labels[:9])
    with pytest.raises(ValueError, match="at least 3 patients"):
        split_by_patient(np.array(["a", "b", "a"]), np.zeros(3))


def test_two_fractions_split_one_set_in_two():
    ids = np.array([f"p{i // 2}" for i in range(200)])
    labels = np.array([i % 2 for i in range(200)])
    keep, held = split_by_patient(ids, labels, fractions=(0.9, 0.1), seed=4)
    assert len(keep) + len(held) == 200 and 14 <= len(held) <= 26
    assert not set(ids[keep]) & set(ids[held])
    with pytest.raises(ValueError, match="at least 2 patients"):
        split_by_patient(np.array(["a", "a"]), np.array([0, 1]), fractions=(0.5, 0.5))


def _capped(ids, images, k, seed=0):
    """{(patient, image bytes)} the cap keeps."""
    kept = cap_images_per_patient(ids, images, k, seed=seed)
    return {(ids[i], images[i].tobytes()) for i in kept}


def _patients_with_images(n_patients=40, seed=0):
    rng = np.random.default_rng(seed)
    per = rng.integers(1, 7, n_patients)
    ids = np.repeat([f"p{i}" for i in range(n_patients)], per)
    return ids, rng.random((len(ids), 1, 4, 4)).astype(np.float32)


def test_the_cap_keeps_at_most_k_images_of_each_patient_and_all_of_those_with_fewer():
    ids, images = _patients_with_images()
    kept = cap_images_per_patient(ids, images, 3, seed=1)
    assert np.all(np.diff(kept) > 0)
    got = dict(zip(*np.unique(ids[kept], return_counts=True)))
    want = dict(zip(*np.unique(ids, return_counts=True)))
    assert got == {p: min(n, 3) for p, n in want.items()}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), drop=st.integers(0, 39), k=st.integers(1, 4))
def test_removing_a_patient_changes_no_other_patients_kept_images(seed, drop, k):
    """The attack a seeded shuffle of all images failed: a neighbour without patient ``drop`` must train on
    exactly the other patients' images it trained on before (the cap maps neighbours to neighbours)."""
    ids, images = _patients_with_images(seed=seed % 1000)
    without = ids != f"p{drop}"
    full = _capped(ids, images, k, seed=seed)
    assert _capped(ids[without], images[without], k, seed=seed) == {x for x in full if x[0] != f"p{drop}"}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), drop=st.integers(0, 10**6))
def test_removing_one_image_changes_its_patients_kept_images_by_at_most_one_in_and_one_out(seed, drop):
    ids, images = _patients_with_images(seed=seed % 1000)
    drop %= len(ids)
    rest = np.arange(len(ids)) != drop
    before, after = _capped(ids, images, 2, seed=seed), _capped(ids[rest], images[rest], 2, seed=seed)
    assert len(before - after) <= 1 and len(after - before) <= 1
    assert {x[0] for x in before ^ after} <= {ids[drop]}


def test_the_caps_choice_follows_the_seed_not_the_order_of_the_images():
    ids, images = _patients_with_images()
    perm = np.random.default_rng(5).permutation(len(ids))
    assert _capped(ids, images, 2, seed=3) == _capped(ids[perm], images[perm], 2, seed=3)
    assert _capped(ids, images, 2, seed=3) != _capped(ids, images, 2, seed=4)


def test_a_stratum_of_one_patient_lands_in_each_split_as_often_as_its_fraction():
    """The random rotation of each stratum's positions: without it a lone positive patient (a stratum of one, centre
    0.5) would always land in the same split, so that a rare class never reached validation or test."""
    ids = np.array([f"p{i}" for i in range(41)])
    labels = np.array([1] + [0] * 40)                              # p0: the only positive patient
    where = [next(j for j, part in enumerate(split_by_patient(ids, labels, seed=seed)) if 0 in part)
             for seed in range(400)]
    shares = np.bincount(where, minlength=3) / len(where)
    # 0.7 / 0.15 / 0.15 with a binomial sd of at most 0.023 over 400 seeds: 4 sd
    np.testing.assert_allclose(shares, [0.7, 0.15, 0.15], atol=0.095)
