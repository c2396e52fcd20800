"""Datasets published as a table of images, other than chest X-rays: APTOS 2019, HAM10000, and a generic CSV whose
columns the study file names (the chest X-ray tables are in :mod:`dpmed.data.formats.chest_xray`).

Each reader turns its table into a :class:`~dpmed.data.manifest.Manifest` (no pixel is decoded here) with the shared
table reading of :mod:`dpmed.data.formats.table_reading`: rows whose label lies outside the task are flagged with
the CSV line (header = line 1) and the value, so the user can find them. A missing table or column stops at once with
the file and the column named. Image files that are missing or unreadable are found by :mod:`dpmed.data.assembly`,
which also splits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import get_args

import numpy as np

from dpmed.data.formats.table_reading import (Flags, class_index, csv_line, dataset_folder, first_existing,
                                              index_images, patient_column, read_table, table_manifest)
from dpmed.data.manifest import Manifest, parse_age, parse_sex, parse_splits
from dpmed.data.sample import Task, TaskKind
from dpmed.errors import DataError

__all__ = ["read_aptos", "read_ham10000", "read_csv_table", "APTOS_GRADES", "HAM10000_CLASSES"]

APTOS_GRADES = ("no DR", "mild", "moderate", "severe", "proliferative DR")
HAM10000_CLASSES = {"akiec": "actinic keratoses / intraepithelial carcinoma", "bcc": "basal cell carcinoma",
                    "bkl": "benign keratosis-like lesions", "df": "dermatofibroma", "mel": "melanoma",
                    "nv": "melanocytic nevi", "vasc": "vascular lesions"}


def read_aptos(path: str | Path) -> Manifest:
    """APTOS 2019 Blindness Detection (Kaggle): ``train.csv`` (id_code, diagnosis 0-4) and
    ``train_images/<id_code>.png``. Grades 0 no DR, 1 mild, 2 moderate, 3 severe, 4 proliferative DR: an ordinal
    multiclass task (quadratic-weighted kappa is reported). ``test.csv`` has no labels and is not read. APTOS publishes
    no patient ids: each image is its own patient, so both eyes of one person may sit in different splits (stated in
    the record); there is no published labelled split, so all rows are split by the study's fractions.
    """
    root = dataset_folder(path, "APTOS 2019", "train.csv and train_images/")
    table = root / "train.csv"
    frame = read_table(table, ["id_code", "diagnosis"])
    flags = Flags()
    labels = np.zeros(len(frame), dtype=np.int64)
    for i, (code, grade) in enumerate(zip(frame["id_code"], frame["diagnosis"])):
        k = class_index(grade, len(APTOS_GRADES))
        if k is None:
            flags(i, "label outside the task", f"diagnosis {grade!r} is not a grade 0-4")
        else:
            labels[i] = k
    codes = frame["id_code"].tolist()
    return table_manifest(
        name="aptos2019", root=root, task=Task("multiclass", APTOS_GRADES, ordinal=True),
        paths=[root / "train_images" / f"{c}.png" for c in codes], labels=labels, patients=codes,
        sex=[""] * len(codes), ages=[""] * len(codes), splits=[""] * len(codes),
        where=[f"train.csv line {csv_line(i, frame)} (id_code {c})" for i, c in enumerate(codes)], ids=codes,
        notes={"format": "aptos2019", "patient_key": "id_code (APTOS publishes no patient id; each image its own)",
               "patients_known": False},
        description=("APTOS 2019 diabetic retinopathy grades 0-4 (Kaggle), train.csv; no patient ids or demographics "
                     "are published, so each image is its own patient and sex/age are unknown."),
        problems=flags)


def read_ham10000(path: str | Path) -> Manifest:
    """HAM10000 (Tschandl et al. 2018): ``HAM10000_metadata.csv`` (lesion_id, image_id, dx, dx_type, age, sex, ...)
    and ``<image_id>.jpg`` in ``HAM10000_images_part_1/`` and ``HAM10000_images_part_2/`` (or one
    ``HAM10000_images/`` or ``images/`` folder, or beside the table).

    Seven nominal classes, dx in akiec, bcc, bkl, df, mel, nv, vasc (:data:`HAM10000_CLASSES`). HAM10000 has several
    images of one lesion and publishes no patient id, so the lesion is the unit that never crosses splits:
    patient_id = lesion_id. There is no published labelled split: lesions are split by the study's fractions.
    """
    root = dataset_folder(path, "HAM10000", "HAM10000_metadata.csv")
    table_path = first_existing(root, ["HAM10000_metadata.csv", "HAM10000_metadata"], "HAM10000")
    frame = read_table(table_path, ["lesion_id", "image_id", "dx", "age", "sex"])
    classes = tuple(HAM10000_CLASSES)
    flags = Flags()
    labels = np.zeros(len(frame), dtype=np.int64)
    for i, dx in enumerate(frame["dx"]):
        if dx in classes:
            labels[i] = classes.index(dx)
        else:
            flags(i, "label outside the task", f"dx {dx!r} is not one of {', '.join(classes)}")
    folders = [root / "HAM10000_images_part_1", root / "HAM10000_images_part_2", root / "HAM10000_images",
               root / "images", root]
    index = index_images(folders, ".jpg")
    ids = frame["image_id"].tolist()
    return table_manifest(
        name="ham10000", root=root, task=Task("multiclass", classes), labels=labels,
        paths=[index.get(f"{i}.jpg", root / "HAM10000_images_part_1" / f"{i}.jpg") for i in ids],
        patients=patient_column(frame, "lesion_id", table_path, "fill in each row's lesion_id (the published "
                                "table has one on every row), or remove those rows", unit="lesion"),
        sex=frame["sex"].tolist(), ages=frame["age"].tolist(),
        splits=[""] * len(ids), where=[f"{table_path.name} line {csv_line(i, frame)} ({v})" for i, v in enumerate(ids)],
        ids=ids, notes={"format": "ham10000", "classes": HAM10000_CLASSES,
                        # a person may have several lesions and the table names no person: the split keeps each
                        # lesion's images together, but the unit of privacy can only be the image
                        "patient_key": "lesion_id (split by lesion; no patient id is published)",
                        "patients_known": False},
        description=("HAM10000 dermatoscopic images, 7 classes; split by lesion (lesion_id), sex and age from the "
                     "table."),
        problems=flags)


def _image_path(root: Path, value: str) -> Path:
    """Where a table's image path points: relative to the table's folder ``root`` unless absolute. A path written on
    Windows ("images\\0001.png") is read with "\\" as the separator on Linux and macOS too, unless a file of that
    very name exists (a backslash is a legal character of a POSIX file name, and rare in one). os.path.exists, not
    Path.exists: a name the system cannot look up ("File name too long") is no file, not an error."""
    path = Path(value) if Path(value).is_absolute() else root / value
    if os.sep == "\\" or "\\" not in value or os.path.exists(path):
        return path
    posix = value.replace("\\", "/")
    return Path(posix) if Path(posix).is_absolute() else root / posix


def read_csv_table(path: str | Path, *, columns: Mapping[str, str], labels: Sequence[str],
                   task: TaskKind | None = None, classes: Sequence[str] | None = None,
                   name: str | None = None) -> Manifest:
    """A CSV the study describes: ``columns: {path: <image column>, patient:, sex:, age:, split:}`` (path required,
    the rest optional) and ``labels: [<label column>, ...]``.

    Image paths are relative to the CSV's folder (or absolute). One label column holds class indices 0, 1, ...:
    binary when the task is binary or (task unset) every value is 0 or 1, else multiclass with classes 0..max (so
    inferred, a class below the max that no row holds is refused as a likely typo; ``task: multiclass`` reads it).
    ``classes`` names them, class index k the k-th name (the report then says "pneumonia", not "class_1"; a row may
    hold the name itself, in any case, instead of its index), and so states their number: binary for two names
    unless the task says otherwise, a row whose index has no name is a label outside the task, and a name that no
    row's index reaches is refused. Without it they are class_0, ...
    ``name``: the dataset's name in the record and the report (default: the file's, "labels" for labels.csv).
    Several label columns make a multilabel task, each column 0 or 1, each named once. Without a patient column each
    image is its own patient; with one, a blank id is refused (the blank rows would be one patient). The split column
    (train / val / validation / test, as :data:`~dpmed.data.manifest.SPLIT_NAMES` spells them; blank = let dpmed
    split) publishes a split.
    """
    if task is not None and task not in get_args(TaskKind):    # a study file's schema checks it; the Python API not
        raise DataError(f"data.task {task!r} is no task kind: use binary, multiclass or multilabel, or leave it out "
                        "to infer it from the labels")
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
    repeated = sorted({c for c in labels if list(labels).count(c) > 1})
    if repeated:
        raise DataError(f"data.labels lists the column(s) {repeated} more than once ({list(labels)}); list each label "
                        "column once")
    if classes is not None:
        _check_class_names(classes, labels, task)
    frame = read_table(table, [columns["path"], *labels, *(columns[k] for k in sorted(columns) if k != "path")])
    named: TaskKind | None = None if classes is None else ("binary" if len(classes) == 2 else "multiclass")
    kind: TaskKind = task or named or ("multilabel" if len(labels) > 1 else "binary")
    flags = Flags()
    if kind == "multilabel":
        y: np.ndarray = np.zeros((len(frame), len(labels)), dtype=np.float32)
        for j, col in enumerate(labels):
            for i, raw in enumerate(frame[col]):
                k = class_index(raw, 2)
                if k is None:
                    flags(i, "label outside the task", f"{col} = {raw!r}; multilabel columns hold 0 or 1")
                else:
                    y[i, j] = k
        names = tuple(labels)
    else:
        if len(labels) != 1:
            raise DataError(f"task {kind} takes one label column, got {list(labels)}; use task: multilabel")
        raw_values = frame[labels[0]].tolist()
        parsed = [class_index(v, 1 << 30) for v in raw_values]
        if classes is not None:     # an export writes the class's name ("PNEUMONIA") as often as its index
            parsed = [_class_named(v, classes) if p is None else p for v, p in zip(raw_values, parsed)]
        if task is None and classes is None and any(p is not None and p > 1 for p in parsed):
            kind = "multiclass"
        count = (len(classes) if classes is not None else 2 if kind == "binary"
                 else max([p for p in parsed if p is not None], default=1) + 1)
        if task is None and kind == "multiclass" and classes is None:
            _refuse_classes_without_rows(parsed, count, labels[0], table, frame)
        if classes is not None:
            _refuse_names_without_rows(parsed, classes, labels[0], table)
        indices = "0/1" if kind == "binary" else "0.."
        named_as = "" if classes is None else f" (data.classes names {count}: {', '.join(classes)})"
        y = np.zeros(len(frame), dtype=np.int64)
        for i, (raw, p) in enumerate(zip(raw_values, parsed)):
            if p is None or p >= count:
                flags(i, "label outside the task",
                      f"{labels[0]} = {raw!r}; a {kind} label is a class index {indices}{named_as}")
            else:
                y[i] = p
        names = tuple(classes) if classes is not None else tuple(f"class_{k}" for k in range(max(count, 2)))
    values = frame[columns["path"]].tolist()
    for i in (i for i, v in enumerate(values) if not v):
        flags(i, "missing image", f"{columns['path']} is blank; fill in the image's path, or delete the row")
    n = len(frame)
    _refuse_unread_attributes(frame, columns, table)
    splits = np.full(n, "", dtype=str)
    if "split" in columns:
        splits, bad = parse_splits(frame[columns["split"]])
        for row, value in bad:
            flags(row, "unknown split", f"{columns['split']} = {value!r}; use train, val, test or leave it blank")
    return table_manifest(
        name=name or table.stem, root=table.parent,
        task=Task(kind, names, classes_from_data=kind != "multilabel" and classes is None),
        paths=[_image_path(table.parent, v) for v in values], labels=y,
        patients=patient_column(frame, columns["patient"], table, "fill in each row's patient id, or remove "
                                "'patient' from data.columns (each image is then its own patient)")
        if "patient" in columns else values,
        sex=frame[columns["sex"]].tolist() if "sex" in columns else [""] * n,
        ages=frame[columns["age"]].tolist() if "age" in columns else [""] * n, splits=splits,
        where=[f"{table.name} line {csv_line(i, frame)} ({v})" for i, v in enumerate(values)], ids=values,
        notes={"format": "csv", "columns": dict(columns), "labels": list(labels),
               **({} if classes is None else {"classes": list(classes)}),
               "patients_known": "patient" in columns},
        description=f"Table {table.name}: {kind} labels from {', '.join(labels)}.", problems=flags)


def _class_named(text: str, classes: Sequence[str]) -> int | None:
    """The index of the class ``text`` names, or None: spaces around it and case do not count ("Pneumonia " is
    PNEUMONIA, as exports write it) unless two names differ only in case; then the name must match exactly."""
    text = str(text).strip()
    folded = [name.casefold() for name in classes]
    if len(set(folded)) < len(folded):
        return list(classes).index(text) if text in classes else None
    return folded.index(text.casefold()) if text.casefold() in folded else None


def _check_class_names(classes: Sequence[str], labels: Sequence[str], task: TaskKind | None) -> None:
    """DataError, before the table is read, where ``data.classes`` cannot name the classes of the study's labels."""
    if len(labels) > 1 or task == "multilabel":
        raise DataError(f"data.classes names the classes of one label column; a multilabel task's classes are its "
                        f"label columns (data.labels: {list(labels)}): remove data.classes")
    blank = [i for i, name in enumerate(classes) if not str(name).strip()]
    repeated = sorted({c for c in classes if list(classes).count(c) > 1})
    if len(classes) < 2 or blank or repeated:
        raise DataError(f"data.classes {list(classes)} must name each class once, at least two, none blank: class "
                        "index k of the label column is the k-th name")
    if task == "binary" and len(classes) != 2:
        raise DataError(f"data.classes names {len(classes)} classes ({', '.join(classes)}), but task binary has two "
                        "(indices 0 and 1); name two, or set data.task: multiclass")


def _refuse_names_without_rows(parsed: list[int | None], classes: Sequence[str], column: str, table: Path) -> None:
    """A name of ``data.classes`` whose class index no row of the label column holds: the list does not match the
    column (a name too many, or indices that start at 1), and a class without images could not be evaluated."""
    held = {p for p in parsed if p is not None}
    empty = [k for k in range(len(classes)) if k not in held]
    if empty:
        shown = ", ".join(f"{k} ({classes[k]})" for k in empty)
        values = ", ".join(map(str, sorted(held)[:10])) + (", ..." if len(held) > 10 else "")
        raise DataError(f"{table}: data.classes names {len(classes)} classes for the class indices "
                        f"0..{len(classes) - 1} of column {column!r}, but no row holds index {shown} (the column "
                        f"holds {values or 'none'}); list one name per index the column holds, in index order")


def _refuse_unread_attributes(frame, columns: Mapping[str, str], table: Path) -> None:
    """DataError where the study names a sex or age column of which no filled-in value reads as one: a column of
    0/1 sex codes (which is which differs between publishers) or of ages written "45 years" would otherwise leave
    every image's attribute unknown, and the report would say the data record none. Single odd values stay unknown,
    as for any publisher's table (`parse_sex`, `parse_age`)."""
    for key, noun, unread, remedy in (
            ("sex", "a sex", lambda v: parse_sex(v) == "unknown", "write M/F or male/female"),
            ("age", "an age", lambda v: np.isnan(parse_age(v)[0]),
             "write ages in years (45, 45.5) or as DICOM does (045Y)")):
        if key not in columns:
            continue
        filled = [v for v in frame[columns[key]] if v]
        if filled and unread(filled).all():
            shown = ", ".join(repr(v[:20]) for v in list(dict.fromkeys(filled))[:4])
            raise DataError(f"{table}: no value of the {key} column {columns[key]!r} (data.columns.{key}) reads as "
                            f"{noun} (it holds {shown}, ...); {remedy}, or remove '{key}' from data.columns")


def _refuse_classes_without_rows(parsed: list[int | None], count: int, column: str, table: Path, frame) -> None:
    """Where the task was inferred as classes 0..max of the label column, a class index with no row is most likely
    a typo above it ("11" for "1" makes twelve classes, ten of them empty): refused, naming the rows above the gap,
    rather than trained and reported over classes that do not exist. ``task: multiclass`` states the classes."""
    empty = sorted(set(range(count)) - {p for p in parsed if p is not None})
    if not empty:
        return
    above = [(i, p) for i, p in enumerate(parsed) if p is not None and p > empty[0]]
    rows = ", ".join(f"line {csv_line(i, frame)}: {p}" for i, p in above[:5]) + (", ..." if len(above) > 5 else "")
    gaps = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
    raise DataError(f"{table}: the labels of {column!r} read as classes 0..{count - 1}, but no row holds class "
                    f"{gaps}; {len(above)} row(s) hold a class above it ({rows}). Correct the mistyped labels; if the "
                    "classes are meant as written, set data.task: multiclass")
