"""load_dataset and the registry of dataset sources."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.data import DATASET_SOURCES, DataRequest, SplitPlan, load_dataset
from dpmed.errors import DataError


def _fixture_npz(path, shape=(28, 28)):
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 5), ("val", 3), ("test", 3)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(n) % 2)[:, None].astype(np.uint8)
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("name", sorted(DATASET_SOURCES))
def test_every_source_is_described(name):
    info = DATASET_SOURCES[name]
    assert info.name == name and info.summary
    assert not info.needs_path or info.layout  # a user must learn where the files go
    assert info.options <= {"labels", "classes", "name", "columns", "task", "uncertain", "views", "split",
                            "skip_invalid", "cache_dir"}


def test_unknown_source_lists_the_known_ones():
    with pytest.raises(DataError) as err:
        load_dataset(source="kaggle", path=None, image_size=None, channels=None, seed=0, n_images=None)
    assert "'kaggle'" in str(err.value)
    assert all(repr(name) in str(err.value) for name in DATASET_SOURCES)


def test_phantom_is_generated_at_the_size_and_converted_to_rgb():
    d = load_dataset(source="phantom", path=None, image_size=32, channels=3, seed=4, n_images=60)
    assert d.train.image_shape == (3, 32, 32) and d.train.masks.shape[1:] == (32, 32)
    assert sum(len(s) for s in (d.train, d.val, d.test)) == 60
    assert d.source["image_size"] == 32 and d.source["transforms"] == ("channels 1 -> 3",)
    np.testing.assert_array_equal(d.test.images[:, 0], d.test.images[:, 2])


def test_phantom_defaults_and_seed():
    a = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=2, n_images=30)
    b = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=2, n_images=30)
    assert a.train.image_shape == (1, 64, 64) and "transforms" not in a.source
    np.testing.assert_array_equal(a.train.images, b.train.images)


def test_medmnist_is_resized_with_provenance(tmp_path):
    path = _fixture_npz(tmp_path / "tiny.npz")
    d = load_dataset(source="medmnist", path=str(path), image_size=64, channels=3, seed=0, n_images=None)
    assert d.train.image_shape == (3, 64, 64) and d.val.image_shape == d.test.image_shape == (3, 64, 64)
    assert d.source["transforms"] == ("resize 28x28 -> 64x64 (bilinear, antialiased)", "channels 1 -> 3")
    assert d.train.images.dtype == np.float32 and d.train.images.max() <= 1


def test_real_pneumoniamnist_through_the_registry(pneumoniamnist_path):
    d = load_dataset(source="medmnist", path=pneumoniamnist_path, image_size=64, channels=None, seed=0, n_images=None)
    assert d.test.images.shape == (624, 1, 64, 64)


def test_arguments_that_do_not_apply_are_errors(tmp_path):
    with pytest.raises(DataError, match="needs a path"):
        load_dataset(source="medmnist", path=None, image_size=None, channels=None, seed=0, n_images=None)
    with pytest.raises(DataError, match="needs a path"):      # first: the path is what the user must give at all
        load_dataset(source="medmnist", path=None, image_size=None, channels=None, seed=0, n_images=10)
    with pytest.raises(DataError, match="reads no file"):
        load_dataset(source="phantom", path="x.npz", image_size=None, channels=None, seed=0, n_images=None)
    path = _fixture_npz(tmp_path / "tiny.npz")
    with pytest.raises(DataError, match="n_images=10"):
        load_dataset(source="medmnist", path=path, image_size=None, channels=None, seed=0, n_images=10)
    with pytest.raises(DataError, match="channels"):
        load_dataset(source="phantom", path=None, image_size=None, channels=2, seed=0, n_images=30)


@pytest.mark.parametrize("name", sorted(n for n, s in DATASET_SOURCES.items() if s.needs_path))
def test_a_file_source_read_directly_without_a_path_says_it_needs_one(name):
    """DATASET_SOURCES is public: a library call of an entry's read, past read_dataset's checks, gets the same
    DataError naming where the files go, not a TypeError from deep in a reader."""
    info = DATASET_SOURCES[name]
    with pytest.raises(DataError, match="needs a path") as err:
        info.read(DataRequest(source=name, path=None, seed=0))
    assert info.layout in str(err.value)


def test_a_bad_image_size_or_aspect_given_to_load_dataset_is_a_data_error_naming_it():
    with pytest.raises(DataError, match=r"^image_size must be a positive number of pixels, got 0$"):
        load_dataset(source="phantom", path=None, image_size=0, channels=None, seed=0, n_images=30)
    with pytest.raises(DataError, match=r"^Preprocessing.aspect must be 'stretch' or 'crop', got 'squash'$") as err:
        load_dataset(source="phantom", path=None, image_size=16, channels=None, seed=0, n_images=30, aspect="squash")
    assert err.value.__cause__ is None and err.value.__suppress_context__     # one line, no ValueError behind it


def test_a_generated_source_without_a_size_takes_its_own():
    """No image_size: the phantom's and the random processes' own 64 px, not a resize of theirs."""
    phantom = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=0, n_images=30)
    processes = load_dataset(source="random_processes", path=None, image_size=None, channels=None, seed=0,
                             n_images=30)
    assert phantom.train.image_shape[1:] == processes.train.image_shape[1:] == (64, 64)


@pytest.mark.parametrize("aspect", ["stretch", "crop"])
def test_an_array_source_s_masks_are_cut_and_resized_as_its_images_are(aspect):
    """Lesion masks must stay on their lesions (the explanation metrics score a map against them): with the masks
    themselves as the images, each processed mask is its processed image thresholded at 0.5, for a crop to another
    aspect as for a stretch."""
    from dataclasses import replace

    from dpmed.data.registry import _preprocess_arrays
    from dpmed.data.transforms import Preprocessing

    d = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=1, n_images=40)
    as_images = replace(d, **{name: replace(split, images=split.masks[:, None].astype(np.float32))
                              for name, split in (("train", d.train), ("val", d.val), ("test", d.test))})
    out = _preprocess_arrays(as_images, Preprocessing(size=(16, 32), aspect=aspect), generated=False)
    for split in (out.train, out.val, out.test):
        assert split.masks.shape[1:] == (16, 32) and split.masks.any()
        np.testing.assert_array_equal(split.masks, split.images[:, 0] >= 0.5)


def test_an_array_source_needing_no_step_keeps_the_normalisation_asked_for():
    d = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=2, n_images=30,
                     normalize=((0.5,), (0.25,)))
    assert "transforms" not in d.source and d.normalization == ((0.5,), (0.25,))
    assert load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=2,
                        n_images=30).normalization is None


# the optional study keys each source reads; any other is refused, never ignored
OPTIONS = {
    "phantom": {"task"}, "random_processes": set(), "medmnist": set(),
    "folders": {"split", "skip_invalid", "cache_dir", "labels"},
    "aptos": {"split", "skip_invalid", "cache_dir"}, "ham10000": {"split", "skip_invalid", "cache_dir"},
    "nih": {"split", "skip_invalid", "cache_dir", "labels"},
    "chexpert": {"split", "skip_invalid", "cache_dir", "labels", "uncertain", "views"},
    "mimic": {"split", "skip_invalid", "cache_dir", "labels", "uncertain", "views"},
    "csv": {"split", "skip_invalid", "cache_dir", "labels", "classes", "name", "columns", "task"},
}


def test_each_source_reads_exactly_its_documented_options():
    assert {name: set(info.options) for name, info in DATASET_SOURCES.items()} == OPTIONS


@pytest.mark.parametrize("key, value", [("labels", ("a", "b")), ("classes", ("a", "b")), ("columns", {"path": "p"}),
                                        ("task", "binary"), ("name", "x"),
                                        ("uncertain", "ones"), ("views", "all"), ("skip_invalid", True),
                                        ("cache_dir", "cache"),
                                        ("split", SplitPlan())])
def test_an_option_an_array_file_does_not_read_is_refused_naming_it(tmp_path, key, value):
    path = _fixture_npz(tmp_path / "tiny.npz")
    with pytest.raises(DataError, match=rf"data\.{key} does not apply to source 'medmnist'"):
        load_dataset(source="medmnist", path=path, image_size=None, channels=None, seed=0, n_images=None,
                     **{key: value})


def test_an_array_file_at_the_size_asked_for_is_not_resized_and_one_resized_keeps_its_normalisation(tmp_path):
    from dpmed.data.transforms import Preprocessing

    path = _fixture_npz(tmp_path / "tiny.npz")
    same = load_dataset(source="medmnist", path=path, image_size=28, channels=None, seed=0, n_images=None)
    assert "transforms" not in same.source
    norm = ((0.5,), (0.25,))
    d = load_dataset(source="medmnist", path=path, image_size=64, channels=None, seed=0, n_images=None,
                     aspect="crop", normalize=norm)
    assert d.normalization == norm and d.source["transforms"] == ("resize 28x28 -> 64x64 (bilinear, antialiased)",)
    assert d.source["preprocessing"] == Preprocessing(size=(64, 64), aspect="crop", normalize=norm).describe()


def test_a_non_square_array_file_cropped_to_the_aspect_says_so(tmp_path):
    path = _fixture_npz(tmp_path / "wide.npz", shape=(20, 28))
    d = load_dataset(source="medmnist", path=path, image_size=16, channels=None, seed=0, n_images=None, aspect="crop")
    assert d.source["transforms"] == (
        "central crop to the aspect, then resize 20x28 -> 16x16 (bilinear, antialiased)",)
    assert d.train.image_shape == (1, 16, 16)


@pytest.mark.parametrize("step, text", [("minmax", "per-image min-max"),
                                        ("equalize", "per-image histogram equalisation")])
def test_a_per_image_step_runs_on_an_array_source_where_it_is_the_only_step(step, text):
    plain = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=2, n_images=30)
    d = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=2, n_images=30, **{step: True})
    assert d.source["transforms"] == (text,) and not np.array_equal(d.train.images, plain.train.images)
    flat = d.train.images.reshape(len(d.train), -1)
    np.testing.assert_allclose(flat.min(axis=1), 0, atol=1e-6)
    np.testing.assert_allclose(flat.max(axis=1), 1, atol=1e-6)


def test_the_random_processes_take_n_images_and_the_phantom_its_tasks():
    d = load_dataset(source="random_processes", path=None, image_size=16, channels=None, seed=0, n_images=60)
    assert sum(len(s) for s in (d.train, d.val, d.test)) == 60
    multi = load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=0, n_images=60,
                         task="multilabel")
    assert multi.task.kind == "multilabel"
    with pytest.raises(DataError, match="not a phantom task"):
        load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=0, n_images=60,
                     task="multiclass")
    with pytest.raises(DataError, match="ordinal"):      # grades are multiclass; findings have no order
        load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=0, n_images=60,
                     task="multilabel", ordinal=True)


def test_a_normalisation_for_another_channel_count_is_refused_when_the_data_are_read():
    with pytest.raises(DataError, match="normalize has 3 mean and 3 std values for images with 1 channel"):
        load_dataset(source="phantom", path=None, image_size=None, channels=None, seed=0, n_images=30,
                     normalize=((0.5, 0.5, 0.5), (0.2, 0.2, 0.2)))


@pytest.mark.parametrize("source", ["phantom", "random_processes"])
def test_more_generated_images_than_memory_holds_are_refused_before_any_is_made(source, monkeypatch):
    """Before: data.n_images 10**23 ended in "internal error: OverflowError: Python int too large to convert to C
    long" (10**9 filled the memory for minutes first)."""
    from dpmed import memory

    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=2**30, swap=0))
    with pytest.raises(DataError, match=r"^the 100000000000000000000000 images at 16 x 16 px, 1 channel, take .* of "
                                        r"memory as float32, and only 1.1 GB is free for dpmed here: lower n_images "
                                        rf"\(the images source {source} generates\) or image_size, or run on a "
                                        r"machine with more memory$"):
        load_dataset(source=source, path=None, image_size=16, channels=None, seed=0, n_images=10**23)


class _Read(Exception):
    """Raised by a stand-in reader once it has seen its arguments."""


@pytest.mark.parametrize("source, reader, given, expected", [
    ("folders", "read_image_folders", {"labels": ("normal", "sick")}, {"class_names": ("normal", "sick")}),
    ("chexpert", "read_chexpert", {"labels": ("Edema",), "uncertain": "ones", "views": "all"},
     {"findings": ("Edema",), "uncertain": "ones", "views": "all"}),
    ("chexpert", "read_chexpert", {}, {"findings": None, "uncertain": "zeros", "views": None}),
    ("nih", "read_nih", {"labels": ("Hernia", "Mass")}, {"findings": ("Hernia", "Mass")}),
    ("mimic", "read_mimic", {"labels": ("Edema",), "uncertain": "ones", "views": "all"},
     {"findings": ("Edema",), "uncertain": "ones", "views": "all"}),
    ("csv", "read_csv_table", {"labels": ("y",), "classes": ("no", "yes"), "name": "d", "columns": {"path": "p"},
                               "task": "binary"},
     {"labels": ("y",), "classes": ("no", "yes"), "name": "d", "columns": {"path": "p"}, "task": "binary"}),
])
def test_a_file_source_s_reader_receives_every_option_the_study_gives(tmp_path, monkeypatch, source, reader, given,
                                                                      expected):
    """An option a source reads must reach its reader: a CheXpert study asking for every view, or NIH findings of
    its own, would otherwise silently train on the default views or findings."""
    from dpmed.data import registry

    seen = {}

    def stand_in(path, **kwargs):
        seen.update(kwargs, path=path)
        raise _Read

    monkeypatch.setattr(registry, reader, stand_in)
    with pytest.raises(_Read):
        load_dataset(source=source, path=tmp_path, image_size=8, channels=1, seed=0, n_images=None, **given)
    assert seen.pop("path") == tmp_path
    assert {key: (tuple(v) if isinstance(v, list) else v) for key, v in seen.items()} == expected


def test_a_normalisation_with_unequal_counts_of_means_and_stds_is_refused():
    """One mean with three stds would broadcast without a word; the study must give both per channel, or one each."""
    with pytest.raises(DataError, match="normalize has 1 mean and 3 std values for images with 3 channel"):
        load_dataset(source="phantom", path=None, image_size=None, channels=3, seed=0, n_images=30,
                     normalize=((0.5,), (0.2, 0.2, 0.2)))


@pytest.mark.parametrize("source", ["phantom", "random_processes"])
def test_a_generated_source_asked_for_images_that_are_not_square_refuses_them(source):
    """The generated sources draw square images of one side: asked for 16 x 32 they gave 16 x 16 while the record
    said 16x32."""
    from dpmed.data.registry import DataRequest, read_dataset
    from dpmed.data.transforms import Preprocessing

    with pytest.raises(DataError, match=rf"^source {source} generates square images; asked for 16 x 32 px"):
        read_dataset(DataRequest(source=source, path=None, seed=0, n_images=30,
                                 preprocessing=Preprocessing(size=(16, 32))))
    square = read_dataset(DataRequest(source=source, path=None, seed=0, n_images=60,
                                      preprocessing=Preprocessing(size=(16, 16))))
    assert square.train.image_shape[1:] == (16, 16)
