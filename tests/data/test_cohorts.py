"""Cohorts of patients (`dpmed.data.cohorts`): the two parts of one draw are complementary and disjoint, whole
patients stay together, and a study file selects one with ``data.patients``."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.config.schema import DataConfig
from dpmed.data import read_dataset
from dpmed.data.cohorts import PatientSelection, patient_draws, select_patients
from dpmed.errors import DataError


def _patients(dataset) -> dict[str, set[str]]:
    return {name: set(getattr(dataset, name).patient_ids.tolist()) for name in ("train", "val", "test")}


def test_the_two_parts_of_a_draw_divide_every_split(phantom):
    first = select_patients(phantom, PatientSelection(fraction=0.3, part=0, seed=4))
    rest = select_patients(phantom, PatientSelection(fraction=0.3, part=1, seed=4))
    for name in ("train", "val", "test"):
        whole, a, b = (getattr(d, name) for d in (phantom, first, rest))
        assert len(a) + len(b) == len(whole)
        assert not set(a.patient_ids.tolist()) & set(b.patient_ids.tolist())
    share = len(set().union(*_patients(first).values())) / len(set().union(*_patients(phantom).values()))
    assert 0.25 < share < 0.35
    assert first.source["cohort"]["images"]["train"]["of"] == len(phantom.train)
    # what a shareable file may hold of it: the draw, never the counts (the "of" of a public cohort counts the
    # private one's images too)
    assert first.shareable_source()["cohort"] == {"fraction": 0.3, "part": 0, "seed": 4,
                                                  "description": first.source["cohort"]["description"],
                                                  "patients_known": phantom.patients_known}
    assert {k: v for k, v in first.source.items() if k != "cohort"} == dict(phantom.source)   # where the data came from
    assert rest.source["cohort"]["description"] == ("cohort 1 of a seeded patient draw (seed 4): 70% of the patients, "
                                                    "u >= 0.3")
    assert "30% of the patients, u < 0.3" in first.source["cohort"]["description"]


def test_another_seed_draws_other_patients_and_images_without_patient_ids_are_recorded_as_such(phantom):
    from dataclasses import replace

    seeds = [_patients(select_patients(phantom, PatientSelection(fraction=0.5, part=0, seed=s)))["train"]
             for s in (4, 5)]
    assert seeds[0] != seeds[1]
    anonymous = select_patients(replace(phantom, patients_known=False), PatientSelection(fraction=0.5, part=0))
    assert anonymous.source["cohort"]["patients_known"] is False   # a person's images may then be in both cohorts


def test_a_patient_keeps_all_of_their_images(phantom):
    """Every image of a selected patient is kept (the draw depends on the id alone)."""
    chosen = select_patients(phantom, PatientSelection(fraction=0.5, part=0, seed=0))
    kept = set(chosen.train.patient_ids.tolist())
    ids = phantom.train.patient_ids
    assert int(np.isin(ids, list(kept)).sum()) == len(chosen.train)


def test_draws_are_the_same_whatever_the_order_of_the_rows():
    ids = np.array(["a", "b", "c", "a", "d"])
    draws = patient_draws(ids, seed=3)
    assert draws[0] == draws[3] and np.all((0 <= draws) & (draws < 1))
    assert np.array_equal(patient_draws(ids[::-1], seed=3), draws[::-1])
    assert not np.array_equal(patient_draws(ids, seed=4), draws)


def test_data_patients_in_a_study_file_selects_the_cohort():
    config = DataConfig.model_validate({"source": "phantom", "n_images": 200, "image_size": 16,
                                        "patients": {"fraction": 0.5, "part": 1, "seed": 2}})
    dataset = read_dataset(config.to_request())
    whole = read_dataset(DataConfig.model_validate({"source": "phantom", "n_images": 200,
                                                    "image_size": 16}).to_request())
    assert len(dataset.train) < len(whole.train)
    assert dataset.source["cohort"]["part"] == 1


def test_an_empty_split_is_an_error(phantom):
    tiny = select_patients(phantom, PatientSelection(fraction=0.5, part=0, seed=0))
    with pytest.raises(DataError, match="leaves the .* split"):
        # at most a handful of patients per split: a 0.1 % cohort empties a split
        select_patients(tiny, PatientSelection(fraction=0.001, part=0, seed=0))
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\), got 1\.0"):
        PatientSelection(fraction=1.0, part=0)


def _two_hospitals(root, write_image, n=40):
    """A Kermany-like release (train and test folders, patient keys in the names) of n patients per class."""
    for k in range(n):
        write_image(root / "train" / "PNEUMONIA" / f"person{k}_bacteria_{k}.jpeg", level=60 + k)
        write_image(root / "train" / "NORMAL" / f"IM-{k:04d}-0001.jpeg", level=100 + k)
        if k % 4 == 0:
            write_image(root / "test" / "PNEUMONIA" / f"person{500 + k}_virus_1.jpeg", level=70 + k)
            write_image(root / "test" / "NORMAL" / f"IM-{500 + k:04d}-0001.jpeg", level=110 + k)
    return root


def _cohort(root, part):
    config = DataConfig.model_validate({"source": "folders", "path": str(root), "image_size": 8, "channels": 1,
                                        "split": {"val_fraction": 0.25, "seed": 1},
                                        "patients": {"fraction": 0.5, "part": part, "seed": 2}})
    return read_dataset(config.to_request())


def test_a_cohorts_carved_split_does_not_depend_on_the_other_cohorts_patients(tmp_path, write_image):
    """The attack on a simulated second site: the public hospital's training set (and so its pretrained weights)
    must be the same whether or not one patient of the private hospital is in the release. Carving validation out of
    the whole release and then keeping a cohort let one private patient move public ones between splits."""
    root = _two_hospitals(tmp_path / "chest_xray", write_image)
    public = _patients(_cohort(root, 0))
    private = _cohort(root, 1)
    assert public["val"] and not set().union(*public.values()) & set().union(*_patients(private).values())
    for patient in sorted(_patients(private)["train"])[:6]:
        for f in root.glob(f"train/*/{patient}[_-]*"):
            f.rename(tmp_path / f.name)                         # the release without this private patient
        assert _patients(_cohort(root, 0)) == public, patient
        for f in tmp_path.glob("*.jpeg"):
            f.rename(root / "train" / ("PNEUMONIA" if f.name.startswith("person") else "NORMAL") / f.name)


def test_a_file_layouts_cohort_record_counts_the_rows_it_was_cut_from(tmp_path, write_image):
    """A file layout is cut to the cohort before its split is carved, so its record's counts are the rows of the
    whole release it was cut from, not the cut set again (which recorded every split as keeping all it had)."""
    root = _two_hospitals(tmp_path / "chest_xray", write_image)
    dataset = _cohort(root, 0)
    counts = dataset.source["cohort"]["images"]
    assert counts["rows_cut_from"] == 100                   # 80 training and 20 test images in the release
    assert [counts[name]["kept"] for name in ("train", "val", "test")] == [len(dataset.train), len(dataset.val),
                                                                           len(dataset.test)]
    assert 30 < sum(len(s) for s in (dataset.train, dataset.val, dataset.test)) < 70
    assert "images" not in dataset.shareable_source()["cohort"]


def test_a_patients_draw_is_the_stated_hash_so_another_site_can_recompute_its_cohort():
    """u = the first 8 bytes of sha256("<seed>:<patient id>") over 2^64 (the module docstring's formula)."""
    import hashlib

    expected = [int.from_bytes(hashlib.sha256(f"7:{p}".encode()).digest()[:8], "big") / 2 ** 64 for p in ("p1", "17")]
    assert patient_draws(np.array(["p1", "17"]), seed=7).tolist() == expected


def test_a_selection_names_one_of_the_two_parts_of_a_share_strictly_between_0_and_1():
    for bad in (dict(fraction=0.5, part=2), dict(fraction=0.0, part=0), dict(fraction=1.0, part=1)):
        with pytest.raises(ValueError, match="part must be|fraction must be"):
            PatientSelection(**bad)


def test_a_file_layouts_cohort_decodes_only_its_own_patients_images(tmp_path, write_image, monkeypatch):
    """The rows are cut to the cohort before anything is decoded: the other site's images are neither read (an
    unreadable one there would stop this site's study) nor held in memory."""
    import dpmed.data.cache as cache

    root = _two_hospitals(tmp_path / "chest_xray", write_image)
    decoded, real = [], cache.read_image
    monkeypatch.setattr(cache, "read_image", lambda path, **kw: decoded.append(path) or real(path, **kw))
    dataset = _cohort(root, 0)
    kept = sum(len(s) for s in (dataset.train, dataset.val, dataset.test))
    assert 30 < kept < 70 and len(decoded) == len(set(decoded)) == kept
