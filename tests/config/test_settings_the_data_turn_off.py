"""A setting the data turn off (a fraction of a split the layout publishes, the pointing game's tolerance on data
without lesion masks, age bins where no test image records an age) is found once the data are read, and told then:
before any training, by `prepare_study`, so by `dpmed plan` as by `dpmed run`, whose log keeps it. Never for a key
left at its default, nor for the quickstart study."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from dpmed import run_study
from dpmed.cli import main
from dpmed.config import load_study
from dpmed.study import prepare_study

ARMS = "arms: [{name: base, mechanism: none}]\n"
EVALUATION = "evaluation: {bootstrap_resamples: 10}\n"
SMALL = "training: {steps: 1, batch_size: 4}\n"


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "changes nothing" in
            r.getMessage()]


def _table(folder: Path, splits: list[str]) -> Path:
    """A CSV layout of one grey PNG per row, a patient each, with a split column holding ``splits`` (cycled over 60
    rows; "" for a row without a split) and no age column."""
    from PIL import Image

    rng = np.random.default_rng(0)
    (folder / "images").mkdir()
    rows = ["file,finding,patient,split"]
    for i in range(60):
        Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(folder / "images" / f"{i}.png")
        rows.append(f"images/{i}.png,{i // len(splits) % 2},p{i},{splits[i % len(splits)]}")
    (folder / "t.csv").write_text("\n".join(rows) + "\n")
    return folder / "t.csv"


def _told(write_study, tmp_path, caplog, data: str, evaluation: str = EVALUATION) -> list[str]:
    study = load_study(write_study(f"name: s\ndata: {{{data}}}\n{SMALL}{evaluation}{ARMS}"))
    with caplog.at_level(logging.WARNING):
        prepare_study(study, out=tmp_path / "out")
    return _warnings(caplog)


CSV = ("source: csv, path: t.csv, image_size: 16, labels: [finding], "
       "columns: {path: file, patient: patient, split: split}")


@pytest.mark.parametrize("splits, given, unread", [
    (["train"] * 4 + ["val", "test"], "{val_fraction: 0.2, test_fraction: 0.2, seed: 3}",
     ["data.split.val_fraction", "data.split.test_fraction", "data.split.seed"]),
    (["train"] * 4 + ["test"], "{val_fraction: 0.2, test_fraction: 0.2, seed: 3}", ["data.split.test_fraction"]),
    ([""], "{official: true, shared_patients: keep, seed: 3}",
     ["data.split.official", "data.split.shared_patients"]),
    (["train"] * 4 + ["val", "test"], "{official: false, val_fraction: 0.2, seed: 3}", []),
    (["train"] * 4 + [""], "{official: false, seed: 3}", ["data.split.official"]),
])
def test_a_split_setting_the_layout_turns_off_is_told_once_the_data_are_read(write_study, tmp_path, caplog, splits,
                                                                            given, unread):
    _table(tmp_path, splits)
    said = _told(write_study, tmp_path, caplog, f"{CSV}, split: {given}")
    assert [line.split(" ")[0] for line in said] == unread, said
    assert all("runs that finished with it are the same runs without it" in line for line in said), said


def test_a_kermany_layout_with_a_small_published_validation_names_val_fraction_once(write_study, tmp_path, caplog):
    """Kaggle's copy of the Kermany folders publishes a val/ of 16 images: its warning, the per-class one on so few
    images and the unread val_fraction each named data.split.val_fraction, the first two as if it were read. It is
    named once, as changing nothing; the others say how validation is made larger."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n, first in (("train", 20, 0), ("val", 3, 100), ("test", 5, 200)):   # a patient per image
        for label, name in (("NORMAL", "IM-{:04d}-0001.jpeg"), ("PNEUMONIA", "person{}_bacteria_1.jpeg")):
            (tmp_path / "chest_xray" / split / label).mkdir(parents=True)
            for i in range(first, first + n):
                Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)).save(
                    tmp_path / "chest_xray" / split / label / name.format(i))
    study = load_study(write_study(f"name: s\ndata: {{source: folders, path: chest_xray, image_size: 16, split: "
                                   f"{{val_fraction: 0.1}}}}\n{SMALL}{EVALUATION}{ARMS}"))
    with caplog.at_level(logging.WARNING):
        prepare_study(study, out=tmp_path / "out")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("publishes a validation split of only 6 images" in line for line in said), said
    assert [line for line in said if "val_fraction" in line] == [
        "data.split.val_fraction changes nothing, as chest_xray publishes its validation split, kept as published; "
        "remove it from the study file (runs that finished with it are the same runs without it)"], said


def test_mask_and_age_settings_are_told_where_the_data_hold_no_masks_or_ages(write_study, tmp_path, caplog):
    _table(tmp_path, ["train"] * 4 + ["val", "test"])
    said = _told(write_study, tmp_path, caplog, CSV,
                 "evaluation: {bootstrap_resamples: 10, fairness: {age_bins: [0, 50]}, "
                 "explanations: {n_images: 2, pointing_tolerance: 2}}\n")
    assert [line.split(" ")[0] for line in said] == ["evaluation.explanations.pointing_tolerance",
                                                     "evaluation.fairness.age_bins"], said
    assert "t has no lesion masks" in said[0] and "no test image of t records an age" in said[1], said
    assert all("evaluated again without it, not retrained" in line for line in said), said
    caplog.clear()
    said = _told(write_study, tmp_path, caplog, CSV, "evaluation: {bootstrap_resamples: 10, fairness: "
                                                     "{attributes: [age], age_bins: [0, 50]}}\n")
    assert [line.split(" ")[0] for line in said] == ["evaluation.fairness.attributes"], said


def test_the_phantom_s_masks_and_ages_read_those_settings(write_study, tmp_path, caplog):
    said = _told(write_study, tmp_path, caplog, "n_images: 80, image_size: 16",
                 "evaluation: {bootstrap_resamples: 10, fairness: {attributes: [age], age_bins: [0, 50]}, "
                 "explanations: {n_images: 2, pointing_tolerance: 2}}\n")
    assert said == []


def test_the_quickstart_study_is_told_of_no_setting_the_data_turn_off(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        prepare_study(load_study(), out=tmp_path / "out")
    assert _warnings(caplog) == []


@pytest.mark.parametrize("command", ["run", "plan"])
def test_dpmed_run_and_plan_tell_it_naming_the_set_that_gave_it(write_study, tmp_path, capsys, command):
    """The key is blamed on the --set that gave it, not on a study file that does not hold it: `dpmed run` validates
    the loaded study again (`check_study`), which keeps where its keys were given."""
    _table(tmp_path, ["train"] * 4 + ["val", "test"])
    path = write_study(f"name: s\ndata: {{{CSV}, split: {{seed: 3}}}}\n{SMALL}{EVALUATION}{ARMS}")
    assert main([command, str(path), "--out", str(tmp_path / "out"), "--no-progress" if command == "run" else
                 "--no-estimate", "--set", "data.split.val_fraction=0.3"]) == 0
    said = ("data.split.val_fraction changes nothing, as t publishes its validation split, kept as published; remove "
            "it from --set data.split.val_fraction=0.3 (")
    told = [line for line in capsys.readouterr().err.splitlines() if "changes nothing" in line]
    # only the keys given: run_study validates the loaded study again, and a default (the fairness attributes this
    # table records none of, the test fraction of its published test split) is no setting of the user's
    assert len(told) == 2 and said in told[0], told
    assert "data.split.seed changes nothing" in told[1] and "remove it from the study file (" in told[1], told
    if command == "run":
        assert said in (tmp_path / "out" / "s" / "private" / "dpmed.log").read_text()


def test_a_study_built_in_python_is_told_to_remove_it_from_the_study_not_from_a_file(tmp_path, caplog):
    """A Study built in Python has no study file: the warning asked to remove the key from one."""
    import yaml

    from dpmed import Study

    _table(tmp_path, ["train"] * 4 + ["val", "test"])
    given = yaml.safe_load(f"name: s\ndata: {{{CSV}, split: {{val_fraction: 0.3}}}}\n{SMALL}{EVALUATION}{ARMS}")
    given["data"]["path"] = str(tmp_path / "t.csv")
    with caplog.at_level(logging.WARNING):
        run_study(Study.model_validate(given), out=tmp_path / "out", progress=False)
    assert _warnings(caplog) == [
        "data.split.val_fraction changes nothing, as t publishes its validation split, kept as published; remove it "
        "from the Study passed to run_study (runs that finished with it are the same runs without it)"]


@pytest.mark.parametrize("sets, blamed", [
    (["data.split={seed: 3}", "data.split.val_fraction=0.3"], "data.split.val_fraction=0.3"),
    (["data.split.val_fraction=0.2", "data.split={val_fraction: 0.3}"], "data.split={val_fraction: 0.3}"),
])
def test_of_two_sets_that_give_the_key_the_one_applied_last_is_named(write_study, tmp_path, capsys, sets, blamed):
    """The --set that gave the key's value is the last that covers it: a section's --set before a key's own does not
    hold the key, and removing it would leave the warning as it was."""
    _table(tmp_path, ["train"] * 4 + ["val", "test"])
    path = write_study(f"name: s\ndata: {{{CSV}}}\n{SMALL}{EVALUATION}{ARMS}")
    assert main(["plan", str(path), "--out", str(tmp_path / "out"), "--no-estimate",
                 *[arg for given in sets for arg in ("--set", given)]]) == 0
    told = [line for line in capsys.readouterr().err.splitlines() if "data.split.val_fraction changes nothing" in line]
    assert len(told) == 1 and f"remove it from --set {blamed} (" in told[0], told


def test_a_run_finished_with_a_data_setting_turned_off_is_the_same_run_without_it(write_study, tmp_path):
    """What the warnings promise: a finished run's data are matched by their content, not by the data section's keys,
    so dropping a key the source never read (aspect on the phantom, which generates square images) retrains
    nothing."""
    def study(extra: str) -> Path:
        return write_study(f"name: s\ndata: {{n_images: 80, image_size: 16{extra}}}\n{SMALL}{EVALUATION}{ARMS}")

    first = run_study(study(", preprocessing: {aspect: crop}"), out=tmp_path / "out", progress=False)
    again = run_study(study(""), out=tmp_path / "out", progress=False)
    assert [r.run_id for r in first.records] == again.resumed == ["base_seed0"]
