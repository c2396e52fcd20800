"""The split records every stage reads: an ImageSet refuses arrays that do not describe its N images, indexes to the
documented Sample, keeps order and masks where a stage subsets or replaces its pixels, and a Dataset counts what it
holds and shares only how it was read."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.data import Dataset, ImageSet, Task
from dpmed.data.synthetic import make_phantom


def _set(n: int = 4, with_masks: bool = True, **changed) -> ImageSet:
    arrays = dict(images=np.random.default_rng(0).random((n, 1, 5, 6)).astype(np.float32),
                  labels=np.arange(n, dtype=np.int64) % 2, patient_ids=np.array([f"p{i}" for i in range(n)]),
                  sex=np.array(["female", "male", "unknown", "female"][:n]),
                  age=np.array([30.0, 41.5, np.nan, 77.0][:n]),
                  masks=np.arange(n * 30).reshape(n, 5, 6) % 7 == 0 if with_masks else None)   # each image's own
    arrays.update(changed)
    return ImageSet(**arrays)


@pytest.mark.parametrize("changed, words", [
    ({"images": np.zeros((4, 5, 6), np.float32)}, "images must be [N, C, H, W]"),
    ({"labels": np.zeros(3, np.int64)}, "labels has 3 entries for 4 images"),
    ({"patient_ids": np.array(["a"] * 5)}, "patient_ids has 5 entries for 4 images"),
    ({"sex": np.array(["female"] * 3)}, "sex has 3 entries"),
    ({"age": np.zeros(5)}, "age has 5 entries"),
    ({"masks": np.zeros((4, 6, 5), bool)}, "masks must be [N, H, W] = (4, 5, 6)"),
])
def test_arrays_that_do_not_describe_the_n_images_are_refused(changed, words):
    with pytest.raises(ValueError) as error:
        _set(**changed)
    assert words in str(error.value)


def test_an_image_is_the_documented_sample():
    images = _set()
    for i in range(4):
        sample = images[i]
        assert type(sample.label) is int and sample.label == i % 2
        assert sample.patient_id == f"p{i}" and sample.attributes["sex"] == images.sex[i]
        np.testing.assert_equal(sample.attributes["age"], images.age[i])
        np.testing.assert_array_equal(sample.mask, images.masks[i])
        np.testing.assert_array_equal(sample.image, images.images[i])
    multilabel = _set(labels=np.eye(4, 2, dtype=np.float32), with_masks=False)
    np.testing.assert_array_equal(multilabel[0].label, [1.0, 0.0])
    assert multilabel[1].mask is None


def test_a_subset_keeps_the_order_asked_for_and_other_pixels_keep_everything_else():
    images = _set()
    part = images.subset(np.array([3, 0, 2]))
    assert part.patient_ids.tolist() == ["p3", "p0", "p2"] and part.labels.tolist() == [1, 0, 0]
    np.testing.assert_array_equal(part.masks, images.masks[[3, 0, 2]])
    np.testing.assert_array_equal(part.age, images.age[[3, 0, 2]])
    assert part.sex.tolist() == ["female", "female", "unknown"]
    assert images.subset(np.array([2, 1, 0])).sex.tolist() == ["unknown", "male", "female"]
    assert len({mask.tobytes() for mask in images.masks}) == 4      # each mask its own: a mix-up would show
    for row, i in enumerate([3, 0, 2]):        # each image stays with its own label, patient and mask
        np.testing.assert_array_equal(part.images[row], images.images[i])
    noisy = images.with_images(images.images + 1)
    assert noisy.masks is images.masks and noisy.patient_ids is images.patient_ids and noisy.sex is images.sex
    np.testing.assert_array_equal(noisy.images, images.images + 1)


def test_the_patients_are_counted_by_distinct_id_whatever_their_type():
    assert _set().n_patients == 4
    assert _set(patient_ids=np.array(["a", "b", "a", "c"])).n_patients == 3
    assert _set(patient_ids=np.array([7, 7, 7, 7])).n_patients == 1
    assert _set(patient_ids=np.array(["a", "b", "a", "c"])).subset(np.array([0, 2])).n_patients == 1


def test_a_task_is_described_with_its_classes():
    assert Task("multiclass", ("a", "b", "c")).describe() == "multiclass (a, b, c)"
    assert Task("binary", ("NORMAL", "PNEUMONIA")).describe() == (
        "binary (positive class PNEUMONIA, label 1; negative NORMAL, label 0)")


def test_a_dataset_counts_every_split_s_images_and_masks_and_the_phantom_knows_its_patients():
    train, val, test = _set(), _set(n=2), _set(n=3, with_masks=False)
    dataset = Dataset(name="d", task=Task("binary", ("0", "1")), train=train, val=val, test=test)
    assert dataset.image_bytes == (4 + 2 + 3) * 30 * 4 + (4 + 2) * 30       # float32 pixels, one byte per mask cell
    assert dataset.patients_known and not dataset.synthetic
    phantom = make_phantom(n_images=40, image_size=16)
    assert phantom.patients_known and phantom.synthetic


def test_a_filtered_key_whose_reader_gave_a_sentence_keeps_the_sentence():
    """APTOS says in words that it has no patient ids (a string, not a mapping of what was matched)."""
    note = "id_code (APTOS publishes no patient id; each image its own)"
    dataset = Dataset(name="d", task=Task("binary", ("0", "1")), train=_set(), val=_set(), test=_set(),
                      source={"patient_key": note, "rows": 12, "split": {"seed": 1, "patients_crossing_splits": 0}})
    assert dataset.shareable_source() == {"patient_key": note, "split": {"seed": 1}}


def test_the_shareable_source_names_the_data_file_not_where_it_lies():
    """run.json is shared: the absolute path published the user's file-system layout (their name, their hospital's
    share) and said nothing a reader can use elsewhere; the file or folder name identifies the dataset."""
    dataset = Dataset(name="d", task=Task("binary", ("0", "1")), train=_set(), val=_set(), test=_set(),
                      source={"format": "medmnist-npz", "path": "/home/alice/hospital/xrays/pneumoniamnist.npz"})
    assert dataset.shareable_source() == {"format": "medmnist-npz", "path": "pneumoniamnist.npz"}


def test_label_names_holding_a_comma_are_joined_by_semicolons():
    assert Task("multilabel", ("opacity, image-left lung", "opacity, image-right lung")).describe() == \
        "multilabel (opacity, image-left lung; opacity, image-right lung)"
    assert Task("multilabel", ("effusion", "edema")).describe() == "multilabel (effusion, edema)"
