"""The table readers (APTOS, CheXpert, NIH ChestX-ray14, MIMIC-CXR-JPG, HAM10000, a generic CSV) on small fixture
datasets written in each one's published layout, and each one's bad inputs."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from dpmed.data import SplitPlan, load_dataset
from dpmed.data.formats.tables import (
    CHEXPERT_FINDINGS, read_aptos, read_chexpert, read_csv_table, read_ham10000, read_mimic, read_nih,
)
from dpmed.errors import DataError


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


# --- APTOS 2019 ---------------------------------------------------------------------------------------------------


@pytest.fixture
def aptos(tmp_path, write_image):
    root = tmp_path / "aptos2019-blindness-detection"
    codes = [f"{i:03d}c1434d8d7" for i in range(15)]
    _csv(root / "train.csv", ["id_code", "diagnosis"], [[c, i % 5] for i, c in enumerate(codes)])
    for i, c in enumerate(codes):
        write_image(root / "train_images" / f"{c}.png", level=90 + 10 * i, mode="RGB")
    return root


def test_aptos_grades_are_an_ordinal_task_split_by_fractions(aptos):
    m = read_aptos(aptos)
    assert m.task.kind == "multiclass" and m.task.ordinal and m.task.label_names[4] == "proliferative DR"
    assert m.labels.tolist() == [i % 5 for i in range(15)] and m.where[2] == "train.csv line 4 (id_code 002c1434d8d7)"
    d = _load("aptos", aptos, channels=3, split=SplitPlan(val_fraction=0.2, test_fraction=0.2))
    assert sum(map(len, (d.train, d.val, d.test))) == 15 and d.train.image_shape == (3, 8, 8)
    assert d.source["split"]["carved"] == ["val", "test"] and len(set(d.test.labels)) >= 2


def test_aptos_bad_rows_are_listed_with_line_and_count(aptos):
    rows = [["000c1434d8d7", 0], ["001c1434d8d7", 7], ["002c1434d8d7", "x"], ["003c1434d8d7", 2],
            ["000c1434d8d7", 1], ["zzz", 3]] + [[f"{i:03d}c1434d8d7", i % 5] for i in range(4, 15)]
    _csv(aptos / "train.csv", ["id_code", "diagnosis"], rows)
    with pytest.raises(DataError) as err:
        _load("aptos", aptos)
    message = str(err.value)
    assert "4 of 17 rows cannot be used" in message
    assert "train.csv line 3 (id_code 001c1434d8d7): diagnosis '7' is not a grade 0-4" in message
    assert "train.csv line 4 (id_code 002c1434d8d7): diagnosis 'x'" in message
    assert "train.csv line 6 (id_code 000c1434d8d7): id '000c1434d8d7' repeats train.csv line 2" in message
    assert "train.csv line 7 (id_code zzz): image file train_images/zzz.png does not exist" in message
    d = _load("aptos", aptos, skip_invalid=True, split=SplitPlan(val_fraction=0.2, test_fraction=0.2))
    assert sum(map(len, (d.train, d.val, d.test))) == 13
    assert d.source["left_out_invalid"]["by_kind"] == {"label outside the task": 2, "duplicate id": 1,
                                                      "missing image": 1}


def test_aptos_missing_column_and_folder(aptos, tmp_path):
    _csv(aptos / "train.csv", ["id_code", "grade"], [["000c1434d8d7", 0]])
    with pytest.raises(DataError, match=r"train.csv has no column 'diagnosis'; its columns are 'id_code', 'grade'"):
        read_aptos(aptos)
    with pytest.raises(DataError, match="APTOS 2019 folder .* not found"):
        read_aptos(tmp_path / "elsewhere")


# --- CheXpert -------------------------------------------------------------------------------------------------------


def _chexpert_row(path, sex, age, **findings):
    return [path, sex, age, "Frontal", "AP"] + [findings.get(f, "") for f in CHEXPERT_FINDINGS]


@pytest.fixture
def chexpert(tmp_path, write_image):
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
    _csv(root / "train.csv", header, train)
    valid = []
    for p in range(64541, 64545):
        path = f"CheXpert-v1.0-small/valid/patient{p}/study1/view1_frontal.jpg"
        write_image(root / "valid" / f"patient{p}" / "study1" / "view1_frontal.jpg", level=150)
        valid.append(_chexpert_row(path, "Male", 70, **{f: ["1.0", "0.0"][(p + j) % 2] for j, f in
                                                          enumerate(CHEXPERT_FINDINGS)}))
    _csv(root / "valid.csv", header, valid)
    return root


def test_chexpert_uncertain_and_blank_policy(chexpert):
    zeros = read_chexpert(chexpert)
    ones = read_chexpert(chexpert, uncertain="ones")
    assert zeros.task.label_names == ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion")
    edema = zeros.task.label_names.index("Edema")
    # patient00001..04 write Edema as 0.0, -1.0, blank, 1.0 (p % 4 = 1, 2, 3, 0); patient00003 has two studies
    first_studies = [0, 1, 2, 4]
    assert zeros.labels[first_studies, edema].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert ones.labels[first_studies, edema].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert zeros.notes["uncertain_policy"] == "-1 -> zeros" and zeros.notes["blank_policy"].startswith("blank -> 0")
    assert zeros.patient_ids[0] == "patient00001" and zeros.sex[0] == "female" and zeros.age[0] == 41
    assert zeros.paths[0] == chexpert / "train" / "patient00001" / "study1" / "view1_frontal.jpg"
    assert (zeros.splits == "val").sum() == 4


def test_chexpert_valid_csv_is_validation_and_test_is_carved_by_patient(chexpert):
    d = _load("chexpert", chexpert, split=SplitPlan(test_fraction=0.25), labels=("Edema", "Pleural Effusion"))
    assert d.task.kind == "multilabel" and d.task.label_names == ("Edema", "Pleural Effusion")
    assert len(d.val) == 4 and set(d.val.patient_ids) == {f"patient{p}" for p in range(64541, 64545)}
    assert _no_patient_crosses(d) and len(d.train) + len(d.test) == 16
    assert d.train.labels.dtype == np.float32 and d.train.labels.shape[1] == 2


def test_chexpert_bad_values_and_unknown_findings(chexpert):
    text = (chexpert / "train.csv").read_text().splitlines()
    cells = text[5].split(",")
    cells[5 + CHEXPERT_FINDINGS.index("Edema")] = "maybe"
    text[5] = ",".join(cells)
    (chexpert / "train.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(DataError, match=r"(?s)1 of 20 rows .*train.csv line 6 \(CheXpert-v1.0-small/train/patient00004/"
                                        r"study1/view1_frontal.jpg\): Edema = 'maybe' in train.csv"):
        _load("chexpert", chexpert)
    with pytest.raises(DataError, match=r"labels \['Pneumonnia'\] are not findings of this dataset"):
        read_chexpert(chexpert, findings=["Pneumonnia"])


# --- NIH ChestX-ray14 ---------------------------------------------------------------------------------------------


@pytest.fixture
def nih(tmp_path, write_image):
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
    _csv(root / "Data_Entry_2017.csv", header, rows)
    (root / "test_list.txt").write_text("\n".join(test) + "\n")
    (root / "train_val_list.txt").write_text("\n".join(train) + "\n")
    return root


def test_nih_findings_ages_folders_and_official_test_list(nih):
    m = read_nih(nih)
    assert m.task.kind == "multilabel" and len(m.task.label_names) == 14
    effusion, mass = m.task.label_names.index("Effusion"), m.task.label_names.index("Mass")
    row = list(m.ids).index("00000001_000.png")  # "Effusion|Mass"
    assert m.labels[row, effusion] == m.labels[row, mass] == 1 and m.labels[row].sum() == 2
    assert m.labels[list(m.ids).index("00000006_000.png")].sum() == 0  # "No Finding"
    assert np.isnan(m.age[list(m.ids).index("00000005_000.png")]) and m.notes["implausible_ages_set_unknown"] == 1
    assert m.paths[-1].parent == nih / "images_002" / "images"
    d = _load("nih", nih, labels=("Effusion", "Atelectasis"), split=SplitPlan(val_fraction=0.3))
    assert sorted(set(d.test.patient_ids)) == ["10", "11", "12"] and len(d.test) == 4
    assert _no_patient_crosses(d) and d.source["split"]["published"] == ["test", "train"]


def test_nih_unknown_finding_and_missing_image(nih):
    text = (nih / "Data_Entry_2017.csv").read_text().replace("00000002_000.png,Atelectasis",
                                                              "00000002_000.png,Pneumonnia|Mass")
    (nih / "Data_Entry_2017.csv").write_text(text)
    (nih / "images_001" / "images" / "00000003_000.png").unlink()
    with pytest.raises(DataError) as err:
        _load("nih", nih)
    message = str(err.value)
    assert "2 of 15 rows cannot be used" in message
    assert "Data_Entry_2017.csv line 3 (00000002_000.png): Finding Labels 'Pneumonnia|Mass': ['Pneumonnia']" in message
    assert "line 4 (00000003_000.png): image file images/00000003_000.png does not exist" in message


# --- MIMIC-CXR-JPG ------------------------------------------------------------------------------------------------


@pytest.fixture
def mimic(tmp_path, write_image):
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
    _csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", ["dicom_id", "subject_id", "study_id", "ViewPosition"], meta,
         gz=True)
    _csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", ["subject_id", "study_id", *CHEXPERT_FINDINGS], labels, gz=True)
    _csv(root / "mimic-cxr-2.0.0-split.csv.gz", ["dicom_id", "study_id", "subject_id", "split"], split, gz=True)
    _csv(root / "patients.csv.gz", ["subject_id", "gender", "anchor_age"], people, gz=True)
    return root


def test_mimic_study_labels_official_split_and_demographics(mimic):
    m = read_mimic(mimic, findings=("No Finding", "Enlarged Cardiomediastinum"), uncertain="ones")
    # study k writes finding j as ["1.0", "0.0", "-1.0", ""][(k + j) % 4]; -1 -> 1 (ones), blank -> 0
    expected = {0: [1, 0], 1: [0, 1], 2: [1, 0], 3: [0, 1]}
    for k, want in expected.items():
        row = [i for i, p in enumerate(m.patient_ids) if p == str(10000032 + k)]
        assert all(m.labels[r].tolist() == want for r in row)
    assert m.sex[0] == "female" and m.age[0] == 50 and m.notes["official_split"] is True
    d = _load("mimic", mimic)
    assert len(d.val) == 2 and len(d.test) == 3  # subject 10000042 (k = 10) has two images, both in test
    assert _no_patient_crosses(d) and d.source["uncertain_policy"] == "-1 -> zeros"


def test_mimic_study_without_labels_is_flagged(mimic):
    import pandas as pd

    path = mimic / "mimic-cxr-2.0.0-chexpert.csv.gz"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.iloc[1:].to_csv(path, index=False, compression="gzip")
    with pytest.raises(DataError, match=r"(?s)2 of 15 rows .*\(2 missing label\).*line 2 \(dicom_id 000a1b2c3-d4e5f6\): "
                                        r"study s50414267 of subject 10000032 has no row"):
        _load("mimic", mimic)
    with pytest.raises(DataError, match="none of mimic-cxr-2.0.0-metadata.csv.gz, mimic-cxr-2.0.0-metadata.csv"):
        read_mimic(mimic.parent)


# --- HAM10000 -----------------------------------------------------------------------------------------------------


@pytest.fixture
def ham(tmp_path, write_image):
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
    _csv(root / "HAM10000_metadata.csv", ["lesion_id", "image_id", "dx", "dx_type", "age", "sex", "localization"],
         rows)
    return root


def test_ham10000_is_split_by_lesion(ham):
    m = read_ham10000(ham)
    assert m.task.kind == "multiclass" and m.task.label_names == ("akiec", "bcc", "bkl", "df", "mel", "nv", "vasc")
    assert m.labels[0] == m.task.label_names.index("nv") and m.patient_ids[0] == m.patient_ids[1] == "HAM_0000000"
    assert np.isnan(m.age[list(m.patient_ids).index("HAM_0000003")]) and m.sex[2] == "female"
    d = _load("ham10000", ham, channels=3, split=SplitPlan(val_fraction=0.25, test_fraction=0.25, seed=1))
    assert _no_patient_crosses(d) and sum(map(len, (d.train, d.val, d.test))) == 19


def test_ham10000_unknown_dx(ham):
    text = (ham / "HAM10000_metadata.csv").read_text().replace(",mel,", ",melanoma,", 1)
    (ham / "HAM10000_metadata.csv").write_text(text)
    with pytest.raises(DataError, match=r"HAM10000_metadata.csv line 4 \(ISIC_0024308\): dx 'melanoma' is not one of"):
        _load("ham10000", ham)


# --- generic CSV --------------------------------------------------------------------------------------------------


@pytest.fixture
def table(tmp_path, write_image):
    rows = []
    for i in range(16):
        write_image(tmp_path / "pngs" / f"img{i}.png", level=80 + 8 * i)
        rows.append([f"pngs/img{i}.png", i % 2, (i // 2) % 2, f"pt{i // 2}", "FM"[i % 2], 20 + i,
                     "test" if i >= 13 else ""])
    return _csv(tmp_path / "labels.csv", ["file", "opacity", "effusion", "pid", "gender", "years", "fold"], rows)


def test_generic_csv_binary_with_columns(table):
    columns = {"path": "file", "patient": "pid", "sex": "gender", "age": "years", "split": "fold"}
    d = _load("csv", table, columns=columns, labels=("opacity",), split=SplitPlan(val_fraction=0.2))
    assert d.task.kind == "binary" and d.task.label_names == ("class_0", "class_1")
    assert _no_patient_crosses(d)
    # pt6 has img12 (no split) and img13 (published test): img12 is left out of train (test outranks train)
    assert set(d.test.patient_ids) == {"pt6", "pt7"} and len(d.test) == 3
    assert sum(map(len, (d.train, d.val))) == 12 and set(d.train.sex) <= {"female", "male"}


def test_generic_csv_multilabel_and_multiclass(table, tmp_path):
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity", "effusion"])
    assert m.task.kind == "multilabel" and m.labels.shape == (16, 2) and m.labels[2].tolist() == [0.0, 1.0]
    text = table.read_text().replace("pngs/img5.png,1,", "pngs/img5.png,3,")
    table.write_text(text)
    m = read_csv_table(table, columns={"path": "file", "patient": "pid"}, labels=["opacity"])
    assert m.task.kind == "multiclass" and m.task.label_names == ("class_0", "class_1", "class_2", "class_3")
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], task="binary")
    assert m.problems[5].detail == "opacity = '3'; a binary label is a class index 0/1"


def test_generic_csv_missing_named_column_and_bad_split(table):
    with pytest.raises(DataError, match=r"labels.csv has no column 'patient_id'; its columns are 'file', 'opacity'"):
        read_csv_table(table, columns={"path": "file", "patient": "patient_id"}, labels=["opacity"])
    with pytest.raises(DataError, match="must name the image column as 'path'"):
        read_csv_table(table, columns={"image": "file"}, labels=["opacity"])
    text = table.read_text().replace(",test\n", ",holdout\n", 1)
    table.write_text(text)
    with pytest.raises(DataError, match=r"labels.csv line 15 \(pngs/img13.png\): fold = 'holdout'; use train, val"):
        _load("csv", table, columns={"path": "file", "split": "fold"}, labels=("opacity",))


def test_empty_split_after_skipping_is_an_error(table):
    text = table.read_text()
    for i in (13, 14, 15):
        text = text.replace(f"pngs/img{i}.png,", f"pngs/missing{i}.png,")
    table.write_text(text)
    with pytest.raises(DataError, match="the test split is empty after leaving out invalid rows"):
        _load("csv", table, columns={"path": "file", "split": "fold"}, labels=("opacity",), skip_invalid=True,
              split=SplitPlan())


# --- the example study files read these layouts ----------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "examples"


@pytest.mark.parametrize("name, layout, kind", [("aptos", "aptos", "multiclass"), ("chexpert", "chexpert", "multilabel"),
                                                ("ham10000", "ham", "multiclass")])
def test_example_study_reads_its_layout(name, layout, kind, request):
    from dpmed.config import load_study
    from dpmed.study import load_study_data

    study = load_study(EXAMPLES / f"{name}.yaml", {"data.path": str(request.getfixturevalue(layout)),
                                                   "data.image_size": 8})
    d = load_study_data(study)
    assert d.task.kind == kind and min(len(d.train), len(d.val), len(d.test)) > 0 and _no_patient_crosses(d)
    assert d.source["preprocessing"]["resize"].startswith("8x8")


def test_example_csv_study(table):
    from dpmed.config import load_study
    from dpmed.study import load_study_data

    overrides = {"data.path": str(table), "data.labels": ["opacity"], "data.image_size": 8,
                 "data.columns": {"path": "file", "patient": "pid", "sex": "gender", "age": "years", "split": "fold"}}
    d = load_study_data(load_study(EXAMPLES / "csv.yaml", overrides))
    assert d.task.kind == "binary" and len(d.test) == 3 and _no_patient_crosses(d)


# --- bad input common to every table reader ----------------------------------------------------------------------


@pytest.mark.parametrize("layout, table, column, read", [
    ("aptos", "train.csv", "id_code", read_aptos),
    ("chexpert", "train.csv", "Sex", read_chexpert),
    ("nih", "Data_Entry_2017.csv", "Patient ID", read_nih),
    ("ham", "HAM10000_metadata.csv", "lesion_id", read_ham10000),
])
def test_a_table_without_a_required_column_names_it(request, layout, table, column, read):
    root = request.getfixturevalue(layout)
    path = root / table
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace(column, column + "_renamed", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"{table} has no column '{column}'"):
        read(root)


def test_mimic_without_a_required_column(mimic):
    _csv(mimic / "mimic-cxr-2.0.0-metadata.csv.gz", ["dicom", "subject_id", "study_id"], [["a", "1", "2"]], gz=True)
    with pytest.raises(DataError, match="mimic-cxr-2.0.0-metadata.csv.gz has no column 'dicom_id'"):
        read_mimic(mimic)


def test_ham10000_duplicate_image_and_truncated_jpeg(ham):
    text = (ham / "HAM10000_metadata.csv").read_text().splitlines()
    text.append(text[3])  # ISIC_0024308 listed twice
    (ham / "HAM10000_metadata.csv").write_text("\n".join(text) + "\n")
    victim = ham / "HAM10000_images_part_2" / "ISIC_0024310.jpg"
    victim.write_bytes(victim.read_bytes()[:200])
    with pytest.raises(DataError) as err:
        _load("ham10000", ham)
    message = str(err.value)
    assert "1 of 20 rows cannot be used (1 duplicate id)" in message  # table problems stop before decoding
    assert "HAM10000_metadata.csv line 21 (ISIC_0024308): id 'ISIC_0024308' repeats HAM10000_metadata.csv line 4" in message
    d = _load("ham10000", ham, skip_invalid=True, split=SplitPlan(val_fraction=0.25, test_fraction=0.25))
    assert d.source["left_out_invalid"]["by_kind"] == {"duplicate id": 1, "unreadable image": 1}
    assert "image HAM10000_images_part_2/ISIC_0024310.jpg cannot be decoded" in " ".join(
        d.source["left_out_invalid"]["examples"])


# --- every table reader, every row-level bad input -----------------------------------------------------------------

# layout fixture -> (source, the table that lists the images, extra load_dataset arguments)
LAYOUTS = {
    "aptos": ("aptos", "train.csv", {}),
    "chexpert": ("chexpert", "train.csv", {}),
    "nih": ("nih", "Data_Entry_2017.csv", {}),
    "mimic": ("mimic", "mimic-cxr-2.0.0-metadata.csv.gz", {}),
    "ham": ("ham10000", "HAM10000_metadata.csv", {}),
    "table": ("csv", "labels.csv", {"columns": {"path": "file", "patient": "pid", "split": "fold"},
                                    "labels": ("opacity",)}),
}


def _layout(request, layout):
    """(folder, the reader's manifest, load(**more)) for one fixture layout."""
    source, _, extra = LAYOUTS[layout]
    made = request.getfixturevalue(layout)  # the dataset folder (the csv fixture: the CSV file itself)
    folder = made.parent if made.is_file() else made
    readers = {"aptos": read_aptos, "chexpert": read_chexpert, "nih": read_nih, "mimic": read_mimic,
               "ham": read_ham10000,
               "table": lambda p: read_csv_table(p, columns=extra["columns"], labels=list(extra["labels"]))}

    def load(**more):
        return _load(source, made, **{"split": SplitPlan(val_fraction=0.25, test_fraction=0.25), **extra, **more})

    return folder, readers[layout](made), load


def _repeat_data_line(table: Path, line: int) -> None:
    """Append a copy of ``line`` (1-based, header = 1) to the table: a duplicate id at its end."""
    gz = table.suffix == ".gz"
    text = gzip.open(table, "rt", encoding="utf-8").read() if gz else table.read_text(encoding="utf-8")
    lines = text.splitlines()
    lines.append(lines[line - 1])
    if gz:
        with gzip.open(table, "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    else:
        table.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_missing_truncated_and_duplicate_rows_in_every_table_layout(request, layout):
    folder, manifest, load = _layout(request, layout)
    n = len(manifest)
    # rows 0..3 lie in every fixture's training pool (never in a published val/test split)
    missing, truncated = manifest.paths[0], manifest.paths[2]
    assert missing.is_file() and truncated.is_file()
    missing.unlink()
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    _repeat_data_line(folder / LAYOUTS[layout][1], 2 + 3)  # data row 3 listed again at the end
    # Default: stop before any training, with one message naming the rows and counting them. Table problems (the
    # missing file, the repeated id) are found before decoding, so they come first.
    with pytest.raises(DataError) as err:
        load()
    message = str(err.value)
    assert f"2 of {n + 1} rows cannot be used" in message and "1 missing image" in message
    assert "1 duplicate id" in message and str(manifest.where[0]) in message and "skip_invalid" in message
    assert f"line {n + 2}" in message or layout == "chexpert" and str(manifest.ids[3]) in message
    # With the missing file back, the truncated one stops the study at decoding, named.
    missing.write_bytes(manifest.paths[1].read_bytes())
    _drop_last_line(folder / LAYOUTS[layout][1])
    with pytest.raises(DataError) as err:
        load()
    message = str(err.value)
    assert f"1 of {n} rows cannot be used (1 unreadable image)" in message
    assert str(manifest.where[2]) in message and "cannot be decoded" in message
    # skip_invalid: all three left out, counted by kind in the run record's data section.
    missing.unlink()
    _repeat_data_line(folder / LAYOUTS[layout][1], 2 + 3)
    d = load(skip_invalid=True)
    left = d.source["left_out_invalid"]
    assert left["count"] == 3 and left["by_kind"] == {"missing image": 1, "duplicate id": 1, "unreadable image": 1}
    assert sum(map(len, (d.train, d.val, d.test))) == n - 2 - d.source["split"][
        "rows_of_those_patients_outside_their_top_split"] and _no_patient_crosses(d)
    assert "left out 3 invalid rows" in d.source["summary"]


def _drop_last_line(table: Path) -> None:
    gz = table.suffix == ".gz"
    text = gzip.open(table, "rt", encoding="utf-8").read() if gz else table.read_text(encoding="utf-8")
    body = "\n".join(text.splitlines()[:-1]) + "\n"
    if gz:
        with gzip.open(table, "wt", encoding="utf-8") as f:
            f.write(body)
    else:
        table.write_text(body, encoding="utf-8")


@pytest.mark.parametrize("layout, split, rows", [
    ("chexpert", "val", lambda m: np.flatnonzero(m.splits == "val")),    # valid.csv is the published val split
    ("nih", "test", lambda m: np.flatnonzero(m.splits == "test")),       # test_list.txt
    ("mimic", "test", lambda m: np.flatnonzero(m.splits == "test")),     # the split file's "test"
])
def test_a_published_split_left_empty_is_an_error_not_replaced(request, layout, split, rows):
    _, manifest, load = _layout(request, layout)
    for r in rows(manifest):
        manifest.paths[r].unlink()
    with pytest.raises(DataError, match="missing image"):
        load()
    with pytest.raises(DataError, match=rf"the {split} split is empty after leaving out invalid rows"):
        load(skip_invalid=True)


def test_the_message_lists_the_first_five_rows_and_counts_all(aptos):
    rows = [[f"{i:03d}c1434d8d7", 9 if i < 8 else i % 5] for i in range(15)]
    _csv(aptos / "train.csv", ["id_code", "diagnosis"], rows)
    with pytest.raises(DataError) as err:
        _load("aptos", aptos)
    message = str(err.value)
    assert "8 of 15 rows cannot be used (8 label outside the task); the first 5:" in message
    listed = [line for line in message.splitlines() if line.startswith("  - ")]
    assert len(listed) == 5 and listed[0].startswith("  - train.csv line 2 (id_code 000c1434d8d7)")
    assert "line 7 " not in message  # the sixth offending row is counted, not listed
