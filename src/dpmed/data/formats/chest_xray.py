"""Chest X-ray tables: CheXpert, NIH ChestX-ray14 and MIMIC-CXR-JPG, multilabel findings per radiograph.

Each reader turns its tables into a :class:`~dpmed.data.manifest.Manifest` (no pixel is decoded here), with the
shared table reading of :mod:`dpmed.data.formats.table_reading`; image files that are missing or unreadable are found
by :mod:`dpmed.data.assembly`, which also splits.

Uncertain and blank findings (CheXpert, MIMIC-CXR-JPG). The CheXpert labeller (Irvin et al. 2019) writes 1
(positive), 0 (negative), -1 (uncertain: "may represent pneumonia") or leaves the cell blank (not mentioned). dpmed's
policy, stated in every record: **blank -> 0** (a finding the report does not mention is taken as absent, the usual
reading), **-1 -> ``uncertain``**: ``zeros`` (U-Zeros, the default: a finding counts only when the report asserts
it) or ``ones`` (U-Ones, which Irvin et al. found better for atelectasis and edema). Any other value is a flagged row.

Views (CheXpert, MIMIC-CXR-JPG). Both hold lateral films beside the frontal ones, with the study's labels on each. By
default only frontal films are read where the table says which is which (CheXpert's Frontal/Lateral = Frontal,
MIMIC's ViewPosition PA or AP; a blank view is left out), as in the MIMIC pretraining of 003_9a91354dc2d7e2df.txt
(its 210,652 frontal images); ``views="all"`` reads every film. How many films a rule leaves out is a count of the
patients' images, so it goes to the terminal only, never into a record.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import numpy as np

from dpmed.data.formats.table_reading import (Flags, chosen_labels, csv_line, dataset_folder, first_existing,
                                              index_images, optional_file, patient_column, read_table,
                                              table_manifest, where_not_utf8)
from dpmed.data.manifest import Manifest, parse_splits
from dpmed.data.sample import Task
from dpmed.errors import DataError

if TYPE_CHECKING:   # pandas is imported where a table is read: the study file's schema imports the readers
    import pandas as pd

_log = logging.getLogger(__name__)

__all__ = ["read_chexpert", "read_nih", "read_mimic", "CHEXPERT_FINDINGS", "CHEXPERT_COMPETITION", "NIH_FINDINGS",
           "UNCERTAIN_POLICIES", "views_unnamed"]

CHEXPERT_FINDINGS = (
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices")
CHEXPERT_COMPETITION = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion")
"""The five findings of the CheXpert competition (Irvin et al. 2019): the default labels of CheXpert and MIMIC."""
NIH_FINDINGS = (
    "Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
    "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia")
UNCERTAIN_POLICIES = {"zeros": 0.0, "ones": 1.0}
_FINDING_VALUES = {"1": 1.0, "1.0": 1.0, "0": 0.0, "0.0": 0.0, "": 0.0}  # blank: not mentioned -> absent
_UNCERTAIN = {"-1", "-1.0"}


def _findings(frame: pd.DataFrame, findings: Sequence[str], uncertain: str, table: str, start: int,
              flag) -> np.ndarray:
    """CheXpert-labeller columns -> float32 [N, L] by the module docstring's policy; other values are flagged."""
    if uncertain not in UNCERTAIN_POLICIES:
        raise DataError(f"uncertain must be one of {sorted(UNCERTAIN_POLICIES)}, got {uncertain!r}")
    out = np.zeros((len(frame), len(findings)), dtype=np.float32)
    for j, name in enumerate(findings):
        for i, text in enumerate(frame[name].tolist()):
            if text in _FINDING_VALUES:
                out[i, j] = _FINDING_VALUES[text]
            elif text in _UNCERTAIN:
                out[i, j] = UNCERTAIN_POLICIES[uncertain]
            else:
                flag(start + i, "label outside the task",
                     f"{name} = {text!r} in {table}; the labeller's values are 1, 0, -1 or blank")
    return out


def _chexpert_path(root: Path, value: str) -> Path:
    """CheXpert's Path column starts with the release folder ("CheXpert-v1.0-small/train/..."); drop it."""
    parts = PurePosixPath(value).parts
    if parts and (parts[0] == root.name or parts[0].lower().startswith("chexpert-v1.0")):
        parts = parts[1:]
    return root.joinpath(*parts)


_NAMES_NO_VIEW = "names none)"    # the end of a table's views rule where the table names no film's view


def views_unnamed(rule: str) -> bool:
    """Whether ``rule``, a reader's ``views`` note (its tables' rules joined by "; "), says that no table names its
    films' views: every film is then read, and ``data.views: all`` reads what leaving it unset reads."""
    return all(part.endswith(_NAMES_NO_VIEW) for part in rule.split("; "))


def _views_kept(frame: pd.DataFrame, column: str, frontal: Sequence[str], views: str | None,
                table: Path) -> tuple[pd.DataFrame, str]:
    """(the rows of ``frame`` that ``views`` keeps, with their original index; the rule in words). ``views``: "all",
    "frontal" (``column`` in ``frontal``, case aside; DataError where the table has no such column), or None:
    frontal where the table has ``column``, else every row (module docstring)."""
    if views not in (None, "frontal", "all"):
        raise DataError(f"views must be frontal or all, got {views!r}")
    if column not in frame.columns:     # all reads what unset reads, and says so alike
        if views == "frontal":
            raise DataError(f"{table} has no {column!r} column, so data.views: frontal cannot tell its frontal films "
                            f"from lateral ones: add the column (the published table has it), or set data.views: all")
        return frame, f"every view ({table.name} {_NAMES_NO_VIEW}"
    if views == "all":
        return frame, "every view"
    keep = frame[column].str.upper().isin([v.upper() for v in frontal])
    if len(frame) and not keep.any():
        raise DataError(f"{table}: no film's {column} is {' or '.join(frontal)} (data.views reads frontal films only, "
                        f"by default where the table has that column): set data.views: all to read every film, or "
                        f"correct the column")
    if not keep.all():   # a count of the patients' films: the terminal only
        _log.info("%s: %d film(s) whose %s is not %s left out (data.views: all reads them)", table,
                  int((~keep).sum()), column, " or ".join(frontal))
    return frame[keep], f"frontal views only ({column} {' or '.join(frontal)})"


def read_chexpert(path: str | Path, *, findings: Sequence[str] | None = None, uncertain: str = "zeros",
                  views: str | None = None) -> Manifest:
    """CheXpert (Irvin et al. 2019): ``train.csv`` and optionally ``valid.csv`` in the release folder
    (``CheXpert-v1.0-small/``), columns Path, Sex, Age and the 14 findings; images at Path.

    Multilabel over ``findings`` (default: the five competition findings); uncertain and blank by the module
    docstring's policy; ``views`` as the module docstring says (the Frontal/Lateral column). valid.csv
    (radiologist-labelled) is the published validation split; test is carved from train.csv by patient. Patient:
    the ``patientNNNNN`` folder in Path (a row without one is flagged).
    """
    import pandas as pd

    root = dataset_folder(path, "CheXpert", "train.csv")
    chosen = chosen_labels(findings, CHEXPERT_COMPETITION, CHEXPERT_FINDINGS, "CheXpert")
    parts = [("train.csv", "train")] + ([("valid.csv", "val")] if optional_file(root / "valid.csv") else [])
    flags, frames, blocks, rules, start = Flags(), [], [], [], 0
    for name, split in parts:
        frame = read_table(root / name, ["Path", "Sex", "Age", *chosen])
        frame = frame.assign(_split=split, _where=[f"{name} line {csv_line(i, frame)}" for i in range(len(frame))])
        frame, rule = _views_kept(frame, "Frontal/Lateral", ["Frontal"], views, root / name)
        frame = frame.reset_index(drop=True)
        frames.append(frame)
        rules.append(rule)
        blocks.append(_findings(frame, chosen, uncertain, name, start, flags))  # [n, L]
        start += len(frame)
    rule = "; ".join(dict.fromkeys(rules))
    table = pd.concat(frames, ignore_index=True)
    values = table["Path"].tolist()
    patients = [m.group(1) if (m := re.search(r"(patient\d+)", v)) else v for v in values]
    for i, v in enumerate(values):
        if patients[i] == v:    # as its own patient it would be one unit of someone's several images: refused
            flags(i, "no patient", f"Path {v!r} has no patient<NNNNN> folder, which names each CheXpert image's "
                                   "patient; correct the path, or delete the row")
    return table_manifest(
        name="chexpert", root=root, task=Task("multilabel", chosen),
        paths=[_chexpert_path(root, v) for v in values], labels=np.concatenate(blocks),
        patients=patients, sex=table["Sex"].tolist(), ages=table["Age"].tolist(), splits=table["_split"].tolist(),
        where=[f"{w} ({v})" for w, v in zip(table["_where"], values)], ids=values,
        notes={"format": "chexpert", "findings": list(chosen), "uncertain_policy": f"-1 -> {uncertain}",
               "blank_policy": "blank -> 0 (not mentioned)", "tables": [p[0] for p in parts], "views": rule},
        description=(f"CheXpert ({', '.join(p[0] for p in parts)}), findings {', '.join(chosen)}; uncertain (-1) "
                     f"-> {UNCERTAIN_POLICIES[uncertain]:g}, blank -> 0; {rule}."),
        problems=flags)


def read_nih(path: str | Path, *, findings: Sequence[str] | None = None) -> Manifest:
    """NIH ChestX-ray14 (Wang et al. 2017): ``Data_Entry_2017.csv`` (or ``Data_Entry_2017_v2020.csv``) with Image
    Index, Finding Labels ("Effusion|Mass" or "No Finding"), Patient ID, Patient Age, Patient Gender; images in
    ``images/`` or ``images_001/images/`` ... ``images_012/images/``; the official split in ``test_list.txt`` and
    ``train_val_list.txt`` when present (else every row is split by patient).

    Multilabel over ``findings`` (default all 14). A finding name outside the 14 is a flagged row. Ages above 120
    (the 2017 table has a few, e.g. 414) become unknown and are counted.

    A list line naming an image that has no row in the table is refused when both lists are present (the release's
    two lists name every row of its table) and some row is in neither: the line is then most likely a typo of that
    row's image, and the row would silently lose its official split (divided with the training rows: a test image
    may be trained on). Otherwise (a table cut to a subset of the release, or one list only, which leaves rows out
    anyway) the lines are counted in the record (``split_list_lines_without_row``, private) and told to the user; never
    in the description, which study.yaml and the report carry: with public lists, the count gives the table's rows.
    """
    root = dataset_folder(path, "NIH ChestX-ray14", "Data_Entry_2017.csv")
    table_path = first_existing(root, ["Data_Entry_2017.csv", "Data_Entry_2017_v2020.csv"], "NIH ChestX-ray14")
    chosen = chosen_labels(findings, NIH_FINDINGS, NIH_FINDINGS, "NIH ChestX-ray14")
    frame = read_table(table_path, ["Image Index", "Finding Labels", "Patient ID", "Patient Age", "Patient Gender"])
    flags = Flags()
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
    index = index_images(folders, ".png")
    names = frame["Image Index"].tolist()
    # which lists are there (files), never which rows their lines name: a line can be a training patient's
    split_of, rows, no_row, lists = {}, set(names), [], []
    for list_name, split in (("train_val_list.txt", "train"), ("test_list.txt", "test")):
        if optional_file(root / list_name):
            lists.append(list_name)
            # utf-8-sig: a list saved by Notepad starts with a byte-order mark, which would be part of its first name
            try:
                text = (root / list_name).read_text(encoding="utf-8-sig")
            except UnicodeDecodeError as exc:
                raise DataError(f"{root / list_name} is not UTF-8 text{where_not_utf8(root / list_name)}; save it "
                                "as UTF-8") from exc
            lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
            split_of.update({image: split for _, image in lines if image})
            no_row += [(list_name, n, image) for n, image in lines if image and image not in rows]
    unlisted = ([f"line {csv_line(i, frame)}: {n}" for i, n in enumerate(names) if n not in split_of]
                if no_row and len(lists) == 2 else [])
    if unlisted:  # the docstring: a typo in a list would take its row out of the official split
        list_name, line, image = no_row[0]
        more = f" ({len(no_row) - 1} more list line(s) name no row)" if len(no_row) > 1 else ""
        raise DataError(f"{root / list_name} line {line}: {image} has no row in {table_path.name}{more}, and the "
                        f"table has {len(unlisted)} row(s) in neither split list ({', '.join(unlisted[:5])}"
                        f"{', ...' if len(unlisted) > 5 else ''}), which the official split would then not hold; "
                        f"correct the line to the Image Index it means, or add the row of {image} to {table_path.name}")
    if no_row:   # to the user (terminal, private log) only
        _log.warning("%s: %d split list line(s) name images without a row in %s (not read), e.g. %s", root,
                     len(no_row), table_path.name, ", ".join(f"{f} line {n}" for f, n, _ in no_row[:3]))
    return table_manifest(
        name="nih-chestxray14", root=root, task=Task("multilabel", chosen),
        paths=[index.get(n, root / "images" / n) for n in names], labels=labels,
        patients=patient_column(frame, "Patient ID", table_path, "fill in each row's Patient ID (the published "
                                "table has one on every row), or remove those rows"),
        sex=frame["Patient Gender"].tolist(),
        ages=frame["Patient Age"].tolist(), splits=[split_of.get(n, "") for n in names],
        where=[f"{table_path.name} line {csv_line(i, frame)} ({n})" for i, n in enumerate(names)], ids=names,
        notes={"format": "nih-chestxray14", "table": table_path.name, "findings": list(chosen),
               "official_split_lists": sorted(lists),
               # lines, not image names: the notes go to run.json, and a file's name can name its patient
               "split_list_lines_without_row": {"count": len(no_row),
                                                "first": [f"{f} line {n}" for f, n, _ in no_row[:5]]}},
        description=(f"NIH ChestX-ray14 ({table_path.name}), findings {', '.join(chosen)}; "
                     f"{'official split lists ' + ', '.join(lists) if lists else 'no split lists: split by patient'}."),
        problems=flags)


def _age_at_exam(anchor_age: str, anchor_year: str, study_date: str) -> str:
    """MIMIC's age at the exam (read_mimic): anchor_age plus the years from anchor_year to the StudyDate (YYYYMMDD);
    anchor_age as given where either date is missing or unreadable."""
    try:
        return str(int(anchor_age) + int(study_date[:4]) - int(anchor_year))
    except ValueError:
        return anchor_age


def read_mimic(path: str | Path, *, findings: Sequence[str] | None = None, uncertain: str = "zeros",
               views: str | None = None) -> Manifest:
    """MIMIC-CXR-JPG (Johnson et al. 2019), the PhysioNet folder ``mimic-cxr-jpg/2.x.0/``:
    ``mimic-cxr-2.0.0-metadata.csv[.gz]`` (dicom_id, subject_id, study_id, ...), ``mimic-cxr-2.0.0-chexpert.csv[.gz]``
    (subject_id, study_id, the 14 CheXpert findings per study), optionally ``mimic-cxr-2.0.0-split.csv[.gz]``
    (dicom_id, split = train / validate / test) and ``patients.csv[.gz]`` from MIMIC-IV (subject_id, gender,
    anchor_age: sex and age; without it they are unknown). anchor_age is the age in the patient's anchor_year; where
    patients.csv has anchor_year and the metadata StudyDate (both shifted alike per patient), an image's age is
    anchor_age + (the study's year - anchor_year), its age at the exam, as the fairness age bins need. Images at
    ``files/p<first two digits>/p<subject_id>/s<study_id>/<dicom_id>.jpg``.

    Labels are per study and apply to each of its images; an image whose study has no label row is flagged.
    Uncertain and blank by the module docstring's policy; ``views`` as it says (the metadata's ViewPosition);
    patient: subject_id.
    """
    root = dataset_folder(path, "MIMIC-CXR-JPG", "mimic-cxr-2.0.0-metadata.csv.gz")
    chosen = chosen_labels(findings, CHEXPERT_COMPETITION, CHEXPERT_FINDINGS, "MIMIC-CXR-JPG")
    stem = "mimic-cxr-2.0.0-"
    meta_path = first_existing(root, [f"{stem}metadata.csv.gz", f"{stem}metadata.csv"], "MIMIC-CXR-JPG")
    label_path = first_existing(root, [f"{stem}chexpert.csv.gz", f"{stem}chexpert.csv"], "MIMIC-CXR-JPG")
    meta, rule = _views_kept(read_table(meta_path, ["dicom_id", "subject_id", "study_id"]), "ViewPosition",
                             ["PA", "AP"], views, meta_path)
    studies = read_table(label_path, ["subject_id", "study_id", *chosen])
    flags, study_flags = Flags(), Flags()
    study_labels = _findings(studies, chosen, uncertain, label_path.name, 0, study_flags)  # [S, L]
    bad_study = {row: detail for row, _, detail in reversed(study_flags)}  # first problem of each study
    row_of_study: dict[tuple[str, str], int] = {}
    repeated = set()
    for row, key in enumerate(zip(studies["subject_id"], studies["study_id"])):
        if key in row_of_study:
            repeated.add(key)
        row_of_study.setdefault(key, row)
    split_of, sex_of, age_of, year_of, split_file, people_file, line_of = {}, {}, {}, {}, None, None, {}
    for name in (f"{stem}split.csv.gz", f"{stem}split.csv"):
        if optional_file(root / name):
            split_file = name
            split_table = read_table(root / name, ["dicom_id", "split"], header_only_ok=True)
            split_of = dict(zip(split_table["dicom_id"], split_table["split"]))
            break
    for name in ("patients.csv.gz", "patients.csv"):
        if optional_file(root / name):
            people_file = name
            people = read_table(root / name, ["subject_id", "gender", "anchor_age"], header_only_ok=True)
            line_of = {subject: f"{name} line {csv_line(i, people)} (subject_id {subject})"     # the last, as sex_of
                       for i, subject in enumerate(people["subject_id"])}
            sex_of = dict(zip(people["subject_id"], people["gender"]))
            age_of = dict(zip(people["subject_id"], people["anchor_age"]))
            if "anchor_year" in people.columns:
                year_of = dict(zip(people["subject_id"], people["anchor_year"]))
            break
    dates = meta["StudyDate"].tolist() if "StudyDate" in meta.columns else [""] * len(meta)
    labels = np.zeros((len(meta), len(chosen)), dtype=np.float32)
    paths, patients, where = [], [], []
    ids = zip(meta.index, meta["dicom_id"], meta["subject_id"], meta["study_id"])
    for i, (line, dicom, subject, study) in enumerate(ids):
        paths.append(root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg")
        patients.append(subject)
        where.append(f"{meta_path.name} line {csv_line(line, meta)} (dicom_id {dicom})")   # its line before views kept
        s = row_of_study.get((subject, study))
        if s is None:
            flags(i, "missing label", f"study s{study} of subject {subject} has no row in {label_path.name}")
        elif (subject, study) in repeated:
            flags(i, "duplicate label row", f"study s{study} has several rows in {label_path.name}; keep one")
        elif s in bad_study:
            flags(i, "label outside the task", f"{bad_study[s]} (line {csv_line(s, studies)}, study s{study})")
        else:
            labels[i] = study_labels[s]
    splits, bad_splits = parse_splits([split_of.get(d, "") for d in meta["dicom_id"]])
    for row, value in bad_splits:
        flags(row, "unknown split", f"split {value!r} is not train, validate or test")
    return table_manifest(
        name="mimic-cxr-jpg", root=root, task=Task("multilabel", chosen), paths=paths, labels=labels,
        patients=patients, sex=[sex_of.get(p, "") for p in patients],
        ages=[_age_at_exam(age_of.get(p, ""), year_of.get(p, ""), date) for p, date in zip(patients, dates)],
        splits=splits, where=where, ids=meta["dicom_id"].tolist(),
        notes={"format": "mimic-cxr-jpg", "findings": list(chosen), "uncertain_policy": f"-1 -> {uncertain}",
               # by the files found, never by their rows: a row can be a training patient's
               "blank_policy": "blank -> 0 (not mentioned)", "official_split": split_file is not None,
               "demographics": "patients.csv (MIMIC-IV)" if people_file else "none (sex and age unknown)",
               "views": rule},
        description=(f"MIMIC-CXR-JPG, findings {', '.join(chosen)}; uncertain (-1) -> "
                     f"{UNCERTAIN_POLICIES[uncertain]:g}, blank -> 0; labels per study; {rule}."),
        problems=flags, demographics_at=[line_of.get(p, "") for p in patients])
