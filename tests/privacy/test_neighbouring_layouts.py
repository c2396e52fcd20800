"""What a study publishes about its data besides the DP model and the accountant, for each published layout: image
folders (PNG and DICOM), APTOS, CheXpert, NIH ChestX-ray14, MIMIC-CXR-JPG and HAM10000 (the generic CSV and a
MedMNIST file are `test_neighbouring_files.py`'s).

Adversary: holds every file the study writes outside ``private/`` (study.yaml's dataset summary and every run's plan,
run.json's data section, the validation and test predictions, the report built from them, the model's first and last
layer) for a dataset D or for its neighbour D', the same files on disk plus one more *training* patient (all their
images and table rows), and tries to tell which. The patient is chosen adversarially: an id that sorts first, a
class or finding value no other row holds, an uncertain (-1) finding, a lateral view, an odd sex or age, a blank
optional value, another bit depth, size, channel count or file format, an image folder of their own. Each test
builds D in a pytest folder, reads what it publishes, adds the patient in place (same paths, so that paths printed
in the record agree) and reads it again; the two must agree, or the study must be refused before anything is
written.

Published, as read here (`_published`): the dataset summary study.yaml and the report carry (with the training
set's size hidden, as a study with DP-SGD arms hides it), the plans of a DP-SGD arm given the same DP count of the
training set, run.json's ``data`` (the shareable part of the reader's record), and the validation and test splits as
predictions.npz and the report carry them (patients, labels, sex, age, pixels, in order). Counts the README keeps to
the terminal and the private log are not compared. (A whole `dpmed run` of D and D' differs besides only in the DP
count and in what the model's outputs give: scores, thresholds, metrics.)

A refusal is allowed, of D' or of D: it writes no file (README: whether dpmed accepts a dataset reads its training
images too). Cases that leaked before this file, each now a test: a split no patient draws was filled with the
training patient whose id sorts first; run.json's split.published (and NIH's description) read whether any row is
published as training (NIH lists, MIMIC's split file, a CSV's split column); MIMIC's "demographics" read whether
patients.csv had a row; with skip_invalid, a training row that repeated an evaluation row's id or file, read first,
left the evaluation row out.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from dpmed.config import load_study
from dpmed.data.cohorts import patient_draws
from dpmed.data.formats.chest_xray import NIH_FINDINGS as NIH_ALL
from dpmed.errors import DataError
from dpmed.released_size import needed_sizes
from dpmed.study import _dataset_summary, load_study_data, plan_context, plan_study

SIDE = 16
VAL, TEST = 0.15, 0.15     # SplitPlan's default shares


# ---------------------------------------------------------------------------------------------------- the release


def _split(images) -> dict:
    """One evaluation split as predictions.npz and the report publish it, in order."""
    return {"patients": images.patient_ids.astype(str).tolist(), "labels": np.asarray(images.labels).tolist(),
            "sex": images.sex.astype(str).tolist(),
            "age": [None if math.isnan(a) else float(a) for a in images.age.tolist()],
            "pixels": hashlib.sha256(np.ascontiguousarray(images.images).tobytes()).hexdigest()}


def _published(study_path: Path) -> dict:
    """Everything the study at ``study_path`` publishes before and outside training, given one DP count."""
    study = load_study(study_path)
    data = load_study_data(study)
    context = plan_context(data)
    sizes = {key: 1000 for key in needed_sizes(study, context)}     # the same DP count for D and D'
    assert sizes, "the study needs a DP-SGD arm, so that the summary hides the training set's size"
    plans = plan_study(study, data, sizes, context=context)
    return {
        "study.yaml dataset": _dataset_summary(data, sizes, study.size_epsilon).model_dump(mode="json"),
        "study.yaml runs": [plan.model_dump(mode="json") for plan in plans],
        "run.json data": {"name": data.name, "task": data.task.kind, "source": data.shareable_source()},
        "model layers": (data.train.image_shape[0], data.task.num_outputs, data.train.image_shape[1]),
        "val": _split(data.val), "test": _split(data.test),
    }


def _training_patients(study_path: Path) -> set[str]:
    data = load_study_data(load_study(study_path))
    return set(data.train.patient_ids.astype(str).tolist())


def _differences(a: dict, b: dict) -> list[str]:
    """The published items that differ, by name (and the first differing key of a mapping)."""
    out = []
    for key in a:
        if a[key] != b[key]:
            inner = [k for k in a[key] if a[key][k] != b[key].get(k)] if isinstance(a[key], dict) else []
            out.append(f"{key}: {inner[:3]}" if inner else key)
    return out


def _write_study(folder: Path, data: dict) -> Path:
    """A study of ``data`` with a DP-SGD arm of given noise (no calibration: fast) and a non-private arm."""
    raw = {"name": "neighbours", "seeds": [0], "data": data, "model": {"name": "small_cnn"},
           "training": {"batch_size": 4, "steps": 5},
           "arms": [{"name": "non-private", "mechanism": "none"},
                    {"name": "dp", "mechanism": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0,
                     "delta": 1e-5}]}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------- the patients


def _drawn(pid: str, carved: tuple[str, ...]) -> str:
    """The split dpmed carves ``pid`` into, where it carves ``carved`` from the training rows (`dpmed.data.splits`:
    a keyed draw of the id alone, at the default shares)."""
    shares = [1.0 - sum({"val": VAL, "test": TEST}[c] for c in carved)] + [{"val": VAL, "test": TEST}[c]
                                                                           for c in carved]
    u = patient_draws(np.array([pid]), 0, purpose="split")[0]
    return ["train", *carved][int(np.searchsorted(np.cumsum(shares)[:-1], u, side="right"))]


def _ids(name, wanted: dict[str, int], carved: tuple[str, ...], start: int = 100) -> dict[str, list[str]]:
    """Ids ``name(k)``, k = start, start + 1, ..., sorted into the splits they are carved into, ``wanted[split]`` of
    each (so that a small dataset holds what each split needs, and no split is filled by moving a patient). ``name``
    pads k, so that ids sort as their numbers do and ``name(0..start - 1)`` sort before them all."""
    out: dict[str, list[str]] = {split: [] for split in wanted}
    k = start
    while any(len(out[s]) < n for s, n in wanted.items()):
        pid = name(k)
        k += 1
        split = _drawn(pid, carved)
        if split in out and len(out[split]) < wanted[split]:
            out[split].append(pid)
    return out


def _first_training_id(name, carved: tuple[str, ...] = ()) -> str:
    """The first of ``name(0)``, ``name(1)``, ... (each sorting before every id :func:`_ids` gives) that is carved into
    training: the neighbour's patient, first in every sorted list of patients."""
    return next(name(k) for k in range(100) if _drawn(name(k), carved) == "train")


# ----------------------------------------------------------------------------------------------------- the files


def _png(path: Path, *, mode: str = "L", side: int = SIDE, seed: int = 0, fmt: str | None = None) -> Path:
    """A noise image; mode L (grey), RGB, RGBA or I;16 (16-bit grey)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    if mode == "I;16":
        Image.fromarray(rng.integers(0, 65536, (side, side), dtype=np.uint16)).save(path)
        return path
    pixels = rng.integers(0, 256, (side, side, 4), dtype=np.uint8)
    image = {"L": lambda: Image.fromarray(pixels[..., 0]), "RGB": lambda: Image.fromarray(pixels[..., :3]),
             "RGBA": lambda: Image.fromarray(pixels, mode="RGBA")}[mode]()
    image.save(path, format=fmt)
    return path


def _dicom(write_dicom, path: Path, *, patient: str | None, sex: str = "F", age: str = "045Y", side: int = SIDE,
           seed: int = 0, photometric: str = "MONOCHROME2", bits: int = 12, colour: bool = False) -> Path:
    """A noise DICOM file (grey, ``bits`` stored; or 8-bit RGB) with the patient's header fields, by the data tests'
    writer (``write_dicom``, the fixture)."""
    rng = np.random.default_rng(seed)
    if colour:
        return write_dicom(path, rng.integers(0, 256, (side, side, 3)), photometric="RGB", patient=patient, sex=sex,
                           age=age, bits=(8, 8))
    return write_dicom(path, rng.integers(0, 2 ** bits, (side, side)), photometric=photometric, patient=patient,
                       sex=sex, age=age, bits=(8 if bits <= 8 else 16, bits))


def _neighbours(study: Path, add) -> tuple[dict, dict]:
    """(what D publishes, what D' publishes): D as on disk, then ``add()`` writes the training patient into it, who
    must then be a training patient."""
    before = _published(study)
    patient = add()
    assert patient in _training_patients(study), f"{patient} should have joined the training split"
    return before, _published(study)


def _refused(study: Path, add, match: str) -> None:
    """D is read; with ``add()``'s patient, D' is refused (DataError ``match``) before anything is written."""
    _published(study)
    add()
    with pytest.raises(DataError, match=match):
        load_study_data(load_study(study))


# ------------------------------------------------------------------------------------------------- image folders

KERMANY = "person{:04d}".format     # Kermany names: person<k>_<kind>_<n>.jpeg -> patient person<k>
CLASSES = ("NORMAL", "PNEUMONIA")


def _folders(root: Path, *, split: bool = True) -> Path:
    """A Kermany layout: train/ and test/ class folders (validation carved from train), or with ``split=False``
    class folders alone (every split carved); both classes in each split."""
    carved = ("val",) if split else ("val", "test")
    drawn = _ids(KERMANY, {"train": 6, "val": 2} if split else {"train": 6, "val": 2, "test": 2}, carved)
    folder_of = {"train": "train", "val": "train", "test": "test"} if split else dict.fromkeys(drawn, "")
    patients = [(pid, folder_of[s], k % 2) for s, ids in drawn.items() for k, pid in enumerate(ids)]
    if split:
        patients += [(KERMANY(9000 + k), "test", k % 2) for k in range(2)]
    for n, (pid, folder, label) in enumerate(patients):
        for j in range(1 + n % 2):
            _png(root / folder / CLASSES[label] / f"{pid}_{'bacteria' if label else 'normal'}_{j}.png",
                 seed=10 * n + j)
    return _write_study(root.parent, {"source": "folders", "path": str(root)})


@pytest.mark.parametrize("layout", ["train and test folders", "class folders alone"])
@pytest.mark.parametrize("patient", ["two PNG files", "16-bit PNG", "JPEG", "a folder of their own",
                                     "DICOM with PatientID"])
def test_folders_an_extra_training_patient_changes_nothing_published(tmp_path, layout, patient, write_dicom):
    """The patient sorts first, and their files take another code path: 16-bit samples, a JPEG among PNGs, a
    sub-folder of the class folder (read recursively), a DICOM file whose header names them."""
    split = layout == "train and test folders"
    study = _folders(tmp_path / "chest_xray", split=split)
    pid = _first_training_id(KERMANY, ("val",) if split else ("val", "test"))
    where = tmp_path / "chest_xray" / ("train" if split else "") / "PNEUMONIA"

    def add():
        if patient == "two PNG files":
            for j in range(2):
                _png(where / f"{pid}_virus_{j}.png", seed=99 + j)
        elif patient == "16-bit PNG":
            _png(where / f"{pid}_virus_1.png", mode="I;16", seed=99)
        elif patient == "JPEG":
            _png(where / f"{pid}_virus_1.jpeg", seed=99, fmt="JPEG")
        elif patient == "a folder of their own":
            _png(where / pid / f"{pid}_virus_1.png", seed=99)
        else:
            _dicom(write_dicom, where / "IM-0000-0001.dcm", patient=pid, sex="O", age="003D", seed=99)
        return pid

    before, after = _neighbours(study, add)
    assert _differences(before, after) == []


def test_folders_a_training_patients_class_folder_is_refused_not_published(tmp_path):
    """Class folders alone (every split carved): a third class whose only patient is carved into training would
    publish a multiclass task; refused. Given in data.labels, the class is the study's, and the folder's absence
    in D is refused too."""
    study = _folders(tmp_path / "chest_xray", split=False)
    pid = _first_training_id(KERMANY, ("val", "test"))
    _refused(study, lambda: _png(tmp_path / "chest_xray" / "COVID" / f"{pid}_covid_1.png"),
             r"class\(es\) COVID have training images but no validation or test image")


@pytest.mark.parametrize("image", ["colour", "larger"])
def test_folders_a_training_patients_image_of_another_shape_is_refused_or_read_to_the_study_shape(tmp_path, image):
    """A colour or larger image of a training patient, first in its folder: refused unless data.channels or
    data.image_size sets the shape; then nothing published changes."""
    pid = _first_training_id(KERMANY, ("val",))
    options = {"mode": "RGB"} if image == "colour" else {"side": 24}

    def add():
        _png(tmp_path / "a" / "chest_xray" / "train" / "NORMAL" / f"{pid}_normal_1.png", seed=99, **options)
        return pid

    _refused(_folders(tmp_path / "a" / "chest_xray"), add,
             r"images are stored (grey|colour) while the first readable one" if image == "colour"
             else "differ in size from the first readable one")
    study = _folders(tmp_path / "b" / "chest_xray")
    setting = {"channels": 1} if image == "colour" else {"image_size": SIDE}
    raw = yaml.safe_load(study.read_text(encoding="utf-8"))
    raw["data"].update(setting)
    study.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")

    def add_b():
        _png(tmp_path / "b" / "chest_xray" / "train" / "NORMAL" / f"{pid}_normal_1.png", seed=99, **options)
        return pid

    before, after = _neighbours(study, add_b)
    assert _differences(before, after) == []


DICOM_ID = "DX{:05d}".format


def _dicom_folders(root: Path, write_dicom) -> Path:
    """train/ and test/ class folders of DICOM files named as a viewer exports them (IM-<series>-<image>.dcm), the
    patient, sex and age in each header; validation carved from train."""
    drawn = _ids(DICOM_ID, {"train": 6, "val": 2}, ("val",))
    patients = [(pid, "train", k % 2) for s in ("train", "val") for k, pid in enumerate(drawn[s])]
    patients += [(DICOM_ID(90000 + k), "test", k % 2) for k in range(2)]
    for n, (pid, folder, label) in enumerate(patients):
        for j in range(1 + n % 2):
            _dicom(write_dicom, root / folder / CLASSES[label] / f"IM-{n:04d}-{j:04d}.dcm", patient=pid,
                   sex="MF"[n % 2], age=f"{40 + n:03d}Y", seed=10 * n + j)
    return _write_study(root.parent, {"source": "folders", "path": str(root)})


@pytest.mark.parametrize("header", ["odd sex and age", "MONOCHROME1, 8 bits", "IM name of a test file's series"])
def test_dicom_folders_an_extra_training_patient_changes_nothing_published(tmp_path, header, write_dicom):
    """The patient's id sorts first; their header holds a sex no other file has ("O") and an age in days, or
    another photometric interpretation and bit depth, or a file name that repeats a test file's series number (the
    patient is the header's, never the name's)."""
    study = _dicom_folders(tmp_path / "dicom", write_dicom)
    pid = _first_training_id(DICOM_ID, ("val",))
    where = tmp_path / "dicom" / "train" / "PNEUMONIA"
    options = {"odd sex and age": {"sex": "O", "age": "003D"},
               "MONOCHROME1, 8 bits": {"photometric": "MONOCHROME1", "bits": 8, "age": ""},
               "IM name of a test file's series": {"sex": ""}}[header]
    name = "IM-0008-0001.dcm" if header == "IM name of a test file's series" else "IM-0000-0099.dcm"

    def add():
        _dicom(write_dicom, where / name, patient=pid, seed=99, **options)
        return pid

    before, after = _neighbours(study, add)
    assert _differences(before, after) == []


@pytest.mark.parametrize("header", ["no PatientID", "colour"])
def test_dicom_folders_a_training_patient_that_would_change_the_unit_or_the_shape_is_refused(tmp_path, header,
                                                                                              write_dicom):
    """A file without PatientID would be its own patient among files that name theirs (the unit of privacy, on every
    card, would then turn on it); a colour file among grey ones would make the first layer take three channels."""
    study = _dicom_folders(tmp_path / "dicom", write_dicom)
    pid = _first_training_id(DICOM_ID, ("val",))
    where = tmp_path / "dicom" / "train" / "NORMAL"

    def add():
        _dicom(write_dicom, where / "IM-0000-0099.dcm", patient=None if header == "no PatientID" else pid,
               colour=header == "colour", seed=99)
        return pid

    _refused(study, add, r"1 of \d+ images name no patient" if header == "no PatientID"
             else r"\d+ of \d+ images are stored (grey|colour) while the first readable one is (grey|colour)")


# ------------------------------------------------------------------------------------------------------------ APTOS

APTOS_ID = "{:012x}".format      # id_code: 12 hex digits; each image its own patient


def _aptos(root: Path, wanted: dict[str, int] | None = None, extra: dict | None = None) -> Path:
    """train.csv (id_code, diagnosis) and train_images/<id_code>.png in colour; grades 0-3 (no row holds 4)."""
    drawn = _ids(APTOS_ID, wanted or {"train": 8, "val": 2, "test": 2}, ("val", "test"))
    rows = [(pid, k % 4) for ids in drawn.values() for k, pid in enumerate(ids)]
    for n, (pid, _) in enumerate(rows):
        _png(root / "train_images" / f"{pid}.png", mode="RGB", seed=n)
    _aptos_table(root, rows)
    return _write_study(root.parent, {"source": "aptos", "path": str(root), **(extra or {})})


def _aptos_table(root: Path, rows: list[tuple[str, object]]) -> None:
    (root / "train.csv").write_text("id_code,diagnosis\n" + "".join(f"{c},{g}\n" for c, g in rows), encoding="utf-8")


def _aptos_add(root: Path, grade: object, **image) -> str:
    """The training patient's row first in train.csv, and their image."""
    pid = _first_training_id(APTOS_ID, ("val", "test"))
    lines = (root / "train.csv").read_text(encoding="utf-8").splitlines()
    (root / "train.csv").write_text("\n".join([lines[0], f"{pid},{grade}", *lines[1:]]) + "\n", encoding="utf-8")
    _png(root / "train_images" / f"{pid}.png", seed=99, **{"mode": "RGB", **image})
    return pid


@pytest.mark.parametrize("patient", ["grade no other image has", "RGBA image", "grade written 4.0"])
def test_aptos_an_extra_training_patient_changes_nothing_published(tmp_path, patient):
    """First row and first id; grade 4, which no other row holds (the five grades are APTOS's, never counted), or
    an image with an alpha channel (read as colour), or a grade written as a float."""
    study = _aptos(tmp_path / "aptos")
    grade, image = {"grade no other image has": (4, {}), "RGBA image": (1, {"mode": "RGBA"}),
                    "grade written 4.0": ("4.0", {})}[patient]
    before, after = _neighbours(study, lambda: _aptos_add(tmp_path / "aptos", grade, **image))
    assert _differences(before, after) == []


def test_aptos_a_training_patients_unreadable_grade_is_refused_or_left_out_unsaid(tmp_path):
    """Grade 5 is outside the task: refused, or with skip_invalid left out, and then nothing published says so."""
    _refused(_aptos(tmp_path / "a" / "aptos"), lambda: _aptos_add(tmp_path / "a" / "aptos", 5),
             r"1 of 13 rows cannot be used \(1 label outside the task\)")
    study = _aptos(tmp_path / "b" / "aptos", extra={"skip_invalid": True})
    before = _published(study)
    pid = _aptos_add(tmp_path / "b" / "aptos", 5)
    assert pid not in _training_patients(study)
    assert _differences(before, _published(study)) == []


def test_aptos_a_training_patients_grey_image_is_refused_or_read_as_colour(tmp_path):
    _refused(_aptos(tmp_path / "a" / "aptos"), lambda: _aptos_add(tmp_path / "a" / "aptos", 2, mode="L"),
             r"12 of 13 images are stored colour while the first readable one is grey")
    study = _aptos(tmp_path / "b" / "aptos", extra={"channels": 3})
    before, after = _neighbours(study, lambda: _aptos_add(tmp_path / "b" / "aptos", 2, mode="L"))
    assert _differences(before, after) == []


def test_aptos_a_split_no_patient_draws_is_refused_for_the_dataset_and_its_neighbour(tmp_path):
    """A small table in which no image draws the validation split. Before, dpmed filled it with one training image,
    the one (of the fewest images) whose id sorts first: with the neighbour's patient, whose own draw is training,
    that was them, so D published another patient's image as validation than D' did, and D' trained on that
    patient. Now the empty split is refused, for D and for D' alike (the new patient's draw is training)."""
    study = _aptos(tmp_path / "aptos", wanted={"train": 6, "test": 2})
    refusal = r"no patient's draw fell in the val split that dpmed carves \(data.split.val_fraction 0.15, seed 0\)"
    with pytest.raises(DataError, match=refusal):
        load_study_data(load_study(study))
    _aptos_add(tmp_path / "aptos", 1)
    with pytest.raises(DataError, match=refusal):
        load_study_data(load_study(study))


# --------------------------------------------------------------------------------------------------------- HAM10000

LESION = "HAM_{:07d}".format      # the lesion is the unit that never crosses splits
HAM_HEADER = "lesion_id,image_id,dx,dx_type,age,sex,localization\n"


def _ham(root: Path, train_dx: str | None = None, extra: dict | None = None) -> Path:
    """HAM10000_metadata.csv and colour JPEGs in HAM10000_images_part_1/; dx from akiec, bcc, bkl, mel, nv (no row
    holds df or vasc; ``train_dx``: every training lesion's), one or two images per lesion."""
    drawn = _ids(LESION, {"train": 8, "val": 2, "test": 2}, ("val", "test"))
    lines, n = [], 0
    for k, (split, lesion) in enumerate((s, pid) for s, ids in drawn.items() for pid in ids):
        dx = train_dx if train_dx and split == "train" else ("akiec", "bcc", "bkl", "mel", "nv")[k % 5]
        for _ in range(1 + k % 2):
            image = f"ISIC_{1000 + n:07d}"
            _png(root / "HAM10000_images_part_1" / f"{image}.jpg", mode="RGB", seed=n, fmt="JPEG")
            lines.append(f"{lesion},{image},{dx},histo,{30 + 5 * k}.0,{('male', 'female')[k % 2]},back\n")
            n += 1
    (root / "HAM10000_metadata.csv").write_text(HAM_HEADER + "".join(lines), encoding="utf-8")
    return _write_study(root.parent, {"source": "ham10000", "path": str(root), **(extra or {})})


def _ham_add(root: Path, rows: list[tuple[str, str, str, str]], image_ids: list[str] | None = None) -> str:
    """The training lesion (id sorting first) at the top of the table: rows (dx, age, sex, image folder), their
    images named ISIC_0000000, ... unless ``image_ids`` names them."""
    pid = _first_training_id(LESION, ("val", "test"))
    lines = []
    for j, (dx, age, sex, folder) in enumerate(rows):
        image = image_ids[j] if image_ids else f"ISIC_{j:07d}"
        _png(root / folder / f"{image}.jpg", mode="RGB", seed=99 + j, fmt="JPEG")
        lines.append(f"{pid},{image},{dx},histo,{age},{sex},face\n")
    table = root / "HAM10000_metadata.csv"
    table.write_text(HAM_HEADER + "".join(lines) + table.read_text(encoding="utf-8")[len(HAM_HEADER):],
                     encoding="utf-8")
    return pid


@pytest.mark.parametrize("lesion", ["a class no other lesion has, in part 2", "unknown sex, blank age",
                                    "three images, one in the table's folder"])
def test_ham10000_an_extra_training_lesion_changes_nothing_published(tmp_path, lesion):
    """The lesion's id sorts first and its rows come first: dx df, which no other row holds (the seven classes are
    HAM10000's, never counted), with its images in HAM10000_images_part_2/; or sex "unknown" and a blank age; or
    three images, one of them beside the table (the last folder dpmed looks in)."""
    root = tmp_path / "ham"
    study = _ham(root)
    rows = {"a class no other lesion has, in part 2": [("df", "55.0", "female", "HAM10000_images_part_2")] * 2,
            "unknown sex, blank age": [("nv", "", "unknown", "HAM10000_images_part_1")],
            "three images, one in the table's folder": [("mel", "85.0", "male", folder) for folder in (
                "HAM10000_images_part_1", "HAM10000_images_part_2", ".")]}[lesion]
    before, after = _neighbours(study, lambda: _ham_add(root, rows))
    assert _differences(before, after) == []


# --------------------------------------------------------------------------------------------------------- CheXpert

CHEXPERT_ID = "patient{:05d}".format
CHEXPERT_HEADER = ("Path,Sex,Age,Frontal/Lateral,AP/PA,No Finding,Atelectasis,Cardiomegaly,Consolidation,Edema,"
                   "Pleural Effusion\n")


def _chexpert_row(folder: str, pid: str, view: str, sex: str, age: str, findings: str, suffix: str = "jpg") -> str:
    lateral = view == "lateral"
    return (f"CheXpert-v1.0-small/{folder}/{pid}/study1/view{2 if lateral else 1}_{view}.{suffix},{sex},{age},"
            f"{'Lateral' if lateral else 'Frontal'},{'' if lateral else 'AP'},{findings}\n")


def _chexpert(root: Path, extra: dict | None = None) -> Path:
    """train.csv and valid.csv (the published validation split; test carved from train.csv by patient), grey JPEGs
    at their Path; findings 1, 0 and blank, no -1; each finding present in one validation patient and absent in the
    other (a finding validation holds one way only picks no threshold, and is refused)."""
    drawn = _ids(CHEXPERT_ID, {"train": 6, "test": 2}, ("test",))
    tables = {"train.csv": [(pid, "train") for ids in drawn.values() for pid in ids],
              "valid.csv": [(CHEXPERT_ID(64541 + k), "valid") for k in range(2)]}
    n = 0
    for name, patients in tables.items():
        lines = []
        for k, (pid, folder) in enumerate(patients):
            _png(root / folder / pid / "study1" / "view1_frontal.jpg", seed=n, fmt="JPEG")
            n += 1
            findings = ",".join(["", "1.0", "0.0", "", "1.0", "0.0"][(k + i) % 6] if name == "train.csv"
                                else ("0.0", "1.0")[(k + i) % 2] for i in range(6))
            lines.append(_chexpert_row(folder, pid, "frontal", ("Male", "Female")[k % 2], str(40 + k), findings))
        (root / name).write_text(CHEXPERT_HEADER + "".join(lines), encoding="utf-8")
    return _write_study(root.parent, {"source": "chexpert", "path": str(root), **(extra or {})})


def _chexpert_add(root: Path, rows: list[tuple[str, str, str, str, dict]], write_dicom=None) -> str:
    """The training patient (id sorting first) at the top of train.csv: rows (view, sex, age, findings, image);
    ``write_dicom`` (the fixture) writes an image given as DICOM."""
    pid = _first_training_id(CHEXPERT_ID, ("test",))
    lines = []
    for view, sex, age, findings, image in rows:
        suffix = "dcm" if image.get("dicom") else "jpg"
        path = root / "train" / pid / "study1" / f"view{2 if view == 'lateral' else 1}_{view}.{suffix}"
        if image.get("dicom"):
            _dicom(write_dicom, path, patient=None, seed=99)
        else:
            _png(path, seed=99, fmt="JPEG", **image)
        lines.append(_chexpert_row("train", pid, view, sex, age, findings, suffix))
    table = root / "train.csv"
    table.write_text(CHEXPERT_HEADER + "".join(lines) + table.read_text(encoding="utf-8")[len(CHEXPERT_HEADER):],
                     encoding="utf-8")
    return pid


@pytest.mark.parametrize("patient", ["uncertain findings, unknown sex, age 0", "uncertain as ones",
                                     "a lateral view of another size", "a DICOM file"])
def test_chexpert_an_extra_training_patient_changes_nothing_published(tmp_path, patient, write_dicom):
    """The patient's id sorts first and their rows come first in train.csv: every finding uncertain (-1) or blank,
    sex "Unknown" and age 0 (under U-Zeros, or U-Ones); a lateral view stored larger, with data.image_size set and
    every view read (by default the lateral film is left out); a frontal view stored as DICOM."""
    root = tmp_path / "CheXpert-v1.0-small"
    extra = {"a lateral view of another size": {"image_size": SIDE, "views": "all"},
             "uncertain as ones": {"uncertain": "ones"}}.get(patient)
    study = _chexpert(root, extra)
    rows = {"uncertain findings, unknown sex, age 0": [("frontal", "Unknown", "0", "-1.0,-1.0,,-1,,-1.0", {})],
            "uncertain as ones": [("frontal", "Female", "90", "-1.0,-1.0,,-1,,-1.0", {})],
            "a lateral view of another size": [("frontal", "Male", "70", "0.0,1.0,,,,", {}),
                                               ("lateral", "Male", "70", "0.0,1.0,,,,", {"side": 24})],
            "a DICOM file": [("frontal", "Female", "50", "1.0,,,,,", {"dicom": True})]}[patient]
    before, after = _neighbours(study, lambda: _chexpert_add(root, rows, write_dicom))
    assert _differences(before, after) == []


def test_chexpert_a_training_patients_lateral_view_of_another_size_is_refused_without_image_size(tmp_path):
    """With every view read (by default a lateral film is left out, and with it this patient's only image)."""
    root = tmp_path / "CheXpert-v1.0-small"
    _refused(_chexpert(root, {"views": "all"}),
             lambda: _chexpert_add(root, [("lateral", "Male", "70", "0.0,1.0,,,,", {"side": 24})]),
             r"10 of 11 images differ in size from the first readable one \(24x24 px\)")


# -------------------------------------------------------------------------------------------- NIH ChestX-ray14

NIH_ID = "{:08d}".format
NIH_HEADER = "Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position\n"
NIH_FINDINGS = ("No Finding", "Effusion", "Mass|Nodule", "Atelectasis", "Cardiomegaly|Effusion")


def _nih(root: Path, *, test_list: bool = True, train_listed: bool = True) -> Path:
    """Data_Entry_2017.csv, grey PNGs in images_001/images/, test_list.txt and train_val_list.txt (validation carved
    from the training rows). ``test_list=False``: no test list (test carved too); ``train_listed=False``:
    train_val_list.txt is there but names none of the rows (a table cut to a subset of the release, with the list of
    another subset), so the training rows have no published split. The first validation patient has all fourteen
    findings, the second none: validation holds each of them both ways (else it picks no threshold: refused); no
    training row has Hernia."""
    carved = ("val",) if test_list else ("val", "test")
    drawn = _ids(NIH_ID, {"train": 6, "val": 2} if test_list else {"train": 6, "val": 2, "test": 2}, carved)
    patients = [(pid, "train") for s in ("train", "val") for pid in drawn[s]] + [(pid, "") for pid in
                                                                                 drawn.get("test", [])]
    patients += [(NIH_ID(90000 + k), "test") for k in range(3 if test_list else 0)]
    lines, listed = [], {"train": [], "test": [], "": []}
    for n, (pid, split) in enumerate(patients):
        for j in range(1 + n % 2):
            image = f"{pid}_{j:03d}.png"
            _png(root / "images_001" / "images" / image, seed=10 * n + j)
            findings = {pid: f for pid, f in zip(drawn["val"], ("|".join(NIH_ALL), "No Finding"))}.get(
                pid, NIH_FINDINGS[n % 5])
            lines.append(f"{image},{findings},{j},{pid},{30 + n},{'MF'[n % 2]},PA\n")
            listed[split].append(image)
    (root / "Data_Entry_2017.csv").write_text(NIH_HEADER + "".join(lines), encoding="utf-8")
    if test_list:
        (root / "test_list.txt").write_text("".join(f"{i}\n" for i in listed["test"]), encoding="utf-8")
    (root / "train_val_list.txt").write_text("".join(f"{i}\n" for i in listed["train"]) if train_listed else "",
                                             encoding="utf-8")
    return _write_study(root.parent, {"source": "nih", "path": str(root)})


def _nih_add(root: Path, rows: list[tuple[str, str, str, str, dict]], folder: str = "images_012/images",
             carved: tuple[str, ...] = ("val",)) -> str:
    """The training patient (id sorting first) at the top of the table and in train_val_list.txt: rows (findings,
    age, sex, view, image)."""
    pid = _first_training_id(NIH_ID, carved)
    lines, images = [], []
    for j, (findings, age, sex, view, image) in enumerate(rows):
        name = f"{pid}_{j:03d}.png"
        _png(root / folder / name, seed=99 + j, **image)
        lines.append(f"{name},{findings},{j},{pid},{age},{sex},{view}\n")
        images.append(name)
    table = root / "Data_Entry_2017.csv"
    table.write_text(NIH_HEADER + "".join(lines) + table.read_text(encoding="utf-8")[len(NIH_HEADER):],
                     encoding="utf-8")
    listed = root / "train_val_list.txt"
    listed.write_text("".join(f"{i}\n" for i in images) + listed.read_text(encoding="utf-8"), encoding="utf-8")
    return pid


@pytest.mark.parametrize("patient", ["a finding no other row has, age 414, sex O", "16-bit PNG in another folder",
                                     "AP view, findings outside the study's labels"])
def test_nih_an_extra_training_patient_changes_nothing_published(tmp_path, patient):
    """The patient's id sorts first and their rows come first: Hernia, which no other training row holds (the fourteen
    findings are NIH's, never counted), an implausible age and a sex code dpmed does not read; a 16-bit PNG in a
    folder (images_012/images/) no other image is in; findings the study's data.labels leave out."""
    root = tmp_path / "nih"
    study = _nih(root)
    if patient == "AP view, findings outside the study's labels":
        raw = yaml.safe_load(study.read_text(encoding="utf-8"))
        raw["data"]["labels"] = ["Effusion", "Mass"]
        study.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    rows, folder = {
        "a finding no other row has, age 414, sex O": ([("Hernia", "414", "O", "PA", {})], "images_001/images"),
        "16-bit PNG in another folder": ([("No Finding", "58", "F", "PA", {"mode": "I;16"}),
                                          ("Effusion", "58", "F", "PA", {})], "images_012/images"),
        "AP view, findings outside the study's labels": ([("Pneumonia|Hernia", "7", "M", "AP", {})],
                                                         "images_001/images"),
    }[patient]
    before, after = _neighbours(study, lambda: _nih_add(root, rows, folder))
    assert _differences(before, after) == []


def test_nih_a_training_patient_unlisted_beside_full_lists_changes_nothing_published(tmp_path):
    """Both lists name every other row; the patient's row is in neither (pooled with the training rows, as a row
    without a split is) and their list line is absent: nothing changes, and nothing is refused."""
    root = tmp_path / "nih"
    study = _nih(root)

    def add():
        pid = _nih_add(root, [("Mass", "61", "F", "PA", {})])
        listed = root / "train_val_list.txt"
        listed.write_text("".join(line + "\n" for line in listed.read_text(encoding="utf-8").splitlines()
                                  if not line.startswith(pid)), encoding="utf-8")
        return pid

    before, after = _neighbours(study, add)
    assert _differences(before, after) == []


def test_nih_a_training_patients_image_with_alpha_is_refused(tmp_path):
    """Some ChestX-ray14 files are RGBA: read as colour among grey ones, refused unless data.channels is set."""
    root = tmp_path / "nih"
    _refused(_nih(root), lambda: _nih_add(root, [("Effusion", "40", "M", "PA", {"mode": "RGBA"})]),
             r"\d+ of \d+ images are stored (grey|colour) while the first readable one is (grey|colour)")


def test_nih_the_published_split_does_not_read_which_training_rows_the_lists_name(tmp_path):
    """D: train_val_list.txt names none of the table's rows and there is no test list, so every row is carved; D':
    the list names the new training patient's image. The carving is the same (published training rows and rows
    without a split are divided alike), but what is said of the split reads the patient's line."""
    root = tmp_path / "nih"
    study = _nih(root, test_list=False, train_listed=False)
    before, after = _neighbours(study, lambda: _nih_add(root, [("Effusion", "40", "M", "PA", {})],
                                                        carved=("val", "test")))
    assert _differences(before, after) == []


# ------------------------------------------------------------------------------------------------- MIMIC-CXR-JPG

SUBJECT = "1{:07d}".format
MIMIC = "mimic-cxr-2.0.0-"
MIMIC_FINDINGS = "Atelectasis,Cardiomegaly,Consolidation,Edema,Pleural Effusion"


def _mimic_files(root: Path, images: list[tuple[str, str, str, str, str, str]], labels: list[tuple[str, str, str]],
                 people: list[tuple[str, str, str, str]] | None, *, split_file: bool = True) -> None:
    """The tables: images (dicom_id, subject, study, view, StudyDate, split), labels (subject, study, findings),
    people (subject, gender, anchor_age, anchor_year; None: no patients.csv). A split of "" has no split.csv row."""
    (root / f"{MIMIC}metadata.csv").write_text(
        "dicom_id,subject_id,study_id,ViewPosition,StudyDate\n"
        + "".join(f"{d},{s},{t},{v},{date}\n" for d, s, t, v, date, _ in images), encoding="utf-8")
    (root / f"{MIMIC}chexpert.csv").write_text(
        f"subject_id,study_id,{MIMIC_FINDINGS}\n" + "".join(f"{s},{t},{f}\n" for s, t, f in labels), encoding="utf-8")
    if split_file:
        (root / f"{MIMIC}split.csv").write_text(
            "dicom_id,study_id,subject_id,split\n" + "".join(f"{d},{t},{s},{split}\n" for d, s, t, _, _, split
                                                             in images if split), encoding="utf-8")
    if people is not None:
        (root / "patients.csv").write_text("subject_id,gender,anchor_age,anchor_year\n"
                                           + "".join(",".join(p) + "\n" for p in people), encoding="utf-8")


def _mimic(root: Path, *, train_in_split_file: bool = True, patients_table: bool = True,
           views: str | None = None) -> tuple[Path, list]:
    """MIMIC-CXR-JPG with all three splits published in the split file (``train_in_split_file=False``: the file
    names the validation and test images only, the training images having no split), grey JPEGs under files/, and
    MIMIC-IV's patients.csv (``patients_table=False``: its header alone); each finding present in one validation
    study and absent in the other (else validation picks no threshold: refused). Returns (study, the tables' rows)."""
    tables: tuple[list, list, list] = ([], [], [])
    for k in range(12):
        subject, split = SUBJECT(100 + k), (("train",) * 8 + ("validate", "test") * 2)[k]
        for s in range(1 + k % 2):
            study = f"5{k:03d}{s:04d}"
            dicom = f"{k:04d}{s:04d}-aaaa"
            _png(root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg",
                 seed=10 * k + s, fmt="JPEG")
            tables[0].append((dicom, subject, study, ("PA", "AP")[s], f"21{k:02d}0101",
                              split if train_in_split_file or split != "train" else ""))
            tables[1].append((subject, study, ",".join(["1.0", "0.0", "", "-1.0", "1.0"][(k + s + i) % 5]
                                                       if split != "validate" else ("0.0", "1.0")[(k // 2 + i) % 2]
                                                       for i in range(5))))
        tables[2].append((subject, "MF"[k % 2], str(40 + 3 * k), "2150"))
    people = tables[2] if patients_table else []
    _mimic_files(root, *tables[:2], people)
    data = {"source": "mimic", "path": str(root)} | ({} if views is None else {"views": views})
    return _write_study(root.parent, data), [*tables[:2], people]


def _mimic_add(root: Path, tables: list, *, split_file: bool = True, person: tuple | None = None) -> str:
    """The training patient, subject id sorting first, rows first: two studies, a lateral view without StudyDate,
    findings uncertain (-1) and blank, split "train"; ``person``: their patients.csv row (None: none, a missing
    optional value; patients.csv is written only where it was, or where ``person`` is given)."""
    subject = SUBJECT(0)
    rows, labels = [], []
    for s, (view, date, findings) in enumerate([("LATERAL", "", "-1.0,-1.0,,,-1.0"), ("AP", "21990101", ",,,,")]):
        study, dicom = f"4{s:07d}", f"0000{s:04d}-0000"
        _png(root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg", seed=99 + s,
             fmt="JPEG")
        rows.append((dicom, subject, study, view, date, "train"))
        labels.append((subject, study, findings))
    people = tables[2] if (root / "patients.csv").is_file() else None
    if person is not None:
        people = [person, *(people or [])]
    _mimic_files(root, rows + tables[0], labels + tables[1], people, split_file=split_file)
    return subject


@pytest.mark.parametrize("views", [None, "all"])
def test_mimic_an_extra_training_patient_changes_nothing_published(tmp_path, views):
    """Subject id first, rows first; a lateral view, a study without StudyDate, uncertain and blank findings, and no
    patients.csv row (their sex and age unknown). By default the lateral film (their study without StudyDate) is left
    out, with every view read it is in."""
    root = tmp_path / "mimic"
    study, tables = _mimic(root, views=views)
    before, after = _neighbours(study, lambda: _mimic_add(root, tables))
    assert _differences(before, after) == []


def test_mimic_an_extra_training_patient_of_unusual_demographics_changes_nothing_published(tmp_path):
    """Their patients.csv row: gender "O", anchor_age 91 and an anchor_year after their study's year (an age at
    the exam below the anchor age), and one study without a StudyDate (the anchor age as given)."""
    root = tmp_path / "mimic"
    study, tables = _mimic(root)
    before, after = _neighbours(study, lambda: _mimic_add(root, tables, person=(SUBJECT(0), "O", "91", "2250")))
    assert _differences(before, after) == []


def test_mimic_the_published_split_does_not_read_which_training_rows_the_split_file_names(tmp_path):
    root = tmp_path / "mimic"
    study, tables = _mimic(root, train_in_split_file=False)
    before, after = _neighbours(study, lambda: _mimic_add(root, tables))
    assert _differences(before, after) == []


def test_mimic_the_record_of_demographics_does_not_read_a_training_patients_row(tmp_path):
    """D's patients.csv holds its header alone (sex and age unknown everywhere); D''s holds the new training
    patient's row. Before, run.json said "none (sex and age unknown)" for D and "patients.csv (MIMIC-IV)" for D':
    it read whether the table had a row, now whether the file is there. Nothing else published changes: the fairness
    groups are the test split's, all unknown in both."""
    root = tmp_path / "mimic"
    study, tables = _mimic(root, patients_table=False)
    before, after = _neighbours(study, lambda: _mimic_add(root, tables, person=(SUBJECT(0), "F", "50", "2150")))
    assert _differences(before, after) == []


def test_ham10000_a_training_row_that_repeats_a_test_images_id_is_refused_even_when_skipping_invalid_rows(tmp_path):
    """D' adds a training lesion whose one row, first in the table, names image_id ISIC_... of a test lesion's
    image, with a file of that name in HAM10000_images_part_2/ (dpmed's index takes part 1's). Before, skip_invalid
    left out the later row, the test image's, as the "duplicate id": the test split (predictions, metrics, the
    report) lost it, and the training lesion trained on it. Now a repeat is refused, skip_invalid or not."""
    root = tmp_path / "ham"
    study = _ham(root, extra={"skip_invalid": True})
    test_lesions = set(load_study_data(load_study(study)).test.patient_ids.tolist())
    rows = [line.split(",") for line in (root / "HAM10000_metadata.csv").read_text(encoding="utf-8").splitlines()[1:]]
    image = next(r[1] for r in rows if r[0] in test_lesions)
    _refused(study, lambda: _ham_add(root, [("df", "50.0", "male", "HAM10000_images_part_2")], image_ids=[image]),
             r"(?s)id 'ISIC_\d+' repeats HAM10000_metadata.csv line 2.*even with data.skip_invalid")


def test_folders_a_training_patients_link_to_a_validation_image_is_refused_even_when_skipping_invalid_rows(tmp_path):
    """train/, val/ and test/ folders, skip_invalid. D' adds a training patient whose one file is a link to (the
    same file as) a validation image. train/ is read before val/, so skip_invalid used to leave out the validation
    row as the "duplicate image", and the validation split dpmed publishes lost it. Now a repeat is refused."""
    root = tmp_path / "chest_xray"
    for n, (folder, label) in enumerate([("train", 0), ("train", 1)] * 3 + [("val", 0), ("val", 0), ("val", 1),
                                                                            ("test", 0), ("test", 1)]):
        _png(root / folder / CLASSES[label] / f"{KERMANY(100 + n)}_x_1.png", seed=n)
    study = _write_study(tmp_path, {"source": "folders", "path": str(root), "skip_invalid": True})
    pid = KERMANY(0)

    def add():
        link = root / "train" / "NORMAL" / f"{pid}_x_1.png"
        link.symlink_to(root / "val" / "NORMAL" / f"{KERMANY(106)}_x_1.png")
        return pid

    _refused(study, add, r"(?s)val/NORMAL/person0106_x_1.png is the same file as train/NORMAL/person0000_x_1.png.*"
             r"even with data.skip_invalid")


def test_csv_the_published_split_does_not_read_a_training_rows_split_value(tmp_path):
    """A generic CSV whose split column names the validation and test rows and leaves the training rows blank (they
    train: nothing is carved, as val and test are published); D' adds a training patient whose row says train."""
    lines = ["file,label,patient,split"]
    for n, (label, split) in enumerate([(k % 2, "") for k in range(8)] + [(0, "val"), (1, "val"), (0, "test"),
                                                                          (1, "test")]):
        _png(tmp_path / "data" / "images" / f"p{100 + n}.png", seed=n)
        lines.append(f"images/p{100 + n}.png,{label},p{100 + n},{split}")
    table = tmp_path / "data" / "labels.csv"
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    study = _write_study(tmp_path, {"source": "csv", "path": str(table), "labels": ["label"],
                                    "columns": {"path": "file", "patient": "patient", "split": "split"}})

    def add():
        _png(tmp_path / "data" / "images" / "p000.png", seed=99)
        table.write_text("\n".join([lines[0], "images/p000.png,1,p000,train", *lines[1:]]) + "\n", encoding="utf-8")
        return "p000"

    before, after = _neighbours(study, add)
    assert _differences(before, after) == []
