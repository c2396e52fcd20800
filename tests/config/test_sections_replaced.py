"""An override of a whole section replaces the study file's section, as YAML would; the keys the file gave there and
the new value lacks go back to their defaults, which is told, not done without a word. Before, --set
training={steps: 2} over the file's batch_size: 32 trained at the default 64, doubling q, and only `dpmed plan`'s table
showed it."""

from __future__ import annotations

import logging

import pytest

from dpmed.cli import main
from dpmed.config import load_study, parse_override

STUDY = """
name: s
training: {batch_size: 32, learning_rate: 0.05, lr_schedule: {kind: step, gamma: 0.5}}
evaluation: {explanations: {seed: 3}}
arms:
  - {name: base, mechanism: none}
  - {name: dp, mechanism: dp_sgd, target_epsilon: 4, delta: 1e-6}
"""


def _load(write_study, caplog, sets: list[str], text: str = STUDY):
    """The study with ``sets`` given as `dpmed run --set` gives them, in order, and the warnings told."""
    overrides, origins = {}, {}
    for given in sets:
        key, value = parse_override(given)
        overrides[key], origins[key] = value, f"--set {given}"
    path = write_study(text)
    with caplog.at_level(logging.WARNING):
        study = load_study(path, overrides, origins=origins)
    told = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("dpmed")]
    return study, told, path


def test_a_section_replaced_without_keys_the_file_gave_is_told_naming_them_and_the_way_to_set_one(write_study,
                                                                                                 caplog):
    study, told, path = _load(write_study, caplog, ["training={steps: 2}"])
    assert study.training.batch_size == 64 and study.training.steps == 2     # the semantics stay: replaced
    assert told == [f"--set training={{steps: 2}} (with study file {path}): replaces the study file's whole training "
                    "section, so the file's batch_size, learning_rate, lr_schedule are dropped (back to their "
                    "defaults); to change one key and keep the file's others, give that key alone, e.g. --set "
                    "training.steps=2"]


def test_an_override_given_in_python_is_told_as_an_override_not_a_set(write_study, caplog):
    path = write_study(STUDY)
    with caplog.at_level(logging.WARNING):
        load_study(path, {"training": {"batch_size": 32, "learning_rate": 0.05}})
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"override training={{'batch_size': 32, 'learning_rate': 0.05}} (with study file {path}): replaces the study "
        "file's whole training section, so the file's lr_schedule is dropped (back to its default); to change one "
        "key and keep the file's others, give that key alone, e.g. the override {'training.batch_size': 32}"]


@pytest.mark.parametrize("sets, dropped", [
    # a later --set of a key inside the section gives it again: not told as dropped
    (["training={steps: 2}", "training.batch_size=32"], "learning_rate, lr_schedule are"),
    # inside a subsection both hold, the keys the new one lacks, by their dotted names
    (["training={batch_size: 32, learning_rate: 0.1, lr_schedule: {kind: step}}"], "lr_schedule.gamma is"),
    # an arm, a list's item named by its name as by its index: its keys are the file's too
    (["arms.dp={name: dp, mechanism: dp_sgd, target_epsilon: 2}"], "delta is"),
    (["arms.1={name: dp, mechanism: dp_sgd, target_epsilon: 2}"], "delta is"),
])
def test_the_keys_told_are_those_the_file_gave_and_no_override_gives_again(write_study, caplog, sets, dropped):
    _, told, _ = _load(write_study, caplog, sets)
    assert len(told) == 1 and f"so the file's {dropped} dropped" in told[0], told


def test_an_arm_replaced_is_told_with_a_key_it_changes_as_the_example(write_study, caplog):
    study, told, _ = _load(write_study, caplog, ["arms.dp={name: dp, mechanism: dp_sgd, target_epsilon: 2}"])
    assert study.arms[1].delta != 1e-6
    assert told[0].startswith("--set arms.dp={name: dp, mechanism: dp_sgd, target_epsilon: 2} (with study file ")
    assert "replaces the study file's whole arms.dp section" in told[0]
    assert told[0].endswith("e.g. --set arms.dp.target_epsilon=2")


def test_a_section_replaced_twice_is_told_once_by_the_override_applied_last(write_study, caplog):
    _, told, _ = _load(write_study, caplog, ["arms.dp={name: dp, mechanism: dp_sgd, target_epsilon: 2}",
                                             "arms.1={name: dp, mechanism: dp_sgd, target_epsilon: 3}"])
    dropped = [line for line in told if "replaces the study file's whole" in line]
    assert len(dropped) == 1 and dropped[0].startswith("--set arms.1=") and "delta is dropped" in dropped[0], told


@pytest.mark.parametrize("sets, earlier, later", [
    (["training.batch_size=16", "training={steps: 2}"], "training.batch_size=16", "training={steps: 2}"),
    (["training.lr_schedule.gamma=0.9", "training.lr_schedule={kind: step}"], "training.lr_schedule.gamma=0.9",
     "training.lr_schedule={kind: step}"),
    # one arm, by its name and by its index
    (["arms.dp.delta=1e-7", "arms.1={name: dp, mechanism: dp_sgd, target_epsilon: 2, delta: 1e-6}"],
     "arms.dp.delta=1e-7", "arms.1={name: dp, mechanism: dp_sgd, target_epsilon: 2, delta: 1e-6}"),
    (["arms.1={name: dp, mechanism: dp_sgd, target_epsilon: 2, delta: 1e-6}",
      "arms.dp={name: dp, mechanism: dp_sgd, target_epsilon: 3, delta: 1e-6}"],
     "arms.1={name: dp, mechanism: dp_sgd, target_epsilon: 2, delta: 1e-6}",
     "arms.dp={name: dp, mechanism: dp_sgd, target_epsilon: 3, delta: 1e-6}"),
])
def test_an_override_a_later_one_replaces_whole_is_told_as_changing_nothing(write_study, caplog, sets, earlier,
                                                                            later):
    """Overrides apply in order: before, --set training.batch_size=16 --set training={steps: 2} trained at the
    default batch size, and nothing said the first --set was lost (where the file gave no batch size, nothing at
    all was told)."""
    study, told, path = _load(write_study, caplog, sets, STUDY.replace("batch_size: 32, ", ""))
    assert study.training.batch_size == 64
    lost = [line for line in told if "changes nothing" in line]
    assert lost == [f"--set {earlier} (with study file {path}) changes nothing: --set {later}, given after it, "
                    f"replaces all of {later.partition('=')[0]}; give it after that one to change it there"]


@pytest.mark.parametrize("text, sets", [
    (STUDY, ["training={batch_size: 16, learning_rate: 0.1, lr_schedule: {kind: step, gamma: 0.9}, steps: 2}"]),
    (STUDY, ["training={steps: 2}", "training.batch_size=32", "training.learning_rate=0.05",
             "training.lr_schedule={kind: step, gamma: 0.5}"]),
    (STUDY, ["data={n_images: 80}"]),                                  # a section the file does not give
    (STUDY + "data: null\n", ["data={n_images: 80}"]),                 # ... or leaves null
    (STUDY, ["evaluation.explanations=null"]),                         # set to null: its defaults, as meant
    (STUDY, ["training.lr_schedule=null", "training.lr_schedule.kind=step"]),    # ... and a key set inside it
    (STUDY, ["arms=[{name: base, mechanism: none}]"]),                 # a list given whole
    (STUDY, ["training.batch_size=16", "training.lr_schedule.gamma=0.9"]),    # keys, not sections
    # a section inside one an earlier override replaced: the file had no say there
    (STUDY, ["training={batch_size: 32, learning_rate: 0.05, lr_schedule: {kind: step, gamma: 0.5}}",
             "training.lr_schedule={kind: cosine}"]),
])
def test_a_section_replaced_with_every_key_the_file_gave_or_none_given_is_not_told(write_study, caplog, text, sets):
    _, told, _ = _load(write_study, caplog, sets, text)
    assert told == []


def test_dpmed_plan_tells_it_once_before_the_plan(write_study, tmp_path, capsys):
    path = write_study(STUDY.replace("  - {name: dp, mechanism: dp_sgd, target_epsilon: 4, delta: 1e-6}\n", "")
                       + "data: {n_images: 80, image_size: 16}\n")
    assert main(["plan", str(path), "--out", str(tmp_path / "out"), "--no-estimate",
                 "--set", "training={steps: 2, batch_size: 16}", "--set", "training.learning_rate=0.05"]) == 0
    told = [line for line in capsys.readouterr().err.splitlines() if "replaces the study file's whole" in line]
    assert len(told) == 1 and "so the file's lr_schedule is dropped" in told[0], told


@pytest.mark.parametrize("sets, option, key", [
    (["training.device=cuda", "training={steps: 2, device: cuda}"], ["--device", "cpu"], "training.device"),
    (["data.path=a.npz", "data={source: medmnist, path: a.npz}"], ["--data-path", "b.npz"], "data.path"),
])
def test_device_and_data_path_hold_over_a_set_of_their_section_given_before_them_too(write_study, tmp_path,
                                                                                      monkeypatch, sets, option, key):
    """--device and --data-path apply after every --set. Before: a --set of their key took the options' place among
    the overrides, so a later --set of the section replaced what the option gave, without a word (--device cpu
    trained on the GPU)."""
    import dpmed.config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.npz").write_bytes(b"")
    (tmp_path / "b.npz").write_bytes(b"")
    loaded, load = [], dpmed.config.load_study
    monkeypatch.setattr(dpmed.config, "load_study", lambda *a, **k: loaded.append(load(*a, **k)) or loaded[-1])
    path = write_study(STUDY)
    main(["plan", str(path), "--out", str(tmp_path / "out"), "--no-estimate", *[f"--set={s}" for s in sets], *option])
    section, _, name = key.partition(".")
    given = str(tmp_path / option[1]) if key == "data.path" else option[1]     # a path read from the current folder
    assert str(getattr(getattr(loaded[0], section), name)) == given


@pytest.mark.parametrize("option, key", [(["--device", "cpu"], "training.device"),
                                         (["--data-path", "b.npz"], "data.path")])
def test_a_set_of_the_key_device_or_data_path_gives_is_told_it_changes_nothing(write_study, tmp_path, monkeypatch,
                                                                               caplog, option, key):
    """--device and --data-path apply after every --set: a --set of their own key was dropped without a word, and
    one it held a mistake in (--set training.device=gpu) was never checked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.npz").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        main(["plan", str(write_study(STUDY)), "--out", str(tmp_path / "out"), "--no-estimate",
              f"--set={key}=gpu", *option])
    said = [r.getMessage() for r in caplog.records if "changes nothing" in r.getMessage()]
    assert said == [f"--set {key}=gpu changes nothing: {' '.join(option)} gives {key}; leave out one of them"], said


@pytest.mark.parametrize("option, key, section", [
    (["--device", "cpu"], "training.device", "training={steps: 2, device: gpu}"),
    (["--data-path", "b.npz"], "data.path", "data={source: medmnist, path: gpu}"),
])
def test_a_set_of_a_section_that_gives_the_key_device_or_data_path_gives_is_told_it_changes_nothing_there(
        write_study, tmp_path, monkeypatch, caplog, option, key, section):
    """As a --set of the key itself: training={device: gpu} --device cpu dropped the section's device without a word.
    A section that gives no such key, or one a later --set of the key replaced there, is not told of."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.npz").write_bytes(b"")

    def told(*sets: str) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            main(["plan", str(write_study(STUDY)), "--out", str(tmp_path / "out"), "--no-estimate",
                  *(f"--set={text}" for text in sets), *option])
        return [r.getMessage() for r in caplog.records if "changes nothing" in r.getMessage()]

    given = " ".join(option)
    assert told(section) == [f"--set {section}: the {key} it gives changes nothing: {given} gives {key}; leave it "
                             "out of one of them"]
    assert told(section.replace(", device: gpu", "").replace(", path: gpu", "")) == []
    assert told(section, f"{key}=gpu") == [f"--set {key}=gpu changes nothing: {given} gives {key}; leave out one "
                                           "of them"]
