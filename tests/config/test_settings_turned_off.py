"""A setting that another setting turns off is told when the study file is read: it was ignored without a word, and
the user thought it changed the runs. Warned, not refused: a study file is no mistake to stop for, and removing the
key trains no finished run again."""

from __future__ import annotations

import logging

import pytest

from dpmed.config import load_study

ARMS = "arms: [{name: base, mechanism: none}]\n"


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("dpmed")]


@pytest.mark.parametrize("text, key, because", [
    ("training: {reference_batch_size: 512}", "training.reference_batch_size", "lr_scaling is none"),
    ("training: {lr_schedule: {kind: cosine, milestones: [0.3, 0.6]}}", "training.lr_schedule.milestones",
     "kind is cosine"),
    ("training: {lr_schedule: {gamma: 0.5}}", "training.lr_schedule.gamma", "kind is constant"),
    ("data: {preprocessing: {aspect: crop}}", "data.preprocessing.aspect", "generates square images"),
    ("data: {source: random_processes, preprocessing: {aspect: stretch}}", "data.preprocessing.aspect",
     "generates square images"),
    ("data: {source: aptos, path: ., split: {official: false}}", "data.split.official", "publishes no split"),
    ("data: {source: ham10000, path: ., split: {shared_patients: keep}}", "data.split.shared_patients",
     "publishes no split"),
    ("data: {source: csv, path: t.csv, columns: {path: file}, split: {official: true}}", "data.split.official",
     "a csv without columns.split"),
    ("data: {source: folders, path: ., split: {official: false, shared_patients: keep}}",
     "data.split.shared_patients", "official is false"),
    ("pretrain: {public: a public set, data: {source: random_processes}, training: {reference_batch_size: 8}}",
     "pretrain.training.reference_batch_size", "lr_scaling is none"),
    # no size to reach: every image keeps its stored size, and the crop is made only on the way to one
    ("data: {source: medmnist, path: t.csv, preprocessing: {aspect: crop}}", "data.preprocessing.aspect",
     "image_size is unset"),
    ("evaluation: {fairness: {attributes: [sex], age_bins: [0, 50]}}", "evaluation.fairness.age_bins",
     "attributes leaves out age"),
])
def test_a_setting_another_setting_turns_off_is_warned_of_naming_both(write_study, caplog, text, key, because):
    write_study("", name="t.csv")
    path = write_study(f"name: s\n{text}\n{ARMS}")
    with caplog.at_level(logging.WARNING):
        load_study(path)
    said = _warnings(caplog)
    assert len(said) == 1, said
    assert said[0].startswith(f"study file {path}: {key} changes nothing") and because in said[0], said[0]
    # a training setting turned off is none of a run's settings, and a finished run's data are matched by content:
    # a run that finished with it is the run without it (tests/config/test_settings_the_data_turn_off.py resumes one);
    # an evaluation setting changed evaluates finished runs again (`dpmed.resumption`)
    keep = ("finished runs are evaluated again without it, not retrained" if key.startswith("evaluation.") else
            "runs that finished with it are the same runs without it")
    assert f"remove it ({keep})" in said[0], said[0]


@pytest.mark.parametrize("key, value", [("training.lr_schedule.milestones", [0.2]),
                                        ("training.lr_schedule", {"milestones": [0.2]})])
def test_a_setting_given_with_set_is_warned_of_as_the_option_s(write_study, caplog, key, value):
    """The warning named the study file alone, and asked to remove from it a key it does not hold."""
    path = write_study(f"name: s\n{ARMS}")
    with caplog.at_level(logging.WARNING):
        load_study(path, {key: value}, origins={key: f"--set {key}=..."})
    said = _warnings(caplog)
    assert len(said) == 1, said
    assert said[0].startswith(f"--set {key}=... (with study file {path}): training.lr_schedule.milestones changes "
                              "nothing"), said[0]


@pytest.mark.parametrize("text", [
    "training: {reference_batch_size: 512, lr_scaling: sqrt}",
    "training: {lr_schedule: {kind: step, milestones: [0.3, 0.6], gamma: 0.5}}",
    "training: {lr_schedule: {kind: cosine}, lr_scaling: linear}",
    "data: {source: medmnist, path: t.csv, image_size: 64, preprocessing: {aspect: crop}}",
    # resized to the study's images where it sets no size of its own
    "pretrain: {public: a public set, data: {source: medmnist, path: t.csv, preprocessing: {aspect: crop}}}",
    "evaluation: {fairness: {attributes: [age], age_bins: [0, 50]}}",
    "data: {source: folders, path: ., split: {official: false}}",
    "data: {source: folders, path: ., split: {shared_patients: keep}}",
    "data: {source: csv, path: t.csv, columns: {path: file, split: s}, split: {official: false}}",
    "data: {source: aptos, path: ., split: {val_fraction: 0.2}}",
])
def test_a_setting_that_is_read_is_not_warned_of(write_study, caplog, text):
    write_study("", name="t.csv")
    with caplog.at_level(logging.WARNING):
        load_study(write_study(f"name: s\n{text}\n{ARMS}"))
    assert _warnings(caplog) == []


def test_a_study_built_in_python_is_told_too_and_a_loaded_one_once(write_study, caplog):
    """Only load_study told: a Study built in Python (``Study.model_validate``) and passed to run_study, which checks
    it with check_study, had a setting another turns off ignored without a word. A loaded Study is told once, when
    its file is read."""
    from dpmed import Study
    from dpmed.config import check_study

    built = Study.model_validate({"name": "s", "training": {"lr_schedule": {"gamma": 0.5}},
                                  "arms": [{"name": "base", "mechanism": "none"}]})
    with caplog.at_level(logging.WARNING):
        check_study(built)
    assert _warnings(caplog) == [
        "training.lr_schedule.gamma changes nothing, as lr_schedule.kind is constant (set step to decay at the "
        "milestones); remove it from the Study passed to run_study (runs that finished with it are the same runs "
        "without it)"]
    path = write_study(f"name: s\ntraining: {{lr_schedule: {{gamma: 0.5}}}}\n{ARMS}")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        check_study(load_study(path))
    [said] = _warnings(caplog)
    assert said.startswith(f"study file {path}: training.lr_schedule.gamma changes nothing"), said


def test_a_setting_changed_in_python_on_a_loaded_study_is_told_as_the_study_s(write_study, caplog):
    """A Study read from a file and changed in Python with ``model_copy(update=...)`` (which validates nothing) was
    told nothing by check_study, which left a loaded Study's settings to load_study, and a key added in Python was to
    be removed from the study file, or from a --set that gave another value."""
    from dpmed.config import check_study

    path = write_study(f"name: s\ntraining: {{lr_schedule: {{gamma: 0.5}}}}\n{ARMS}")
    loaded = load_study(path)
    changed = loaded.model_copy(update={"training": loaded.training.model_copy(update={"reference_batch_size": 128})})
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        checked = check_study(changed)
    assert _warnings(caplog) == [
        "training.reference_batch_size changes nothing, as lr_scaling is none (set linear or sqrt to scale the "
        "learning rate by it); remove it from the Study passed to run_study (runs that finished with it are the same "
        "runs without it)"]
    # the file's own, told when it was read, is still the file's
    assert checked.removal("training.lr_schedule.gamma").startswith("remove it from the study file (")
    key = "training.lr_schedule.gamma"
    loaded = load_study(path, {key: 0.2}, origins={key: f"--set {key}=0.2"})
    schedule = loaded.training.lr_schedule.model_copy(update={"gamma": 0.3})
    changed = loaded.model_copy(update={"training": loaded.training.model_copy(update={"lr_schedule": schedule})})
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        checked = check_study(changed)
    [said] = _warnings(caplog)
    assert said.endswith("remove it from the Study passed to run_study (runs that finished with it are the same runs "
                         "without it)"), said
    assert checked.origin(key) is None
    assert check_study(loaded).origin(key) == f"--set {key}=0.2"


def test_a_setting_of_the_file_that_a_change_in_python_turns_off_is_told(write_study, caplog):
    """The file's reference_batch_size, read under lr_scaling linear, is turned off once lr_scaling is set to none in
    Python: load_study had nothing to tell, and check_study told only keys changed in Python, so it was ignored
    without a word. Told as the file's, which holds it; one the file still lets be read is not."""
    from dpmed.config import check_study

    path = write_study(f"name: s\ntraining: {{lr_scaling: linear, reference_batch_size: 128}}\n{ARMS}")
    loaded = load_study(path)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        check_study(loaded)
    assert _warnings(caplog) == []
    changed = loaded.model_copy(update={"training": loaded.training.model_copy(update={"lr_scaling": "none"})})
    with caplog.at_level(logging.WARNING):
        check_study(changed)
    assert _warnings(caplog) == [
        "training.reference_batch_size changes nothing, as lr_scaling is none (set linear or sqrt to scale the "
        "learning rate by it); remove it from the study file (runs that finished with it are the same runs without "
        "it)"]
