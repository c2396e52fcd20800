"""Sex and age values that dpmed reads as unknown, and patients with rows of two sexes: told to the user (terminal,
private log) where the data are assembled, never recorded in a shareable file (they are statistics of the private
rows, training rows included)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from dpmed.data import SplitPlan, load_dataset

# path, label, patient, sex, age, split: the CSV's lines 2.. in order
ROWS = [("img0.png", 0, "p1", "F", "abc", "train"),      # line 2: an age that is no number
        ("img1.png", 1, "p2", "M", "-5", "train"),       # line 3
        ("img2.png", 0, "p3", "X", "250", "train"),      # line 4: a sex code dpmed does not read, an age above 120
        ("img3.png", 1, "p4", "", "", "train"),          # line 5: blanks are unknown, not warned about
        ("img4.png", 0, "p5", "unknown", "unknown", "val"),
        ("img5.png", 1, "p6", "male", "45", "val"),
        ("img6.png", 0, "p7", "female", "045Y", "test"),
        ("img7.png", 1, "p8", "m", "61.5", "test"),
        ("img8.png", 1, "p1", "M", "33", "train")]       # line 10: p1 again, now male


def _csv(root: Path, write_image, rows=ROWS) -> Path:
    for i, row in enumerate(rows):
        write_image(root / row[0], level=90 + 10 * i)
    lines = ["file,label,pid,sex,age,fold"] + [",".join(map(str, row)) for row in rows]
    (root / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root / "labels.csv"


def _load_csv(table: Path):
    return load_dataset(source="csv", path=table, image_size=8, channels=1, seed=0, n_images=None,
                        columns={"path": "file", "patient": "pid", "sex": "sex", "age": "age", "split": "fold"},
                        labels=("label",))


def _never_shared(dataset, *values: str) -> None:
    """The reader's notes keep the count, but neither it nor the values reach what run.json holds."""
    shared = json.dumps(dataset.shareable_source())
    assert "implausible_ages_set_unknown" in dataset.source and "implausible_ages_set_unknown" not in shared
    assert not [v for v in values if f'"{v}"' in shared]


def test_csv_sex_and_age_values_read_as_unknown_are_told_privately_with_examples(tmp_path, write_image, caplog):
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        d = _load_csv(_csv(tmp_path, write_image))
    assert ("data: 3 age value(s) not a plausible age in years were read as unknown (e.g. labels.csv line 2 "
            "(img0.png): 'abc', labels.csv line 3 (img1.png): '-5', labels.csv line 4 (img2.png): '250'); "
            "fairness by age leaves them out") in caplog.text
    assert ("data: 1 sex value(s) not M/F/male/female were read as unknown (e.g. labels.csv line 4 (img2.png): 'X'); "
            "fairness by sex leaves them out") in caplog.text
    assert ("data: 1 patient id has rows of two different sexes (e.g. labels.csv line 2 (img0.png) and "
            "labels.csv line 10 (img8.png))") in caplog.text
    assert caplog.text.count("read as unknown") == 2     # the blank and "unknown" cells are not told
    assert np.isnan(d.train.age).sum() == 4 and (d.train.sex == "unknown").sum() == 2
    _never_shared(d, "abc", "-5", "250", "X")


def test_csv_without_unread_values_tells_nothing(tmp_path, write_image, caplog):
    rows = [(path, label, pid, {"X": "F"}.get(sex, sex), age if age in ("", "45", "045Y", "61.5") else "70", split)
            for path, label, pid, sex, age, split in ROWS[:-1]]
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        _load_csv(_csv(tmp_path, write_image, rows))
    assert "read as unknown" not in caplog.text and "two different sexes" not in caplog.text


def test_folders_dicom_header_values_read_as_unknown_are_told_privately(tmp_path, caplog, write_dicom):
    """DICOM ages ("045Y", "006M") are ages; "250Y" is not plausible, sex "O" is not read, a blank age is unknown."""
    for k, cls in enumerate(("normal", "nodule")):
        for i in range(6):
            age = {(1, 3): "250Y", (0, 5): "", (0, 2): "006M"}.get((k, i), f"0{40 + i}Y")
            sex = "O" if (k, i) == (1, 1) else "MF"[i % 2]
            write_dicom(tmp_path / "cxr" / cls / f"{cls}{i}.dcm", np.arange(36).reshape(6, 6) + 10 * i + 100 * k,
                        patient=f"P{i % 4}", sex=sex, age=age, bits=(8, 8))
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        # split seed 1: at seed 0 none of the four patients draws validation (refused, not filled)
        d = load_dataset(source="folders", path=tmp_path / "cxr", image_size=8, channels=1, seed=0, n_images=None,
                         split=SplitPlan(val_fraction=0.25, test_fraction=0.25, seed=1))
    assert ("data: 1 age value(s) not a plausible age in years were read as unknown (e.g. nodule/nodule3.dcm: "
            "'250Y'); fairness by age leaves them out") in caplog.text
    assert ("data: 1 sex value(s) not M/F/male/female were read as unknown (e.g. nodule/nodule1.dcm: 'O'); "
            "fairness by sex leaves them out") in caplog.text
    assert "two different sexes" not in caplog.text
    ages = np.concatenate([s.age for s in (d.train, d.val, d.test)])
    assert np.isnan(ages).sum() == 2 and 0.5 in ages and 45.0 in ages
    _never_shared(d, "250Y", "O")
