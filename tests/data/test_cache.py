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
    assert second.images.shape == (6, 1, 8, 8)
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


def _key_before_aspect_and_size_refusal(paths, pre, channels, size):
    """The key as dpmed computed it before ``aspect`` and before images of another size were refused (they were
    stored as failures then): written out here, as a second implementation, from that version's rules."""
    import hashlib
    import json
    from pathlib import Path

    import PIL

    h = hashlib.sha256()
    h.update(json.dumps({"format": "dpmed-image-cache-1", "pillow": PIL.__version__, "channels": channels,
                         "size": list(size), "resize": pre.size is not None, "minmax": pre.minmax,
                         "equalize": pre.equalize}, sort_keys=True).encode())
    for path in paths:
        st = Path(path).resolve().stat()
        h.update(f"{Path(path).resolve()}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


def test_an_entry_from_before_is_read_where_its_pixels_still_hold_and_not_where_it_kept_other_sizes(tmp_path,
                                                                                                   write_image):
    """Resized entries stay valid across the versions; an unresized one may hold images of another size as
    failures, which dpmed now refuses, so it gets a new key rather than silently dropping those images."""
    paths = _files(tmp_path, write_image)
    sized = Preprocessing(size=(8, 8), channels=1)
    # ... up to EXIF orientation: an entry from before holds a turned JPEG or PNG as stored, and the key cannot tell
    # which files are turned without opening them, so every entry from before is decoded again, once
    assert cache_key(paths, sized, 1, (8, 8)) != _key_before_aspect_and_size_refusal(paths, sized, 1, (8, 8))
    assert _key_before_orientation(paths, sized, 1, (8, 8)) == \
        _key_before_aspect_and_size_refusal(paths, sized, 1, (8, 8))
    unsized = Preprocessing(channels=1)
    assert cache_key(paths, unsized, 1, (10, 14)) != _key_before_aspect_and_size_refusal(paths, unsized, 1, (10, 14))
    # Channels unset: an entry from before converted every image to the first one's channels, now refused
    unset = Preprocessing(size=(8, 8))
    assert cache_key(paths, unset, 1, (8, 8)) != _key_before_aspect_and_size_refusal(paths, unset, 1, (8, 8))


def _key_before_orientation(paths, pre, channels, size, **later):
    """cache_key without the EXIF orientation setting: what it computed before turned images were read upright;
    ``later`` adds the settings of the changes since (orientation="exif")."""
    import hashlib
    import json
    from pathlib import Path

    import PIL

    settings = {"format": "dpmed-image-cache-1", "pillow": PIL.__version__, "channels": channels,
                "size": list(size), "resize": pre.size is not None, "minmax": pre.minmax, "equalize": pre.equalize}
    if pre.aspect != "stretch":
        settings["aspect"] = pre.aspect
    if pre.size is None:
        settings["other_sizes"] = "refused"
    if pre.channels is None:
        settings["other_channels"] = "refused"
    h = hashlib.sha256(json.dumps({**settings, **later}, sort_keys=True).encode())
    for path in paths:
        st = Path(path).resolve().stat()
        h.update(f"{Path(path).resolve()}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


def test_an_entry_from_before_16_bit_images_were_stretched_is_decoded_again(tmp_path, write_image):
    """It holds 12-bit values stored in 16 bits / 65535, near black, and the key cannot tell which files are 16-bit
    without opening them."""
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(channels=1)     # not resized: torch's version is no part of the key
    assert cache_key(paths, pre, 1, (10, 14)) != _key_before_orientation(paths, pre, 1, (10, 14), orientation="exif")


def test_an_entry_from_before_webp_and_tiff_orientation_is_decoded_again_and_one_of_png_is_read(tmp_path,
                                                                                               write_image):
    """It may hold a WebP or multi-picture JPEG as stored, or an uncompressed TIFF shown a quarter turn scrambled;
    a PNG was read upright already, so an entry of PNG files stays valid."""
    pre = Preprocessing(channels=1)
    before = {"orientation": "exif", "sixteen_bit": "stretched"}
    pngs = _files(tmp_path, write_image)
    assert cache_key(pngs, pre, 1, (10, 14)) == _key_before_orientation(pngs, pre, 1, (10, 14), **before)
    for suffix in (".webp", ".tif", ".jpg"):
        turned = [*pngs, write_image(tmp_path / "img" / f"turned{suffix}", size=(10, 14))]
        assert cache_key(turned, pre, 1, (10, 14)) != _key_before_orientation(turned, pre, 1, (10, 14), **before)


def test_an_entry_from_before_palette_dicom_was_read_is_decoded_again(tmp_path, write_image, write_dicom):
    """It keeps a PALETTE COLOR file as unreadable, which it is no longer; an entry without DICOM files holds."""
    from dpmed.data.cache import DICOM_PLUGINS
    from dpmed.provenance import package_version

    paths = [*_files(tmp_path, write_image), write_dicom(tmp_path / "img" / "a.dcm", np.zeros((10, 14), np.uint16))]
    pre = Preprocessing(channels=1)
    before = {"orientation": "exif", "sixteen_bit": "stretched", "pydicom": package_version("pydicom"),
              "pydicom_plugins": {plugin: package_version(plugin) for plugin in DICOM_PLUGINS},
              "pixel_padding": "black"}
    assert cache_key(paths, pre, 1, (10, 14)) != _key_before_orientation(paths, pre, 1, (10, 14), **before)
    assert cache_key(paths, pre, 1, (10, 14)) == _key_before_orientation(paths, pre, 1, (10, 14), **before,
                                                                         palette_color="read")


def test_without_channels_an_image_stored_otherwise_than_the_first_is_refused_naming_it(tmp_path, write_image):
    """Before: every image was converted to the first readable file's channels, which published that one file's
    (a training patient's, perhaps) colour in the shape of the model's first layer."""
    paths = _files(tmp_path, write_image, n=3) + [write_image(tmp_path / "img" / "rgb.png", size=(10, 14),
                                                              mode="RGB")]
    for cache_dir in (None, tmp_path / "cache"):
        with pytest.raises(DataError, match=r"^1 of 4 images are stored colour while the first readable one is "
                                            r"grey \(a file of three equal channels is grey\), e\.g\. .*rgb\.png; "
                                            r"set data\.channels \(1: every image read "
                                            r"as grey, 3: as colour\)$"):
            decode_images(paths, Preprocessing(size=(8, 8)), cache_dir=cache_dir)
    assert not list((tmp_path / "cache").glob("*.npy"))
    assert decode_images(paths, Preprocessing(size=(8, 8), channels=3)).images.shape == (4, 3, 8, 8)


@pytest.mark.parametrize("channels", [None, 1])
def test_each_file_is_opened_once_to_decode_it_whether_or_not_channels_are_set(tmp_path, write_image, monkeypatch,
                                                                               channels):
    """With data.channels unset each file was opened twice, once to read its header's channels and once to decode
    it (a third of the decode time at 64 px); only the first, whose header sets the layout, is opened twice now.
    The images are those of a decode at the channels set."""
    from PIL import Image

    paths = _files(tmp_path, write_image, n=5)
    opened: list[str] = []
    real = Image.open
    monkeypatch.setattr(Image, "open", lambda fp, *a, **k: opened.append(os.path.basename(getattr(fp, "name", fp)))
                        or real(fp, *a, **k))     # a decode opens a file object, a peek a path
    images = decode_images(paths, Preprocessing(size=(8, 8), channels=channels), workers=1).images
    assert sorted(opened) == sorted(["0.png"] + [p.name for p in paths])
    monkeypatch.setattr(Image, "open", real)
    np.testing.assert_array_equal(images, decode_images(paths, Preprocessing(size=(8, 8), channels=1)).images)


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


def test_images_written_to_or_read_from_the_cache_are_held_once(tmp_path, write_image):
    """Before: a study with data.cache_dir copied each split out of a map of the entry, whose pages stayed
    resident beside the copies: at 30,000 images of 224 px its peak was twice the decoded bytes (12 GB, not 6)."""
    for cls in ("a", "b"):
        for i in range(6):
            write_image(tmp_path / "data" / cls / f"{cls}{i}.png", level=50 + 20 * i)
    args = dict(source="folders", path=tmp_path / "data", image_size=8, channels=1, seed=0, n_images=None,
                split=SplitPlan(val_fraction=0.25, test_fraction=0.25), cache_dir=tmp_path / "cache")
    for dataset in (load_dataset(**args), load_dataset(**args)):    # writes the entry, then reads it
        held = dataset.train.images.base
        assert held is not None and not isinstance(held, np.memmap)
        assert dataset.val.images.base is held and dataset.test.images.base is held


def test_a_cache_dir_under_a_file_names_that_file(tmp_path, write_image):
    """Before: "data.cache_dir .../cache/inner/deeper cannot be made or written (Not a directory)", which left the
    user to find which part of the path was wrong."""
    paths = _files(tmp_path, write_image)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(DataError, match=rf"^data.cache_dir {blocker}/inner/deeper lies under {blocker}, which is a "
                                        r"file, not a folder: give a folder \(made if missing\), or remove "
                                        r"data.cache_dir to decode without a cache$"):
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=blocker / "inner" / "deeper")
    assert blocker.read_text() == "a file where the cache folder should be"


def test_a_cache_dir_that_cannot_be_made_is_a_clear_error_naming_the_setting(tmp_path, write_image, monkeypatch):
    paths = _files(tmp_path, write_image)

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(tmp_path), "mkdir", refused)
    with pytest.raises(DataError, match=r"data.cache_dir .*cache cannot be made or written \(Permission denied\); "
                                        r"choose a writable folder, or remove data.cache_dir"):
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=tmp_path / "cache")


def test_a_file_rewritten_with_its_size_and_time_set_back_is_not_read_from_the_cache(tmp_path, write_image):
    """Before, the key held path, size and modification time only: an image replaced by one of the same byte length
    and its time restored (`touch -r`) was read from the cache with its old pixels."""
    import time

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    key = cache_key(paths, pre, 1, (8, 8))
    before = os.stat(paths[2])
    time.sleep(0.01)                           # a status-change time the filesystem can tell from the first
    with open(paths[2], "r+b") as f:           # rewritten in place (same inode), here with the same bytes
        f.write(paths[2].read_bytes())
    os.utime(paths[2], ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(paths[2])
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    if after.st_ctime_ns == before.st_ctime_ns:
        pytest.skip("this filesystem's status-change times are too coarse to tell the rewrite")
    assert cache_key(paths, pre, 1, (8, 8)) != key
    replaced = tmp_path / "copy.png"          # replaced by a copy (another inode), its time set back too
    replaced.write_bytes(paths[4].read_bytes())
    os.utime(replaced, ns=(os.stat(paths[4]).st_atime_ns, os.stat(paths[4]).st_mtime_ns))
    key = cache_key(paths, pre, 1, (8, 8))
    os.replace(replaced, paths[4])
    assert cache_key(paths, pre, 1, (8, 8)) != key


def test_an_entry_is_owner_only_and_a_stopped_decode_leaves_no_partial_images(tmp_path, write_image, monkeypatch,
                                                                               umask_022):
    """Decoded patient images: before, 0644 files in a 0755 folder (under umask 022), and a decode stopped midway
    left a full-size temporary file of them that nothing removed."""
    import dpmed.data.cache as cache

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "cache").iterdir()} == {0o600}

    real = cache.read_image

    def stopped(path, **kw):
        if path == paths[3]:
            raise KeyboardInterrupt
        return real(path, **kw)

    monkeypatch.setattr(cache, "read_image", stopped)
    with pytest.raises(KeyboardInterrupt):
        decode_images(paths, pre, cache_dir=tmp_path / "stopped", workers=1)
    assert list((tmp_path / "stopped").iterdir()) == []

    def full(*args, **kwargs):          # the disk fills as the array is sized: the empty 0600 file is removed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.np.lib.format, "open_memmap", full)
    with pytest.raises(DataError, match="has no room for the 6 decoded images"):
        decode_images(paths, pre, cache_dir=tmp_path / "full")
    assert list((tmp_path / "full").iterdir()) == []


def test_a_cache_dir_without_room_for_the_images_is_a_clear_error_before_any_decode(tmp_path, write_image,
                                                                                   monkeypatch):
    """Before: the entry was a sparse file, and a write through its memory map into a block a full disk could not
    give killed the process with SIGBUS ("Bus error", no message), leaving its partial file of decoded images. The
    blocks are now reserved first; here the disk refuses them as a full one does."""
    import dpmed.data.cache as cache

    def full(fd, offset, length):
        raise OSError(28, "No space left on device")

    decoded = []
    monkeypatch.setattr(cache, "read_image", lambda path, **kw: decoded.append(path))
    monkeypatch.setattr(cache.os, "posix_fallocate", full, raising=False)
    with pytest.raises(DataError, match=r"^data.cache_dir .*/full has no room for the 6 decoded images \(2 kB as "
                       r"float32\): free space on its disk \(or quota\), choose a folder on another disk, or remove "
                       r"data.cache_dir"):
        decode_images(_files(tmp_path, write_image), Preprocessing(size=(8, 8), channels=1),
                      cache_dir=tmp_path / "full")
    assert decoded == [] and list((tmp_path / "full").iterdir()) == []


@pytest.mark.parametrize("cache", [False, True])
def test_images_that_cannot_fit_in_memory_are_refused_before_any_decode(tmp_path, write_image, monkeypatch, cache):
    """Before: a dataset larger than the memory was decoded until the kernel killed dpmed (SIGKILL: no message)."""
    import dpmed.data.cache as cache_module
    from dpmed import memory
    from dpmed.memory import Headroom

    paths = _files(tmp_path, write_image)                      # 6 images of 1 x 8 x 8 float32: 1536 bytes
    decoded = []
    monkeypatch.setattr(cache_module, "read_image", lambda path, **kw: decoded.append(path))
    monkeypatch.setattr(memory, "headroom", lambda: Headroom(ram=1000, swap=500))
    with pytest.raises(DataError, match=r"^the 6 images at 8 x 8 px, 1 channel, take 2 kB of memory as float32, "
                       r"and only 1 kB \(and 500 bytes of swap\) is free for dpmed here: set a smaller "
                       r"data.image_size"):
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=tmp_path / "c" if cache else None)
    assert decoded == [] and not (tmp_path / "c").exists()


def test_images_that_fit_only_with_swap_are_decoded_with_a_warning(tmp_path, write_image, monkeypatch, caplog):
    from dpmed import memory
    from dpmed.memory import Headroom

    paths = _files(tmp_path, write_image)
    monkeypatch.setattr(memory, "headroom", lambda: Headroom(ram=1000, swap=1000))
    assert decode_images(paths, Preprocessing(size=(8, 8), channels=1)).images.shape == (6, 1, 8, 8)
    assert "take 2 kB of memory as float32, more than the 1 kB free: the machine will swap" in caplog.text
    caplog.clear()
    monkeypatch.setattr(memory, "headroom", lambda: Headroom(ram=1536, swap=0))   # just fits: quiet
    decode_images(paths, Preprocessing(size=(8, 8), channels=1))
    assert caplog.text == ""


@pytest.mark.parametrize("fallocate", ["missing", "refused"])
def test_where_blocks_cannot_be_reserved_the_zeros_are_written_and_the_entry_reads_back(tmp_path, write_image,
                                                                                       monkeypatch, fallocate):
    """Without posix_fallocate (macOS, Windows), or on a file system that refuses it for another reason than room,
    the zeros are written after the header, which must stay whole; such a file system was never an error."""
    import dpmed.data.cache as cache

    def refused(fd, offset, length):
        raise OSError(95, "Operation not supported")

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    if fallocate == "missing":
        monkeypatch.delattr(cache.os, "posix_fallocate", raising=False)
    else:
        monkeypatch.setattr(cache.os, "posix_fallocate", refused, raising=False)
    written = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(written.images, decode_images(paths, pre).images)
    np.testing.assert_array_equal(decode_images(paths, pre, cache_dir=tmp_path / "cache").images, written.images)


@pytest.mark.parametrize("field", ["st_ino", "st_size", "st_mtime_ns"])
def test_a_file_replaced_by_another_with_the_same_size_and_times_changes_the_key(tmp_path, write_image, monkeypatch,
                                                                                 field):
    """Each of inode, size and mtime on its own: a file swapped for another whose other fields all match (a restore
    that sets them back, on a filesystem whose ctime is coarse, or is the creation time as on Windows) is another
    file."""
    from pathlib import Path
    from types import SimpleNamespace

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    real = Path.stat
    before = cache_key(paths, pre, 1, (8, 8))

    def other_inode(self, *args, **kwargs):
        st = real(self, *args, **kwargs)
        if self.name != "2.png":
            return st
        fields = dict(st_size=st.st_size, st_ino=st.st_ino, st_mtime_ns=st.st_mtime_ns, st_ctime_ns=st.st_ctime_ns,
                      st_mode=st.st_mode)
        fields[field] += 1
        return SimpleNamespace(**fields)

    monkeypatch.setattr(Path, "stat", other_inode)
    assert cache_key(paths, pre, 1, (8, 8)) != before


def test_a_file_that_could_not_be_read_at_all_is_not_cached_as_unreadable(tmp_path, write_image, monkeypatch):
    """An OSError (a full file table, a share gone for a moment) was stored with the entry as the file's failure, so
    every later study reported the file unreadable, or skipped it, though it reads fine."""
    from PIL import Image

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    real = Image.open

    def once(path, *args, **kw):              # where the system fails: inside the decoder, as a real EMFILE would
        if str(getattr(path, "name", path)) == str(paths[3]):     # the decoder opens a file object
            raise OSError(24, "Too many open files")
        return real(path, *args, **kw)

    monkeypatch.setattr(Image, "open", once)
    first = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert list(first.failures) == [3] and "Too many open files" in first.failures[3]
    assert not list((tmp_path / "cache").glob("*.npy"))
    monkeypatch.setattr(Image, "open", real)
    again = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert again.failures == {} and not again.cached


def test_the_key_names_the_pillow_version_and_where_a_missing_file_stood(tmp_path, write_image, monkeypatch):
    import PIL

    paths = _files(tmp_path, write_image, n=2)
    pre = Preprocessing(size=(8, 8), channels=1)
    gone = tmp_path / "gone.png"
    assert cache_key([paths[0], gone], pre, 1, (8, 8)) != cache_key([gone, paths[0]], pre, 1, (8, 8))
    key = cache_key(paths, pre, 1, (8, 8))
    monkeypatch.setattr(PIL, "__version__", "0.0")          # another decoder may decode otherwise
    assert cache_key(paths, pre, 1, (8, 8)) != key


def test_a_change_to_the_images_does_not_reach_the_cache_whether_just_decoded_or_read_from_it(tmp_path, write_image):
    """A writable map of the entry would let an in-place change of a study's images corrupt every later study."""
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    expected = decode_images(paths, pre).images
    for _ in range(2):
        decoded = decode_images(paths, pre, cache_dir=tmp_path / "cache")
        decoded.images[:] = 0.5
    again = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert again.cached
    np.testing.assert_array_equal(again.images, expected)


def test_an_entry_without_its_index_is_decoded_again_and_an_index_of_another_entry_is_refused(tmp_path, write_image):
    """The index is written last, so an array alone is a decode stopped before it finished, not damage."""
    import json

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    cache = tmp_path / "cache"
    first = decode_images(paths, pre, cache_dir=cache)
    index = cache / f"{first.key}.json"
    index.unlink()
    again = decode_images(paths, pre, cache_dir=cache)
    assert not again.cached and index.is_file()
    meta = json.loads(index.read_text())
    for change, lists in (({"n": 5}, "5 images of format 'dpmed-image-cache-1'"),
                          ({"format": "dpmed-image-cache-0"}, "6 images of format 'dpmed-image-cache-0'")):
        index.write_text(json.dumps({**meta, **change}))
        # the index is the file that is wrong, so it is the one named (before: the array, which is sound)
        with pytest.raises(DataError, match=rf"^cache entry \S*{first.key}.json does not match its key \(it lists "
                                            rf"{lists}; the key is for 6 of 'dpmed-image-cache-1'\); delete "
                                            r"\S*\.npy and \S*\.json to decode again$"):
            decode_images(paths, pre, cache_dir=cache)


def test_unreadable_files_keep_the_layout_asked_for_and_a_size_error_names_the_first(tmp_path, write_image,
                                                                                    monkeypatch):
    import dpmed.data.cache as cache_module

    broken = [tmp_path / f"bad{i}.png" for i in range(2)]
    for path in broken:
        path.write_bytes(b"\x89PNG broken")
    decoded = decode_images(broken, Preprocessing(size=(8, 8), channels=3))
    assert decoded.images.shape == (2, 3, 8, 8) and set(decoded.failures) == {0, 1}
    sizes = [write_image(tmp_path / name, size=size) for name, size in (("a.png", (10, 14)), ("c.png", (6, 6)),
                                                                         ("d.png", (7, 7)))]
    with pytest.raises(DataError) as refused:
        decode_images(sizes, Preprocessing())
    assert "c.png" in str(refused.value) and "d.png" not in str(refused.value)
    # a system error while peeking at the first file: the next readable one gives the layout
    real = cache_module.peek_image
    files = _files(tmp_path, write_image, n=3)

    def busy(path):
        if path == files[0]:
            raise OSError(24, "Too many open files")
        return real(path)

    monkeypatch.setattr(cache_module, "peek_image", busy)
    assert decode_images(files, Preprocessing(channels=1)).images.shape == (3, 1, 10, 14)


@pytest.mark.parametrize("index", ["[]", '{"format": "dpmed-image-cache-1", "n": 6}', '{"n": "six"}'])
def test_a_damaged_index_is_an_error_naming_the_entry(tmp_path, write_image, index):
    """Before: "internal error: AttributeError: 'list' object has no attribute 'get'" or KeyError: 'failures'."""
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    first = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    (tmp_path / "cache" / f"{first.key}.json").write_text(index)
    with pytest.raises(DataError, match=rf"cache entry .*{first.key}.json is damaged .* to decode again"):
        decode_images(paths, pre, cache_dir=tmp_path / "cache")     # the file that is damaged, not its array


def test_a_damaged_array_is_an_error_naming_the_array(tmp_path, write_image):
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    first = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    (tmp_path / "cache" / f"{first.key}.npy").write_bytes(b"not an array")
    with pytest.raises(DataError, match=rf"cache entry .*{first.key}.npy is damaged .*delete .*\.npy and .*\.json"):
        decode_images(paths, pre, cache_dir=tmp_path / "cache")


def test_a_cache_dir_that_is_a_file_says_so(tmp_path, write_image):
    """Before: "data.cache_dir ... cannot be made or written (File exists)", which says nothing of what is wrong."""
    paths = _files(tmp_path, write_image)
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    with pytest.raises(DataError, match=r"^data.cache_dir .*cache is a file, not a folder: give a folder \(made if "
                                        r"missing\), or remove data.cache_dir to decode without a cache$"):
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=tmp_path / "cache")
    assert (tmp_path / "cache").read_text() == "a file where the cache folder should be"


@pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges on Windows")
@pytest.mark.parametrize("under", [("cache",), ()])
def test_a_cache_dir_that_is_or_lies_under_a_link_to_nothing_names_the_link(tmp_path, write_image, under):
    """A cache on a disk that is not mounted: mkdir said "cannot be made or written (File exists)"."""
    paths = _files(tmp_path, write_image)
    link = tmp_path / "scratch"
    link.symlink_to(tmp_path / "scratch-disk")
    cache_dir = link.joinpath(*under)
    with pytest.raises(DataError) as caught:
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=cache_dir)
    assert str(caught.value) == (f"data.cache_dir {cache_dir}: {link} is a link to {tmp_path / 'scratch-disk'}, which "
                                 "does not exist (a disk not mounted, a folder moved); mount or make it, or remove "
                                 "data.cache_dir to decode without a cache")


def test_a_cache_in_the_study_folder_s_shareable_part_is_refused(tmp_path, write_image):
    """The cache holds the training images, decoded; before, data.cache_dir pointing into the output study folder
    was accepted without a word, and the .npy sat beside run.json among the files a user may share."""
    from dpmed.config import load_study
    from dpmed.errors import ConfigError
    from dpmed.study import prepare_study

    for cls in ("a", "b"):
        for i in range(20):         # each image its own patient: enough that validation and test draw both classes
            write_image(tmp_path / "data" / cls / f"{cls}{i}.png", level=50 + 10 * i)
    out = tmp_path / "out"
    study_file = tmp_path / "s.yaml"
    for cache, refused in ((out / "s" / "decoded", True), (out / "s" / "private" / "decoded", False),
                           (tmp_path / "cache", False)):
        study_file.write_text(f"name: s\ndata: {{source: folders, path: {tmp_path / 'data'}, image_size: 8, "
                              f"cache_dir: {cache}, split: {{val_fraction: 0.3, test_fraction: 0.3}}}}\n"
                              "training: {batch_size: 4}\n"
                              "arms: [{name: base, mechanism: none}]\n")
        if refused:
            with pytest.raises(ConfigError, match=r"data.cache_dir .* lies in the study folder .* put it where the "
                                                  r"dataset itself lives, or under .*private"):
                prepare_study(load_study(study_file), out=out)
            assert not cache.exists()
        else:
            prepare_study(load_study(study_file), out=out)
            assert list(cache.glob("*.npy"))


def test_a_cache_entry_you_cannot_read_is_named_as_another_user_s(tmp_path, write_image, monkeypatch):
    """Entries are owner-only: another user's entry gave an internal PermissionError traceback, or 'is damaged ...
    delete it', telling the user to delete someone else's files."""
    from pathlib import Path

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    decode_images(paths, pre, cache_dir=tmp_path / "cache")
    real = Path.read_text

    def denied(self, *args, **kwargs):
        if self.suffix == ".json" and self.parent.name == "cache":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(DataError, match=r"\.json is not readable by you: .* set a data.cache_dir of your own") \
            as raised:
        decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert "delete" not in str(raised.value)


@pytest.mark.skipif(os.name == "nt", reason="no owners to compare on Windows")
def test_a_cache_dir_that_others_can_write_or_own_is_refused_before_any_decode(tmp_path, write_image, monkeypatch):
    """Whoever can write the cache folder can replace the decoded images a study trains on, or swap an entry being
    written for a file of theirs, which the decode then filled with patient images; dpmed used any folder."""
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(DataError, match=r"cache may be written by every user \(mode 777\): whoever can write it"):
        decode_images(paths, pre, cache_dir=cache)
    assert not list(cache.iterdir())
    cache.chmod(0o770)                                      # its group may: the umask 002 of user-private groups
    assert not decode_images(paths, pre, cache_dir=cache).cached
    monkeypatch.setattr(os, "getuid", lambda: cache.stat().st_uid + 1)
    with pytest.raises(DataError, match=r"belongs to another user \(uid \d+\)"):
        decode_images(paths, pre, cache_dir=cache)


def test_an_entry_of_another_shape_under_the_key_is_refused(tmp_path, write_image):
    """An array of the right count but another C x H x W (a file copied in by hand, a bug) is not read as images."""
    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    first = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    np.save(tmp_path / "cache" / f"{first.key}.npy", np.zeros((6, 1, 4, 4), dtype=np.float32))
    with pytest.raises(DataError, match=rf"cache entry .*{first.key}.npy does not match its key \(it holds an "
                                        r"array of shape \(6, 1, 4, 4\); the key is for \(6, 1, 8, 8\)\)"):
        decode_images(paths, pre, cache_dir=tmp_path / "cache")


def test_a_long_decode_says_how_far_it_has_come(tmp_path, write_image, monkeypatch, caplog):
    """Before: nothing was said until every file was decoded (CheXpert's 224,316 at 1,500 a second: 2.5 minutes)."""
    import logging

    import dpmed.data.pace

    paths = _files(tmp_path, write_image)
    with caplog.at_level(logging.INFO, logger="dpmed"):
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), workers=1)
        assert "decoding" not in caplog.text                                # a short decode is quiet
        monkeypatch.setattr(dpmed.data.pace, "REPORT_EVERY", 0.0)
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), workers=1)
    lines = [r.getMessage() for r in caplog.records if "decoding" in r.getMessage()]
    assert [line.split(",")[0] for line in lines] == [f"data: decoding: {i} of 6 images ({100 * i / 6:.0f} %)"
                                                      for i in range(1, 6)]
    assert all(line.endswith("min left") for line in lines)


@pytest.mark.skipif(os.name != "posix", reason="the partial entry's lock is flock's, which Windows lacks")
def test_the_partial_entry_of_a_killed_decode_is_deleted_by_the_next_one(tmp_path, write_image, caplog,
                                                                          monkeypatch):
    """Before: a decode killed outright (the out-of-memory killer, kill -9) left its partial file of decoded images,
    as large as the whole tensor, for ever. A decode in progress holds a lock on its file; this host's files whose
    lock is free are deleted, a held one, another host's and one named as before hosts were named are kept."""
    import fcntl
    import logging
    import signal
    import socket
    import subprocess
    import sys
    import threading

    import dpmed.data.cache as cache_module

    paths = _files(tmp_path, write_image)
    cache = tmp_path / "cache"
    cache.mkdir()
    host, key = socket.gethostname(), "a" * 64
    killed, running = cache / f".{key}.{host}.4242.npy", cache / f".{key}.{host}.4343.npy"
    elsewhere, older = cache / f".{key}.other-node.example.org.4242.npy", cache / f".{key}.4242.npy"
    for path in (killed, running, elsewhere, older):
        path.write_bytes(b"\0" * 1000)
    # a decode that was killed while it held its lock: the kernel let the lock go with the process
    child = subprocess.Popen([sys.executable, "-c", f"import fcntl, time; f = open({str(killed)!r}, 'rb'); "
                              "fcntl.flock(f.fileno(), fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    child.send_signal(signal.SIGKILL)
    child.wait()
    with open(running, "rb") as held, caplog.at_level(logging.INFO, logger="dpmed"):
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)                  # a decode still writing: its lock is held
        decode_images(paths, Preprocessing(size=(8, 8), channels=1), cache_dir=cache)
    assert not killed.exists() and running.exists() and elsewhere.exists() and older.exists()
    assert f"removed partial cache entries of decodes that were killed (1 kB) from {cache}" in caplog.text

    # and a decode's own partial entry is locked while it runs: a second decode into the folder meanwhile keeps it
    seen, real = [], cache_module.read_image

    def read(path, **kw):
        if not seen:
            partial = [p for p in cache.glob(".*.npy") if host in p.name and p != running]
            seen.extend(partial)
            thread = threading.Thread(target=cache_module._sweep_abandoned, args=(cache,))
            thread.start()
            thread.join()
            seen.append(all(p.exists() for p in partial))
        return real(path, **kw)

    monkeypatch.setattr(cache_module, "read_image", read)
    decode_images(paths, Preprocessing(size=(8, 8), channels=1, minmax=True), cache_dir=cache,   # another key
                  workers=1)                          # one thread: the first read is the only one that sweeps
    assert len(seen) == 2 and seen[-1] is True, seen


def test_the_key_names_each_file_s_path_so_two_files_with_equal_status_are_told_apart(tmp_path, write_image,
                                                                                     monkeypatch):
    """Files restored with the same size and times, on a filesystem whose inodes and status-change times are
    reported alike (a network share, a FUSE mount), differ only by path: listed the other way round, the images
    change rows, so the key must change too."""
    from pathlib import Path
    from types import SimpleNamespace

    first, second = _files(tmp_path, write_image, n=2)
    pre = Preprocessing(size=(8, 8), channels=1)
    alike = SimpleNamespace(st_size=100, st_ino=7, st_mtime_ns=10**18, st_ctime_ns=10**18, st_mode=0o100600)
    monkeypatch.setattr(Path, "stat", lambda self, *args, **kwargs: alike)
    assert cache_key([first, second], pre, 1, (8, 8)) != cache_key([second, first], pre, 1, (8, 8))


def test_each_file_is_decoded_with_the_size_asked_for_as_its_hint(tmp_path, write_image, monkeypatch):
    """The hint lets a JPEG decode at a reduced scale that still covers the size (`dpmed.data.decoding`); it is
    (height, width), as the size is, so that a wide film is not decoded below its width."""
    import dpmed.data.cache as cache

    paths = [write_image(tmp_path / f"{i}.jpg", size=(20, 40)) for i in range(3)]
    hints, real = [], cache.read_image
    monkeypatch.setattr(cache, "read_image", lambda path, **kw: hints.append(kw["size_hint"]) or real(path, **kw))
    decode_images(paths, Preprocessing(size=(8, 16), channels=1))
    assert hints == [(8, 16)] * 3
    hints.clear()
    decode_images(paths, Preprocessing(channels=1))
    assert hints == [None] * 3


def test_without_channels_grey_images_stored_as_colour_are_grey_like_the_grey_files_beside_them(tmp_path):
    """Radiograph JPEGs are often saved RGB with R = G = B: read as stored, a study of them alone had 3 channels and
    one that also held grey PNGs was refused. Grey is what the pixels are, whichever file comes first."""
    from PIL import Image

    rng = np.random.default_rng(0)
    greys = [(rng.random((10, 14)) * 255).astype(np.uint8) for _ in range(4)]
    paths = []
    for i, grey in enumerate(greys):
        paths.append(tmp_path / (f"{i}.jpeg" if i % 2 == 0 else f"{i}.png"))    # an RGB JPEG first
        Image.fromarray(grey).convert("RGB" if i % 2 == 0 else "L").save(paths[-1], quality=95)
    for order in (paths, paths[::-1]):
        images = decode_images(order, Preprocessing()).images
        assert images.shape == (4, 1, 10, 14)
    as_colour = decode_images(paths, Preprocessing(channels=3)).images
    np.testing.assert_array_equal(images[::-1, 0], as_colour[:, 1])     # the same grey, whether asked for or not
    rgb = decode_images(paths[::2], Preprocessing()).images
    assert rgb.shape == (2, 1, 10, 14)


def test_images_stored_otherwise_than_the_first_are_counted_and_the_first_of_them_is_named(tmp_path, write_image):
    paths = [write_image(tmp_path / f"{name}.png", size=(10, 14), mode=mode)
             for name, mode in (("a", "L"), ("b", "RGB"), ("c", "L"), ("d", "RGB"))]
    with pytest.raises(DataError, match=r"^2 of 4 images are stored colour while the first readable one is grey "
                                        r"\(a file of three equal channels is grey\), "
                                        r"e\.g\. \S*/b\.png;"):
        decode_images(paths, Preprocessing(size=(8, 8)), workers=2)


@pytest.mark.parametrize("package", ["pydicom", "pylibjpeg", "python-gdcm"])
def test_the_key_of_dicom_files_names_the_pydicom_and_plugin_versions_and_that_of_other_files_does_not(
        tmp_path, write_image, monkeypatch, package):
    """pydicom decodes a DICOM's pixel data and applies the modality and VOI LUTs that set its pixels, and another
    version may do so otherwise: an entry decoded under another pydicom is stale, as one under another Pillow is.
    Its plugins decode compressed files: before, an entry that stored a JPEG DICOM as a failure ("needs pylibjpeg")
    was still read after the user installed pylibjpeg, refusing the file again. Entries of raster files keep their
    key."""
    import importlib.metadata

    pre = Preprocessing(size=(8, 8), channels=1)
    dicoms = [tmp_path / "a.dcm", tmp_path / "b.DICOM"]       # missing files hash as missing: no decode needed
    pngs = _files(tmp_path, write_image, n=2)
    mixed = pngs + dicoms[:1]
    before = [cache_key(paths, pre, 1, (8, 8)) for paths in (dicoms, mixed, pngs)]
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0" if name == package else real(name))
    after = [cache_key(paths, pre, 1, (8, 8)) for paths in (dicoms, mixed, pngs)]
    assert after[0] != before[0] and after[1] != before[1] and after[2] == before[2]


def test_the_key_of_resized_images_names_the_torch_version_that_resizes_them(tmp_path, write_image, monkeypatch):
    """The resize is torch's antialiased bilinear interpolation, whose filter another torch may compute otherwise:
    an entry resized under another torch is stale. Images kept at their own size do not pass through torch."""
    import importlib.metadata

    paths = _files(tmp_path, write_image, n=2)
    sized, unsized = Preprocessing(size=(8, 8), channels=1), Preprocessing(channels=1)
    before = [cache_key(paths, sized, 1, (8, 8)), cache_key(paths, unsized, 1, (10, 14))]
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0" if name == "torch" else real(name))
    assert cache_key(paths, sized, 1, (8, 8)) != before[0] and cache_key(paths, unsized, 1, (10, 14)) == before[1]


@pytest.mark.filterwarnings("error::PIL.Image.DecompressionBombWarning")
def test_images_over_pillow_s_bomb_limit_are_told_once_by_name_without_pillow_s_warning(tmp_path, write_image,
                                                                                          monkeypatch, caplog):
    """Pillow warns of a "decompression bomb DOS attack" without naming the file; dpmed names it and says what to do.
    The filter turns a leaked warning into an error in the decoding thread, so the decode fails."""
    from PIL import Image

    paths = _files(tmp_path, write_image, n=3)          # 10 x 14 = 140 px each
    paths.append(write_image(tmp_path / "img" / "big.png", level=90, size=(12, 14)))     # 168 px
    paths.append(write_image(tmp_path / "img" / "bigger.png", level=90, size=(13, 14)))  # 182 px
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 150)
    decoded = decode_images(paths, Preprocessing(size=(8, 8), channels=1))
    assert decoded.failures == {}
    told = [r.getMessage() for r in caplog.records if "decompression" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith("data: 2 of 5 images are larger than 150 pixels")
    assert f"the first is {paths[3]}" in told[0] and "resize" in told[0]


def test_an_image_over_twice_pillow_s_bomb_limit_is_a_flagged_file_saying_to_resize_it(tmp_path, write_image,
                                                                                      monkeypatch):
    from PIL import Image

    paths = _files(tmp_path, write_image, n=2)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 60)     # 140 px > 2 * 60
    decoded = decode_images(paths, Preprocessing(size=(8, 8), channels=1))
    assert list(decoded.failures) == [0, 1]
    assert decoded.failures[0].startswith("has more than 120 pixels, ") and "resize it" in decoded.failures[0]
    assert "DOS attack" not in decoded.failures[0]


def test_transparency_that_hides_pixels_is_told_with_the_first_file_and_how_many(tmp_path, caplog):
    """Alpha is dropped: where it hides pixels, the model sees what lies under them, which no viewer shows."""
    from PIL import Image

    folder = tmp_path / "img"
    folder.mkdir()
    rgba = np.full((4, 4, 4), 200, np.uint8)
    rgba[..., 3] = 255
    Image.fromarray(rgba, "RGBA").save(folder / "0_opaque.png")            # alpha 255 everywhere: nothing to say
    rgba[0, 0, 3] = 0
    Image.fromarray(rgba, "RGBA").save(folder / "1_masked.png")
    Image.new("LA", (4, 4), (100, 254)).save(folder / "2_translucent.png")
    Image.new("LA", (4, 4), (100, 255)).save(folder / "3_opaque_grey.png")
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 255, 255, 255] + [0] * 762)
    palette.putpixel((0, 0), 0)
    palette.save(folder / "4_palette_hole.png", transparency=0)
    paths = sorted(folder.iterdir())
    decoded = decode_images(paths, Preprocessing(size=(4, 4), channels=1))
    assert decoded.failures == {}
    told = [r.getMessage() for r in caplog.records if "transparent" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith("data: 3 of 5 images have transparent pixels")
    assert f"the first is {paths[1]}" in told[0]
    caplog.clear()
    decode_images([paths[0], paths[3]], Preprocessing(size=(4, 4), channels=1))
    assert "transparent" not in caplog.text


def test_a_cached_load_tells_the_notes_the_decode_told(tmp_path, write_image, monkeypatch, caplog):
    """Before: the notes were logged when the images were decoded, and a later study loading them from the cache
    heard nothing of them, while it was told the unreadable rows again."""
    from PIL import Image

    paths = _files(tmp_path, write_image, n=3)          # 10 x 14 = 140 px each
    paths.append(write_image(tmp_path / "img" / "big.png", level=90, size=(12, 14)))     # 168 px
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 150)
    pre = Preprocessing(size=(8, 8), channels=1)
    decode_images(paths, pre, cache_dir=tmp_path / "cache")
    fresh = [r.getMessage() for r in caplog.records if "decompression" in r.getMessage()]
    caplog.clear()
    again = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    told = [r.getMessage() for r in caplog.records if "decompression" in r.getMessage()]
    assert again.cached and len(fresh) == 1 and told == fresh
    assert told[0].startswith("data: 1 of 4 images are larger than 150 pixels")
    assert f"the first is {paths[3]}" in told[0]


def test_an_entry_written_before_notes_were_kept_still_loads(tmp_path, write_image, caplog):
    import json

    paths = _files(tmp_path, write_image)
    pre = Preprocessing(size=(8, 8), channels=1)
    first = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    index = tmp_path / "cache" / f"{first.key}.json"
    index.write_text(json.dumps({"format": "dpmed-image-cache-1", "n": 6, "failures": {}}))
    again = decode_images(paths, pre, cache_dir=tmp_path / "cache")
    assert again.cached and again.failures == {}
    np.testing.assert_array_equal(first.images, again.images)


def test_no_files_decode_to_no_images_with_a_cache_as_without_one(tmp_path):
    """An entry of no images is an empty array file: reading it into memory must not fail where mapping it did not."""
    for _ in range(2):                                          # writes the entry, then reads it
        decoded = decode_images([], Preprocessing(channels=1), cache_dir=tmp_path / "cache")
        assert decoded.images.shape[0] == 0 and decoded.failures == {}
    assert decoded.cached
