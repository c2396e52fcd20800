"""What a study publishes about its data besides the DP model, read from files on disk: the task and its classes
(study.yaml, the report, the model's last layer) and the image shape (study.yaml, the model's first layer).

Adversary: holds those files for a dataset or for its neighbour, the same files plus one training patient, and
tries to tell which. Each neighbour here differs only in that patient, and the test asserts that its study either
publishes the same task and shape or is refused before anything is written. Before, a generic CSV counted its
classes over every row, so one training patient labelled 2 turned a binary task into a three-class one; and with
``data.channels`` unset the first readable file set the channels of every image, so a training patient whose image
came first in the table and was saved in colour made the model's first layer take three channels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from dpmed.config import load_study
from dpmed.errors import DataError
from dpmed.evaluation.predictions import save_predictions
from dpmed.study import load_study_data

SIDE = 16
# (patient, label, split): both classes in every split, as a binary task needs
BASE = [(f"p{i}", i % 2, "train") for i in range(8)] + [("v0", 0, "val"), ("v1", 1, "val"),
                                                         ("t0", 0, "test"), ("t1", 1, "test")]


def _image(path: Path, *, mode: str = "L", side: int = SIDE, seed: int = 0) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(pixels if mode == "RGB" else pixels[..., 0]).save(path)
    return path.name


def _released(folder: Path, extra: list[tuple[str, int, str, dict]], data: dict | None = None):
    """(task kind, class names, training image shape) of a CSV study on BASE plus ``extra`` rows (patient, label,
    split, image options), the extra rows first in the table, as a patient's may be."""
    rows = [(p, label, split, {}) for p, label, split in BASE]
    lines = ["file,label,patient,split"]
    for k, (patient, label, split, options) in enumerate([*extra, *rows]):
        name = _image(folder / "images" / f"{patient}.png", seed=k, **options)
        lines.append(f"images/{name},{label},{patient},{split}")
    (folder / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    raw = {"name": "neighbours", "seeds": [0],
           "data": {"source": "csv", "path": str(folder / "labels.csv"), "labels": ["label"],
                    "columns": {"path": "file", "patient": "patient", "split": "split"}, **(data or {})},
           "model": {"name": "small_cnn"}, "arms": [{"name": "non-private", "mechanism": "none"}]}
    (folder / "study.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    dataset = load_study_data(load_study(folder / "study.yaml"))
    return dataset.task.kind, dataset.task.label_names, dataset.train.image_shape


def test_an_ordinary_extra_training_patient_changes_nothing_published(tmp_path):
    """The control: the neighbour's study runs and publishes what the dataset's does."""
    base = _released(tmp_path / "a", [])
    assert base == ("binary", ("class_0", "class_1"), (1, SIDE, SIDE))
    assert _released(tmp_path / "b", [("x", 1, "train", {})]) == base


def test_a_training_patient_of_a_class_no_evaluation_image_holds_is_refused_not_published(tmp_path):
    """Before: ("multiclass", class_0..class_2), a last layer of three outputs, for this one patient's label."""
    with pytest.raises(DataError, match=r"class\(es\) class_2 have training images but no validation or test image"
                                        r".*would publish those patients' labels"):
        _released(tmp_path, [("x", 2, "train", {})])
    # the same class with a test image too: a fact of the test split, published
    assert _released(tmp_path / "b", [("x", 2, "train", {}), ("y", 2, "test", {})])[1] == (
        "class_0", "class_1", "class_2")


def test_a_training_patients_colour_image_first_in_the_table_is_refused_not_published(tmp_path):
    """Before: channels 3 for every image, from this patient's file alone."""
    with pytest.raises(DataError, match=r"12 of 13 images are stored grey while the first readable one is colour "
                                        r"\(a file of three equal channels is grey\), "
                                        r"e\.g\. .*p0\.png; set data\.channels"):
        _released(tmp_path, [("x", 0, "train", {"mode": "RGB"})])
    assert _released(tmp_path / "b", [("x", 0, "train", {"mode": "RGB"})], {"channels": 1})[2] == (1, SIDE, SIDE)


def test_a_training_patients_image_of_another_size_is_refused_not_published(tmp_path):
    with pytest.raises(DataError, match=r"12 of 13 images differ in size from the first readable one \(24x24 px\)"):
        _released(tmp_path, [("x", 0, "train", {"side": 24})])
    assert _released(tmp_path / "b", [("x", 0, "train", {"side": 24})], {"image_size": SIDE})[2] == (1, SIDE, SIDE)


def test_a_medmnist_file_of_unknown_name_counts_its_classes_from_the_evaluation_splits(tmp_path):
    """A MedMNIST file whose name is not a published dataset has its classes counted from the labels: a training
    label that neither val nor test holds is refused."""
    def write(path: Path, top: int) -> Path:
        arrays = {}
        for split, n, labels in (("train", 8, [0, 1, 2, 0, 1, 2, 0, top]), ("val", 3, [0, 1, 2]),
                                 ("test", 3, [0, 1, 2])):
            arrays[f"{split}_images"] = np.zeros((n, 28, 28), dtype=np.uint8)
            arrays[f"{split}_labels"] = np.array(labels, dtype=np.uint8)[:, None]
        np.savez(path, **arrays)
        (path.parent / "study.yaml").write_text(yaml.safe_dump(
            {"name": "m", "seeds": [0], "data": {"source": "medmnist", "path": str(path)},
             "model": {"name": "small_cnn"}, "arms": [{"name": "n", "mechanism": "none"}]}), encoding="utf-8")
        return path.parent / "study.yaml"

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert load_study_data(load_study(write(tmp_path / "a" / "scans.npz", 1))).task.num_outputs == 3
    with pytest.raises(DataError, match=r"class\(es\) class_3 have training images but no validation or test"):
        load_study_data(load_study(write(tmp_path / "b" / "scans.npz", 3)))


def test_a_split_dpmed_carves_moves_no_other_patient_when_one_joins(tmp_path):
    """Which patients are validated and tested on is published (predictions, the test split's class counts and
    metrics). Carved stratified, one patient more moved others between the splits, so the test split read the new
    patient's label and the two training splits differed in more than that patient. Now only the new patient's own
    split is new."""
    def splits(folder: Path, patients: list[tuple[str, int]]) -> list[set[str]]:
        lines = ["file,label,patient"]
        for k, (patient, label) in enumerate(patients):
            lines.append(f"images/{_image(folder / 'images' / f'{patient}.png', seed=k)},{label},{patient}")
        (folder / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder / "study.yaml").write_text(yaml.safe_dump(
            {"name": "s", "seeds": [0], "model": {"name": "small_cnn"}, "arms": [{"name": "n", "mechanism": "none"}],
             "data": {"source": "csv", "path": str(folder / "labels.csv"), "labels": ["label"],
                      "columns": {"path": "file", "patient": "patient"}}}), encoding="utf-8")
        data = load_study_data(load_study(folder / "study.yaml"))
        return [set(s.patient_ids.tolist()) for s in (data.train, data.val, data.test)]

    patients = [(f"p{i:02d}", int(i % 3 == 0)) for i in range(60)]
    base = splits(tmp_path / "a", patients)
    for k, label in enumerate((0, 1)):
        joined = splits(tmp_path / f"b{k}", [*patients, ("x", label)])
        assert [s - {"x"} for s in joined] == base


def _evaluation_predictions(folder: Path, extra: list[tuple[str, str]]) -> bytes:
    """predictions.npz of fixed scores on the validation and test splits of a CSV study on BASE (sex alternating)
    plus ``extra`` training patients (patient id, sex cell): the file dpmed releases with every run, whatever the
    model."""
    lines = ["file,label,patient,sex,split"]
    rows = [(p, label, split, "FM"[k % 2]) for k, (p, label, split) in enumerate(BASE)]
    for patient, label, split, sex in [*rows, *((p, 0, "train", sex) for p, sex in extra)]:
        seed = int.from_bytes(patient.encode(), "big") % 2 ** 32    # a patient's pixels whoever else is in the table
        lines.append(f"images/{_image(folder / 'images' / f'{patient}.png', seed=seed)},{label},{patient},{sex},"
                     f"{split}")
    (folder / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "study.yaml").write_text(yaml.safe_dump(
        {"name": "p", "seeds": [0], "model": {"name": "small_cnn"}, "arms": [{"name": "n", "mechanism": "none"}],
         "data": {"source": "csv", "path": str(folder / "labels.csv"), "labels": ["label"],
                  "columns": {"path": "file", "patient": "patient", "sex": "sex", "split": "split"}}}),
        encoding="utf-8")
    data = load_study_data(load_study(folder / "study.yaml"))
    save_predictions(folder / "predictions.npz", val=(data.val, np.zeros(len(data.val))),
                     test=(data.test, np.zeros(len(data.test))))
    return (folder / "predictions.npz").read_bytes()


@pytest.mark.parametrize("patient, sex", [("a-training-patient-with-a-long-id", "F"), ("x", "not recorded")])
def test_a_training_patients_id_or_sex_leaves_the_evaluation_predictions_as_they_were(tmp_path, patient, sex):
    """predictions.npz holds the validation and test images' patient ids and sex as numpy strings, whose width
    (its dtype, <U2 or <U33) was the longest of the whole dataset's: one training patient with a longer id, or whose
    sex is "unknown" where every other is "male" or "female", made every run's file another, in no eps."""
    base = _evaluation_predictions(tmp_path / "a", [])
    assert _evaluation_predictions(tmp_path / "b", [(patient, sex)]) == base
