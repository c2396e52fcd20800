"""Datasets published as a table of images: APTOS 2019, CheXpert, NIH ChestX-ray14, MIMIC-CXR-JPG, HAM10000, and a
generic CSV whose columns the study file names.

Each reader turns its table into a :class:`~dpmed.data.manifest.Manifest` (no pixel is decoded here); rows whose
label lies outside the task are flagged with the CSV line (header = line 1) and the value, so the user can find
them. A missing table or column stops at once with the file and the column named. Image files that are missing or
unreadable are found by :mod:`dpmed.data.assembly`, which also splits.

Uncertain and blank findings (CheXpert, MIMIC-CXR-JPG). The CheXpert labeller (Irvin et al. 2019) writes 1
(positive), 0 (negative), -1 (uncertain: "may represent pneumonia") or leaves the cell blank (not mentioned). dpmed's
policy, stated in every record: **blank -> 0** (a finding the report does not mention is taken as absent, the usual
reading), **-1 -> ``uncertain``**: ``zeros`` (U-Zeros, the default: a finding counts only when the report asserts
it) or ``ones`` (U-Ones, which Irvin et al. found better for atelectasis and edema). Any other value is a flagged row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

from dpmed.data.manifest import Manifest, parse_age, parse_sex, parse_splits
from dpmed.data.sample import Task, TaskKind
from dpmed.errors import DataError

__all__ = [
    "read_aptos", "read_chexpert", "read_nih", "read_mimic", "read_ham10000", "read_csv_table",
    "APTOS_GRADES", "CHEXPERT_FINDINGS", "CHEXPERT_COMPETITION", "NIH_FINDINGS", "HAM10000_CLASSES",
    "UNCERTAIN_POLICIES",
]

APTOS_GRADES = ("no DR", "mild", "moderate", "severe", "proliferative DR")
CHEXPERT_FINDINGS = (
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices")
CHEXPERT_COMPETITION = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion")
"""The five findings of the CheXpert competition (Irvin et al. 2019): the default labels of CheXpert and MIMIC."""
NIH_FINDINGS = (
    "Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
    "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia")
HAM10000_CLASSES = {"akiec": "actinic keratoses / intraepithelial carcinoma", "bcc": "basal cell carcinoma",
                    "bkl": "benign keratosis-like lesions", "df": "dermatofibroma", "mel": "melanoma",
                    "nv": "melanocytic nevi", "vasc": "vascular lesions"}
UNCERTAIN_POLICIES = {"zeros": 0.0, "ones": 1.0}
_FINDING_VALUES = {"1": 1.0, "1.0": 1.0, "0": 0.0, "0.0": 0.0, "": 0.0}  # blank: not mentioned -> absent
_UNCERTAIN = {"-1", "-1.0"}


# ------------------------------------------------------------------------------------------------------ helpers


def _folder(path: str | Path, dataset: str, table: str) -> Path:
    """The dataset folder: ``path`` itself, or the folder of ``path`` when it names the table file."""
    p = Path(path).expanduser()
    if p.is_file():
        p = p.parent
    if not p.is_dir():
        raise DataError(f"{dataset} folder {p} not found; data.path must name the folder that holds {table}")
    return p


def _first_existing(root: Path, names: Sequence[str], dataset: str) -> Path:
    for name in names:
        if (root / name).is_file():
            return root / name
    raise DataError(f"{dataset}: none of {', '.join(names)} found in {root}; data.path must name the folder the "
                    f"dataset was extracted to (it holds {names[0]})")


def _read_table(path: Path, required: Sequence[str]) -> pd.DataFrame:
    """The CSV as text (keep every cell as written: blank stays ""), or DataError naming the file or the column."""
    if not path.is_file():
        raise DataError(f"table {path} not found")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataError(f"{path} is not a readable CSV table ({type(exc).__name__}: {exc})") from exc
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        have = ", ".join(repr(c) for c in frame.columns[:30])
        raise DataError(f"{path} has no column {', '.join(repr(c) for c in missing)}; its columns are {have}. "
                        "Check the file (or the column names in the study file's data.columns / data.labels).")
    if len(frame) == 0:
        raise DataError(f"{path} has a header but no rows; the dataset needs images")
    return frame


def _line(row: int) -> int:
    return row + 2  # the header is line 1


def _class_index(text: str, count: int) -> int | None:
    """A class index 0..count-1 written as an integer ("3" or "3.0"), else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and 0 <= value < count else None


def _findings(frame: pd.DataFrame, findings: Sequence[str], uncertain: str, table: str, start: int,
              flag) -> np.ndarray:
    """CheXpert-labeller columns -> float32 [N, L] by the module docstring's policy; other values are flagged."""
    if uncertain not in UNCERTAIN_POLICIES:
        raise DataError(f"uncertain must be one of {sorted(UNCERTAIN_POLICIES)}, got {uncertain!r}")
    out = np.zeros((len(frame), len(findings)), dtype=np.float32)
    for j, name in enumerate(findings):
        for i, raw in enumerate(frame[name].tolist()):
            text = raw.strip()
            if text in _FINDING_VALUES:
                out[i, j] = _FINDING_VALUES[text]
            elif text in _UNCERTAIN:
                out[i, j] = UNCERTAIN_POLICIES[uncertain]
            else:
                flag(start + i, "label outside the task",
                     f"{name} = {raw!r} in {table}; the labeller's values are 1, 0, -1 or blank")
    return out


def _manifest(*, name, root, task, paths, labels, patients, sex, ages, splits, where, ids, notes, description,
              problems=()) -> Manifest:
    age, implausible = parse_age(ages)
    manifest = Manifest(name=name, root=root, task=task, paths=list(paths), labels=labels,
                        patient_ids=np.array(patients, dtype=str), sex=parse_sex(sex), age=age,
                        splits=np.array(splits, dtype=str), where=np.array(where, dtype=str),
                        ids=np.array(ids, dtype=str),
                        notes={**notes, "implausible_ages_set_unknown": implausible}, description=description)
    for row, kind, detail in problems:
        manifest.flag(row, kind, detail)
    return manifest


class _Flags(list):
    """Problems found while parsing rows, (row, kind, detail); flagged on the manifest once it exists."""

    def __call__(self, row: int, kind: str, detail: str) -> None:
        self.append((row, kind, detail))


def _index_images(folders: Sequence[Path], suffix: str) -> dict[str, Path]:
    """File name -> path over ``folders`` (first folder wins): one directory scan instead of a stat per row."""
    index: dict[str, Path] = {}
    for folder in folders:
        if folder.is_dir():
            for entry in sorted(folder.iterdir()):
                if entry.suffix.lower() == suffix and entry.name not in index:
                    index[entry.name] = entry
    return index


def _chosen(labels: Sequence[str] | None, default: Sequence[str], known: Sequence[str], dataset: str) -> tuple:
    chosen = tuple(labels) if labels else tuple(default)
    unknown = [f for f in chosen if f not in known]
    if unknown:
        raise DataError(f"{dataset}: labels {unknown} are not findings of this dataset; choose from {list(known)}")
    if len(set(chosen)) != len(chosen):
        raise DataError(f"{dataset}: labels list a finding twice: {list(chosen)}")
    return chosen


# ------------------------------------------------------------------------------------------------------ readers


def read_aptos(path: str | Path) -> Manifest:
    """APTOS 2019 Blindness Detection (Kaggle): ``train.csv`` (id_code, diagnosis 0-4) and
    ``train_images/<id_code>.png``. Grades 0 no DR, 1 mild, 2 moderate, 3 severe, 4 proliferative DR: an ordinal
    multiclass task (quadratic-weighted kappa is reported). ``test.csv`` has no labels and is not read. APTOS publishes
    no patient ids: each image is its own patient, so both eyes of one person may sit in different splits (stated in
    the record); there is no published labelled split, so all rows are split by the study's fractions.
    """
    root = _folder(path, "APTOS 2019", "train.csv and train_images/")
    table = root / "train.csv"
    frame = _read_table(table, ["id_code", "diagnosis"])
    flags = _Flags()
    labels = np.zeros(len(frame), dtype=np.int64)
    for i, (code, grade) in enumerate(zip(frame["id_code"], frame["diagnosis"])):
        k = _class_index(grade, len(APTOS_GRADES))
        if k is None:
            flags(i, "label outside the task", f"diagnosis {grade!r} is not a grade 0-4")
        else:
            labels[i] = k
    codes = [c.strip() for c in frame["id_code"]]
    return _manifest(
        name="aptos2019", root=root, task=Task("multiclass", APTOS_GRADES, ordinal=True),
        paths=[root / "train_images" / f"{c}.png" for c in codes], labels=labels, patients=codes,
        sex=[""] * len(codes), ages=[""] * len(codes), splits=[""] * len(codes),
        where=[f"train.csv line {_line(i)} (id_code {c})" for i, c in enumerate(codes)], ids=codes,
        notes={"format": "aptos2019", "patient_key": "id_code (APTOS publishes no patient id; each image its own)",
               "patients_known": False},
        description=("APTOS 2019 diabetic retinopathy grades 0-4 (Kaggle), train.csv; no patient ids or demographics "
                     "are published, so each image is its own patient and sex/age are unknown."),
        problems=flags)


def _chexpert_path(root: Path, value: str) -> Path:
    """CheXpert's Path column starts with the release folder ("CheXpert-v1.0-small/train/..."); drop it."""
    parts = PurePosixPath(value.strip()).parts
    if parts and (parts[0] == root.name or parts[0].lower().startswith("chexpert-v1.0")):
        parts = parts[1:]
    return root.joinpath(*parts)


def read_chexpert(path: str | Path, *, findings: Sequence[str] | None = None, uncertain: str = "zeros") -> Manifest:
    """CheXpert (Irvin et al. 2019): ``train.csv`` and optionally ``valid.csv`` in the release folder
    (``CheXpert-v1.0-small/``), columns Path, Sex, Age and the 14 findings; images at Path.

    Multilabel over ``findings`` (default: the five competition findings); uncertain and blank by the module
    docstring's policy. valid.csv (radiologist-labelled) is the published validation split; test is carved from
    train.csv by patient. Patient: the ``patientNNNNN`` folder in Path.
    """
    root = _folder(path, "CheXpert", "train.csv")
    chosen = _chosen(findings, CHEXPERT_COMPETITION, CHEXPERT_FINDINGS, "CheXpert")
    parts = [("train.csv", "train")] + ([("valid.csv", "val")] if (root / "valid.csv").is_file() else [])
    flags, frames, blocks, start = _Flags(), [], [], 0
    for name, split in parts:
        frame = _read_table(root / name, ["Path", "Sex", "Age", *chosen])
        frames.append(frame.assign(_split=split, _where=[f"{name} line {_line(i)}" for i in range(len(frame))]))
        blocks.append(_findings(frame, chosen, uncertain, name, start, flags))  # [n, L]
        start += len(frame)
    table = pd.concat(frames, ignore_index=True)
    values = table["Path"].tolist()
    patients = [m.group(1) if (m := re.search(r"(patient\d+)", v)) else v for v in values]
    return _manifest(
        name="chexpert", root=root, task=Task("multilabel", chosen),
        paths=[_chexpert_path(root, v) for v in values], labels=np.concatenate(blocks),
        patients=patients, sex=table["Sex"].tolist(), ages=table["Age"].tolist(), splits=table["_split"].tolist(),
        where=[f"{w} ({v})" for w, v in zip(table["_where"], values)], ids=values,
        notes={"format": "chexpert", "findings": list(chosen), "uncertain_policy": f"-1 -> {uncertain}",
               "blank_policy": "blank -> 0 (not mentioned)", "tables": [p[0] for p in parts]},
        description=(f"CheXpert ({', '.join(p[0] for p in parts)}), findings {', '.join(chosen)}; uncertain (-1) "
                     f"-> {UNCERTAIN_POLICIES[uncertain]:g}, blank -> 0."),
        problems=flags)


def read_nih(path: str | Path, *, findings: Sequence[str] | None = None) -> Manifest:
    """NIH ChestX-ray14 (Wang et al. 2017): ``Data_Entry_2017.csv`` (or ``Data_Entry_2017_v2020.csv``) with Image
    Index, Finding Labels ("Effusion|Mass" or "No Finding"), Patient ID, Patient Age, Patient Gender; images in
    ``images/`` or ``images_001/images/`` ... ``images_012/images/``; the official split in ``test_list.txt`` and
    ``train_val_list.txt`` when present (else every row is split by patient).

    Multilabel over ``findings`` (default all 14). A finding name outside the 14 is a flagged row. Ages above 120
    (the 2017 table has a few, e.g. 414) become unknown and are counted.
    """
    root = _folder(path, "NIH ChestX-ray14", "Data_Entry_2017.csv")
    table_path = _first_existing(root, ["Data_Entry_2017.csv", "Data_Entry_2017_v2020.csv"], "NIH ChestX-ray14")
    chosen = _chosen(findings, NIH_FINDINGS, NIH_FINDINGS, "NIH ChestX-ray14")
    frame = _read_table(table_path, ["Image Index", "Finding Labels", "Patient ID", "Patient Age", "Patient Gender"])
    flags = _Flags()
    column = {f: j for j, f in enumerate(chosen)}
    labels = np.zeros((len(frame), len(chosen)), dtype=np.float32)
    for i, text in enumerate(frame["Finding Labels"]):
        names = [n.strip() for n in text.split("|") if n.strip()]
        unknown = [n for n in names if n not in NIH_FINDINGS and n != "No Finding"]
        if not names or unknown:
            flags(i, "label outside the task", f"Finding Labels {text!r}: {unknown or 'blank'} not among the 14 "
                                               "findings or 'No Finding'")
        for n in names:
            if n in column:
                labels[i, column[n]] = 1.0
    folders = [root / "images"] + sorted(root.glob("images_*/images")) + sorted(root.glob("images_*"))
    index = _index_images(folders, ".png")
    names = [n.strip() for n in frame["Image Index"]]
    split_of = {}
    for list_name, split in (("train_val_list.txt", "train"), ("test_list.txt", "test")):
        if (root / list_name).is_file():
            split_of.update({line.strip(): split for line in (root / list_name).read_text().splitlines()
                             if line.strip()})
    return _manifest(
        name="nih-chestxray14", root=root, task=Task("multilabel", chosen),
        paths=[index.get(n, root / "images" / n) for n in names], labels=labels,
        patients=[p.strip() for p in frame["Patient ID"]], sex=frame["Patient Gender"].tolist(),
        ages=frame["Patient Age"].tolist(), splits=[split_of.get(n, "") for n in names],
        where=[f"{table_path.name} line {_line(i)} ({n})" for i, n in enumerate(names)], ids=names,
        notes={"format": "nih-chestxray14", "table": table_path.name, "findings": list(chosen),
               "official_split_lists": sorted({"train_val_list.txt", "test_list.txt"} & {p.name for p in
                                                                                         root.glob("*.txt")})},
        description=(f"NIH ChestX-ray14 ({table_path.name}), findings {', '.join(chosen)}; "
                     f"{'official test_list.txt split' if split_of else 'no split lists found: split by patient'}."),
        problems=flags)


def read_mimic(path: str | Path, *, findings: Sequence[str] | None = None, uncertain: str = "zeros") -> Manifest:
    """MIMIC-CXR-JPG (Johnson et al. 2019), the PhysioNet folder ``mimic-cxr-jpg/2.x.0/``:
    ``mimic-cxr-2.0.0-metadata.csv[.gz]`` (dicom_id, subject_id, study_id, ...), ``mimic-cxr-2.0.0-chexpert.csv[.gz]``
    (subject_id, study_id, the 14 CheXpert findings per study), optionally ``mimic-cxr-2.0.0-split.csv[.gz]``
    (dicom_id, split = train / validate / test) and ``patients.csv[.gz]`` from MIMIC-IV (subject_id, gender,
    anchor_age: sex and age; without it they are unknown). Images at
    ``files/p<first two digits>/p<subject_id>/s<study_id>/<dicom_id>.jpg``.

    Labels are per study and apply to each of its images; an image whose study has no label row is flagged.
    Uncertain and blank by the module docstring's policy; patient: subject_id.
    """
    root = _folder(path, "MIMIC-CXR-JPG", "mimic-cxr-2.0.0-metadata.csv.gz")
    chosen = _chosen(findings, CHEXPERT_COMPETITION, CHEXPERT_FINDINGS, "MIMIC-CXR-JPG")
    stem = "mimic-cxr-2.0.0-"
    meta_path = _first_existing(root, [f"{stem}metadata.csv.gz", f"{stem}metadata.csv"], "MIMIC-CXR-JPG")
    label_path = _first_existing(root, [f"{stem}chexpert.csv.gz", f"{stem}chexpert.csv"], "MIMIC-CXR-JPG")
    meta = _read_table(meta_path, ["dicom_id", "subject_id", "study_id"])
    studies = _read_table(label_path, ["subject_id", "study_id", *chosen])
    flags, study_flags = _Flags(), _Flags()
    study_labels = _findings(studies, chosen, uncertain, label_path.name, 0, study_flags)  # [S, L]
    bad_study = {row: detail for row, _, detail in reversed(study_flags)}  # first problem of each study
    row_of_study: dict[tuple[str, str], int] = {}
    repeated = set()
    for s, key in enumerate(zip(studies["subject_id"].str.strip(), studies["study_id"].str.strip())):
        if key in row_of_study:
            repeated.add(key)
        row_of_study.setdefault(key, s)
    split_of, sex_of, age_of = {}, {}, {}
    for name in (f"{stem}split.csv.gz", f"{stem}split.csv"):
        if (root / name).is_file():
            split_table = _read_table(root / name, ["dicom_id", "split"])
            split_of = dict(zip(split_table["dicom_id"].str.strip(), split_table["split"]))
            break
    for name in ("patients.csv.gz", "patients.csv"):
        if (root / name).is_file():
            people = _read_table(root / name, ["subject_id", "gender", "anchor_age"])
            sex_of = dict(zip(people["subject_id"].str.strip(), people["gender"]))
            age_of = dict(zip(people["subject_id"].str.strip(), people["anchor_age"]))
            break
    labels = np.zeros((len(meta), len(chosen)), dtype=np.float32)
    paths, patients, where = [], [], []
    for i, (dicom, subject, study) in enumerate(zip(meta["dicom_id"].str.strip(), meta["subject_id"].str.strip(),
                                                    meta["study_id"].str.strip())):
        paths.append(root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg")
        patients.append(subject)
        where.append(f"{meta_path.name} line {_line(i)} (dicom_id {dicom})")
        s = row_of_study.get((subject, study))
        if s is None:
            flags(i, "missing label", f"study s{study} of subject {subject} has no row in {label_path.name}")
        elif (subject, study) in repeated:
            flags(i, "duplicate id", f"study s{study} has several rows in {label_path.name}; keep one")
        elif s in bad_study:
            flags(i, "label outside the task", f"{bad_study[s]} (line {_line(s)}, study s{study})")
        else:
            labels[i] = study_labels[s]
    splits, bad_splits = parse_splits([split_of.get(d, "") for d in meta["dicom_id"].str.strip()])
    for row, value in bad_splits:
        flags(row, "unknown split", f"split {value!r} is not train, validate or test")
    return _manifest(
        name="mimic-cxr-jpg", root=root, task=Task("multilabel", chosen), paths=paths, labels=labels,
        patients=patients, sex=[sex_of.get(p, "") for p in patients], ages=[age_of.get(p, "") for p in patients],
        splits=splits, where=where, ids=meta["dicom_id"].str.strip().tolist(),
        notes={"format": "mimic-cxr-jpg", "findings": list(chosen), "uncertain_policy": f"-1 -> {uncertain}",
               "blank_policy": "blank -> 0 (not mentioned)", "official_split": bool(split_of),
               "demographics": "patients.csv (MIMIC-IV)" if sex_of else "none (sex and age unknown)"},
        description=(f"MIMIC-CXR-JPG, findings {', '.join(chosen)}; uncertain (-1) -> "
                     f"{UNCERTAIN_POLICIES[uncertain]:g}, blank -> 0; labels per study."),
        problems=flags)


def read_ham10000(path: str | Path) -> Manifest:
    """HAM10000 (Tschandl et al. 2018): ``HAM10000_metadata.csv`` (lesion_id, image_id, dx, dx_type, age, sex, ...)
    and ``<image_id>.jpg`` in ``HAM10000_images_part_1/`` and ``HAM10000_images_part_2/`` (or one
    ``HAM10000_images/`` or ``images/`` folder, or beside the table).

    Seven nominal classes, dx in akiec, bcc, bkl, df, mel, nv, vasc (:data:`HAM10000_CLASSES`). HAM10000 has several
    images of one lesion and publishes no patient id, so the lesion is the unit that never crosses splits:
    patient_id = lesion_id. There is no published labelled split: lesions are split by the study's fractions.
    """
    root = _folder(path, "HAM10000", "HAM10000_metadata.csv")
    table_path = _first_existing(root, ["HAM10000_metadata.csv", "HAM10000_metadata"], "HAM10000")
    frame = _read_table(table_path, ["lesion_id", "image_id", "dx", "age", "sex"])
    classes = tuple(HAM10000_CLASSES)
    flags = _Flags()
    labels = np.zeros(len(frame), dtype=np.int64)
    for i, dx in enumerate(frame["dx"]):
        if dx.strip() in classes:
            labels[i] = classes.index(dx.strip())
        else:
            flags(i, "label outside the task", f"dx {dx!r} is not one of {', '.join(classes)}")
    folders = [root / "HAM10000_images_part_1", root / "HAM10000_images_part_2", root / "HAM10000_images",
               root / "images", root]
    index = _index_images(folders, ".jpg")
    ids = [v.strip() for v in frame["image_id"]]
    return _manifest(
        name="ham10000", root=root, task=Task("multiclass", classes), labels=labels,
        paths=[index.get(f"{i}.jpg", root / "HAM10000_images_part_1" / f"{i}.jpg") for i in ids],
        patients=[v.strip() for v in frame["lesion_id"]], sex=frame["sex"].tolist(), ages=frame["age"].tolist(),
        splits=[""] * len(ids), where=[f"{table_path.name} line {_line(i)} ({v})" for i, v in enumerate(ids)],
        ids=ids, notes={"format": "ham10000", "patient_key": "lesion_id (split by lesion)",
                        "classes": HAM10000_CLASSES},
        description="HAM10000 dermatoscopic images, 7 classes; split by lesion (lesion_id), sex and age from the table.",
        problems=flags)


def read_csv_table(path: str | Path, *, columns: Mapping[str, str], labels: Sequence[str],
                   task: TaskKind | None = None) -> Manifest:
    """A CSV the study describes: ``columns: {path: <image column>, patient:, sex:, age:, split:}`` (path required,
    the rest optional) and ``labels: [<label column>, ...]``.

    Image paths are relative to the CSV's folder (or absolute). One label column holds class indices 0, 1, ...:
    binary when the task is binary or (task unset) every value is 0 or 1, else multiclass with classes 0..max.
    Several label columns make a multilabel task, each column 0 or 1. Without a patient column each image is its
    own patient; the split column (train / val / validation / test, blank = let dpmed split) publishes a split.
    """
    table = Path(path).expanduser()
    if table.is_dir():
        raise DataError(f"{table} is a folder; for source 'csv' data.path names the CSV file itself")
    known = {"path", "patient", "sex", "age", "split"}
    unknown = sorted(set(columns) - known)
    if "path" not in columns or unknown:
        raise DataError(f"data.columns must name the image column as 'path' (and may name {sorted(known - {'path'})});"
                        f" got {dict(columns)}")
    if not labels:
        raise DataError("source 'csv' needs data.labels: the label column(s)")
    frame = _read_table(table, [columns["path"], *labels, *(columns[k] for k in sorted(columns) if k != "path")])
    kind: TaskKind = task or ("multilabel" if len(labels) > 1 else "binary")
    flags = _Flags()
    if kind == "multilabel":
        y = np.zeros((len(frame), len(labels)), dtype=np.float32)
        for j, col in enumerate(labels):
            for i, raw in enumerate(frame[col]):
                k = _class_index(raw, 2)
                if k is None:
                    flags(i, "label outside the task", f"{col} = {raw!r}; multilabel columns hold 0 or 1")
                else:
                    y[i, j] = k
        names = tuple(labels)
    else:
        if len(labels) != 1:
            raise DataError(f"task {kind} takes one label column, got {list(labels)}; use task: multilabel")
        raw_values = frame[labels[0]].tolist()
        parsed = [_class_index(v, 1 << 30) for v in raw_values]
        if task is None and any(p is not None and p > 1 for p in parsed):
            kind = "multiclass"
        count = 2 if kind == "binary" else max([p for p in parsed if p is not None], default=1) + 1
        y = np.zeros(len(frame), dtype=np.int64)
        for i, (raw, p) in enumerate(zip(raw_values, parsed)):
            if p is None or p >= count:
                flags(i, "label outside the task",
                      f"{labels[0]} = {raw!r}; a {kind} label is a class index 0{'/1' if kind == 'binary' else '..'}")
            else:
                y[i] = p
        names = tuple(f"class_{k}" for k in range(max(count, 2)))
    values = [v.strip() for v in frame[columns["path"]]]
    n = len(frame)
    splits = [""] * n
    if "split" in columns:
        splits, bad = parse_splits(frame[columns["split"]])
        for row, value in bad:
            flags(row, "unknown split", f"{columns['split']} = {value!r}; use train, val, test or leave it blank")
    return _manifest(
        name=table.stem, root=table.parent, task=Task(kind, names),
        paths=[Path(v) if Path(v).is_absolute() else table.parent / v for v in values], labels=y,
        patients=frame[columns["patient"]].str.strip().tolist() if "patient" in columns else values,
        sex=frame[columns["sex"]].tolist() if "sex" in columns else [""] * n,
        ages=frame[columns["age"]].tolist() if "age" in columns else [""] * n, splits=splits,
        where=[f"{table.name} line {_line(i)} ({v})" for i, v in enumerate(values)], ids=values,
        notes={"format": "csv", "columns": dict(columns), "labels": list(labels),
               "patients_known": "patient" in columns},
        description=f"Table {table.name}: {kind} labels from {', '.join(labels)}.", problems=flags)
