"""The study file's data section: every source of the registry is a valid ``data.source``, new keys parse, and
unknown or misplaced keys are errors that name the key."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from dpmed.config import DataConfig, load_study
from dpmed.data import DATASET_SOURCES, DataRequest, Preprocessing, SplitPlan
from dpmed.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[2]


def test_schema_sources_are_the_registry():
    assert set(typing.get_args(DataConfig.model_fields["source"].annotation)) == set(DATASET_SOURCES)


def test_data_keys_parse(write_study, tmp_path):
    (tmp_path / "xr").mkdir()
    study = load_study(write_study(
        "name: s\ndata:\n  source: folders\n  path: xr\n  labels: [NORMAL, PNEUMONIA]\n  image_size: 64\n"
        "  preprocessing: {aspect: crop, minmax: true, equalize: true, normalize: {mean: [0.5], std: [0.25]}}\n"
        "  split: {val_fraction: 0.1, seed: 3, shared_patients: keep}\n  skip_invalid: true\n"
        "  cache_dir: /tmp/c\narms: [{name: a, mechanism: none}]\n"))
    d = study.data
    assert d.path == (tmp_path / "xr").resolve() and d.labels == ["NORMAL", "PNEUMONIA"]
    assert d.preprocessing.equalize and d.preprocessing.normalize.std == [0.25]
    assert d.preprocessing.aspect == "crop" and d.to_request().preprocessing.aspect == "crop"
    assert d.split.val_fraction == 0.1 and d.split.test_fraction == 0.15 and d.split.shared_patients == "keep"
    assert d.skip_invalid and d.cache_dir == Path("/tmp/c")


@pytest.mark.parametrize("data, message", [
    ("{source: folders, path: xr, preprocessing: {equalise: true}}", "data.preprocessing.equalise: unknown key"),
    ("{source: folders, path: xr, preprocessing: {aspect: pad}}", "data.preprocessing.aspect"),
    ("{source: folders, path: xr, split: {val_fraction: 0.6, test_fraction: 0.5}}", "must be below 1"),
    ("{source: folders, path: xr, preprocessing: {normalize: {mean: [0.5, 0.5], std: [1]}}}", "same number"),
    ("{source: folders, path: xr, preprocessing: {normalize: {mean: [.nan], std: [1]}}}", "finite"),   # was taken
    ("{source: csv, path: xr, columns: {file: a}}", "data.columns.path: required key is missing"),
    ("{source: folders}", "source 'folders' needs 'path'"),
    ("{source: kermany, path: xr}", "data.source"),
    ("{source: folders, path: xr, n_images: 100}", "'n_images' applies only to generated sources"),   # not ignored
    ("{source: folders, path: xr, seed: 7}", r"data.seed: seeds the images a generated source draws, and source "
                                             r"'folders' reads its images: it would change nothing \(a split dpmed "
                                             r"carves is seeded by data.split.seed\); remove it"),   # was ignored
    ("{source: phantom, preprocessing: {normalize: {mean: [0.5], std: [0]}}}", "data.preprocessing.normalize"),
])
def test_bad_data_keys_name_the_key(write_study, tmp_path, data, message):
    (tmp_path / "xr").mkdir(exist_ok=True)
    with pytest.raises(ConfigError, match=message):
        load_study(write_study(f"name: s\ndata: {data}\narms: [{{name: a, mechanism: none}}]\n"))


def test_each_seed_and_split_option_reaches_the_data_stage_as_given():
    """Three seeds (the generated data's, the split's, the cohort's) and the split's options: routed to the wrong
    stage, a second site's cohort would be drawn with the split's seed (another set of patients), or the published
    split kept where the study pooled it. Every shipped study leaves the seeds at 0, where a mix-up is invisible."""
    request = DataConfig.model_validate({
        "source": "folders", "path": "xr",
        "split": {"seed": 2, "official": False, "shared_patients": "keep"},
        "patients": {"fraction": 0.5, "part": 1, "seed": 3}}).to_request()
    assert (request.seed, request.split.seed, request.patients.seed) == (0, 2, 3)
    generated = DataConfig.model_validate({"source": "phantom", "seed": 1,
                                           "patients": {"fraction": 0.5, "part": 1, "seed": 3}}).to_request()
    assert (generated.seed, generated.patients.seed) == (1, 3)
    assert request.split.official is False and request.split.shared_patients == "keep"
    assert (request.patients.fraction, request.patients.part) == (0.5, 1)


def test_a_data_seed_is_refused_only_where_no_reader_takes_it(write_study, tmp_path):
    """``data.seed`` draws the images of a generated source and is read nowhere else: on a MedMNIST file it ran the
    same images and split as seed 0 while study.yaml recorded it. The default (0), which every study.yaml holds, and a
    study.yaml an earlier dpmed wrote with another (read back through JSON, as report, status and resume do) pass."""
    import json

    from dpmed.config import Study

    (tmp_path / "m.npz").write_bytes(b"")
    file = "name: s\ndata: {source: medmnist, path: m.npz, seed: %d}\narms: [{name: a, mechanism: none}]\n"
    with pytest.raises(ConfigError, match=r"data.seed: seeds .*source 'medmnist' reads its images: it would change "
                                          r"nothing; remove it"):
        load_study(write_study(file % 7))
    study = load_study(write_study(file % 0))
    assert study.data.seed == 0
    written = study.model_dump(mode="json")
    written["data"]["seed"] = 7
    assert Study.model_validate_json(json.dumps(written)).data.seed == 7
    for source in ("phantom", "random_processes"):
        assert load_study(write_study(f"name: s\ndata: {{source: {source}, seed: 7}}\n"
                                      "arms: [{name: a, mechanism: none}]\n")).data.seed == 7


def test_kermany_study_file(chest_xray_path):
    study = load_study(REPO / "configs" / "kermany.yaml")
    assert study.data.source == "folders" and study.data.path == chest_xray_path.resolve()
    assert study.data.image_size == 64 and study.model.name == "scatternet_cnn"
    assert study.training.epochs == "auto" and study.training.ema_decay == 0.999
    arms = {arm.mechanism: arm for arm in study.arms}
    assert arms["pixel_laplace"].scale == [0.5] and arms["dp_sgd"].target_epsilon == [1, 8]


def test_an_option_the_source_ignores_stops_the_study(tmp_path, write_image):
    """Refused where the data are read (the Python API's `load_dataset` too), naming the key."""
    from dpmed.data import load_dataset

    for cls in ("a", "b"):
        for i in range(3):
            write_image(tmp_path / "xr" / cls / f"{i}.png")
    with pytest.raises(DataError, match="data.uncertain does not apply to source 'folders'"):
        load_dataset(source="folders", path=tmp_path / "xr", image_size=None, channels=None, seed=0, n_images=None,
                     uncertain="ones")


def test_a_public_source_without_a_path_is_not_sent_to_data_path(write_study):
    """pretrain.data of a file source without a path was told "(or pass --data-path)", which sets the study's own
    data.path, never a public source of another kind."""
    with pytest.raises(ConfigError) as info:
        load_study(write_study("name: s\npretrain: {public: x, data: {source: csv}}\n"
                               "arms: [{name: a, mechanism: none}]\n"))
    assert ("  - pretrain.data: source 'csv' needs 'path': its file or folder (--data-path gives the study's data "
            "section one, not pretrain.data)") in str(info.value)


@pytest.mark.parametrize("section", ["data", "pretrain.data"])
@pytest.mark.parametrize("given, message", [
    ("uncertain: ones", "'uncertain' does not apply to source 'folders' (it applies to: chexpert, mimic)"),
    ("classes: [a, b]", "'classes' does not apply to source 'folders' (it applies to: csv)"),
    ("split: {seed: 1}", None),
    ("task: multiclass", None),
])
def test_an_option_the_source_ignores_is_refused_with_the_study_file(write_study, tmp_path, section, given, message):
    """Before, the data stage refused it, naming data.<key>: `dpmed plan`, which reads no public data, passed a
    pretrain.data.split for the phantom, and `dpmed run` refused it only after reading the private data, as
    "data.split does not apply to source 'phantom'", a key the study's own data section did not hold."""
    (tmp_path / "xr").mkdir(exist_ok=True)
    source = "{source: folders, path: xr" if given.startswith(("uncertain", "classes")) else "{source: phantom"
    block = f"{source}, {given}}}"
    text = ("name: s\nmodel: {name: small_cnn}\n"
            + (f"data: {block}\n" if section == "data" else f"pretrain: {{public: synthetic, data: {block}}}\n")
            + "arms: [{name: a, mechanism: none}]\n")
    key = given.split(":")[0]
    expected = message or ("task 'multiclass' is not a phantom task" if key == "task"
                           else f"'{key}' does not apply to source 'phantom'")
    with pytest.raises(ConfigError) as info:
        load_study(write_study(text))
    assert f"  - {section}: {expected}" in str(info.value)


@pytest.mark.parametrize("section, expected", [
    ({"source": "csv", "path": "x.csv", "image_size": 32, "channels": 3,
      "preprocessing": {"aspect": "crop", "minmax": True, "equalize": True,
                        "normalize": {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.1, 0.3]}},
      "labels": ["grade"], "classes": ["a", "b", "c"], "name": "d", "columns": {"path": "file", "patient": "pid"},
      "task": "multiclass", "ordinal": True, "skip_invalid": True, "cache_dir": "/tmp/c",
      "split": {"val_fraction": 0.1, "test_fraction": 0.3}},
     dict(source="csv", path=Path("x.csv"), seed=0,
          preprocessing=Preprocessing(size=(32, 32), channels=3, aspect="crop", minmax=True, equalize=True,
                                      normalize=((0.5, 0.4, 0.3), (0.2, 0.1, 0.3))),
          labels=("grade",), classes=("a", "b", "c"), name="d", columns={"path": "file", "patient": "pid"},
          task="multiclass", ordinal=True, skip_invalid=True, cache_dir=Path("/tmp/c"),
          split=SplitPlan(val_fraction=0.1, test_fraction=0.3))),
    ({"source": "chexpert", "path": "x", "labels": ["Edema"], "uncertain": "ones", "views": "all"},
     dict(source="chexpert", path=Path("x"), seed=0, labels=("Edema",), uncertain="ones", views="all")),
    ({"source": "phantom", "n_images": 77, "task": "multilabel", "seed": 5},
     dict(source="phantom", path=None, seed=5, n_images=77, task="multilabel")),
    # one of two boolean steps on: with both on (above), minmax and equalize could trade places unseen
    ({"source": "folders", "path": "x", "preprocessing": {"minmax": True}},
     dict(source="folders", path=Path("x"), seed=0, preprocessing=Preprocessing(minmax=True, equalize=False))),
    ({"source": "folders", "path": "x", "preprocessing": {"equalize": True}},
     dict(source="folders", path=Path("x"), seed=0, preprocessing=Preprocessing(minmax=False, equalize=True))),
])
def test_every_key_of_the_data_section_reaches_the_request_as_given(section, expected):
    """A key dropped or swapped on its way from the study file (minmax, the mean for the std, the views, the
    validation share for the test share) would read other data than the study says, without a word."""
    assert DataConfig.model_validate(section).to_request() == DataRequest(**expected)
