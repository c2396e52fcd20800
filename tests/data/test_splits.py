"""split_by_patient and cap_images_per_patient: partitions, no patient in two splits, seeded, and both map
neighbouring datasets (one patient more or fewer) to neighbouring ones; property tests with hypothesis."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmed.data import cap_images_per_patient, split_by_patient
from dpmed.data.splits import split_stratified
from dpmed.data.cohorts import patient_draws


def _drawn(ids: np.ndarray, seed: int) -> set[int]:
    """The splits (at the default shares) that some patient's own draw falls in."""
    draws = patient_draws(np.unique(ids), seed, purpose="split")
    return set(np.searchsorted([0.7, 0.85], draws, side="right").tolist())


def _check_partition(ids: np.ndarray, parts, seed: int | None = None) -> None:
    """``parts`` partition the images, whole patients each; with a split ``seed`` a part is empty just where no
    patient's draw falls (split_by_patient), without one none is (split_stratified fills them)."""
    joined = np.sort(np.concatenate(parts))
    np.testing.assert_array_equal(joined, np.arange(len(ids)))  # every image exactly once
    for j, part in enumerate(parts):
        assert (len(part) > 0) == (seed is None or j in _drawn(ids, seed)) and part.dtype == np.int64
        assert np.all(np.diff(part) > 0)  # sorted
    owners = [set(ids[p].tolist()) for p in parts]
    assert not (owners[0] & owners[1]) and not (owners[0] & owners[2]) and not (owners[1] & owners[2])


def _split_of(ids: np.ndarray, parts) -> dict[str, int]:
    return {str(ids[i]): j for j, part in enumerate(parts) for i in part}


@settings(max_examples=150, deadline=None)
@given(patients=st.lists(st.integers(0, 40), min_size=1, max_size=200), seed=st.integers(0, 2**32 - 1))
def test_partition_and_no_patient_crosses(patients, seed):
    ids = np.array([f"p{p}" for p in patients])
    if len(set(patients)) < 3:
        with pytest.raises(ValueError, match="at least 3 patients"):
            split_by_patient(ids, seed=seed)
        return
    _check_partition(ids, split_by_patient(ids, seed=seed), seed)


@settings(max_examples=100, deadline=None)
@given(patients=st.lists(st.integers(0, 60), min_size=1, max_size=150), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_removing_a_patient_moves_no_other_patient_between_splits(patients, seed, data):
    """What DP-SGD's eps over the training split needs of the split: neighbouring datasets give neighbouring
    training splits. A stratified split, which lays each class out by share, moved other patients (39 of 199 when
    one of 200 patients was removed). Small sets included: a split that no patient draws is left empty (for the
    caller to refuse), never filled with a patient whose choice would read the others' draws."""
    ids = np.array([f"p{p}" for p in patients])
    drop = data.draw(st.sampled_from(sorted(set(ids.tolist()))))
    kept = ids[ids != drop]
    if len(set(kept.tolist())) < 3:      # fewer patients than splits: a ValueError (test_bad_arguments)
        return
    before, after = (_split_of(x, split_by_patient(x, seed=seed)) for x in (ids, kept))
    assert {p: j for p, j in before.items() if p != drop} == after


def test_a_patients_split_is_its_own_keyed_draw_whatever_the_order_of_the_rows():
    """The rule written out a second time: u = sha256("split:<seed>:<id>")[:8] / 2^64 against the cumulative
    shares, and independent of the cohort's draw of the same seed (which is u without the "split:" prefix)."""
    ids = np.array([f"patient-{i}" for i in range(300)])
    parts = split_by_patient(ids, fractions=(0.6, 0.25, 0.15), seed=7)
    for i in (0, 1, 2, 150, 299):
        u = int.from_bytes(hashlib.sha256(f"split:7:{ids[i]}".encode()).digest()[:8], "big") / 2.0 ** 64
        assert _split_of(ids, parts)[ids[i]] == (0 if u < 0.6 else 1 if u < 0.85 else 2)
    order = np.random.default_rng(0).permutation(len(ids))
    assert _split_of(ids[order], split_by_patient(ids[order], fractions=(0.6, 0.25, 0.15), seed=7)) == \
        _split_of(ids, parts)
    without = _split_of(ids[1:], split_by_patient(ids[1:], fractions=(0.6, 0.25, 0.15), seed=7))
    assert without == {p: j for p, j in _split_of(ids, parts).items() if p != ids[0]}     # the neighbour, by hand
    cohort0 = patient_draws(ids, 7) < 0.5
    assert 0.4 < np.isin(np.arange(300), parts[0])[cohort0].mean() < 0.8     # not all of cohort 0 in training


def test_the_fractions_hold_within_their_binomial_spread_on_a_large_cohort():
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(4000), rng.integers(1, 3, 4000)).astype(str)  # 1 or 2 images per patient
    for seed in range(3):
        parts = split_by_patient(ids, seed=seed)
        for part, share in zip(parts, (0.7, 0.15, 0.15), strict=True):
            patients = len(np.unique(ids[part]))
            assert abs(patients / 4000 - share) < 4 * np.sqrt(share * (1 - share) / 4000)


def test_seeded():
    ids = np.arange(300).astype(str)
    a, b, c = (split_by_patient(ids, seed=s) for s in (5, 5, 6))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[1], c[1])


def test_a_split_no_patient_draws_is_left_empty_not_filled():
    """Before, the patient with the fewest images of the largest split was moved into it: which one read every
    other patient's draw, so one more training patient could displace a patient from a published split."""
    ids = np.array(["a", "a", "b", "c"])
    assert [len(p) for p in split_by_patient(ids, seed=0)] == [2, 2, 0]       # "a" trains, "b" and "c" validate
    assert [len(p) for p in split_by_patient(ids, seed=4)] == [2, 1, 1]


def test_bad_arguments():
    ids = np.arange(10).astype(str)
    with pytest.raises(ValueError, match="fractions"):
        split_by_patient(ids, fractions=(0.8, 0.2, 0.0))
    with pytest.raises(ValueError, match="fractions"):
        split_by_patient(ids, fractions=(0.5, 0.2, 0.2))
    with pytest.raises(ValueError, match="fractions"):   # 1 % short: the test split would silently take it
        split_by_patient(ids, fractions=(0.7, 0.15, 0.14))
    with pytest.raises(ValueError, match="at least 3 patients"):
        split_by_patient(np.array(["a", "b", "a"]))


def test_two_fractions_split_one_set_in_two():
    ids = np.array([f"p{i // 2}" for i in range(200)])
    keep, held = split_by_patient(ids, fractions=(0.9, 0.1), seed=4)
    assert len(keep) + len(held) == 200 and 8 <= len(held) <= 36
    assert not set(ids[keep]) & set(ids[held])
    with pytest.raises(ValueError, match="at least 2 patients"):
        split_by_patient(np.array(["a", "a"]), fractions=(0.5, 0.5))


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
    got = dict(zip(*np.unique(ids[kept], return_counts=True), strict=True))
    want = dict(zip(*np.unique(ids, return_counts=True), strict=True))
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


def test_a_cap_below_one_image_is_refused():
    ids, images = _patients_with_images()
    with pytest.raises(ValueError, match="k must be at least 1, got 0"):
        cap_images_per_patient(ids, images, 0, seed=0)


def test_stratified_strata_follow_the_documented_rules():
    """By hand: binary, a patient with any positive image is positive; multiclass, the most frequent class, ties to
    the highest; multilabel, the rarest finding the patient has, else "no finding" (index L); a negative class
    index is refused."""
    from dpmed.data.splits import _patient_strata

    patient_of_image = np.array([0, 0, 1, 1, 2, 2, 2])
    binary = np.array([0, 1, 0, 0, 1, 0, 0])     # patient 2: one positive of three
    assert _patient_strata(patient_of_image, binary, 3).tolist() == [1, 0, 1]
    multiclass = np.array([2, 0, 1, 1, 0, 2, 2])   # tie 0/2 -> 2; 1; 2 twice
    assert _patient_strata(patient_of_image, multiclass, 3).tolist() == [2, 1, 2]
    multilabel = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]])
    # finding 0: patients 0 and 2; finding 1: patient 0 alone (rarer); patient 1 has none
    assert _patient_strata(patient_of_image, multilabel, 3).tolist() == [1, 3, 0]
    with pytest.raises(ValueError, match="class labels must be >= 0, found -1"):
        _patient_strata(patient_of_image, np.array([0, 1, 2, -1, 0, 0, 0]), 3)


def test_the_caps_choice_follows_the_seed_not_the_order_of_the_images():
    ids, images = _patients_with_images()
    perm = np.random.default_rng(5).permutation(len(ids))
    assert _capped(ids, images, 2, seed=3) == _capped(ids[perm], images[perm], 2, seed=3)
    assert _capped(ids, images, 2, seed=3) != _capped(ids, images, 2, seed=4)


# --- the phantom's stratified split -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(patients=st.lists(st.integers(0, 30), min_size=3, max_size=120), seed=st.integers(0, 1000), data=st.data())
def test_stratified_partition_binary_multiclass_and_multilabel(patients, seed, data):
    ids = np.array([str(p) for p in patients])
    width = data.draw(st.sampled_from([1, 3]))
    labels = np.array(data.draw(st.lists(st.integers(0, 2 if width == 1 else 1), min_size=width * len(ids),
                                         max_size=width * len(ids))), dtype=np.float32)
    labels = labels.astype(np.int64) if width == 1 else labels.reshape(len(ids), width)
    if len(set(patients)) < 3:
        return
    _check_partition(ids, split_stratified(ids, labels, seed=seed))


def test_stratified_rare_class_lands_in_every_split_and_any_positive_makes_the_patient_positive():
    """20 patients of a rare class: systematic sampling gives each split its share (14/3/3) up to one patient."""
    ids = np.arange(1000).astype(str)
    labels = np.zeros(1000, np.int64)
    labels[:20] = 2
    labels[20:500] = 1
    for seed in range(10):
        counts = [np.sum(labels[p] == 2) for p in split_stratified(ids, labels, seed=seed)]
        assert all(abs(c - e) <= 1 for c, e in zip(counts, (14, 3, 3), strict=True)), counts
    ids = np.repeat(np.arange(400), 2).astype(str)
    labels = np.zeros(800, np.int64)
    labels[1:200:2] = 1  # the second image of the first 100 patients is positive
    for part in split_stratified(ids, labels, seed=3):
        assert abs(np.unique(ids[part][labels[part] == 1]).size / np.unique(ids[part]).size - 0.25) < 0.03
