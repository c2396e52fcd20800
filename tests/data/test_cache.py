"""The decode cache: a memory-mapped entry keyed by the files and the preprocessing, reused only when both match."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dpmed.data import Preprocessing, SplitPlan, load_dataset
from dpmed.data.cache import cache_key, decode_images
from dpmed.errors import DataError


def _files(tmp_path, write_image, n=6):
    return [write_image(tmp_path / "img" / f"{i}.png", level=60 + 30 * i, size=(10, 14)) for i in range(n)]


def test_second_decode_reads_the_cache_and_matches_memory(tmp_path, write_image):
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1, minmax=True)
    memory = decode_images(paths, pre)
    first = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    second = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert not memory.cached and not first.cached and second.cached and first.key == second.key
    assert isinstance(second.images, np.memmap) and second.images.shape == (6, 1, 8, 8)
    np.testing.assert_array_equal(memory.images, second.images)
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == [".json", ".npy"]


def test_key_follows_preprocessing_and_file_changes(tmp_path, write_image):
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    key = cache_key(paths, pre, 1, (8, 8))
    assert cache_key(paths, Preprocessing(size=(8, 8), channels=1, equalize=True), 1, (8, 8)) != key
    assert cache_key(paths, pre, 3, (8, 8)) != key and cache_key(paths, pre, 1, (16, 16)) != key
    assert cache_key(paths[::-1], pre, 1, (8, 8)) != key
    assert cache_key(paths, Preprocessing(size=(8, 8), channels=1, aspect="crop"), 1, (8, 8)) != key
    stat = os.stat(paths[2])
    os.utime(paths[2], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file changed
    assert cache_key(paths, pre, 1, (8, 8)) != key
    # normalize is applied at the model input, not stored: it does not change the key
    fixed = Preprocessing(size=(8, 8), channels=1, normalize=((0.5,), (0.25,)))
    assert cache_key(paths, fixed, 1, (8, 8)) == cache_key(paths, pre, 1, (8, 8))


def test_failures_are_stored_with_the_entry(tmp_path, write_image):
    paths = _files(tmp_path, write_image)
    paths[3].write_bytes(b"\x89PNG broken")
    pre = Preprocessing(size=(8, 8), channels=1)
    first = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    second = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert second.cached and list(first.failures) == list(second.failures) == [3]
    assert second.failures[3] == first.failures[3] and "cannot be" in first.failures[3]


def test_load_dataset_reuses_the_cache(tmp_path, write_image):
    for cls in ("a", "b"):
        for i in range(6):
            write_image(tmp_path / "data" / cls / f"{cls}{i}.png", level=50 + 20 * i)
    args = dict(source="folders", path=tmp_path / "data", image_size=8, channels=1, seed=0, n_images=None,
                split=SplitPlan(val_fraction=0.25, test_fraction=0.25), cache_dir=tmp_path / "cache")
    one, two = load_dataset(**args), load_dataset(**args)
    assert one.source["decode"]["from_cache"] is False and two.source["decode"]["from_cache"] is True
    np.testing.assert_array_equal(one.train.images, two.train.images)
    assert two.train.images.flags.writeable and not isinstance(two.train.images, np.memmap)


def test_a_cache_dir_that_cannot_be_made_is_a_clear_error_naming_the_setting(tmp_path, write_image):
    paths = _files(tmp_path, write_image)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(DataError, match=r"data.cache_dir .*cache/inner cannot be made or written .*remove data.cache"):
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=blocker / "inner")
