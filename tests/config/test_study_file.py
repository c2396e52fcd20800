"""Study files are strict: every mistake fails before training, naming the file and the key."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from dpmed.config import load_study, parse_override, plan_runs, run_ids
from dpmed.errors import ConfigError
from dpmed.mechanisms import PlanContext

CONTEXT = PlanContext(images_per_patient=np.ones(140, dtype=np.int64), image_shape=(1, 16, 16))

GOOD = """
name: s
seeds: [0, 1]
training: {epochs: 2}
arms:
  - {name: base, mechanism: none}
  - {name: ldp, mechanism: pixel_laplace, scale: [0.5, 1]}
  - {name: dp, mechanism: dp_sgd, target_epsilon: [1, 8], delta: 1e-5}
"""


def test_good_study_expands_into_one_run_per_value_per_seed(write_study):
    study = load_study(write_study(GOOD))
    runs = plan_runs(study, CONTEXT)
    assert len(runs) == 2 * (1 + 2 + 2)
    ids = [r.run_id for r in runs]
    assert ids == run_ids(study) and len(set(ids)) == len(ids)
    assert "dp_eps8_C1_seed1" in ids and "ldp_b0.5_seed0" in ids and "base_seed0" in ids
    dp = next(r for r in runs if r.run_id == "dp_eps8_C1_seed1")
    assert dp.privacy.target_epsilon == 8.0 and dp.privacy.delta == 1e-5 and dp.seed == 1
    assert dp.swept_value("target_epsilon") == 8.0 and dp.label == "dp_eps8_C1" and dp.mechanism == "dp_sgd"


def test_exponent_floats_parse_as_numbers(write_study):
    """YAML 1.1 reads 1e-5 as a string; privacy parameters are written that way, so they must parse."""
    study = load_study(write_study(GOOD.replace("target_epsilon: [1, 8]", "target_epsilon: [1e6, 1E15]")))
    assert study.arms[2].target_epsilon == [1e6, 1e15]


@pytest.mark.parametrize("change, key, words", [
    (("epochs: 2", "epoch: 2"), "training.epoch", "did you mean 'epochs'"),
    (("epochs: 2", "epochs: two"), "training.epochs", "integer"),
    (("target_epsilon: [1, 8]", "target_epsilon: [0, 8]"), "arms[2].target_epsilon", "positive"),
    (("target_epsilon: [1, 8]", "target_epsilon: -3"), "arms[2].target_epsilon", "positive"),
    (("delta: 1e-5", "delta: 1.0"), "arms[2].delta", "must be below 1, got 1.0; lower it below 1"),
    (("scale: [0.5, 1]", "scale: [0.5, 0.5]"), "arms[1].scale", "twice"),
    (("mechanism: dp_sgd", "mechanism: dp-sgd"), "arms[2]", "dp_sgd"),
    (("seeds: [0, 1]", "seeds: []"), "seeds", "non-empty"),
    (("target_epsilon: [1, 8], delta", "noise_multiplier: 1.0, target_epsilon: [1, 8], delta"), "arms[2]",
     "exactly one of 'target_epsilon' and 'noise_multiplier'"),
    (("delta: 1e-5", "delta: 1e-5, noise: laplace, accountant: rdp"), "arms[2]", "does not analyse laplace"),
    (("delta: 1e-5", "delta: 1e-5, sampling: shuffled"), "arms[2].sampling", "'shuffle'"),
    (("scale: [0.5, 1]", "scale: 1, target_epsilon_image: 10"), "arms[1]", "exactly one of 'scale'"),
    (("name: base", "name: ldp"), "arms", "unique"),
    # each bound at its edge: one value past it trains nothing, divides by zero, never moves, or claims more
    (("seeds: [0, 1]", "seeds: [0, 0]"), "seeds", "distinct"),                       # two runs, one folder
    (("training: {epochs: 2}", "training: {steps: 0}"), "training.steps",
     "must be at least 1, got 0; raise it to 1 or more"),
    (("epochs: 2}", "epochs: 2, ema_decay: 1}"), "training.ema_decay", "must be below 1, got 1"),
    (("epochs: 2}", "epochs: 2, momentum: 1}"), "training.momentum", "must be below 1, got 1"),
    (("epochs: 2}", "epochs: 2, augmentation: {multiplicity: 0}}"), "training.augmentation.multiplicity",
     "must be at least 1, got 0"),
    # 10**30 attacked batches passed planning and looped for ever after the arm had trained
    (("delta: 1e-5", "delta: 1e-5, attack: {batches: 1000000000000000000000000000000}"), "arms[2].attack.batches",
     "must be at most 10000, got 1000000000000000000000000000000"),
    # 10**20 copies passed planning and failed inside numpy at the first step
    (("epochs: 2}", "epochs: 2, augmentation: {multiplicity: 100000000000000000000}}"),
     "training.augmentation.multiplicity", "must be at most 256, got 100000000000000000000"),
    (("epochs: 2}", "epochs: 2, augmentation: {crop_padding: -1}}"), "training.augmentation.crop_padding", ">= 0"),
    (("epochs: 2}", "epochs: 2, lr_schedule: {kind: cosine, warmup_fraction: 1}}"),
     "training.lr_schedule.warmup_fraction", "must be below 1, got 1"),
    (("epochs: 2}", "epochs: 2, lr_schedule: {kind: step, milestones: [0.5, 0.5]}}"),
     "training.lr_schedule.milestones", "increasing"),
    (("epochs: 2}", "epochs: 2, lr_schedule: {kind: step, gamma: 1.5}}"), "training.lr_schedule.gamma",
     "must be at most 1, got 1.5; lower it to 1 or less"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nsize_epsilon: 1.5"), "size_epsilon", "must be at most 1, got 1.5"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nprivacy_budget: {epsilon: .inf, delta: 1e-5}"), "privacy_budget.epsilon",
     "finite"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nprivacy_budget: {epsilon: 10, delta: 1}"), "privacy_budget.delta",
     "must be below 1, got 1"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {bootstrap_resamples: 5}"), "evaluation.bootstrap_resamples",
     "must be at least 10, got 5"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, image_size: 4}"), "data.image_size", "8"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, n_images: 10}"), "data.n_images", "20"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, split: {val_fraction: 0.5, test_fraction: 0.5}}"),
     "data.split", "must be below 1"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, patients: {fraction: 1, part: 0}}"),
     "data.patients.fraction", "must be below 1, got 1"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, path: 5}"), "data.path", "must be a path"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nsize_epsilon: 0"), "size_epsilon", "must be above 0, got 0; raise it above 0"),
    (("epochs: 2}", "epochs: 2, batch_size: 0}"), "training.batch_size", "must be at least 1, got 0"),  # q = 0
    (("epochs: 2}", "epochs: 2, physical_batch_size: 0}"), "training.physical_batch_size", "must be at least 1, got 0"),
    (("epochs: 2}", "epochs: 2, learning_rate: 0}"), "training.learning_rate", "must be above 0, got 0"),
    (("epochs: 2}", "epochs: 2, momentum: -0.1}"), "training.momentum", "must be at least 0, got -0.1"),
    (("epochs: 2}", "epochs: 2, weight_decay: -0.1}"), "training.weight_decay", "must be at least 0, got -0.1"),
    (("epochs: 2}", "epochs: 2, ema_decay: 0}"), "training.ema_decay", "must be above 0, got 0"),
    (("epochs: 2}", "epochs: 2, lr_schedule: {kind: step, gamma: 0}}"), "training.lr_schedule.gamma",
     "must be above 0, got 0"),
    (("epochs: 2}", "epochs: 2, lr_schedule: {kind: step, milestones: [0, 0.5]}}"),
     "training.lr_schedule.milestones", "increasing fractions of the run in (0, 1)"),
    (("epochs: 2}", "epochs: 2, lr_schedule: {kind: step, milestones: [0.5, 1]}}"),
     "training.lr_schedule.milestones", "increasing fractions of the run in (0, 1)"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {confidence: 1}"), "evaluation.confidence",
     "must be below 1, got 1"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {confidence: 0}"), "evaluation.confidence",
     "must be above 0, got 0"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {explanations: {n_images: 0}}"), "evaluation.explanations.n_images",
     "must be at least 1, got 0"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {explanations: {deletion_steps: 1}}"),   # a curve needs 2 points
     "evaluation.explanations.deletion_steps", "must be at least 2, got 1"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {explanations: {pointing_tolerance: -1}}"),
     "evaluation.explanations.pointing_tolerance", "must be at least 0, got -1"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {fairness: {attributes: []}}"), "evaluation.fairness.attributes",
     "at least 1 item"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {fairness: {age_bins: [30]}}"), "evaluation.fairness.age_bins",
     "at least 2 items"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {fairness: {age_bins: [0, 30, 30]}}"),
     "evaluation.fairness.age_bins", "increase"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {fairness: {age_bins: [-10, 30]}}"),
     "evaluation.fairness.age_bins", "start at 0 or above (a negative age is unknown)"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nprivacy_budget: {epsilon: 0, delta: 1e-5}"), "privacy_budget.epsilon",
     "must be above 0, got 0"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nprivacy_budget: {epsilon: 10, delta: 0}"), "privacy_budget.delta",
     "must be above 0, got 0"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, patients: {fraction: 0, part: 0}}"),
     "data.patients.fraction", "must be above 0, got 0"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, image_size: 1025}"), "data.image_size",
     "must be at most 1024, got 1025"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: folders, path: x, labels: []}"), "data.labels",
     "at least 1 item"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: csv, path: x, name: ''}"), "data.name", "at least 1 character"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, preprocessing: {normalize: {mean: [0, 0, 0, 0], "
                       "std: [1, 1, 1, 1]}}}"), "data.preprocessing.normalize.mean", "at most 3 items"),
    # a statement the report prints must say something
    (("seeds: [0, 1]", "seeds: [0, 1]\npretrain: {public: '', data: {source: phantom}}"), "pretrain.public",
     "at least 1 character"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nsettings_chosen_on: ''"), "settings_chosen_on", "at least 1 character"),
    # a sweepable privacy key: an empty sweep would plan no run of the arm, a repeated value the same run twice
    (("target_epsilon: [1, 8]", "target_epsilon: []"), "arms[2].target_epsilon", "must hold at least one value"),
    (("target_epsilon: [1, 8]", "target_epsilon: [8, 8]"), "arms[2].target_epsilon", "lists a value twice"),
    (("target_epsilon: [1, 8]", "target_epsilon: [1, .inf]"), "arms[2].target_epsilon",
     "must be a positive finite number, got inf"),
    # a number chosen from a fixed set: YAML's true and false are 1 and 0 to Python, and were taken for them
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, channels: true}"), "data.channels",
     "must be 1 (grey) or 3 (colour), got true; write 1 or 3"),
    (("seeds: [0, 1]", "seeds: [0, 1]\ndata: {source: phantom, patients: {fraction: 0.5, part: false}}"),
     "data.patients.part", "must be 0 or 1, got false; write 0 or 1"),
    # text: pydantic's "Input should be a valid string (got None)" said neither what was read nor what to write
    (("name: s\n", "name:\n"), "name", "must be text, got null (nothing after the key, or null or ~); write the text"),
    (("name: s\n", "name: 5\n"), "name", "must be text, got 5 (YAML reads it as a number); quote it: '5'"),
    (("{name: base,", "{name: [base],"), "arms[0].name", "must be text, got a list; write one text value"),
    # a list or a section where one number goes: pydantic's "Input should be a valid integer" said no more
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {bootstrap_resamples: [100]}"), "evaluation.bootstrap_resamples",
     "must be a whole number, got a list ([100]); write it in digits (e.g. 2)"),
    (("seeds: [0, 1]", "seeds: [0, 1]\nevaluation: {confidence: {a: 1}}"), "evaluation.confidence",
     "must be a number, got a section ({'a': 1}); write it in digits"),
    (("seeds: [0, 1]", "seeds: {a: 1}"), "seeds",
     "must be a list, got a section ({'a': 1}); write its items in brackets"),
    (("epochs: 2}", "epochs: 2, learning_rate: .nan}"), "training.learning_rate",
     "must be a finite number, got nan; write a number in digits (e.g. 0.5 or 1e-5)"),
])
def test_bad_values_name_file_and_key(write_study, change, key, words):
    path = write_study(GOOD.replace(*change))
    with pytest.raises(ConfigError) as info:
        load_study(path)
    message = str(info.value)
    assert str(path) in message and key in message and words in message


def test_a_study_without_arms_is_refused(write_study):
    with pytest.raises(ConfigError, match=r"arms: a study needs at least one arm"):
        load_study(write_study("name: s\narms: []\n"))


def test_the_defaults_every_eps_depends_on_are_the_documented_ones_and_are_written_out(write_study):
    """The README's defaults: fresh secret randomness and a count released at eps_N = 0.02, which is in every DP-SGD
    eps; and the study.yaml a study writes holds every value, defaults included (the resolved study)."""
    study = load_study(write_study("name: s\narms: [{name: a, mechanism: dp_sgd, target_epsilon: 8}]\n"))
    assert (study.privacy_randomness, study.size_epsilon, study.seeds) == ("secure", 0.02, [0])
    written = study.model_dump(mode="json")   # as `dpmed run` writes study.yaml
    assert written["privacy_randomness"] == "secure" and written["size_epsilon"] == 0.02 and written["seeds"] == [0]
    assert written["training"]["dp_engine"] == "dpmed" and written["arms"][0]["max_grad_norm"] == [1.0]


def test_the_other_documented_defaults_are_the_ones_a_bare_study_gets(write_study):
    """README.md's study file and recipe sections promise these defaults; a study that names none of them gets them
    (each line here is a sentence of the README: change a default and the README must change with it)."""
    study = load_study(write_study("name: s\narms: [{name: a, mechanism: dp_sgd, target_epsilon: 8}]\n"))
    arm, model, training, evaluation = study.arms[0], study.model, study.training, study.evaluation
    assert (arm.privacy_unit, arm.accountant, arm.noise, arm.sampling) == ("patient", "pld", "gaussian", "poisson")
    assert arm.delta is None and arm.max_grad_norm == [1.0] and arm.max_images_per_patient is None  # min(1e-5, ..)
    assert arm.attack is None and arm.audit is None
    assert (study.data.source, model.name, model.weights, model.trainable) == ("phantom", "small_cnn", None, "all")
    assert study.pretrain is None and study.privacy_budget is None and study.settings_chosen_on is None
    # the recipe's parts are each off; the length is `epochs: auto` (at least 10 epochs and 500 steps)
    assert (training.epochs, training.steps, training.augmentation, training.ema_decay) == ("auto", None, None, None)
    assert (training.lr_schedule.kind, training.lr_scaling) == ("constant", "none")
    assert (training.batch_size, training.physical_batch_size, training.optimizer, training.learning_rate) == (
        64, 128, "adam", 0.001)
    assert (training.device, training.threads) == ("auto", "auto")
    assert (evaluation.bootstrap_resamples, evaluation.confidence, evaluation.bootstrap_seed) == (1000, 0.95, 0)
    assert evaluation.training_metrics is False


def test_a_section_written_empty_gets_the_documented_defaults_of_its_keys(write_study, tmp_path):
    """A section a user opens without its keys (``augmentation: {}``, ``split: {}``) takes each key's default: the
    README's (split 0.15 / 0.15 / seed 0, 64 images explained, the age bins of 003), and the schema's (crops of S / 8
    px, 4 px at 32 px and at least 1; a step decay by 0.1 at half and three quarters of the run; 30 of 255 hash bits).
    A default that changed would retrain every study that relies on it differently, without a word."""
    (tmp_path / "xr").mkdir()
    study = load_study(write_study(
        "name: s\ndata: {source: folders, path: xr, split: {}}\n"
        "training: {augmentation: {}, lr_schedule: {kind: step}, optimizer: sgd, lr_scaling: linear}\n"
        "evaluation: {explanations: {}}\nprivacy_budget: {epsilon: 8, delta: 1.0e-5}\n"
        "pretrain: {public: a phantom, data: {source: phantom}}\n"
        "arms: [{name: a, mechanism: dp_sgd, target_epsilon: 4}]\n"))
    training, evaluation, split = study.training, study.evaluation, study.data.split
    augmentation, schedule = training.augmentation, training.lr_schedule
    assert (augmentation.multiplicity, augmentation.crop_padding, augmentation.flip) == (1, "auto", False)
    assert [augmentation.padding(size) for size in (32, 64, 4)] == [4, 8, 1]
    assert (schedule.warmup_fraction, schedule.milestones, schedule.gamma) == (0.0, [0.5, 0.75], 0.1)
    assert (training.momentum, training.weight_decay, training.reference_batch_size) == (0.9, 0.0, 256)
    assert training.scaled_learning_rate == pytest.approx(0.001 * 64 / 256)          # lr * B / reference
    assert training.model_copy(update={"lr_scaling": "sqrt"}).scaled_learning_rate == pytest.approx(0.001 * 0.5)
    assert (split.val_fraction, split.test_fraction, split.seed) == (0.15, 0.15, 0)
    assert (split.official, split.shared_patients) == (True, "drop_from_train")
    assert evaluation.fairness.age_bins == [0, 30, 60, 70, 80, 100]
    cam = evaluation.explanations
    assert (cam.method, cam.n_images, cam.seed, cam.deletion_steps, cam.pointing_tolerance) == (
        "gradcam", 64, 0, 16, 0.0)
    assert study.privacy_budget.accountant == "pld"
    assert (study.pretrain.seed, study.pretrain.near_duplicate_bits) == (0, 30)


def test_missing_data_path_is_an_error_before_training(write_study, tmp_path):
    path = write_study("name: s\ndata: {source: medmnist, path: nowhere.npz}\narms: [{name: a, mechanism: none}]\n")
    with pytest.raises(ConfigError, match="nowhere.npz does not exist.*--data-path"):
        load_study(path)


@pytest.mark.parametrize("source, asked", [("folders", "FOLDER"), ("nih", "FOLDER"), ("csv", "FILE"),
                                           ("medmnist", "FILE")])
def test_a_data_path_that_does_not_exist_asks_for_a_folder_where_the_source_reads_one(write_study, source, asked):
    """Before: "pass --data-path FILE" for a source whose data.path is a folder (folders, the published layouts)."""
    path = write_study(f"name: s\ndata: {{source: {source}, path: gone}}\narms: [{{name: a, mechanism: none}}]\n")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    assert str(info.value).endswith(f"fix the path in the file or pass --data-path {asked}")


def test_a_missing_relative_data_path_says_what_was_tried_and_from_which_folder(write_study, tmp_path, monkeypatch):
    """Before: the absolute path alone, without the path as written or the folder a relative one is read from."""
    path = write_study("name: s\ndata: {source: medmnist, path: ../d/x.npz}\narms: [{name: a, mechanism: none}]\n")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    assert str(info.value) == (
        f"study file {path}: data.path ../d/x.npz does not exist (tried {(tmp_path.parent / 'd' / 'x.npz').resolve()}: "
        f"a relative path in the study file is read from its folder, {tmp_path.resolve()}); fix the path in the file "
        "or pass --data-path FILE")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(ConfigError) as info:
        load_study(path, {"data.path": "y.npz"}, origins={"data.path": "--set data.path=y.npz"})
    assert str(info.value) == (
        f"--set data.path=y.npz: no such file or folder y.npz (tried {Path.cwd() / 'y.npz'}: a relative path given "
        f"outside the study file is read from the current folder, {Path.cwd()}); pass the dataset's file or folder")


@pytest.mark.parametrize("key, section", [("model.weights", "model"), ("pretrain.data.path", "pretrain")])
def test_a_missing_weights_file_or_public_data_names_the_study_file_or_the_option(write_study, tmp_path, monkeypatch,
                                                                                 key, section):
    """Before: "model.weights: no such file ..." alone, without the study file it was read from or the --set that
    gave it, where a missing data.path named both."""
    settings = {"model.weights": {"model.weights": "w.pt", "model.weights_source": "another study"},
                "pretrain.data.path": {"pretrain": {"public": "a second site", "data": {"source": "folders",
                                                                                       "path": "w.pt"}}}}[key]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    def said(folder: Path, rule: str) -> str:
        rule = f"a relative path {rule}, {folder.resolve()}"
        return {"model.weights": f"model.weights: no such file {(folder / 'w.pt').resolve()}; give the path of a "
                                 f"local state dict (dpmed downloads nothing; {rule})",
                "pretrain.data.path": f"pretrain.data.path: no such file or folder {(folder / 'w.pt').resolve()} "
                                      f"({rule})"}[key]
    in_file = write_study(GOOD + {"model": "model: {weights: w.pt, weights_source: another study}\n",
                                  "pretrain": "pretrain: {public: a second site, data: {source: folders, path: w.pt}}\n"
                                  }[section])
    with pytest.raises(ConfigError) as info:
        load_study(in_file)
    assert str(info.value) == f"study file {in_file}: {said(tmp_path, 'in the study file is read from its folder')}"
    path = write_study(GOOD)
    with pytest.raises(ConfigError) as info:
        load_study(path, settings, origins={section: f"--set {section}=..."} if section == "pretrain" else
                   {"model.weights": "--set model.weights=w.pt"})
    origin = "--set pretrain=..." if section == "pretrain" else "--set model.weights=w.pt"
    here = "given outside the study file is read from the current folder"
    assert str(info.value) == f"{origin}: {said(Path.cwd(), here)}"


@pytest.mark.parametrize("study_file", [True, False], ids=["study-file", "embedded-quickstart"])
def test_paths_given_with_set_are_read_from_the_current_folder_and_the_files_from_its_folder(
        write_study, tmp_path, monkeypatch, study_file):
    """Before: a relative path given with --set was read from the study file's folder, unlike --data-path: run from
    the project root, `--set model.weights=weights/w.pt` looked in configs/weights/, and with no study file in
    dpmed's installed package folder. A path written in the study file is still read from the file's folder."""
    (tmp_path / "files").mkdir()
    (tmp_path / "here").mkdir()
    for folder in ("files", "here"):
        (tmp_path / folder / "w.pt").write_bytes(b"x")
        (tmp_path / folder / "public").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    path = None
    if study_file:
        path = tmp_path / "files" / "s.yaml"
        path.write_text("name: s\nmodel: {weights: w.pt, weights_source: a second site}\n"
                        "pretrain: {public: a second site, data: {source: folders, path: public}}\n"
                        "data: {source: phantom}\narms: [{name: a, mechanism: none}]\n")
        study = load_study(path)
        assert (study.model.weights, study.pretrain.data.path) == (tmp_path / "files" / "w.pt",
                                                                   tmp_path / "files" / "public")
    study = load_study(path, {"model.weights": "w.pt", "model.weights_source": "a second site",
                              "pretrain": {"public": "a second site", "data": {"source": "folders", "path": "public"}}})
    assert (study.model.weights, study.pretrain.data.path) == (tmp_path / "here" / "w.pt", tmp_path / "here" / "public")
    if study_file:
        study = load_study(path, {"data.path": "public", "data.source": "folders"})
        assert (study.data.path, study.model.weights) == (tmp_path / "here" / "public", tmp_path / "files" / "w.pt")


def test_relative_data_path_resolves_against_the_study_file(write_study, tmp_path):
    (tmp_path / "d.npz").write_bytes(b"x")
    study = load_study(write_study("name: s\ndata: {source: medmnist, path: d.npz}\n"
                                   "arms: [{name: a, mechanism: none}]"))
    assert study.data.path == (tmp_path / "d.npz").resolve()


def test_overrides_are_validated_like_file_keys(write_study):
    path = write_study(GOOD)
    assert load_study(path, {"training.epochs": 7}).training.epochs == 7
    assert load_study(path, {"arms.2.target_epsilon": 3}).arms[2].target_epsilon == [3.0]
    with pytest.raises(ConfigError, match="training.epochs"):
        load_study(path, {"training.epochs": 0})


def test_not_yaml_and_missing_file(write_study, tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_study(write_study("name: [unclosed"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_study(tmp_path / "absent.yaml")


def test_a_yaml_error_is_one_line_that_places_it_in_the_file_not_in_a_unicode_string(write_study):
    """Before: five lines, each mark saying in "<unicode string>", line 5 instead of the study file."""
    path = write_study(GOOD.replace("arms:", "arms:\n  - name: a\n  bad: [\n"))
    with pytest.raises(ConfigError) as error:
        load_study(path)
    assert str(error.value) == (f"study file {path} is not valid YAML: line 7, column 3: expected <block end>, but "
                                "found '?' (while parsing a block collection at line 6, column 3); line the key "
                                "up with the other keys of its section (a list item, '- ...', goes under its key, "
                                "indented)")


@pytest.mark.parametrize("change, words", [
    ("name: s\nsize_epsilon: !!int abc", "not valid YAML: a value its tag cannot convert (ValueError: invalid "),
    ("name: s\nsize_epsilon: [" + "[" * 20000 + "]" * 20000 + "]", "not valid YAML: its lists or sections are nested "
                                                                     "too deep"),
    ("name: s\nName: t", "Name: unknown key (did you mean 'name'?); remove or rename it"),
    ("name: s\nnone: 1", "none: unknown key"),
    ("name: s\nevaluation: {Confidence: 0.9}", "evaluation.Confidence: unknown key (did you mean 'confidence'?)"),
])
def test_what_pyyaml_and_pydantic_raise_for_odd_files_is_a_message_naming_the_file(write_study, change, words):
    """Found by fuzzing: an impossible date or a bad explicit tag raised ValueError, KeyError or AttributeError, deep
    nesting RecursionError, and an unknown key spelt with a capital (or named like a mechanism) was dropped from its
    own location, so that the message builder met an empty one: each reached the user as an internal error."""
    path = write_study(GOOD.replace("name: s", change))
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value).startswith(f"study file {path}") and words in str(caught.value)


@pytest.mark.parametrize("number, problem", [
    ("1e-400", "underflows to 0 (the smallest positive double is about 5e-324)"),
    ("1.0e-400", "underflows to 0 (the smallest positive double is about 5e-324)"),
    ("-1e400", "overflows to infinity (the largest double is about 1.8e308)")])
def test_a_number_a_double_cannot_hold_is_refused_as_written_in_a_file_and_an_option(write_study, number, problem):
    """Before, size_epsilon: 1e-400 read as 0 and was refused as "got 0.0", 1e400 as "got inf": values the user never
    wrote. 0.0, 0e5 and .inf, in either case, are what they say, and reach the schema's own checks."""
    path = write_study(GOOD.replace("name: s", f"name: s\nsize_epsilon: {number}"))
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value) == (f"study file {path}, line 3, column 15: the number {number} {problem}; write a "
                                 "number within a double's range")
    with pytest.raises(ConfigError) as caught:
        parse_override(f"size_epsilon={number}")
    assert str(caught.value).startswith(f"--set 'size_epsilon={number}': the number {number} {problem}")
    assert [parse_override(f"x={text}")[1] for text in ("0.0", "0e5", "0E5", "-0.0e-3")] == [0.0] * 4
    assert [parse_override(f"x={text}")[1] for text in (".inf", ".INF", "-.Inf")] == [math.inf, math.inf, -math.inf]
    assert parse_override("x=1e308")[1] == 1e308


def test_a_date_is_text_in_a_study_file_and_an_override_key_with_brackets_is_told_its_spelling(write_study):
    """name: 2020-02-30 raised "day is out of range for month"; name: 2020-01-15 was a date the schema refused."""
    assert load_study(write_study(GOOD.replace("name: s", "name: 2020-02-30"))).name == "2020-02-30"
    assert parse_override("name=2020-01-15") == ("name", "2020-01-15")
    with pytest.raises(ConfigError, match=r"--set 'arms\[0\].name=x': a list item is named by its index after a dot: "
                                          r"write arms.0.name=\.\.\."):
        parse_override("arms[0].name=x")
    with pytest.raises(ConfigError, match=r"--set 'name=!!bool maybe': the value is not valid YAML \(a value its tag"):
        parse_override("name=!!bool maybe")


@pytest.mark.parametrize("seeds, expected", [("0", [0]), ("7", [7]), ("[3]", [3])])
def test_seeds_may_be_one_integer_as_a_swept_key_may_be_one_value(write_study, seeds, expected):
    """Before: seeds: 0 was refused as "not a valid list" while target_epsilon: 8 was read as [8]."""
    study = load_study(write_study(GOOD.replace("seeds: [0, 1]", f"seeds: {seeds}")))
    assert study.seeds == expected
    assert [r.seed for r in plan_runs(study, CONTEXT)] == expected * 5
    with pytest.raises(ConfigError, match=r"seeds: must be a list, got true; write its items in brackets \(\[a, b, "
                                          r"\.\.\.\]\)"):   # a bool is no seed
        load_study(write_study(GOOD.replace("seeds: [0, 1]", "seeds: true")))


def test_a_key_of_another_section_and_numeric_choices_get_useful_hints(write_study):
    """A real key in the wrong place was offered itself as the correction; numeric choices were listed as nothing."""
    text = GOOD.replace("seeds: [0, 1]", "seed: 3\ndata: {source: phantom, channels: 2}")
    with pytest.raises(ConfigError) as err:
        load_study(write_study(text.replace("{name: base, mechanism: none}",
                                            "{name: base, mechanism: none, max_grad_norm: 1}")))
    message = str(err.value)
    assert "data.channels: 2 is not one of 1, 3" in message
    for key in ("seed", "arms[0].max_grad_norm"):
        assert f"{key}: unknown key (valid elsewhere in a study, not here" in message
    assert "did you mean 'seed'" not in message and "did you mean 'max_grad_norm'" not in message
    with pytest.raises(ConfigError, match=r"data.labels\[0\]: .*\(got False\); YAML reads yes/no/on/off as "
                                          r"true/false: quote the name, e.g. 'no'"):
        load_study(write_study(GOOD.replace("training:", "data: {source: phantom, labels: [no, yes]}\ntraining:")))


def test_merge_keys_share_settings_and_own_keys_override_them(write_study):
    """YAML's ``<<: *anchor`` was refused ("could not determine a constructor for the tag ... merge"), and a key
    overriding a merged one must not count as given twice; one given twice beside the merge still does."""
    arms = ("arms:\n  - &dp {name: a, mechanism: dp_sgd, target_epsilon: 8, max_grad_norm: 0.5}\n"
            "  - <<: *dp\n    name: b\n    target_epsilon: 2\n")
    study = load_study(write_study("name: s\nseeds: [0]\n" + arms))
    assert [(a.name, a.target_epsilon, a.max_grad_norm) for a in study.arms] == [("a", [8], [0.5]), ("b", [2], [0.5])]
    with pytest.raises(ConfigError, match="key 'name' appears twice"):
        load_study(write_study("name: s\nseeds: [0]\n" + arms + "    name: c\n"))


@pytest.mark.parametrize("override, changed, kept", [
    ({"training.batch_size": 16}, "training", "pretrain.training"),
    ({"pretrain.training.steps": 50}, "pretrain.training", "training"),
    # a merge copies the anchor's keys, not what they hold: the section inside stayed shared
    ({"arms.b.attack.batches": 2}, "arms.1.attack", "arms.0.attack"),
])
def test_an_override_inside_an_aliased_section_changes_that_section_alone(write_study, override, changed, kept):
    """PyYAML builds an anchor's value once and hands the same dict to every alias of it, so a --set of a key inside
    one place wrote it into each: --set pretrain.training.steps=50 over ``pretrain: {training: *t}`` also gave the
    arms 50 steps, without a word."""
    path = write_study("name: s\nseeds: [0]\ntraining: &t {batch_size: 32, steps: 2}\n"
                       "pretrain: {data: {source: random_processes, n_images: 40}, public: generated, training: *t}\n"
                       "arms:\n  - &a {name: a, mechanism: dp_sgd, target_epsilon: 8, attack: {batches: 1}}\n"
                       "  - <<: *a\n    name: b\n")
    [(key, value)] = override.items()
    field = key.rpartition(".")[2]

    def at(study, dotted):
        for part in dotted.split("."):
            study = study[int(part)] if part.isdigit() else getattr(study, part)
        return getattr(study, field)

    before, after = load_study(path), load_study(path, override)
    assert at(after, changed) == value != at(before, changed)
    assert at(after, kept) == at(before, kept)


@pytest.mark.parametrize("key", ["[a, b]", "{a: 1}"])
def test_a_list_or_a_section_as_a_key_is_named_by_its_line(write_study, key):
    """A key YAML allows but no mapping can hold: the check for keys given twice must leave it to PyYAML's own
    error, one line with its place, rather than fail on it with an internal TypeError."""
    path = write_study(f"name: s\n{key}: 1\n")
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value) == (f"study file {path} is not valid YAML: line 2, column 1: found unhashable key "
                                 "(while constructing a mapping at line 1, column 1); a key is a word: write it as "
                                 "text, not a list or a section")


def test_a_key_given_twice_a_file_not_in_utf8_and_a_bad_override_are_named(write_study, tmp_path):
    """Plain YAML keeps the last of two equal keys: a second training block dropped the first's settings silently."""
    with pytest.raises(ConfigError, match=r"key 'training' appears twice in one section \(lines 4 and 5\)"):
        load_study(write_study(GOOD.replace("arms:", "training: {batch_size: 16}\narms:")))
    with pytest.raises(ConfigError, match="appears twice"):
        load_study(write_study(GOOD.replace("{epochs: 2}", "{epochs: 2, epochs: 3}")))
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(GOOD.replace("name: s", "name: s\nsettings_chosen_on: caf\u00e9").encode("latin-1"))
    with pytest.raises(ConfigError, match=f"study file {latin} is not UTF-8 text .*save it as UTF-8"):
        load_study(latin)
    with pytest.raises(ConfigError, match=r"--set 'training.epochs=\[1': the value is not valid YAML"):
        parse_override("training.epochs=[1")


@pytest.mark.parametrize("text, found", [
    ("training.epochs=[1", "expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)"),
    ('name="a', "found unexpected end of stream (while scanning a quoted scalar)"),
    ("name=@a", "found character '@' that cannot start any token (while scanning for the next token)"),
])
def test_a_set_value_that_is_no_yaml_says_what_yaml_found(text, found):
    """Before: only PyYAML's context ("(while parsing a flow sequence)"), not what it found there."""
    with pytest.raises(ConfigError) as caught:
        parse_override(text)
    assert f"--set {text!r}: the value is not valid YAML ({found}); quote it" in str(caught.value)


def test_run_ids_keep_the_study_order_of_seeds_and_write_large_values_as_g_without_a_plus(write_study):
    """Seeds run innermost, in the order the file lists them; a swept value is written as %g writes it, less the
    '+' of its exponent (1e+20 -> 1e20): a run id that changed would retrain finished runs."""
    study = load_study(write_study("name: s\nseeds: [3, 1]\narms: [{name: dp, mechanism: dp_sgd, "
                                   "target_epsilon: [1.0e+20, 1234567]}]\n"))
    assert run_ids(study) == ["dp_eps1e20_C1_seed3", "dp_eps1e20_C1_seed1", "dp_eps1.23457e06_C1_seed3",
                              "dp_eps1.23457e06_C1_seed1"]


def test_run_ids_do_not_change_when_a_sweep_grows(write_study):
    """Adding a value must not rename (and so retrain) the runs already finished."""
    one = set(run_ids(load_study(write_study(GOOD.replace("[1, 8]", "8")))))
    two = set(run_ids(load_study(write_study(GOOD))))
    assert one <= two


@pytest.mark.parametrize("arms, folder", [
    ("[{name: dp, mechanism: dp_sgd, target_epsilon: 8}, {name: dp_eps8_C1, mechanism: none}]", "dp_eps8_C1_seed0"),
    ("[{name: base, mechanism: none}, {name: Base, mechanism: none}]", "Base_seed0"),
    ("[{name: dp, mechanism: dp_sgd, target_epsilon: [1.00001, 1.000012]}]", "dp_eps1.00001_C1_seed0"),
])
def test_two_runs_that_would_write_one_folder_are_refused_naming_both(write_study, arms, folder):
    """Before: such a study planned both runs; the second overwrote the first's model in runs/<id>/ (on macOS's and
    Windows's file systems also where the ids differ only in case) and a resumed study took one for the other."""
    with pytest.raises(ConfigError, match=re.escape(f"would both write runs/{folder}/")) as caught:
        load_study(write_study(f"name: s\nseeds: [0]\narms: {arms}\n"))
    assert str(caught.value).count("arm '") == 2


def test_fairness_is_on_and_explanations_off_by_default_and_both_are_checked(write_study):
    study = load_study(write_study(GOOD))
    assert study.evaluation.fairness.attributes == ["sex", "age"] and study.evaluation.explanations is None
    study = load_study(write_study(GOOD + "evaluation: {fairness: null, explanations: {method: gradcam++, "
                                          "n_images: 32}}\n"))
    assert study.evaluation.fairness is None and study.evaluation.explanations.n_images == 32
    for bad, key in (("fairness: {attributes: [ethnicity]}", "evaluation.fairness.attributes"),
                     ("fairness: {age_bins: [0, 60, 30]}", "evaluation.fairness.age_bins"),
                     ("fairness: {age_bins: [0, .nan]}", "evaluation.fairness.age_bins"),     # NaN was taken
                     ("fairness: {age_bins: [0, 30, .inf]}", "evaluation.fairness.age_bins"),
                     ("explanations: {method: lime}", "evaluation.explanations.method"),
                     ("cam: {method: gradcam}", "evaluation.cam")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_study(write_study(GOOD + f"evaluation: {{{bad}}}\n"))


@pytest.mark.parametrize("change, words", [
    (("mechanism: dp_sgd", "mechanism: dp-sgd"),
     "arms[2].mechanism: 'dp-sgd' is not a mechanism (did you mean 'dp_sgd'?)"),
    (("mechanism: pixel_laplace", "mechanism: pixel-laplace"), "did you mean 'pixel_laplace'?"),
    (("training: {epochs: 2}", "training: {epochs: 2, optimizer: adamw}"), "did you mean 'adam'?"),
    (("training: {epochs: 2}", "training: {epochs: 2}\nmodel: {name: resnet-18}"), "did you mean 'resnet18'?"),
])
def test_a_mistyped_choice_gets_the_closest_one(write_study, change, words):
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD.replace(*change)))
    assert words in str(info.value)


def test_problems_an_override_causes_are_blamed_on_it_not_on_the_file(write_study):
    path = write_study(GOOD)
    with pytest.raises(ConfigError) as info:
        load_study(path, {"training.learning_rate": "fast"},
                   origins={"training.learning_rate": "--set training.learning_rate=fast"})
    message = str(info.value)
    assert "--set training.learning_rate=fast: training.learning_rate" in message
    assert message.splitlines()[0].startswith("the settings given with study file")   # not the file's problem
    with pytest.raises(ConfigError, match=r"--set arms\.7\.scale=1: '7' names no item"):
        load_study(path, {"arms.7.scale": 1}, origins={"arms.7.scale": "--set arms.7.scale=1"})
    with pytest.raises(ConfigError, match=r"--data-path gone\.npz: no such file"):
        load_study(path, {"data.source": "medmnist", "data.path": "/nowhere/gone.npz"},
                   origins={"data.path": "--data-path gone.npz"})


@pytest.mark.parametrize("in_file", ["", "pretrain: null\n"])
def test_the_keys_a_section_made_by_an_override_lacks_are_blamed_on_the_override(write_study, in_file):
    """Before: --set pretrain.training.epochs=2, where the file has no pretrain section (or leaves it null), answered
    "study file ... has 2 problem(s): pretrain.data: required key is missing ...": the file was blamed for the keys of
    a section only the option had made, and the user was not told what a pretrain section needs."""
    origin = "--set pretrain.training.epochs=2"
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD + in_file), {"pretrain.training.epochs": 2},
                   origins={"pretrain.training.epochs": origin})
    head, *problems = str(info.value).splitlines()
    assert head.startswith("the settings given with study file") and head.endswith(" have 1 problem(s):")
    assert problems == [f"  - {origin}: pretrain: the study file has no pretrain section, so the option adds one, and "
                        "a pretrain section also needs data and public; write the section with them in the study "
                        "file, or give them with --set too"]
    # an override given in Python, not with --set, is not told to use --set
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD + in_file), {"pretrain.training.epochs": 2})
    assert str(info.value).splitlines()[1:] == [
        "  - override pretrain.training.epochs=2: pretrain: the study file has no pretrain section, so the option adds "
        "one, and a pretrain section also needs data and public; write the section with them in the study file"]
    # a section the file has keeps its missing key, the file's
    partial = write_study(GOOD + "pretrain: {data: {source: phantom}}\n")
    with pytest.raises(ConfigError) as info:
        load_study(partial, {"pretrain.training.epochs": 2}, origins={"pretrain.training.epochs": origin})
    assert str(info.value).splitlines() == [f"study file {partial} has 1 problem(s):",
                                            "  - pretrain.public: required key is missing"]


def test_an_override_inside_a_section_an_override_gave_leaves_the_callers_mapping_as_it_was(write_study):
    """Before: load_study(path, {"training": {"steps": 2}, "training.batch_size": 32}) wrote batch_size into the
    caller's {"steps": 2}: a second load_study with the same overrides then held it there, whatever followed."""
    section = {"steps": 2}
    overrides = {"training": section, "training.batch_size": 32}
    study = load_study(write_study(GOOD), overrides)
    assert study.training.steps == 2 and study.training.batch_size == 32
    assert section == {"steps": 2} and overrides == {"training": {"steps": 2}, "training.batch_size": 32}


def test_a_mapping_key_that_is_a_number_is_written_with_a_dot_and_a_list_item_with_brackets(write_study):
    """Before: --set training.5=3 answered "training[5]: unknown key", as if training were a list."""
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD), {"training.5": 3}, origins={"training.5": "--set training.5=3"})
    assert "--set training.5=3: training.5: unknown key" in str(info.value) and "[5]" not in str(info.value)
    with pytest.raises(ConfigError, match=r"arms\[1\]\.scale"):
        load_study(write_study(GOOD), {"arms.1.scale": "x"})


@pytest.mark.parametrize("text, said", [
    ("name=", "--set name=: the value is empty (nothing after '=', read as null); --set KEY=VALUE needs a value after "
              "the '=', e.g. --set name=VALUE"),
    ("training.epochs= ", "--set training.epochs= : the value is empty"),
    ("training=", "--set training=: the value is empty"),
])
def test_a_set_without_a_value_says_the_value_is_empty(write_study, text, said):
    """Before: --set name= answered "name: Input should be a valid string (got None)"."""
    key, value = parse_override(text)
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD), {key: value}, origins={key: f"--set {text}"})
    assert said in str(info.value) and "got None" not in str(info.value)
    assert load_study(write_study(GOOD), {"data.image_size": None}).data.image_size is None   # null is a value here


@pytest.mark.parametrize("section, value, problem, joined", [
    ("arms", "[{name:dp,mechanism:dp_sgd}]", "arms[0].mechanism: required key is missing", "name:dp"),
    ("training", "{epochs:2}", "training.epochs:2: unknown key", "epochs:2"),
])
def test_a_key_with_a_colon_and_no_space_after_it_is_told_how_yaml_read_it(write_study, section, value, problem,
                                                                           joined):
    """Before: --set "arms=[{name:dp,mechanism:dp_sgd}]" answered only "arms[0].mechanism: required key is missing"
    (YAML's flow mapping reads name:dp as one key, its value null); the study file's own such mapping alike."""
    hint = (f"; YAML read {joined!r} as one key (a colon ends a key only where a space follows it): write `key: "
            "value` with a space after the colon")
    text = f"{section}={value}"
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD), dict([parse_override(text)]), origins={section: f"--set {text}"})
    assert f"--set {text}: {problem}" in str(info.value) and hint in str(info.value), str(info.value)
    assert hint in _problems(write_study, GOOD.replace(f"{section}:", f"{section}: {value}\nold_{section}:"))
    assert "YAML read" not in _problems(write_study, GOOD.replace("training: {epochs: 2}", "training: {epochs: x}"))


def _problems(write_study, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_study(write_study(text))
    return str(info.value)


def test_override_edge_cases_a_reviewer_found(write_study):
    """Before: --set into a section the file left null was refused as 'holds a value'; an unknown section made by
    --set was blamed on the file; 010 became 8 and 1:30 became 90 (YAML 1.1 octal and base 60); an empty key part
    reached the schema as 'training.'; learning_rate=.inf trained and failed at evaluation without naming the key."""
    path = write_study(GOOD.replace("training: {epochs: 2}", "training: {epochs: 2}\nevaluation: {explanations: null}"))
    assert load_study(path, {"evaluation.explanations.seed": 3}).evaluation.explanations.seed == 3
    with pytest.raises(ConfigError) as info:
        load_study(path, {"trainingg.epochs": 1}, origins={"trainingg.epochs": "--set trainingg.epochs=1"})
    first = str(info.value).splitlines()
    assert first[0].startswith("the settings given with study file")
    assert "--set trainingg.epochs=1: trainingg" in first[1]
    in_file = write_study(GOOD + "trainingg: {epochs: 1}\n")    # the file's own unknown key stays the file's
    with pytest.raises(ConfigError) as info:
        load_study(in_file, {"trainingg.epochs": 2}, origins={"trainingg.epochs": "--set trainingg.epochs=2"})
    assert str(info.value).startswith("study file") and "(after --set trainingg.epochs=2)" in str(info.value)
    with pytest.raises(ConfigError, match=r"--set training.epochz=2: training.epochz: unknown key"):
        load_study(path, {"training.epochz": 2}, origins={"training.epochz": "--set training.epochz=2"})
    assert parse_override("data.split.seed=010") == ("data.split.seed", "010")
    assert parse_override("training.epochs=1:30") == ("training.epochs", "1:30")
    assert parse_override("seeds=[0, 12]") == ("seeds", [0, 12]) and parse_override("a=-3") == ("a", -3)
    assert parse_override("training.learning_rate=1:30.0") == ("training.learning_rate", "1:30.0")
    with pytest.raises(ConfigError, match=r"data\.split\.seed.*write it without them"):
        load_study(path, {"data.split.seed": parse_override("data.split.seed=010")[1]})
    for text in ("training..epochs=2", "training.=2", ".epochs=2"):
        with pytest.raises(ConfigError, match="has an empty part between dots"):
            parse_override(text)
    for key in ("training.learning_rate", "training.weight_decay", "arms.2.learning_rate",
                "evaluation.explanations.pointing_tolerance"):
        with pytest.raises(ConfigError, match=re.escape(key.replace("arms.2", "arms[2]")) + r".*finite"):
            load_study(path, {key: parse_override(f"{key}=.inf")[1]})
    with pytest.raises(ConfigError, match="quote the whole value"):
        load_study(path, {"name": parse_override("name=a: b")[1]})
    # a --set without =, into a plain value, or past a list's end: said, not a traceback
    with pytest.raises(ConfigError, match=r"--set 'training': expected KEY=VALUE, e.g. --set training.epochs=2"):
        parse_override("training")
    with pytest.raises(ConfigError, match=r"override name.x=1: 'name' holds a value, not a section"):
        load_study(path, {"name.x": 1})
    with pytest.raises(ConfigError, match=r"override arms.5.name='x': '5' names no item of that list; its 3 entries, "
                                          r"by index \(and name\): 0 \(base\), 1 \(ldp\), 2 \(dp\)$"):
        load_study(path, {"arms.5.name": "x"})
    with pytest.raises(ConfigError, match=r"override arms.3.name='x': '3' names no item of that list"):   # one past
        load_study(path, {"arms.3.name": "x"})


def test_a_set_key_past_a_list_items_value_is_refused_naming_it(write_study):
    """--set seeds.0.x=1 (a key inside the seed 0) ended in an internal error, "TypeError: 'int' object does not
    support item assignment", and seeds.0.x.y=1 in an AttributeError; a list's item that holds a plain value is
    refused as a section's plain value is."""
    path = write_study(GOOD)
    for key, at in (("seeds.0.x", "seeds.0"), ("seeds.1.x.y", "seeds.1"), ("arms.dp.target_epsilon.0.x",
                                                                          "arms.2.target_epsilon.0")):
        with pytest.raises(ConfigError, match=rf"--set {re.escape(key)}=1: '{re.escape(at)}' holds a value, not a "
                                              "section"):
            load_study(path, {key: 1}, origins={key: f"--set {key}=1"})
    with pytest.raises(ConfigError, match=r"'arms\.0\.name' holds a value"):
        load_study(path, {"arms.base.name.x": 1})


def test_an_arm_is_named_in_a_set_key_by_its_index_or_its_name(write_study):
    """--set arms.dp.target_epsilon=4 was refused with "'dp' is not an index of that list (it has 3 entries)"."""
    path = write_study(GOOD)
    by_name = load_study(path, {"arms.dp.target_epsilon": 4, "arms.ldp": {"name": "l", "mechanism": "none"}})
    assert by_name.arms[2].target_epsilon == [4] and by_name.arms[1].name == "l"
    assert load_study(path, {"arms.2.target_epsilon": 4}).arms[2].target_epsilon == [4]
    with pytest.raises(ConfigError, match=r"'dp-sgd' names no item of that list; .*2 \(dp\)"):
        load_study(path, {"arms.dp-sgd.target_epsilon": 4})
    # a problem in an arm named by name is the option's, as by index
    with pytest.raises(ConfigError) as info:
        load_study(path, {"arms.dp.target_epsilon": "abc"},
                   origins={"arms.dp.target_epsilon": "--set arms.dp.target_epsilon=abc"})
    assert str(info.value).startswith("the settings given with study file")
    assert "--set arms.dp.target_epsilon=abc: arms[2].target_epsilon" in str(info.value)
    with pytest.raises(ConfigError, match=r"--set training.epochs=auto beside --set training.steps=N"):
        load_study(path, {"training.steps": 50})
    assert load_study(path, {"training.steps": 50, "training.epochs": "auto"}).training.steps == 50


@pytest.mark.parametrize("sets, blamed", [
    # one arm's key by its index, the arm replaced, the key again by its name: the last gave the value
    (["arms.2.delta=abc", "arms.2={name: dp, mechanism: dp_sgd, target_epsilon: 1}", "arms.dp.delta=xyz"],
     "--set arms.dp.delta=xyz"),
    (["arms.dp.delta=abc", "arms.dp={name: dp, mechanism: dp_sgd, target_epsilon: 1}", "arms.2.delta=xyz"],
     "--set arms.2.delta=xyz"),
    # an audit section the first option added, by index: the file has none
    (["arms.2.audit.kind=noise", "arms.dp.audit.kind=noise"], "--set arms.dp.audit.kind=noise: arms[2].audit: the "
                                                              "study file has no arms[2].audit section, so the option "
                                                              "adds one, and an arms[2].audit section also needs "
                                                              "canaries"),
    # an audit section the first option added and the second replaced, its key given again by name: the section is
    # the second's, and so is the key it lacks
    (["arms.2.audit.kind=noise", "arms.2={name: dp, mechanism: dp_sgd, target_epsilon: 1, audit: {kind: noise}}",
      "arms.dp.audit.kind=noise"],
     "--set arms.2={name: dp, mechanism: dp_sgd, target_epsilon: 1, audit: {kind: noise}}: arms[2].audit.canaries: "
     "required key is missing"),
    (["arms.2.audit.kind=noise", "arms.2.audit={kind: noise}"],
     "--set arms.2.audit={kind: noise}: arms[2].audit.canaries: required key is missing"),
])
def test_a_problem_in_an_arm_named_by_index_and_by_name_is_blamed_on_the_option_that_gave_it(
        write_study, tmp_path, capsys, sets, blamed):
    """An arm's key set by its index and again by its name is one key, and the --set applied last gave it: the
    earlier one was blamed (the options' origins, keyed by arm index, kept the place of the first), or, for a
    section the options added, the study file. A section one option added and a later one replaced is the later's:
    the first was said to add it, lacking a key the later left out."""
    from dpmed.cli import main

    path = write_study(GOOD)
    assert main(["plan", str(path), "--no-estimate", *(arg for text in sets for arg in ("--set", text))]) != 0
    said = capsys.readouterr().err
    assert said.startswith("dpmed: error: the settings given with study file"), said
    assert f"  - {blamed}" in said, said


@pytest.mark.parametrize("override, key", [
    ({"data.seed": -1}, "data.seed"),
    ({"seeds": [99999999999999999999999]}, "seeds[0]"),
    ({"seeds": [0, 2**32]}, "seeds[1]"),
    ({"evaluation.bootstrap_seed": -1}, "evaluation.bootstrap_seed"),
    ({"evaluation.explanations": {"seed": -1}}, "evaluation.explanations.seed"),
    ({"data.split": {"seed": -5}}, "data.split.seed"),
    ({"data.patients": {"fraction": 0.5, "part": 0, "seed": 2**40}}, "data.patients.seed"),
    ({"pretrain": {"data": {"source": "phantom", "seed": -2}, "public": "synthetic"}}, "pretrain.data.seed"),
    ({"pretrain": {"data": {"source": "phantom"}, "public": "synthetic", "seed": -3}}, "pretrain.seed"),
])
def test_a_seed_no_generator_takes_is_refused_naming_its_key(write_study, override, key):
    """Negative or huge seeds passed the schema and failed later naming no key: numpy's traceback for data.seed -1,
    every run failing after training for the evaluation seeds, torch's overflow for seeds above 2**64."""
    origins = {k: f"--set {k}={v}" for k, v in override.items()}
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD), override, origins=origins)
    message = str(info.value)
    assert f"{origins[next(iter(override))]}: {key}: a seed must be a whole number from 0 to 4294967295" in message


def test_the_largest_seed_is_accepted_and_seeds_every_generator(write_study):
    import torch

    study = load_study(write_study(GOOD), {"seeds": [0, 2**32 - 1], "data.seed": 2**32 - 1})
    assert study.seeds == [0, 2**32 - 1]
    np.random.default_rng(study.data.seed)
    torch.Generator().manual_seed(study.seeds[-1])


@pytest.mark.parametrize("name", ["small_cnn", "resnet18", "scatternet_linear"])
def test_more_last_blocks_than_the_model_has_are_refused_when_the_file_is_read(write_study, name):
    """`dpmed plan` printed "the last 99 block(s) train" for a setting `dpmed run` then refused (after any public
    pretraining had trained); the file is checked now, by the rule set_trainable applies."""
    from dpmed.models import MODELS

    n = len(MODELS[name].blocks)
    path = write_study(GOOD + f"model: {{name: {name}, trainable: {{last_blocks: {n + 1}}}}}\n")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    message = str(info.value)
    assert str(path) in message
    assert f"model.trainable: last_blocks {n + 1}, but {name} has {n} blocks" in message
    assert f"use at most {n}, or all" in message
    public = {"public": "a phantom, of no person", "data": {"source": "phantom"}}   # no random layers left frozen
    assert load_study(path, {"model.trainable": {"last_blocks": n}, "pretrain": public}).model.trainable_setting == n


@pytest.mark.parametrize("blocks, line", [
    (0, "model.trainable.last_blocks: must be at least 1, got 0; raise it to 1 or more"),
    (-1, "model.trainable.last_blocks: must be at least 1, got -1; raise it to 1 or more"),
])
def test_a_bad_last_blocks_is_one_problem_not_also_a_bad_choice_of_all_or_head(write_study, blocks, line):
    """``trainable: {last_blocks: 0}`` was two problems, the second "model.trainable: {'last_blocks': 0} is not one
    of all, head": the mapping was plainly meant, and the line pointed away from the number to fix."""
    path = write_study(GOOD)
    with pytest.raises(ConfigError) as info:
        load_study(path, {"model.trainable": {"last_blocks": blocks}})
    assert str(info.value).splitlines()[1:] == [f"  - override model.trainable={{'last_blocks': {blocks}}}: {line}"]


@pytest.mark.parametrize("trainable, frozen", [("head", 4), ("{last_blocks: 1}", 3)])
def test_freezing_a_random_model_is_refused_unless_it_starts_from_trained_weights(write_study, tmp_path, trainable,
                                                                                 frozen):
    """Before, ``trainable: head`` without model.weights or pretrain was accepted: the head trained for hours on the
    random features of frozen layers. Trained weights, public pretraining, or a model whose frozen part is not
    random (scatternet_linear's GroupNorm over its fixed scattering transform) are accepted."""
    path = write_study(GOOD + f"model: {{name: small_cnn, trainable: {trainable}}}\n")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    message = str(info.value)
    assert str(path) in message
    assert f"model.trainable: {trainable} freezes {frozen} randomly initialised tensor(s) of small_cnn" in message
    assert ("Set model.weights (with model.weights_source) or add a pretrain: section to start from trained weights, "
            "or use trainable: all") in message
    (tmp_path / "m.pt").write_bytes(b"")
    weights = {"model.weights": str(tmp_path / "m.pt"), "model.weights_source": "another study"}
    public = {"pretrain": {"public": "a phantom, of no person", "data": {"source": "phantom"}}}
    for settings in (weights, public, {"model.name": "scatternet_linear"}, {"model.trainable": "all"}):
        assert load_study(path, settings).model.name in ("small_cnn", "scatternet_linear")


def test_checking_for_frozen_random_layers_leaves_the_caller_s_torch_generator_alone(write_study):
    """Reading a study file builds its model to see what a frozen part would hold: loading a study (dpmed as a
    library) must not move the caller's later torch draws."""
    import torch

    path = write_study(GOOD + "model: {name: small_cnn, trainable: head}\n")
    with torch.random.fork_rng(devices=[]):
        before = torch.get_rng_state()
        with pytest.raises(ConfigError, match="freezes 4 randomly initialised tensor"):
            load_study(path)
        assert load_study(path, {"model.name": "scatternet_linear"}).model.trainable == "head"
        assert torch.equal(torch.get_rng_state(), before)


def test_a_study_record_read_back_through_json_is_not_refused_for_a_frozen_random_model(write_study):
    """A study.yaml that dpmed wrote (read back through JSON by report, status and resume) holds a study whose runs
    trained already: freezing random layers is refused where a study file is read, not where its record is."""
    from dpmed.config import Study

    data = load_study(write_study(GOOD)).model_dump(mode="json")
    data["model"]["trainable"] = "head"
    assert Study.model_validate_json(json.dumps(data)).model.trainable == "head"
    with pytest.raises(ValidationError, match="freezes 4 randomly initialised tensor"):
        Study.model_validate(data)


@pytest.mark.parametrize("override, words", [
    ({"arms": [{"name": "x"}]},
     "arms[0].mechanism: required key is missing; say which mechanism the arm uses, one of none, pixel_laplace, "
     "pixel_gaussian, scalar_shift, dp_sgd"),
    ({"training": 3}, "training: must be a mapping of settings (key: value lines, or {key: value, ...}), got 3"),
    ({"data": None}, "data: must be a mapping of settings (key: value lines, or {key: value, ...}), got null "
                     "(nothing under the key); write its settings under it, or remove the key to keep the defaults"),
    ({"arms": [3]}, "arms[0]: must be a mapping of settings"),
    # a list item has no defaults to keep: "remove the key" did not fit it
    ({"arms.0": None}, "arms[0]: must be a mapping of settings (key: value lines, or {key: value, ...}), got null (an "
                       "empty item of the list); write its settings in it, or delete the item from the list in the "
                       "study file"),
    ({"model.trainable": 3}, "model.trainable: should be one of all, head or a mapping such as {last_blocks: ...}"),
    # pydantic's "Input should be a valid integer" named the key but not the fix
    ({"model.trainable": {"last_blocks": "x"}},
     "model.trainable.last_blocks: must be a whole number, got 'x'; write it in digits (e.g. 2)"),
    ({"training.reference_batch_size": 2.5},
     "training.reference_batch_size: must be a whole number, got 2.5; write it in digits (e.g. 2)"),
    ({"training.learning_rate": "fast"}, "training.learning_rate: must be a number, got 'fast'; write it in digits"),
    # "Input should be a valid list (got 0.5)", and a YAML true shown as Python's True
    ({"training.lr_schedule": {"kind": "step", "milestones": 0.5}},
     "training.lr_schedule.milestones: must be a list, got 0.5; write its items in brackets ([a, b, ...])"),
    ({"training.augmentation": {"multiplicity": True}},
     "training.augmentation.multiplicity: must be a whole number, got true; write it in digits (e.g. 2)"),
    # a "did you mean" from the section's own keys: 'comment' in privacy_budget was offered training's 'momentum'
    ({"privacy_budget": {"epsilon": 1, "delta": 1e-5, "comment": 1}},
     "privacy_budget.comment: unknown key (privacy_budget holds epsilon, delta, accountant); remove or rename it"),
    # a section given its kind's word: the key it belongs under
    ({"training.lr_schedule": "cosine"}, "training.lr_schedule: must be a mapping of settings (key: value lines, or "
                                         "{key: value, ...}), got 'cosine'; write {kind: cosine}"),
    # nan compares false with every bound: "got nan; raise it above 0" asked for what cannot help
    ({"privacy_budget": {"epsilon": math.nan, "delta": 1e-5}},
     "privacy_budget.epsilon: must be a number above 0, got nan; write a number above 0 in its place"),
    ({"training.ema_decay": math.nan}, "training.ema_decay: must be a number below 1, got nan; write a number below 1 "
                                       "in its place"),
    ({"training.augmentation": {"flip": "maybe"}},
     "training.augmentation.flip: must be true or false, got 'maybe'; write true or false"),
    ({"pretrain": {"public": "", "data": {"source": "phantom"}}},
     "pretrain.public: must hold at least 1 character(s), got ''; write it out"),
    ({"name": ".."}, "name: study name must start with a letter or digit and hold only letters, digits, '_', '-' or "
                     "'.', at most 64 (it names a folder); got '..': rename it"),
    ({"name": "s" * 65}, "at most 64 (it names a folder)"),
    ({"name": "s\n"}, "study name must start with a letter or digit"),
    ({"arms.0.name": "-x"}, "arms[0].name: arm name must start with a letter or digit"),
    ({"arms.0.name": "a" * 65}, "arms[0].name: arm name must start with a letter or digit and hold only letters, "
                                "digits, '_', '-' or '.', at most 64 (it names folders)"),
])
def test_messages_say_what_is_wrong_in_the_study_files_words(write_study, override, words):
    """pydantic's words reached users: "Unable to extract tag using discriminator 'mechanism'", "instance of
    TrainingConfig" (a class they never see), and a name of only allowed characters ('..') was told to be made of
    them; a trailing newline passed as a folder name; an arm's name of 260 letters failed its runs only, after the
    study had trained the others (a folder's name is at most 255 bytes)."""
    with pytest.raises(ConfigError) as info:
        load_study(write_study(GOOD), override)
    message = str(info.value)
    assert words in message
    assert "discriminator" not in message and "instance of" not in message and not re.search(r"[a-z]Config\b", message)


def test_a_folder_given_as_the_study_file_is_said_to_be_a_folder(tmp_path):
    with pytest.raises(ConfigError, match=r"study file .* is a folder; pass the path of a .yaml study in it"):
        load_study(tmp_path)


@pytest.mark.parametrize("arm, words", [
    ("{name: a, mechanism: pixel_laplace, scale: 5.0e-324}", "scale b = 4.94066e-324 is too extreme to compute with"),
    ("{name: a, mechanism: pixel_laplace, target_epsilon_image: 1.0e-320}", "the scale b that target_epsilon_image"),
    ("{name: a, mechanism: pixel_gaussian, std: 5.0e-324}", "std s = 4.94066e-324 is too extreme to compute with"),
    ("{name: a, mechanism: pixel_gaussian, target_epsilon_image: 1.0e+20}", "too extreme to compute with "
                                                                           "(OverflowError"),
    ("{name: a, mechanism: dp_sgd, noise_multiplier: 1.0e-300}", "its arithmetic fails at values this extreme"),
    ("{name: a, mechanism: dp_sgd, noise_multiplier: 1.0e+308}", "its arithmetic fails at values this extreme"),
])
def test_values_too_extreme_to_compute_with_are_refused_naming_the_arm(write_study, arm, words):
    """Found by fuzzing: each reached the user as an internal error (ZeroDivisionError and OverflowError inside
    dp_accounting, a ratio R / b of inf in the samplers' bound checks)."""
    study = load_study(write_study(f"name: s\nseeds: [0]\narms: [{arm}]\n"))
    with pytest.raises(ConfigError, match=r"^arm 'a'") as caught:
        plan_runs(study, CONTEXT)
    assert words in str(caught.value)


def test_a_path_the_file_system_cannot_take_is_named_not_an_internal_error(write_study):
    for bad in ("a" * 300 + ".npz", "a\\0b.npz"):
        path = write_study(f'name: s\ndata: {{source: medmnist, path: "{bad}"}}\narms: [{{name: a, mechanism: none}}]')
        with pytest.raises(ConfigError, match=f"^study file {re.escape(str(path))}: a path in it cannot be used"):
            load_study(path)


def test_a_path_under_the_home_folder_is_read_as_a_shell_reads_it(write_study, tmp_path, monkeypatch):
    """data.path: ~/data/x.npz was read as a folder named ~ beside the study file."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "data").mkdir(parents=True)
    (tmp_path / "home" / "data" / "x.csv").write_bytes(b"")
    study = load_study(write_study("name: s\ndata: {source: csv, path: ~/data/x.csv, cache_dir: ~/cache}\n"
                                   "arms: [{name: a, mechanism: none}]\n"))
    assert study.data.path == tmp_path / "home" / "data" / "x.csv"
    assert study.data.cache_dir == tmp_path / "home" / "cache"


EMPTY = "is empty; write a study in it (name, data, arms: see configs/quickstart.yaml)"


@pytest.mark.parametrize("text, words", [
    ("", EMPTY),
    ("# a study, one day\n\n", EMPTY),
    ("[1, 2]", ": expected a mapping of keys (name, data, arms, ...) at the top, got a list; write each key at the "
               "start of a line (name: ..., arms: ...), not as a list item"),
])
def test_an_empty_study_file_is_said_to_be_empty(write_study, text, words):
    """Before, an empty file (or one of comments) was "expected a mapping of keys ... at the top", which did not say
    that nothing was there."""
    path = write_study(text)
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value) == f"study file {path}{'' if words.startswith(':') else ' '}{words}"


def test_a_tab_in_the_indentation_is_told_to_be_spaces(write_study):
    """Before: PyYAML's "found character '\\t' that cannot start any token", which did not say what to do."""
    path = write_study("name: s\ntraining:\n\tepochs: 2\narms:\n  - {name: base, mechanism: none}\n")
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value) == (f"study file {path} is not valid YAML: line 3, column 1: found character '\\t' that "
                                 "cannot start any token (while scanning for the next token); YAML indents with "
                                 "spaces only: replace the tab with spaces")


def test_a_control_character_or_a_binary_file_is_placed_in_the_study_file(tmp_path):
    """Before: 'unacceptable character #x0000: special characters are not allowed in "<unicode string>", position
    12', naming no file line and saying nothing of what to do."""
    path = tmp_path / "nul.yaml"
    path.write_bytes(b"name: s\nseeds: [0\x00]\n")
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value) == (f"study file {path} is not valid YAML: line 2, column 10: character #x0000 is not "
                                 "allowed in YAML text (a control character, or the file is not text at all); remove "
                                 "it, or pass the study's .yaml file")


def test_a_study_file_that_cannot_be_read_is_named_not_an_internal_error(write_study, monkeypatch):
    """Before: "internal error: PermissionError: [Errno 13] Permission denied" (exit status 1)."""
    path = write_study(GOOD)
    real = type(path).read_text

    def denied(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(path), "read_text", denied)
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value) == (f"study file {path} cannot be read (Permission denied); make it readable to you "
                                 "(chmod u+r), or pass a copy you can read")


@pytest.mark.parametrize("threads", [2000, 10**23])
def test_more_threads_than_a_machine_has_cores_are_refused_when_the_file_is_read(write_study, threads):
    """Before: accepted; 10**23 then failed every run in torch.set_num_threads ("Overflow when unpacking long"), after
    the data had been read, and a count such as 10**6 asked the machine for a million threads."""
    with pytest.raises(ConfigError) as caught:
        load_study(write_study(GOOD), {"training.threads": threads})
    assert str(caught.value).endswith(f"training.threads: must be from 1 to 1024 (or auto), got {threads}: more "
                                      "threads than the machine has cores only slow a run")
    assert load_study(write_study(GOOD), {"training.threads": 1024}).training.threads == 1024


@pytest.mark.parametrize("line, where, key", [
    ("1: 2", "the top level", "1"),
    ("null: 2", "the top level", "null"),
    ("training: {epochs: 2, 3.5: 1}", "training", "3.5"),
    ("training: {epochs: 2, yes: 1}", "training", "true"),
    ("training: {epochs: 2, null: 1}", "training", "null"),        # pydantic names it None, like a union member
])
def test_a_key_yaml_reads_as_no_text_is_named_in_its_section(write_study, line, where, key):
    """Before: "[1]: Keys should be strings (got 1)", a list index where a key was meant, "(top level)" for a key
    inside training (true) and for null, and nothing of what to do."""
    path = write_study(GOOD.replace("training: {epochs: 2}", line))
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value).endswith(f"  - {where}: the key {key} is not text (YAML reads a key such as 1, 3.5, yes "
                                      "or null as a number, true or false, or null); quote it (\"1\": ...), or remove "
                                      "it")


def test_a_link_to_nothing_and_a_device_given_as_the_study_file_say_what_they_are(tmp_path):
    """Before, both were told "does not exist", though the link is there (its target is not) and /dev/null is."""
    link = tmp_path / "study.yaml"
    link.symlink_to(tmp_path / "moved.yaml")
    with pytest.raises(ConfigError) as caught:
        load_study(link)
    assert str(caught.value) == (f"study file {link} is a link to {tmp_path / 'moved.yaml'}, which leads to no file "
                                 "(it is missing, or links loop); point the link at the study file, or pass the "
                                 "study file itself")
    with pytest.raises(ConfigError) as caught:
        load_study("/dev/null")
    assert str(caught.value) == ("study file /dev/null is not a regular file (a device, a pipe or a socket); pass the "
                                 "path of a .yaml study (see configs/)")


def test_a_second_yaml_document_in_the_study_file_is_told_what_to_do(write_study):
    """Before: PyYAML's "but found another document", which did not say that a study file holds one."""
    path = write_study("name: s\narms:\n  - {name: base, mechanism: none}\n---\nname: t\n")
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value).endswith("but found another document (expected a single document in the stream at line "
                                      "1, column 1); a study file holds one study: remove the '---' line and what "
                                      "follows it, or put that study in a file of its own")


@pytest.mark.parametrize("text, hint", [
    ("name: s\n  arms: []\n", "a value holding ': ' must be quoted"),
    ("name: s: t\n", "a value holding ': ' must be quoted"),
    ('name: "s\narms: []\n', "close the quote"),
    ("name: s\narms\n", "write each setting as key: value"),
    ("name: s\narms: [a, b\nseeds: [0]\n", "close the [ or {"),
    ("name: s\narms: {a: 1\n", "close the [ or {"),
    ("name: s\n- a\n", "line the key up with the other keys of its section"),
    ("name: *x\n", "define the anchor"),
    ("name: !foo s\n", "remove the tag"),
    ("name: @s\n", "quote the value"),
    ("? [a]\n: 1\n", "a key is a word"),
])
def test_a_yaml_syntax_error_says_what_to_do(write_study, text, hint):
    """Before: PyYAML's words alone (e.g. "mapping values are not allowed here"), with a line but nothing to do."""
    path = write_study(text)
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    message = str(caught.value)
    assert message.startswith(f"study file {path} is not valid YAML: line ") and hint in message


def _laughs(depth: int) -> str:
    """Anchors each repeating the one before nine times ("billion laughs"): 9^depth values from a few hundred bytes."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, depth)]
    return "\n  ".join(lines)


@pytest.mark.parametrize("change, words", [
    (f"name: s\nx:\n  {_laughs(6)}", "its aliases expand to more than 100,000 values"),
    ("name: s\nx: &a [1, *a]", "an alias refers to the anchor it stands inside"),
])
def test_aliases_that_expand_past_any_study_are_refused_before_the_schema_walks_them(write_study, change, words):
    """Nine anchors deep, a 1 kB study file expanded to 10^9 values, which the schema walked for minutes while memory
    filled; an anchor holding its own alias is a value without end. Each is one line naming the file and where."""
    path = write_study(GOOD.replace("name: s", change))
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value).startswith(f"study file {path} is not valid YAML: line ") and words in str(caught.value)


def test_a_momentum_beside_adam_is_refused_and_sgd_takes_it(write_study):
    """Adam takes no momentum: ``momentum: 0.5`` beside the default optimiser trained exactly as without it. SGD takes
    it; the default (0.9), which every study.yaml holds, passes beside Adam, and so does a run's record an earlier
    dpmed wrote with another (read back through JSON)."""
    from dpmed.config import TrainingConfig

    path = write_study(GOOD)
    with pytest.raises(ConfigError, match=r"have 1 problem.*\n  - --set training.momentum=0.5: training.momentum: sets "
                                          r"SGD's momentum, and optimizer adam takes none \(it would change nothing\): "
                                          r"set optimizer: sgd to train with it, or remove it \(got 0.5\)$"):
        load_study(path, {"training.momentum": 0.5}, origins={"training.momentum": "--set training.momentum=0.5"})
    assert load_study(path, {"training.momentum": 0.5, "training.optimizer": "sgd"}).training.momentum == 0.5
    assert load_study(path, {"training.momentum": 0.9}).training.optimizer == "adam"
    written = TrainingConfig().model_dump(mode="json") | {"momentum": 0.5}
    assert TrainingConfig.model_validate_json(json.dumps(written)).momentum == 0.5


def test_public_pretraining_refuses_a_dp_engine(write_study):
    """Public pretraining takes no DP-SGD step: ``pretrain.training.dp_engine: opacus`` changed nothing but the
    weights' cache key (the same weights trained again). The study's own training.dp_engine still sets the arms'."""
    from dpmed.config import Study

    public = {"public": "a phantom, of no person", "data": {"source": "phantom", "seed": 1}}
    path = write_study(GOOD)
    with pytest.raises(ConfigError, match=r"\n  - override pretrain=.*: pretrain.training.dp_engine: chooses how "
                                          r"DP-SGD clips, and public pretraining trains without privacy"):
        load_study(path, {"pretrain": {**public, "training": {"dp_engine": "opacus"}}})
    study = load_study(path, {"pretrain": public, "training.dp_engine": "opacus"})
    assert study.training.dp_engine == "opacus" and study.pretrain.training.dp_engine == "dpmed"
    written = study.model_dump(mode="json")
    written["pretrain"]["training"]["dp_engine"] = "opacus"
    assert Study.model_validate_json(json.dumps(written)).pretrain.training.dp_engine == "opacus"


def test_a_run_finished_with_a_momentum_beside_adam_is_the_run_of_the_default_momentum():
    """An earlier dpmed took a momentum beside Adam without a word, and trained as with the default. The study file
    that gave it is refused now, so the one that resumes its folder or adds a seed there gives none: its finished
    runs must still be reused (a DP-SGD run trained again is a new release of the same patients), not refused as
    made with other settings. Under SGD the momentum trains, and another one still tells the runs apart."""
    from dpmed.config import TrainingConfig
    from dpmed.resumption import setting_differences

    def written(**settings) -> TrainingConfig:      # as a run.json or study.yaml is read back
        return TrainingConfig.model_validate_json(json.dumps(TrainingConfig().model_dump(mode="json") | settings))

    assert setting_differences(written(momentum=0.5).computed_settings(), TrainingConfig().computed_settings()) == []
    sgd = TrainingConfig(optimizer="sgd").computed_settings()
    assert setting_differences(written(optimizer="sgd", momentum=0.5).computed_settings(), sgd) == [
        "momentum: 0.5 in the finished run, 0.9 now"]
