"""A run's predictions.npz (`dpmed.evaluation.predictions`): what save_predictions writes, load_predictions reads back
as its type, field for field; a file that lacks what the comparisons need is an error naming the file and the
array, which the study turns into a note (its paired comparisons left out), never a KeyError."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.data import ImageSet
from dpmed.evaluation.predictions import load_predictions, save_predictions


def _split(n: int, seed: int) -> tuple[ImageSet, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = ImageSet(rng.random((n, 1, 4, 4)).astype(np.float32), rng.integers(0, 2, n).astype(np.int64),
                    np.array([f"p{i // 2}" for i in range(n)]), rng.choice(["female", "male", "unknown"], n),
                    np.where(rng.random(n) < 0.2, np.nan, rng.uniform(20, 90, n)))
    return data, rng.random(n)


def test_saved_predictions_read_back_split_by_split(tmp_path):
    (val, val_scores), (test, test_scores) = _split(7, 0), _split(11, 1)
    save_predictions(tmp_path / "predictions.npz", val=(val, val_scores), test=(test, test_scores))
    loaded = load_predictions(tmp_path / "predictions.npz")
    for data, scores, split in ((val, val_scores, loaded.val), (test, test_scores, loaded.test)):
        np.testing.assert_array_equal(split.scores, scores)
        np.testing.assert_array_equal(split.labels, data.labels)
        np.testing.assert_array_equal(split.patient_ids, data.patient_ids)
        np.testing.assert_array_equal(split.sex, data.sex)
        np.testing.assert_array_equal(split.age, data.age)            # nan where unknown, as saved


def test_a_file_without_validation_reads_and_one_without_patient_ids_is_named(tmp_path):
    path = tmp_path / "predictions.npz"
    np.savez(path, test_scores=np.r_[0.2, 0.8], test_labels=np.r_[0, 1], test_patient_ids=np.array(["a", "b"]))
    loaded = load_predictions(path)
    assert loaded.val is None and loaded.test.sex is None and list(loaded.test.patient_ids) == ["a", "b"]
    np.savez(path, test_scores=np.r_[0.2, 0.8], test_labels=np.r_[0, 1], val_scores=np.r_[0.5])
    with pytest.raises(ValueError, match=f"{path} has no test_patient_ids"):
        load_predictions(path)
    np.savez(path, test_scores=np.r_[0.2], test_labels=np.r_[0], test_patient_ids=np.array(["a"]),
             val_scores=np.r_[0.5])
    with pytest.raises(ValueError, match="has no val_labels, val_patient_ids"):     # a split in part
        load_predictions(path)
    np.savez(path, val_scores=np.r_[0.5], val_labels=np.r_[1], val_patient_ids=np.array(["a"]))
    with pytest.raises(ValueError, match="has no test_scores, test_labels, test_patient_ids"):   # no test split
        load_predictions(path)
