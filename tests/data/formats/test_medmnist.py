"""read_medmnist on the real PneumoniaMNIST file and on small npz fixtures, including every kind of bad input."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from dpmed.data import read_medmnist
from dpmed.errors import DataError


def _write(path: Path, *, sizes=(6, 3, 4), image_shape=(28, 28), labels=None, drop=(), extra=None, seed=0) -> Path:
    """A MedMNIST-layout npz: uint8 images of ``image_shape`` per split, labels from ``labels(split, n)``."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n in zip(("train", "val", "test"), sizes, strict=True):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, *image_shape), dtype=np.uint8)
        arrays[f"{split}_labels"] = (labels(split, n) if labels else (np.arange(n) % 2)[:, None]).astype(np.uint8)
    arrays.update(extra or {})
    for key in drop:
        del arrays[key]
    np.savez(path, **arrays)
    return path


# --- the real file ------------------------------------------------------------------------------------------------

def test_real_pneumoniamnist(pneumoniamnist_path):
    d = read_medmnist(pneumoniamnist_path)
    assert (len(d.train), len(d.val), len(d.test)) == (4708, 524, 624)
    assert d.train.image_shape == (1, 28, 28)
    assert d.task.kind == "binary" and d.task.label_names == ("normal", "pneumonia")
    raw = np.load(pneumoniamnist_path)
    for split in ("train", "val", "test"):
        s = getattr(d, split)
        assert s.images.dtype == np.float32 and s.images.min() >= 0 and s.images.max() <= 1
        np.testing.assert_array_equal(s.images[:, 0], raw[f"{split}_images"] / np.float32(255))
        np.testing.assert_array_equal(s.labels, raw[f"{split}_labels"][:, 0])
        assert s.labels.dtype == np.int64
        assert s.patient_ids[0] == f"{split}-0" and len(set(s.patient_ids)) == len(s)
        assert set(s.sex) == {"unknown"} and np.isnan(s.age).all() and s.masks is None
    assert d.synthetic is False and d.name == "pneumoniamnist"
    assert d.test.labels.mean() == pytest.approx(390 / 624)  # 62.5% pneumonia in the test split (METHODS.md 8)


# --- fixtures of every shape ---------------------------------------------------------------------------------------

def test_rgb_multiclass_channels_and_values(tmp_path):
    path = _write(tmp_path / "colours.npz", image_shape=(32, 32, 3), labels=lambda s, n: (np.arange(n) % 4)[:, None])
    raw = np.load(path)
    d = read_medmnist(path)
    assert d.train.image_shape == (3, 32, 32)
    assert d.task.kind == "multiclass" and d.task.label_names == ("class_0", "class_1", "class_2", "class_3")
    # channel c of pixel (y, x) is raw[..., y, x, c] / 255
    np.testing.assert_array_equal(d.train.images[2, 1, 5, 7], raw["train_images"][2, 5, 7, 1] / np.float32(255))
    np.testing.assert_array_equal(d.val.labels, np.arange(3) % 4)


def test_multilabel_is_float_matrix(tmp_path):
    path = _write(tmp_path / "findings.npz", labels=lambda s, n: np.eye(5)[np.arange(n) % 5])
    d = read_medmnist(path)
    assert d.task.kind == "multilabel" and d.task.label_names == tuple(f"finding_{i}" for i in range(5))
    assert d.train.labels.dtype == np.float32 and d.train.labels.shape == (6, 5)


def test_known_dataset_names_by_file_name(tmp_path):
    path = _write(tmp_path / "chestmnist_64.npz", image_shape=(64, 64), labels=lambda s, n: np.zeros((n, 14)))
    d = read_medmnist(path)
    assert d.task.kind == "multilabel" and d.task.label_names[0] == "atelectasis" and len(d.task.label_names) == 14


def test_task_kind_and_label_names_override(tmp_path):
    path = _write(tmp_path / "two.npz")
    d = read_medmnist(path, task_kind="multiclass", label_names=("no", "yes"))
    assert d.task.kind == "multiclass" and d.task.label_names == ("no", "yes")
    with pytest.raises(DataError, match="label names"):
        read_medmnist(path, label_names=("only-one",))
    three = _write(tmp_path / "three.npz", labels=lambda s, n: (np.arange(n) % 3)[:, None])
    with pytest.raises(DataError, match="task_kind='multiclass'") as err:
        read_medmnist(three, task_kind="binary")
    assert str(three) in str(err.value)


# --- bad input: every message names the file -----------------------------------------------------------------------

def test_missing_file_says_where_and_what_to_do(tmp_path):
    missing = tmp_path / "nowhere" / "pneumoniamnist.npz"
    with pytest.raises(DataError) as err:
        read_medmnist(missing)
    assert str(missing) in str(err.value) and "--data-path" in str(err.value)


def test_folder_instead_of_file_lists_npz_inside(tmp_path):
    _write(tmp_path / "bloodmnist.npz")
    with pytest.raises(DataError) as err:
        read_medmnist(tmp_path)
    assert str(tmp_path) in str(err.value) and "bloodmnist.npz" in str(err.value)


def test_corrupt_bytes(tmp_path):
    path = tmp_path / "noise.npz"
    path.write_bytes(np.random.default_rng(0).bytes(300))
    with pytest.raises(DataError) as err:
        read_medmnist(path)
    assert str(path) in str(err.value)
    assert "allow_pickle" not in str(err.value)  # never advise unpickling an untrusted file
    assert isinstance(err.value.__cause__, ValueError)


def test_truncated_file(tmp_path):
    path = _write(tmp_path / "cut.npz")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match="truncated") as err:
        read_medmnist(path)
    assert str(path) in str(err.value) and isinstance(err.value.__cause__, zipfile.BadZipFile)


def test_corrupt_member_fails_on_read(tmp_path):
    path = _write(tmp_path / "flipped.npz")
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the first member's array bytes: the zip directory is intact, the CRC is not
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupt") as err:
        read_medmnist(path)
    assert str(path) in str(err.value)


def test_every_changed_byte_reads_back_or_is_one_data_error(tmp_path):
    """Before: a changed byte in a member's zip header (its compression method, version or flags) escaped as
    NotImplementedError or RuntimeError ("internal error"): every byte of a small file, inverted in turn."""
    path = _write(tmp_path / "small.npz", sizes=(2, 1, 1), image_shape=(8, 8))
    data, damaged = path.read_bytes(), tmp_path / "damaged.npz"
    refused = 0
    for i in range(len(data)):
        damaged.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
        try:
            read_medmnist(damaged)
        except DataError as exc:
            assert str(damaged) in str(exc)
            refused += 1
    assert refused > len(data) // 2


def test_npy_instead_of_npz(tmp_path):
    path = tmp_path / "array.npy"
    np.save(path, np.zeros((3, 28, 28), np.uint8))
    with pytest.raises(DataError, match="single .npy array") as err:
        read_medmnist(path)
    assert str(path) in str(err.value)


def test_missing_key_lists_missing_and_present(tmp_path):
    path = _write(tmp_path / "partial.npz", drop=("val_labels",))
    with pytest.raises(DataError) as err:
        read_medmnist(path)
    message = str(err.value)
    assert str(path) in message and "val_labels" in message.split("it has")[0] and "train_images" in message


def test_label_and_image_count_mismatch(tmp_path):
    path = _write(tmp_path / "mismatch.npz", extra={"test_labels": np.zeros((9, 1), np.uint8)})
    with pytest.raises(DataError, match="test_labels has 9 rows but test_images has 4") as err:
        read_medmnist(path)
    assert str(path) in str(err.value)


def test_empty_split(tmp_path):
    path = _write(tmp_path / "empty.npz", sizes=(6, 0, 4))
    with pytest.raises(DataError, match="val_images is empty") as err:
        read_medmnist(path)
    assert str(path) in str(err.value)


def test_wrong_dtype_and_shape(tmp_path):
    floats = _write(tmp_path / "floats.npz", extra={"train_images": np.zeros((6, 28, 28), np.float32)})
    with pytest.raises(DataError, match="uint8"):
        read_medmnist(floats)
    volume = _write(tmp_path / "volume.npz", extra={"train_images": np.zeros((6, 28, 28, 28), np.uint8)})
    with pytest.raises(DataError, match="3D MedMNIST"):
        read_medmnist(volume)
    half = _write(tmp_path / "half.npz", extra={"train_labels": np.array([[0], [1], [0.5], [1], [0], [1]], np.float32)})
    with pytest.raises(DataError) as err:
        read_medmnist(half)                              # 0.5 is no class: not cut down to class 0
    assert str(err.value).endswith("train_labels must hold class indices 0, 1, ...; found 0.5 (row 2 first; 1 of 6 "
                                   "rows)")


def test_bad_labels_are_named_in_one_line_by_their_values_and_first_row(tmp_path):
    """numpy's print of an array broke the message over lines ("[0.0026 0.0066 ...\n 0.027 ...]") and showed the
    smallest values, good or bad, with no row to look at."""
    labels = np.array([[0], [1], [1], [0], [-1], [1]])
    with pytest.raises(DataError) as err:
        read_medmnist(_write(tmp_path / "negative.npz", extra={"train_labels": labels}))
    assert str(err.value).endswith("found -1 (row 4 first; 1 of 6 rows)")
    many = np.arange(6).reshape(6, 1) * 1.5 + 0.25
    with pytest.raises(DataError) as err:
        read_medmnist(_write(tmp_path / "many.npz", extra={"train_labels": many}))
    assert "found 0.25, 1.75, 3.25, 4.75, 6.25, 7.75 (row 0 first; 6 of 6 rows)" in str(err.value)
    assert "\n" not in str(err.value)
    labels = np.array([[0, 1], [1, 2], [1, 0], [0, 0], [1, 3], [1, 1]])
    with pytest.raises(DataError) as err:
        read_medmnist(_write(tmp_path / "multilabel.npz", extra={"train_labels": labels}), task_kind="multilabel")
    assert str(err.value).endswith("must be 0/1 for a multilabel task; found 2, 3 (row 1 first; 2 of 6 rows)")
    three = np.array([[0], [1], [2], [0], [1], [2]])
    with pytest.raises(DataError, match=r"train_labels has classes 0, 1, 2, more than 0/1"):
        read_medmnist(_write(tmp_path / "three.npz", extra={"train_labels": three}), task_kind="binary")


def test_labels_that_are_not_finite_are_named_by_value_and_first_row(tmp_path):
    """Before: nan or inf in float labels read "must hold finite numbers, got dtype float64", blaming a dtype that
    is fine and naming no row to look at."""
    labels = np.array([[0], [1], [np.nan], [0], [np.inf], [np.nan]])
    path = _write(tmp_path / "holes.npz", extra={"val_labels": labels[:3], "test_labels": labels[2:]})
    with pytest.raises(DataError) as err:
        read_medmnist(path)
    assert str(err.value) == (f"{path}: val_labels must hold finite numbers; found nan (row 2 first; 1 of 3 rows). "
                              "Give every image a label, or drop those images with their label rows, and save the npz "
                              "again")
    findings = np.zeros((6, 3))
    findings[[1, 4], [2, 0]] = (-np.inf, np.inf)
    with pytest.raises(DataError, match=r"train_labels must hold finite numbers; found -inf, inf \(row 1 first; 2 of "
                       r"6 rows\)\. Give"):
        read_medmnist(_write(tmp_path / "findings.npz", extra={"train_labels": findings}))
    words = _write(tmp_path / "words.npz", extra={"train_labels": np.array([["a"]] * 6)})
    with pytest.raises(DataError, match=r"train_labels must hold numbers \(class indices, or 0/1 per finding\), got "
                       r"dtype <U1; save the labels as integers$"):
        read_medmnist(words)


def test_labels_saved_as_booleans_are_read_as_0_and_1(tmp_path):
    """numpy does not count bool as a number, so 0/1 findings saved as booleans were refused ("got dtype bool")."""
    findings = {f"{split}_labels": np.arange(2 * n).reshape(n, 2) % 3 == 0
                for split, n in zip(("train", "val", "test"), (6, 3, 4), strict=True)}
    as_bool = _write(tmp_path / "bool.npz", extra=findings)
    assert all(np.load(as_bool)[key].dtype == np.bool_ for key in findings)
    as_int = _write(tmp_path / "int.npz", extra={key: value.astype(np.uint8) for key, value in findings.items()})
    read = read_medmnist(as_bool, task_kind="multilabel"), read_medmnist(as_int, task_kind="multilabel")
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(read[0], split).labels, getattr(read[1], split).labels)
    assert read[0].train.labels.sum() == findings["train_labels"].sum() > 0


def test_flattened_images_are_refused_naming_the_key_and_shape(tmp_path):
    """Images saved as [N, H * W] rows skip the memory check (it needs a height and width) and are refused by shape."""
    flat = _write(tmp_path / "flat.npz", extra={"train_images": np.zeros((6, 784), np.uint8)})
    with pytest.raises(DataError) as err:
        read_medmnist(flat)
    assert str(err.value) == (f"{flat}: train_images has shape (6, 784); expected [N, H, W] (grey) or [N, H, W, 3] "
                              "(RGB). 3D MedMNIST volumes are not supported.")


def test_splits_of_different_image_sizes_are_refused(tmp_path):
    mixed = _write(tmp_path / "mixed.npz", extra={"test_images": np.zeros((4, 64, 64), np.uint8)})
    with pytest.raises(DataError) as err:
        read_medmnist(mixed)
    assert str(err.value).startswith(f"{mixed}: the splits hold images of different shapes (C, H, W) ")
    assert "'test': (1, 64, 64)" in str(err.value) and str(err.value).endswith("re-export the file")


def test_a_pickled_object_array_is_refused_not_unpickled(tmp_path):
    labels = np.empty((6, 1), dtype=object)
    labels[:, 0] = [0, 1, 0, 1, 0, 1]
    path = _write(tmp_path / "pickled.npz", extra={"train_labels": labels})
    with pytest.raises(DataError) as err:
        read_medmnist(path)
    assert str(err.value) == (f"{path}: key train_labels is not a plain numeric array; download it again from "
                              "https://medmnist.com (or check that the path names the .npz file)")


def test_labels_of_any_shape_but_rows_of_classes_or_findings(tmp_path):
    flat = _write(tmp_path / "flat_labels.npz", extra={f"{s}_labels": np.arange(n) % 2 for s, n in
                                                         (("train", 6), ("val", 3), ("test", 4))})
    d = read_medmnist(flat)                              # [N] labels are one class index per image, as [N, 1]
    np.testing.assert_array_equal(d.val.labels, [0, 1, 0])
    assert d.task.kind == "binary"
    for shape in ((6, 1, 1), (6, 0)):
        path = _write(tmp_path / "cube.npz", extra={"train_labels": np.zeros(shape, np.uint8)})
        with pytest.raises(DataError) as err:
            read_medmnist(path)
        assert str(err.value) == (f"{path}: train_labels has shape {shape}; expected [N, 1] (class index) or [N, L] "
                                  "(findings)")


def test_findings_with_a_single_class_task_kind_say_to_drop_it(tmp_path):
    path = _write(tmp_path / "findings.npz", labels=lambda s, n: np.eye(3)[np.arange(n) % 3])
    with pytest.raises(DataError) as err:
        read_medmnist(path, task_kind="binary")
    assert str(err.value) == (f"{path}: train_labels has 3 columns, so it is multilabel; task_kind='binary' needs one "
                              "class index per image. Drop task_kind or set it to 'multilabel'.")


def test_known_names_survive_a_binary_to_multiclass_override(pneumoniamnist_path):
    d = read_medmnist(pneumoniamnist_path, task_kind="multiclass")
    assert d.task.kind == "multiclass" and d.task.label_names == ("normal", "pneumonia")


def test_a_file_or_a_resize_that_cannot_fit_in_memory_is_refused_before_it_is_made(tmp_path, monkeypatch):
    """13 images of 8 x 8 px: 3.3 kB as float32, 53 kB at 32 px. Before, a file too large for the memory (ChestMNIST
    at 224 px: 22.5 GB as float32) was converted until the allocation failed or the kernel killed dpmed."""
    from dpmed import memory
    from dpmed.data import load_dataset
    from dpmed.memory import Headroom

    path = _write(tmp_path / "chestmnist_224.npz", image_shape=(8, 8))
    monkeypatch.setattr(memory, "headroom", lambda: Headroom(ram=3000, swap=0))
    with pytest.raises(DataError, match=r"^the 13 images at 8 x 8 px, 1 channel, take 3 kB of memory as float32, and "
                       r"only 3 kB is free for dpmed here: use a smaller release of chestmnist_224.npz \(MedMNIST "
                       r"publishes 28, 64, 128 and 224 px\), or run on a machine with more memory$"):
        read_medmnist(path)
    monkeypatch.setattr(memory, "headroom", lambda: Headroom(ram=10_000, swap=0))
    assert read_medmnist(path).train.image_shape == (1, 8, 8)
    with pytest.raises(DataError, match=r"^the 13 images at 32 x 32 px, 1 channel, take 53 kB of memory as float32, "
                       r"and only 10 kB is free for dpmed here: set a smaller data.image_size"):
        load_dataset(source="medmnist", path=path, image_size=32, channels=None, seed=0, n_images=None)


def test_an_array_declaring_more_bytes_than_memory_holds_is_refused_from_its_header(tmp_path, monkeypatch):
    """An npz is compressed: a file of kB declared a train_images of 1 TB (its header, then a few bytes), and numpy's
    allocation of it reached the user as an internal MemoryError. The header's size is checked before reading."""
    import io
    import zipfile

    from dpmed import memory

    path = _write(tmp_path / "declared.npz")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (10**6, 1000, 1000)})
    with zipfile.ZipFile(path, "a") as archive:
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr("train_images.npy", header.getvalue() + bytes(1000))
    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=2**30, swap=0))
    with pytest.raises(DataError) as err:
        read_medmnist(path)
    assert str(err.value).startswith(f"{path}: key train_images declares an array of shape (1000000, 1000, 1000) "
                                     "(1.0 TB), and only 1.1 GB is free for dpmed here: download it again")


def test_an_array_stored_without_the_npy_suffix_is_read_as_numpy_reads_it(tmp_path):
    """numpy names an npz member ``train_images`` or ``train_images.npy`` alike; the header check must find either,
    not fail on the name numpy accepts."""
    import io

    path = tmp_path / "bare.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for split, n in (("train", 6), ("val", 3), ("test", 4)):
            for key, array in ((f"{split}_images", np.full((n, 28, 28), 7, np.uint8)),
                               (f"{split}_labels", (np.arange(n) % 2)[:, None].astype(np.uint8))):
                data = io.BytesIO()
                np.save(data, array)
                archive.writestr(key if key == "train_images" else f"{key}.npy", data.getvalue())
    d = read_medmnist(path)
    assert len(d.train) == 6 and float(d.train.images.max()) == pytest.approx(7 / 255)


def test_arrays_that_fit_memory_one_by_one_but_not_together_are_refused(tmp_path, monkeypatch):
    """The six arrays are all held at once: each under the free memory passed the check, while together they did not
    fit, and numpy's allocation of the last reached the user as an internal MemoryError."""
    from dpmed import memory

    path = _write(tmp_path / "six.npz", sizes=(200, 100, 100))       # 156,800 + 78,400 + 78,400 image bytes
    monkeypatch.setattr(memory, "headroom", lambda: memory.Headroom(ram=200_000, swap=0))
    with pytest.raises(DataError, match=r"key val_images declares an array .*, and only"):
        read_medmnist(path)
