"""Canaries for the one-run audit: wrong labels really are wrong, insertion changes nothing else, and the sources
leave the training split with every image of their patients."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.names import CANARY_KINDS as CANARY_KIND_NAMES
from dpmed.data import ImageSet, Task
from dpmed.audit.canaries import CANARY_KINDS, hold_out_canary_sources, insert_canaries, make_canaries, max_canaries

BINARY = Task(kind="binary", label_names=("normal", "opacity"))
MULTICLASS = Task(kind="multiclass", label_names=("0", "1", "2", "3", "4"))
MULTILABEL = Task(kind="multilabel", label_names=("a", "b", "c"))


def _images(n: int, task: Task, *, seed: int = 0, masks: bool = True, patients: int | None = None) -> ImageSet:
    rng = np.random.default_rng(seed)
    if task.kind == "multilabel":
        labels = (rng.random((n, task.num_outputs)) < 0.5).astype(np.float32)
    else:
        labels = rng.integers(0, task.num_outputs, n).astype(np.int64)
    pid = rng.integers(0, patients, n) if patients else np.arange(n)
    return ImageSet(images=rng.random((n, 1, 8, 8), dtype=np.float32), labels=labels,
                    patient_ids=np.array([f"p{i:04d}" for i in pid]),
                    sex=rng.choice(np.array(["female", "male"]), n), age=rng.uniform(20, 90, n),
                    masks=(rng.random((n, 8, 8)) < 0.1) if masks else None)


def test_the_schema_offers_exactly_the_kinds_the_data_stage_makes():
    assert set(CANARY_KIND_NAMES) == set(CANARY_KINDS)


@pytest.mark.parametrize("task", [BINARY, MULTICLASS, MULTILABEL], ids=lambda t: t.kind)
@pytest.mark.parametrize("kind", ["mislabelled", "marked"])
def test_every_label_of_a_mislabelled_canary_is_wrong(task, kind):
    pool = _images(60, task)
    canaries = make_canaries(pool, 40, task=task, seed=3, kind=kind)
    # find each canary's source by its untouched pixels (mislabelled) or its source's mask (marked keeps the mask)
    source = [int(np.flatnonzero((pool.masks == mask).all(axis=(1, 2)))[0]) for mask in canaries.masks]
    assert len(set(source)) == 40                      # drawn without replacement
    truth = pool.labels[source]
    if task.kind == "multilabel":
        assert np.all(canaries.labels != truth)        # every finding flipped
    else:
        assert np.all(canaries.labels != truth)
        assert canaries.labels.min() >= 0 and canaries.labels.max() < task.num_outputs
    assert canaries.labels.dtype == pool.labels.dtype and canaries.labels.shape[1:] == pool.labels.shape[1:]
    np.testing.assert_array_equal(canaries.sex, pool.sex[source])
    np.testing.assert_array_equal(canaries.age, pool.age[source])
    changed = canaries.images != pool.images[source]   # [m, C, H, W]
    if kind == "mislabelled":
        assert not changed.any()
    else:  # a 4x4 patch at most: nothing outside one 4x4 window differs
        for c in changed:
            rows, cols = np.nonzero(c[0])
            if len(rows):
                assert rows.max() - rows.min() < 4 and cols.max() - cols.min() < 4


def test_multiclass_wrong_labels_use_every_other_class():
    pool = _images(400, MULTICLASS, seed=1)
    canaries = make_canaries(pool, 400, task=MULTICLASS, seed=2)
    source = [int(np.flatnonzero((pool.masks == mask).all(axis=(1, 2)))[0]) for mask in canaries.masks]
    shift = (canaries.labels - pool.labels[source]) % 5
    assert set(shift.tolist()) == {1, 2, 3, 4}          # not always "the next class"


def test_noise_canaries_are_noise_in_range_with_valid_labels():
    pool = _images(30, MULTICLASS)
    canaries = make_canaries(pool, 30, task=MULTICLASS, seed=0, kind="noise")
    assert canaries.images.dtype == np.float32 and 0 <= canaries.images.min() and canaries.images.max() <= 1
    assert not np.isin(canaries.images, pool.images).all()
    assert set(canaries.labels.tolist()) <= set(range(5))
    many = make_canaries(_images(50, MULTICLASS), 50, task=MULTICLASS, seed=0, kind="noise")
    assert set(many.labels.tolist()) == set(range(5))                   # the last class too
    findings = make_canaries(_images(400, MULTILABEL), 400, task=MULTILABEL, seed=0, kind="noise").labels
    assert abs(findings.mean() - 0.5) < 4 * 0.5 / np.sqrt(findings.size)  # each finding a fair coin


def test_a_marked_canarys_patch_is_4x4_random_black_and_white_anywhere_in_the_image():
    """On a flat grey pool every patch pixel changes: 16 of them, in one 4 x 4 window, black and white mixed,
    placed over every possible top row and left column of a 6 x 16 image (not square: rows and columns apart)."""
    pool = _images(200, MULTICLASS, masks=False)
    pool = pool.with_images(np.full((200, 1, 6, 16), 0.5, np.float32))
    canaries = make_canaries(pool, 200, task=MULTICLASS, seed=0, kind="marked")
    tops, lefts, values = set(), set(), set()
    for image in canaries.images[:, 0]:
        rows, cols = np.nonzero(image != 0.5)
        assert len(rows) == 16 and rows.max() - rows.min() == 3 and cols.max() - cols.min() == 3
        tops.add(int(rows.min()))
        lefts.add(int(cols.min()))
        values |= set(image[rows, cols].tolist())
    assert tops == {0, 1, 2} and lefts == set(range(13)) and values == {0.0, 1.0}
    white = (canaries.images == 1.0).sum() / (200 * 16)                 # each patch pixel a fair coin
    assert abs(white - 0.5) < 4 * 0.5 / np.sqrt(200 * 16)


def test_canaries_get_their_own_patients_and_are_reproducible():
    pool = _images(50, BINARY)
    a = make_canaries(pool, 20, task=BINARY, seed=9)
    b = make_canaries(pool, 20, task=BINARY, seed=9)
    c = make_canaries(pool, 20, task=BINARY, seed=10)
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, c.images)
    assert len(set(a.patient_ids.tolist())) == 20 and all(p.startswith("canary-") for p in a.patient_ids)
    assert not set(a.patient_ids.tolist()) & set(pool.patient_ids.tolist())


def test_make_canaries_rejects_bad_requests():
    pool = _images(10, BINARY)
    with pytest.raises(ValueError, match="unknown canary kind"):
        make_canaries(pool, 5, task=BINARY, seed=0, kind="poison")
    for m in (0, 11, 2.0, True):
        with pytest.raises(ValueError, match=r"m must be an integer in \[1, 10\] \(the pool's size\)"):
            make_canaries(pool, m, task=BINARY, seed=0)
    one_class = Task(kind="multiclass", label_names=("only",))
    with pytest.raises(ValueError, match="at least 2 classes"):
        make_canaries(pool, 5, task=one_class, seed=0)
    flat = _images(10, BINARY, masks=False).with_images(np.zeros((10, 1, 3, 8), np.float32))
    with pytest.raises(ValueError, match="at least 4x4 pixels, got 3x8"):
        make_canaries(flat, 5, task=BINARY, seed=0, kind="marked")
    narrow = _images(10, BINARY, masks=False).with_images(np.zeros((10, 1, 8, 3), np.float32))
    with pytest.raises(ValueError, match="at least 4x4 pixels, got 8x3"):
        make_canaries(narrow, 5, task=BINARY, seed=0, kind="marked")


@pytest.mark.parametrize("task", [BINARY, MULTILABEL], ids=lambda t: t.kind)
def test_insert_keeps_the_training_set_and_appends_exactly_the_included_canaries(task):
    train, pool = _images(50, task, seed=1), _images(30, task, seed=2)
    canaries = make_canaries(pool, 30, task=task, seed=0)
    included = np.random.default_rng(4).random(30) < 0.5
    merged = insert_canaries(train, canaries, included)
    n, k = len(train), int(included.sum())
    assert len(merged) == n + k
    for name in ("images", "labels", "patient_ids", "sex", "age", "masks"):
        got, head, tail = getattr(merged, name), getattr(train, name), getattr(canaries, name)[included]
        np.testing.assert_array_equal(got[:n], head)    # the training set unchanged, in order
        np.testing.assert_array_equal(got[n:], tail)    # then the included canaries, in canary order
    assert merged.labels.dtype == train.labels.dtype
    # nothing included: the training set itself; everything: all canaries
    none = insert_canaries(train, canaries, np.zeros(30, bool))
    np.testing.assert_array_equal(none.images, train.images)
    assert len(insert_canaries(train, canaries, np.ones(30, bool))) == n + 30


def test_an_included_canary_never_joins_a_training_patient_of_the_same_id():
    """Where the patient is the unit, DP-SGD clips by patient id: a canary named as a training patient happens to be
    ("canary-00001" is a valid id in a CSV) would join that patient, so that including it changed an existing unit
    rather than adding one, and the audit's add/remove claim (and the bound's null) did not hold for it."""
    from dpmed.training.loop import sampling_units

    train = _images(10, BINARY, seed=1)
    train = ImageSet(images=train.images, labels=train.labels, sex=train.sex, age=train.age, masks=train.masks,
                     patient_ids=np.array(["canary-00001"] * 2 + [f"p{i}" for i in range(8)]))
    canaries = make_canaries(_images(6, BINARY, seed=2), 6, task=BINARY, seed=0)
    assert "canary-00001" in canaries.patient_ids
    merged = insert_canaries(train, canaries, np.ones(6, bool))
    offsets, owned = sampling_units(merged, "patient")
    units = [set(owned[offsets[u]:offsets[u + 1]].tolist()) for u in range(len(offsets) - 1)]
    assert len(units) == 9 + 6 and {0, 1} in units                    # the training patient's two images
    assert all({10 + i} in units for i in range(6))                    # each canary alone
    np.testing.assert_array_equal(merged.patient_ids[:10], train.patient_ids)
    # a training set that also holds the renamed id: the names grow again until none clashes
    taken = np.array(["canary-00001", "canary-canary-00002"] + [f"p{i}" for i in range(8)])
    clashing = ImageSet(images=train.images, labels=train.labels, sex=train.sex, age=train.age, masks=train.masks,
                        patient_ids=taken)
    merged = insert_canaries(clashing, canaries, np.ones(6, bool))
    added = merged.patient_ids[10:].tolist()
    assert len(set(added)) == 6 and not set(added) & set(taken.tolist())


def test_insert_rejects_what_would_merge_silently_wrong():
    train, canaries = _images(10, BINARY), make_canaries(_images(6, BINARY), 6, task=BINARY, seed=0)
    with pytest.raises(ValueError, match="included must be bool"):
        insert_canaries(train, canaries, np.ones(6, dtype=int))
    with pytest.raises(ValueError, match="included must be bool"):
        insert_canaries(train, canaries, np.ones(5, dtype=bool))
    with pytest.raises(ValueError, match="masks"):
        insert_canaries(_images(10, BINARY, masks=False), canaries, np.ones(6, bool))
    with pytest.raises(ValueError, match="labels"):
        insert_canaries(_images(10, MULTILABEL), canaries, np.ones(6, bool))
    narrow = ImageSet(images=canaries.images, labels=canaries.labels.astype(np.int32), masks=canaries.masks,
                      patient_ids=canaries.patient_ids, sex=canaries.sex, age=canaries.age)
    with pytest.raises(ValueError, match="labels"):
        insert_canaries(train, narrow, np.ones(6, bool))
    small = ImageSet(images=np.zeros((6, 1, 4, 4), np.float32), labels=canaries.labels,
                     patient_ids=canaries.patient_ids, sex=canaries.sex, age=canaries.age)
    with pytest.raises(ValueError, match="images"):
        insert_canaries(_images(10, BINARY, masks=False), small, np.ones(6, bool))


def test_held_out_sources_take_whole_patients_one_image_each():
    train = _images(600, BINARY, seed=5, patients=360)          # many patients with two or more images
    n_patients = len(set(train.patient_ids.tolist()))
    rest, sources = hold_out_canary_sources(train, 50, seed=1, n_patients=n_patients)
    src_patients = set(sources.patient_ids.tolist())
    assert len(sources) == len(src_patients)                     # one image of each drawn patient
    assert abs(len(sources) - 50) < 4 * np.sqrt(50)              # about m: Binomial(P, m / P)
    assert not src_patients & set(rest.patient_ids.tolist())     # no twin left to train on
    held = np.isin(train.patient_ids, sources.patient_ids)
    assert len(rest) == int((~held).sum())                        # everything else stays, in order
    np.testing.assert_array_equal(rest.images, train.images[~held])
    for image in sources.images:                                  # the sources are training images
        assert (train.images == image).all(axis=(1, 2, 3)).any()
    again, _ = hold_out_canary_sources(train, 50, seed=1, n_patients=n_patients)
    np.testing.assert_array_equal(again.patient_ids, rest.patient_ids)
    # every patient drawn, or none: not refused (whether a run finishes must not read which patients drew)
    everyone, each = hold_out_canary_sources(train, 2 * n_patients, seed=0, n_patients=n_patients)
    assert len(everyone) == 0 and sorted(each.patient_ids.tolist()) == sorted(set(train.patient_ids.tolist()))
    whole, nobody = hold_out_canary_sources(train, 1, seed=0, n_patients=10 ** 9)
    assert len(nobody) == 0
    np.testing.assert_array_equal(whole.images, train.images)
    for m, count, words in ((0, 10, "needs m >= 1"), (True, 10, "needs m >= 1"), (1, 0, "count of patients >= 1")):
        with pytest.raises(ValueError, match=words):
            hold_out_canary_sources(train, m, seed=0, n_patients=count)


def test_the_drawn_patients_are_those_whose_draw_is_below_the_rate_and_each_gives_its_image_of_smallest_key():
    """A patient is drawn where u(patient) of the seed is below m / the count, and gives the image whose keyed hash
    (seed, patient, pixels) is smallest: both read that patient alone."""
    from dpmed.data import image_keys, patient_draws

    train = _images(600, BINARY, seed=5, patients=360)
    ids = train.patient_ids.astype(str)
    n_patients = len(set(ids.tolist()))
    _, sources = hold_out_canary_sources(train, 50, seed=11, n_patients=n_patients)
    u = dict(zip(ids.tolist(), patient_draws(ids, 11).tolist(), strict=True))
    drawn = sorted(p for p, draw in u.items() if draw < 50 / n_patients)
    assert sorted(sources.patient_ids.astype(str).tolist()) == drawn
    assert any(50 / n_patients <= draw < 51 / n_patients for draw in u.values())    # the rate's edge is tested
    keys, choices = image_keys(ids, train.images, seed=11), 0
    for pid, image in zip(sources.patient_ids.astype(str), sources.images, strict=True):
        mine = np.flatnonzero(ids == pid)
        np.testing.assert_array_equal(image, train.images[mine[np.argmin(keys[mine])]])
        choices += len(mine) > 1
    assert choices >= 5                                                          # drawn patients with a choice


def test_where_the_image_is_the_unit_every_image_of_a_drawn_patient_is_a_source():
    """The same patients are drawn (the draw reads the patient alone); each of their images becomes a source, so at
    rate m / the count of images about m canaries come out, and removing one image removes its canary alone."""
    train = _images(600, BINARY, seed=5, patients=360)
    n_images = len(train)
    rest, sources = hold_out_canary_sources(train, 50, seed=1, n_patients=n_images, unit="image")
    _, one_each = hold_out_canary_sources(train, 50, seed=1, n_patients=n_images)
    drawn = np.isin(train.patient_ids, sources.patient_ids)
    assert set(one_each.patient_ids.tolist()) == set(sources.patient_ids.tolist())
    assert len(sources) == int(drawn.sum()) > len(one_each)             # all their images, not one each
    assert abs(len(sources) - 50) < 5 * np.sqrt(50 * 1.7)                 # about m images
    np.testing.assert_array_equal(sources.images, train.images[drawn])
    np.testing.assert_array_equal(rest.images, train.images[~drawn])
    with pytest.raises(ValueError, match="unit"):
        hold_out_canary_sources(train, 50, seed=1, n_patients=n_images, unit="study")


def test_at_most_one_canary_per_patient_less_one():
    train = _images(5, BINARY)
    train = ImageSet(images=train.images, labels=train.labels, patient_ids=np.array(["a", "a", "b", "c", "c"]),
                     sex=train.sex, age=train.age)
    assert max_canaries(train) == 2


def _made(train, n_patients, kind, task, seed=3):
    """{(image bytes, label bytes)} of the canaries an audit makes from ``train``, and the rest's image bytes."""
    rest, sources = hold_out_canary_sources(train, 40, seed=seed, n_patients=n_patients)
    canaries = make_canaries(sources, len(sources), task=task, seed=seed + 1, kind=kind)
    return ({(x.tobytes(), y.tobytes()) for x, y in zip(canaries.images, canaries.labels, strict=True)},
            {x.tobytes() for x in rest.images})


@pytest.mark.parametrize("kind", ["mislabelled", "marked", "noise"])
@pytest.mark.parametrize("task", [BINARY, MULTICLASS])
def test_removing_a_patient_changes_the_audits_training_set_by_that_patient_alone(kind, task):
    """The attack m patients drawn from all of them failed: a neighbour without one patient must hold out, make
    and keep exactly what the full set did for every other patient (the count of patients is public and fixed)."""
    train = _images(400, task, seed=7, patients=200)
    ids = train.patient_ids.astype(str)
    canaries, rest = _made(train, 200, kind, task)
    for patient in np.unique(ids)[:25]:
        keep = np.flatnonzero(ids != patient)
        mine = {x.tobytes() for x in train.images[ids == patient]}
        canaries_n, rest_n = _made(train.subset(keep), 200, kind, task)
        assert rest_n == rest - mine
        assert len(canaries - canaries_n) <= 1 and not canaries_n - canaries   # at most this patient's canary goes
