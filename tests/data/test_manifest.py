"""How publishers' split names, sex codes and ages are read (`dpmed.data.manifest`): each reader passes its columns
through these, so a wrong entry here misplaces rows between train and test, or mislabels a fairness group, in every
layout at once. Expected values by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpmed.data import Task
from dpmed.data.manifest import Manifest, describe_spellings, parse_age, parse_sex, parse_splits, patient_key
from dpmed.errors import DataError


def test_every_published_split_name_in_any_case_maps_to_its_split():
    """MIMIC's "validate", CheXpert's "valid", the Kaggle folders' "Training"/"Testing": a validation name read as
    train would train on published validation images; one read as test would score on them."""
    names = ["train", "Training", "val", "valid", "validate", "Validation", "TEST", "testing", " test ", "", "nan",
             "holdout"]
    splits, bad = parse_splits(names)
    assert splits.tolist() == ["train", "train", "val", "val", "val", "val", "test", "test", "test", "", "", ""]
    assert bad == [(11, "holdout")]


def test_sex_codes_map_to_two_groups_and_anything_else_is_unknown():
    codes = ["M", "f", "Male", "FEMALE", "man", "woman", "w", " m ", "O", "", "Unknown", None]
    assert parse_sex(codes).tolist() == ["male", "female", "male", "female", "male", "female", "female", "male",
                                         "unknown", "unknown", "unknown", "unknown"]


def test_ages_in_years_from_numbers_and_dicom_age_strings():
    """DICOM AS: "006M" is half a year, not six; weeks and days likewise; 0 and 120 are ages, 121 and text are not
    (counted as implausible), a blank or "unknown" is simply unknown."""
    values = ["045Y", "006M", "010W", "003D", "045y", "45.5Y", "0", "120", "121", "abc", "unknown", "", 52]
    ages, implausible = parse_age(values)
    expected = [45, 0.5, 70 / 365.25, 3 / 365.25, 45, 45.5, 0, 120, math.nan, math.nan, math.nan, math.nan, 52]
    np.testing.assert_allclose(ages, expected, rtol=1e-12)
    assert implausible == 2


def _manifest(n: int, **changes) -> Manifest:
    fields = dict(name="folder", root=Path("/data"), task=Task(kind="binary", label_names=("a", "b")),
                  paths=[Path(f"/data/{i}.png") for i in range(n)], labels=np.arange(n) % 2,
                  patient_ids=np.array([f"p{i}" for i in range(n)]), sex=np.full(n, "unknown"),
                  age=np.full(n, np.nan), splits=np.full(n, ""), where=np.array([f"{i}.png" for i in range(n)]),
                  ids=np.array([str(i) for i in range(n)]))
    return Manifest(**(fields | changes))


def test_a_subset_renumbers_its_problems_with_its_rows():
    manifest = _manifest(5, sex=np.array(["female", "male", "male", "female", "unknown"]),
                         age=np.array([20.0, 21.0, 22.0, 23.0, 24.0]),
                         splits=np.array(["train", "", "val", "test", ""]))
    manifest.flag(1, "unreadable image", "one")
    manifest.flag(3, "missing label", "three")
    manifest.flag(3, "another", "only the first problem of a row is kept")
    part = manifest.subset(np.array([3, 0, 4]))
    assert [p.name for p in part.paths] == ["3.png", "0.png", "4.png"]
    # every column follows the rows, in the order asked for: each image keeps its own label, patient and split
    assert part.labels.tolist() == [1, 0, 0] and part.patient_ids.tolist() == ["p3", "p0", "p4"]
    assert part.sex.tolist() == ["female", "female", "unknown"] and part.age.tolist() == [23.0, 20.0, 24.0]
    assert part.splits.tolist() == ["test", "train", ""] and part.where.tolist() == ["3.png", "0.png", "4.png"]
    assert part.ids.tolist() == ["3", "0", "4"]
    assert {row: p.kind for row, p in part.problems.items()} == {0: "missing label"}   # row 1 is not in the subset
    assert part.valid_rows().tolist() == [1, 2] and manifest.valid_rows().tolist() == [0, 2, 4]


def test_a_column_of_another_length_or_an_empty_layout_is_refused():
    with pytest.raises(ValueError, match="Manifest.labels has 2 rows for 3 paths"):
        _manifest(3, labels=np.array([0, 1]))
    with pytest.raises(ValueError, match="Manifest.age has 4 rows for 3 paths"):
        _manifest(3, age=np.zeros(4))
    with pytest.raises(DataError, match="lists no images; check that data.path"):
        _manifest(0)


def test_a_patient_key_drops_spaces_case_and_leading_zeros_only():
    """By hand: a number's leading zeros go, its inner and trailing zeros stay, letters lose their case."""
    assert [patient_key(v) for v in (" P007 ", "p07", "p7", "p70", "p700", "2007", "007", "0", "00", "A0B01")] == \
        ["p7", "p7", "p7", "p70", "p700", "2007", "7", "0", "0", "a0b1"]


def test_one_patient_written_several_ways_is_one_patient_written_one_way():
    """"PT1", "pt01" and "pt1" are one patient (`Manifest._write_each_patient_one_way`): written as the first in
    sorted order ("PT1"), so that no split and no privacy unit sees two people. "pt10" and "p1" are others, and a
    subset keeps the spellings, told only for the patients it keeps."""
    ids = np.array(["pt01", "pt10", "PT1", "p1", "pt1", "P01", "q"])
    manifest = _manifest(7, patient_ids=ids)
    assert manifest.patient_ids.tolist() == ["PT1", "pt10", "PT1", "P01", "PT1", "P01", "q"]
    assert manifest.spellings == {"P01": ("P01", "p1"), "PT1": ("PT1", "pt01", "pt1")}
    (line,) = describe_spellings(manifest, np.arange(7))
    assert "2 patient ids are written in ways that differ only in case or leading zeros ('P01' = 'p1'; " \
           "'PT1' = 'pt01' = 'pt1'): each taken as one patient, in one split and one privacy unit" in line
    part = manifest.subset(np.array([1, 3, 6]))
    assert part.patient_ids.tolist() == ["pt10", "P01", "q"]
    assert [s[:len("data: 1 patient id is written")] for s in describe_spellings(part, np.arange(3))] == \
        ["data: 1 patient id is written"]
    assert describe_spellings(part, np.array([0, 2])) == []
    assert describe_spellings(_manifest(3), np.arange(3)) == [] and _manifest(3).spellings == {}


def test_ids_that_name_no_patient_are_not_taken_for_one():
    """APTOS's image codes stand in for patients it does not publish: "a01b2" and "a1b02" are two images."""
    ids = np.array(["a01b2", "a1b02", "A01B2"])
    assert _manifest(3, patient_ids=ids, notes={"patients_known": False}).patient_ids.tolist() == ids.tolist()
    assert _manifest(3, patient_ids=ids).patient_ids.tolist() == ["A01B2"] * 3
