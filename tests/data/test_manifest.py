"""How publishers' split names, sex codes and ages are read (`dpmed.data.manifest`): each reader passes its columns
through these, so a wrong entry here misplaces rows between train and test, or mislabels a fairness group, in every
layout at once. Expected values by hand."""

from __future__ import annotations

import math

import numpy as np

from dpmed.data.manifest import parse_age, parse_sex, parse_splits


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
