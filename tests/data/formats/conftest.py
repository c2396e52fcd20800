"""Fixture datasets in each table layout's published form (APTOS, CheXpert, NIH ChestX-ray14, MIMIC-CXR-JPG,
HAM10000, a generic CSV), and the helpers their tests share: writing a CSV, loading a layout, checking patients."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dpmed.data import load_dataset
from dpmed.data.formats.chest_xray import CHEXPERT_FINDINGS


def _csv(path: Path, header: list[str], rows: list[list[object]], *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(",".join(str(v) for v in row) for row in [header, *rows]) + "\n"
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _load(source, path, **kwargs):
    args = dict(source=source, path=path, image_size=8, channels=1, seed=0, n_images=None)
    args.update(kwargs)
    return load_dataset(**args)


def _no_patient_crosses(d) -> bool:
    sets = [set(s.patient_ids) for s in (d.train, d.val, d.test)]
    return not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])


@pytest.fixture(scope="session")
def write_csv():
    """A function writing a CSV (gzip with gz=True): write_csv(path, header, rows, gz=False) -> path."""
    return _csv


@pytest.fixture(scope="session")
def load_layout():
    """A function loading a fixture dataset at 8 px, grey: load_layout(source, path, **load_dataset arguments)."""
    return _load


@pytest.fixture(scope="session")
def no_patient_crosses():
    """A function: whether no patient of a Dataset has images in two of its splits."""
    return _no_patient_crosses


# --- APTOS 2019 ---------------------------------------------------------------------------------------------------


@pytest.fixture
def aptos(tmp_path, write_image, write_csv):
    root = tmp_path / "aptos2019-blindness-detection"
    codes = [f"{i:03d}c1434d8d7" for i in range(15)]
    write_csv(root / "train.csv", ["id_code", "diagnosis"], [[c, i % 5] for i, c in enumerate(codes)])
    for i, c in enumerate(codes):
        write_image(root / "train_images" / f"{c}.png", level=90 + 10 * i, mode="RGB")
    return root


# --- CheXpert -------------------------------------------------------------------------------------------------------


def _chexpert_row(path, sex, age, **findings):
    return [path, sex, age, "Frontal", "AP"] + [findings.get(f, "") for f in CHEXPERT_FINDINGS]


@pytest.fixture
def chexpert(tmp_path, write_image, write_csv):
    root = tmp_path / "CheXpert-v1.0-small"
    header = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *CHEXPERT_FINDINGS]
    train = []
    for p in range(1, 13):
        for study in (1, 2) if p % 3 == 0 else (1,):
            path = f"CheXpert-v1.0-small/train/patient{p:05d}/study{study}/view1_frontal.jpg"
            write_image(root / "train" / f"patient{p:05d}" / f"study{study}" / "view1_frontal.jpg", level=80 + 9 * p)
            edema = ["1.0", "0.0", "-1.0", ""][p % 4]
            train.append(_chexpert_row(path, "Female" if p % 2 else "Male", 40 + p, **{
                "Edema": edema, "Cardiomegaly": "1.0" if p % 3 == 0 else "0.0", "Atelectasis": ["1.0", ""][p % 2],
                "Consolidation": ["-1.0", "1.0", "0.0"][p % 3], "Pleural Effusion": ["1.0", "0.0"][p % 2]}))
    write_csv(root / "train.csv", header, train)
    valid = []
    for p in range(64541, 64545):
        path = f"CheXpert-v1.0-small/valid/patient{p}/study1/view1_frontal.jpg"
        write_image(root / "valid" / f"patient{p}" / "study1" / "view1_frontal.jpg", level=150)
        valid.append(_chexpert_row(path, "Male", 70, **{f: ["1.0", "0.0"][(p + j) % 2] for j, f in
                                                          enumerate(CHEXPERT_FINDINGS)}))
    write_csv(root / "valid.csv", header, valid)
    return root


# --- NIH ChestX-ray14 ---------------------------------------------------------------------------------------------


@pytest.fixture
def nih(tmp_path, write_image, write_csv):
    root = tmp_path / "NIH"
    header = ["Image Index", "Finding Labels", "Follow-up #", "Patient ID", "Patient Age", "Patient Gender",
              "View Position", "OriginalImage[Width", "Height]", "OriginalImagePixelSpacing[x", "y]", ""]
    findings = ["No Finding", "Effusion|Mass", "Atelectasis", "Cardiomegaly|Effusion", "No Finding", "Hernia"]
    rows, test, train = [], [], []
    for patient in range(1, 13):
        for follow_up in range(2 if patient % 4 == 0 else 1):
            name = f"{patient:08d}_{follow_up:03d}.png"
            folder = "images_001" if patient <= 6 else "images_002"
            write_image(root / folder / "images" / name, level=70 + 10 * patient)
            age = 414 if patient == 5 else 30 + patient
            rows.append([name, findings[patient % 6], follow_up, patient, age, "MF"[patient % 2], "PA", 2500, 2048,
                         0.14, 0.14, ""])
            (test if patient > 9 else train).append(name)
    write_csv(root / "Data_Entry_2017.csv", header, rows)
    (root / "test_list.txt").write_text("\n".join(test) + "\n")
    (root / "train_val_list.txt").write_text("\n".join(train) + "\n")
    return root


# --- MIMIC-CXR-JPG ------------------------------------------------------------------------------------------------


@pytest.fixture
def mimic(tmp_path, write_image, write_csv):
    root = tmp_path / "mimic-cxr-jpg" / "2.0.0"
    meta, labels, split, people = [], [], [], []
    for k in range(12):
        subject, study = str(10000032 + k), str(50414267 + k)
        labels.append([subject, study] + [["1.0", "0.0", "-1.0", ""][(k + j) % 4] for j in range(14)])
        people.append([subject, "FM"[k % 2], 50 + k])
        for v in range(2 if k % 5 == 0 else 1):
            dicom = f"{k:02d}{v}a1b2c3-d4e5f6"
            meta.append([dicom, subject, study, "PA"])
            split.append([dicom, study, subject, "test" if k >= 10 else "validate" if k >= 8 else "train"])
            write_image(root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg",
                        level=60 + 12 * k)
    write_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", ["dicom_id", "subject_id", "study_id", "ViewPosition"], meta,
         gz=True)
    write_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", ["subject_id", "study_id", *CHEXPERT_FINDINGS], labels, gz=True)
    write_csv(root / "mimic-cxr-2.0.0-split.csv.gz", ["dicom_id", "study_id", "subject_id", "split"], split, gz=True)
    write_csv(root / "patients.csv.gz", ["subject_id", "gender", "anchor_age"], people, gz=True)
    return root


# --- HAM10000 -----------------------------------------------------------------------------------------------------


@pytest.fixture
def ham(tmp_path, write_image, write_csv):
    root = tmp_path / "ham10000"
    classes = ["nv", "mel", "bkl", "bcc", "akiec", "vasc", "df"]
    rows, n = [], 0
    for lesion in range(14):
        for _ in range(2 if lesion % 3 == 0 else 1):
            image = f"ISIC_{24306 + n:07d}"
            part = "HAM10000_images_part_1" if n % 2 else "HAM10000_images_part_2"
            write_image(root / part / f"{image}.jpg", level=90 + 5 * n, mode="RGB")
            rows.append([f"HAM_{lesion:07d}", image, classes[lesion % 7], "histo", "" if lesion == 3 else 45.0,
                         ["male", "female", "unknown"][lesion % 3], "back"])
            n += 1
    write_csv(root / "HAM10000_metadata.csv", ["lesion_id", "image_id", "dx", "dx_type", "age", "sex", "localization"],
         rows)
    return root


# --- generic CSV --------------------------------------------------------------------------------------------------


@pytest.fixture
def table(tmp_path, write_image, write_csv):
    rows = []
    for i in range(16):
        write_image(tmp_path / "pngs" / f"img{i}.png", level=80 + 8 * i)
        rows.append([f"pngs/img{i}.png", i % 2, (i // 2) % 2, f"pt{i // 2}", "FM"[i % 2], 20 + i,
                     "test" if i >= 13 else ""])
    return write_csv(tmp_path / "labels.csv", ["file", "opacity", "effusion", "pid", "gender", "years", "fold"], rows)
