"""Image folders (the Kermany / Kaggle chest_xray layout): fixture folders in that layout, its bad inputs, and a few
files of the real ../shared/data/chest_xray."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest

from dpmed.data import SplitPlan, load_dataset, read_image_folders
from dpmed.data.decoding import read_image
from dpmed.errors import DataError

# The Kermany naming: person<k>_<bacteria|virus>_<n> and (NORMAL2-)IM-<patient>-<image>[-<n>]. person9 has images in
# both train and test, as 170 patients of the real release do.
KERMANY = {
    "train/NORMAL": ["IM-0001-0001.jpeg", "IM-0001-0002.jpeg", "IM-0002-0001.jpeg", "NORMAL2-IM-0001-0001.jpeg",
                     "IM-0003-0001-0001.jpeg", "IM-0004-0001.jpeg", "IM-0005-0001.jpeg", "IM-0006-0001.jpeg"],
    "train/PNEUMONIA": ["person1_bacteria_1.jpeg", "person1_bacteria_2.jpeg", "person2_virus_3.jpeg",
                        "person3_bacteria_4.jpeg", "person4_virus_5.jpeg", "person5_bacteria_6.jpeg",
                        "person6_bacteria_7.jpeg", "person7_virus_8.jpeg", "person9_virus_12.jpeg"],
    "test/NORMAL": ["IM-0100-0001.jpeg", "IM-0101-0001.jpeg"],
    "test/PNEUMONIA": ["person9_virus_10.jpeg", "person100_bacteria_1.jpeg"],
}


def _kermany(root: Path, write_image, layout=KERMANY) -> Path:
    for folder, names in layout.items():
        for i, name in enumerate(names):
            write_image(root / folder / name, level=100 + 10 * i, size=(20, 24))
    return root


def _load(path, **kwargs):
    args = dict(source="folders", path=path, image_size=16, channels=1, seed=0, n_images=None,
                split=SplitPlan(val_fraction=0.3))
    args.update(kwargs)
    return load_dataset(**args)


def _owners(dataset) -> dict[str, set[str]]:
    owners: dict[str, set[str]] = {}
    for name in ("train", "val", "test"):
        for pid in getattr(dataset, name).patient_ids:
            owners.setdefault(str(pid), set()).add(name)
    return owners


def test_kermany_layout_patients_classes_and_published_test(tmp_path, write_image):
    m = read_image_folders(_kermany(tmp_path / "chest_xray", write_image))
    assert m.task.kind == "binary" and m.task.label_names == ("NORMAL", "PNEUMONIA")
    by_file = {p.name: pid for p, pid in zip(m.paths, m.patient_ids, strict=True)}
    assert by_file["IM-0001-0002.jpeg"] == by_file["IM-0001-0001.jpeg"] == "IM-0001"
    assert by_file["IM-0003-0001-0001.jpeg"] == "IM-0003"
    assert by_file["NORMAL2-IM-0001-0001.jpeg"] == "NORMAL2-IM-0001"  # the second batch numbers its own patients
    assert by_file["person1_bacteria_2.jpeg"] == "person1" and by_file["person9_virus_10.jpeg"] == "person9"
    assert m.notes["patient_key"]["files_matched"] == len(m) == 21
    labels = dict(zip((p.name for p in m.paths), m.labels, strict=True))
    assert labels["IM-0001-0001.jpeg"] == 0 and labels["person2_virus_3.jpeg"] == 1


def test_published_test_kept_val_carved_and_no_patient_crosses(tmp_path, write_image):
    d = _load(_kermany(tmp_path / "chest_xray", write_image))
    assert sorted(Path(p).name for p in d.test.patient_ids) == sorted(["IM-0100", "IM-0101", "person9", "person100"])
    assert len(d.test) == 4 and d.train.image_shape == (1, 16, 16)
    assert all(len(splits) == 1 for splits in _owners(d).values())
    # person9's train image is left out (the test split outranks train), and the record says so.
    assert "person9" not in set(d.train.patient_ids) | set(d.val.patient_ids)
    assert len(d.train) + len(d.val) == 17 - 1
    split = d.source["split"]
    assert split["published"] == ["test"] and split["carved"] == ["val"]
    assert split["patients_in_two_published_splits"] == 1 and split["patients_crossing_splits"] == 0
    assert set(d.val.labels) == {0, 1}  # both classes in the carved validation split


def test_shared_patients_keep_reproduces_the_published_split(tmp_path, write_image):
    d = _load(_kermany(tmp_path / "chest_xray", write_image),
              split=SplitPlan(val_fraction=0.3, shared_patients="keep"))
    assert len(d.train) + len(d.val) == 17
    assert d.source["split"]["patients_crossing_splits"] == 1
    assert "kept as published" in d.source["summary"]


def test_official_false_splits_every_image_by_patient(tmp_path, write_image):
    d = _load(_kermany(tmp_path / "chest_xray", write_image),
              split=SplitPlan(val_fraction=0.2, test_fraction=0.2, official=False, seed=3))
    assert len(d.train) + len(d.val) + len(d.test) == 21
    assert all(len(splits) == 1 for splits in _owners(d).values())
    assert d.source["split"]["carved"] == ["val", "test"]


def test_split_seed_changes_the_carved_validation_split(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    vals = {tuple(sorted(_load(root, split=SplitPlan(val_fraction=0.3, seed=s)).val.patient_ids)) for s in range(6)}
    assert len(vals) > 1
    again = _load(root, split=SplitPlan(val_fraction=0.3, seed=0))
    np.testing.assert_array_equal(again.val.images, _load(root, split=SplitPlan(val_fraction=0.3, seed=0)).val.images)


def test_nested_kaggle_extraction_is_descended(tmp_path, write_image):
    _kermany(tmp_path / "chest_xray" / "chest_xray", write_image)
    write_image(tmp_path / "chest_xray" / "__MACOSX" / "chest_xray" / "._x.jpeg")
    m = read_image_folders(tmp_path / "chest_xray")
    assert m.root == tmp_path / "chest_xray" / "chest_xray" and len(m) == 21


def test_an_extraction_nested_deeper_than_dpmed_looks_is_told_as_such_not_as_one_class(tmp_path, write_image):
    """Four single folders down are descended; a fifth read the folder four down as a dataset of one class (the
    fifth folder), a message about classes where the fix is data.path."""
    _kermany(tmp_path.joinpath("a", "b", "c", "d", "e"), write_image)
    assert read_image_folders(tmp_path / "a").root == tmp_path.joinpath("a", "b", "c", "d", "e")
    with pytest.raises(DataError) as err:
        read_image_folders(tmp_path)
    assert str(err.value) == (f"{tmp_path} and each folder below it down to {tmp_path.joinpath('a', 'b', 'c', 'd')} "
                              "hold one folder only: dpmed looks 4 folders down for train/ and test/ (or one folder "
                              "per class); point data.path at the folder that holds them "
                              f"({tmp_path.joinpath('a', 'b', 'c', 'd', 'e')} or a folder in it)")


def test_folders_beside_the_split_folders_are_listed_not_read(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    write_image(root / "chest_xray" / "train" / "NORMAL" / "IM-0009-0001.jpeg")  # a second copy, as in the Kaggle zip
    m = read_image_folders(root)
    assert len(m) == 21 and m.notes["folders_not_read"] == ["chest_xray"]


@pytest.mark.parametrize("train, test", [("Training", "Testing"), ("Train", "Testing"), ("TRAINING", "test")])
def test_split_folders_in_any_common_spelling_are_splits_not_classes(tmp_path, write_image, train, test):
    """The Kaggle brain-tumour MRI layout (Training/, Testing/): read as classes, the model would learn which folder
    an image came from; a Testing/ beside Train/ must not be left out."""
    layout = {folder.replace("train/", f"{train}/").replace("test/", f"{test}/"): names
              for folder, names in KERMANY.items()}
    m = read_image_folders(_kermany(tmp_path / "mri", write_image, layout))
    assert m.task.label_names == ("NORMAL", "PNEUMONIA") and len(m) == 21 and m.notes["folders_not_read"] == []
    assert m.notes["published_splits"] == ["test", "train"] and (m.splits == "test").sum() == 4
    assert m.labels[list(m.where).index(f"{test}/PNEUMONIA/person9_virus_10.jpeg")] == 1


def test_a_folder_of_class_folders_beside_the_splits_is_refused_not_left_out(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    write_image(root / "holdout" / "NORMAL" / "IM-0200-0001.jpeg")
    write_image(root / "holdout" / "PNEUMONIA" / "person200_virus_1.jpeg")
    with pytest.raises(DataError, match=r"chest_xray/holdout holds the class folder\(s\) NORMAL, PNEUMONIA like the "
                                        r"split folder\(s\) test, train, but 'holdout' is not a split name, so it "
                                        r"would be left out\. dpmed reads <split>/<class>/<image>"):
        read_image_folders(root)


def test_a_class_folder_of_images_beside_the_splits_is_refused_not_left_out(tmp_path, write_image):
    """NORMAL/*.png beside train/ and test/: images meant for a split, which were listed as a folder not read."""
    root = _kermany(tmp_path / "chest_xray", write_image)
    write_image(root / "normal" / "IM-0300-0001.png")
    write_image(root / "normal" / "more" / "IM-0301-0001.jpeg")
    (root / "normal" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"chest_xray/normal holds 2 image\(s\) and is named like the class NORMAL of "
                                        r"the split folder\(s\) test, train, but 'normal' is not a split name, so its "
                                        r"images would be left out\. dpmed reads <split>/<class>/<image>.*: move them "
                                        r"into the NORMAL folder of a split \(e\.g\. train/NORMAL\), or remove normal"):
        read_image_folders(root)
    # a class-named folder without images (or with hidden files only), a hidden folder and __MACOSX are listed, not
    # refused
    shutil.rmtree(root / "normal")
    (root / "normal").mkdir()
    (root / "normal" / "notes.txt").write_text("x")
    write_image(root / "PNEUMONIA" / "._person1_virus_1.jpeg")
    write_image(root / ".NORMAL" / "IM-0300-0001.jpeg")
    write_image(root / "__MACOSX" / "NORMAL" / "IM-0300-0001.jpeg")
    m = read_image_folders(root)
    assert len(m) == 21 and m.notes["folders_not_read"] == [".NORMAL", "PNEUMONIA", "__MACOSX", "normal"]


def test_class_folders_that_all_hold_the_same_folders_of_images_are_refused(tmp_path, write_image):
    """Fold1/NORMAL, Fold2/NORMAL, ...: read as classes Fold1 and Fold2, the real classes would be flattened."""
    for fold in ("Fold1", "Fold2"):
        for cls in ("NORMAL", "PNEUMONIA"):
            for i in range(3):
                write_image(tmp_path / "folds" / fold / cls / f"{cls}_{i}.png")
    with pytest.raises(DataError, match=r"the folders Fold1, Fold2 in .*folds each hold the folders of images "
                                        r"NORMAL, PNEUMONIA: those are the classes.* rename the outer folders"):
        read_image_folders(tmp_path / "folds")
    # folders below one class only (subtypes, a patient's series) are that class's images, read recursively
    for i in range(3):
        write_image(tmp_path / "cxr" / "NORMAL" / f"n{i}.png")
        write_image(tmp_path / "cxr" / "PNEUMONIA" / ("bacteria" if i % 2 else "virus") / f"p{i}.png")
    m = read_image_folders(tmp_path / "cxr")
    assert m.task.label_names == ("NORMAL", "PNEUMONIA") and m.labels.tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("layout, folder, fix", [
    # folds, each a dataset of its own: were read as the classes fold1 and fold2
    ({f"{fold}/{split}/{cls}": 2 for fold in ("fold1", "fold2") for split in ("train", "test")
      for cls in ("NORMAL", "PNEUMONIA")}, "fold1/test",
     r"if \S*/fold1 holds one whole dataset .* point data\.path at it"),
    # class above split: was told as classes named test and train
    ({f"{cls}/{split}": 2 for cls in ("NORMAL", "PNEUMONIA") for split in ("train", "test")}, "NORMAL/test",
     r"move its images into \S*/data/test/NORMAL$"),
    # a test folder inside a training class: its images were read as training NORMAL images
    ({**{f"{split}/{cls}": 2 for split in ("train", "test") for cls in ("NORMAL", "PNEUMONIA")},
      "train/NORMAL/Test": 1}, "train/NORMAL/Test", r"move its images into \S*/data/test/NORMAL$"),
])
def test_a_folder_named_like_a_split_inside_a_class_folder_is_refused_naming_it(tmp_path, write_image, layout, folder,
                                                                                 fix):
    for where, n in layout.items():
        for i in range(n):
            write_image(tmp_path / "data" / where / f"{where.replace('/', '_')}_{i}.png")
    with pytest.raises(DataError, match=rf"^the folder \S*/data/{folder} is named like a split but lies inside "
                                        rf"\S*/data/{folder.rsplit('/', 1)[0]}, which dpmed reads as the class "
                                        rf"{folder.split('/')[-2]}: .*{fix}"):
        read_image_folders(tmp_path / "data")


def test_a_layout_where_some_files_name_no_patient_is_refused_naming_them(tmp_path, write_image):
    """One file outside the naming pattern would be its own "patient" (false for a person with several such files),
    and falling back to the image as the unit would let that one file change every card: refused instead."""
    root = _kermany(tmp_path / "chest_xray", write_image)
    assert read_image_folders(root).notes["patients_known"] is True
    write_image(root / "train" / "NORMAL" / "scan_0001.jpeg")
    with pytest.raises(DataError, match=r"1 of 22 images name no patient \(e.g. train/NORMAL/scan_0001.jpeg\).*rename"):
        read_image_folders(root)


def test_class_folders_without_split_and_label_order(tmp_path, write_image):
    for cls in ("benign", "malignant", "normal"):
        for i in range(4):
            write_image(tmp_path / "us" / cls / f"{cls}_{i}.png", level=60 + 40 * i)
    d = _load(tmp_path / "us", labels=("normal", "benign", "malignant"),
              split=SplitPlan(val_fraction=0.25, test_fraction=0.25))
    assert d.task.kind == "multiclass" and d.task.label_names == ("normal", "benign", "malignant")
    assert not d.task.classes_from_data     # the study names them
    assert read_image_folders(tmp_path / "us").task.classes_from_data    # counted from the folders' images
    assert sum(map(len, (d.train, d.val, d.test))) == 12
    for part in (d.train, d.val, d.test):   # each image's label: its folder's place in data.labels, every class
        assert part.labels.tolist() == [d.task.label_names.index(pid.split("/")[0]) for pid in part.patient_ids]
    assert d.source["patient_key"]["files_as_own_patient"] == 12
    assert not d.patients_known       # no file names its patient: each image is its own unit, and the card says so
    with pytest.raises(DataError, match=r"labels \['normal', 'benign'\] do not match the class folders"):
        read_image_folders(tmp_path / "us", class_names=("normal", "benign"))


def test_preprocessing_runs_per_image_and_is_recorded(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    d = _load(root, minmax=True, image_size=8, channels=3)
    assert d.train.image_shape == (3, 8, 8)
    assert np.allclose(d.train.images.min(axis=(1, 2, 3)), 0) and np.allclose(d.train.images.max(axis=(1, 2, 3)), 1)
    assert d.source["preprocessing"]["minmax"] is True and d.source["preprocessing"]["channels"] == 3


# --- bad input ------------------------------------------------------------------------------------------------


def test_truncated_image_stops_with_file_and_count(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    for name in ("train/PNEUMONIA/person3_bacteria_4.jpeg", "test/NORMAL/IM-0101-0001.jpeg"):
        data = (root / name).read_bytes()
        (root / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as err:
        _load(root)
    message = str(err.value)
    assert "2 of 21 rows cannot be used (2 unreadable image)" in message
    assert "train/PNEUMONIA/person3_bacteria_4.jpeg" in message and "test/NORMAL/IM-0101-0001.jpeg" in message
    assert "skip_invalid" in message


def test_skip_invalid_leaves_out_and_counts(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    (root / "train/NORMAL/IM-0002-0001.jpeg").write_bytes(b"not a jpeg at all")
    (root / "train/NORMAL/notes.txt").write_text("scanner log")
    d = _load(root, skip_invalid=True)
    left = d.source["left_out_invalid"]
    assert left["count"] == 2 and left["by_kind"] == {"not an image": 1, "unreadable image": 1}
    assert len(d.train) + len(d.val) == 16 - 1  # 17 train rows, the notes file, minus person9 and the broken file


def test_a_broken_link_in_a_class_folder_is_a_missing_image(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    link = root / "train" / "NORMAL" / "IM-0007-0001.jpeg"
    try:
        link.symlink_to(tmp_path / "gone" / "IM-0007-0001.jpeg")
    except OSError:
        pytest.skip("this file system cannot make symbolic links")
    with pytest.raises(DataError) as err:
        _load(root)
    message = str(err.value)
    assert "1 of 22 rows cannot be used (1 missing image)" in message and "skip_invalid" in message
    assert (f"train/NORMAL/IM-0007-0001.jpeg: image train/NORMAL/IM-0007-0001.jpeg is a link to "
            f"{tmp_path / 'gone' / 'IM-0007-0001.jpeg'}, which does not exist") in message
    assert _load(root, skip_invalid=True).source["left_out_invalid"]["by_kind"] == {"missing image": 1}


def test_a_linked_folder_of_images_in_a_class_folder_is_read(tmp_path, write_image):
    """Path.rglob (Python < 3.13) does not enter a linked folder: a batch of images linked into a class folder was
    left out without a word, though the folder is read "recursively" and a broken link to one file is reported."""
    root = _kermany(tmp_path / "chest_xray", write_image)
    before = len(read_image_folders(root).paths)
    write_image(tmp_path / "elsewhere" / "batch2" / "IM-0201-0001.jpeg", level=90, size=(20, 24))
    write_image(tmp_path / "elsewhere" / "batch2" / "deeper" / "IM-0202-0001.jpeg", level=80, size=(20, 24))
    try:
        (root / "train" / "NORMAL" / "batch2").symlink_to(tmp_path / "elsewhere" / "batch2")
        (tmp_path / "elsewhere" / "batch2" / "deeper" / "loop").symlink_to(root / "train" / "NORMAL")  # a cycle
    except OSError:
        pytest.skip("this file system cannot make symbolic links")
    m = read_image_folders(root)
    names = [p.name for p in m.paths]
    assert len(names) == before + 2 and {"IM-0201-0001.jpeg", "IM-0202-0001.jpeg"} <= set(names)
    assert len(names) == len(set(m.paths))                          # the cycle is walked once


def test_files_the_operating_system_leaves_in_a_folder_are_not_data(tmp_path, write_image):
    """Windows' Thumbs.db in a class folder stopped the study ("suffix '.db' is not an image format"), while macOS's
    .DS_Store was skipped."""
    root = _kermany(tmp_path / "chest_xray", write_image)
    before = len(read_image_folders(root).paths)
    for name in ("Thumbs.db", "desktop.ini", ".DS_Store"):
        (root / "train" / "NORMAL" / name).write_bytes(b"\0\1")
    assert len(read_image_folders(root).paths) == before
    _load(root)


def test_hidden_folders_and_macos_metadata_in_a_class_folder_are_not_data(tmp_path, write_image):
    """A viewer's .thumbnails/ in a class folder was read as more images of that class, and a .git/ or __MACOSX/
    there stopped the study with "not an image" rows."""
    root = _kermany(tmp_path / "chest_xray", write_image)
    before = sorted(read_image_folders(root).where)
    write_image(root / "train" / "PNEUMONIA" / ".thumbnails" / "person8_bacteria_9.jpeg", level=10, size=(20, 24))
    (root / "train" / "PNEUMONIA" / ".git").mkdir()
    (root / "train" / "PNEUMONIA" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "test" / "NORMAL" / "__MACOSX").mkdir()
    (root / "test" / "NORMAL" / "__MACOSX" / "IM-0100-0001.jpeg.plist").write_bytes(b"\0\5\26\7")
    assert sorted(read_image_folders(root).where) == before
    _load(root)


def test_a_file_server_s_thumbnail_folders_are_not_read_as_images(tmp_path, write_image):
    """A Synology NAS keeps @eaDir/<image>/SYNOFILE_THUMB_*.jpg beside each image: where file names give no patient
    each thumbnail was one more image of its class, a copy of another that could sit in another split."""
    root = tmp_path / "export"
    for cls in ("benign", "malignant"):
        for i in range(4):
            write_image(root / cls / f"scan{i}.png", level=40 * i, size=(20, 24))
    before = sorted(read_image_folders(root).where)
    write_image(root / "benign" / "@eaDir" / "scan0.png" / "SYNOFILE_THUMB_M.jpg", level=0, size=(20, 24))
    write_image(root / "@eaDir" / "benign" / "SYNOFILE_THUMB_S.jpg", level=0, size=(20, 24))
    assert sorted(read_image_folders(root).where) == before


def test_a_split_folder_given_as_the_dataset_is_told_that_its_siblings_go_unused(tmp_path, write_image, caplog):
    """--data-path chest_xray/train read train's class folders as the whole dataset and carved test from them, and
    nothing said that the published test/ beside it was unused."""
    root = _kermany(tmp_path / "chest_xray", write_image)
    with caplog.at_level("WARNING"):
        read_image_folders(root / "train")
    assert f"data.path {root / 'train'} is a split folder" in caplog.text and "the published test/" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        read_image_folders(root)
    assert "is a split folder" not in caplog.text
    alone = root.parent / "only" / "train"
    shutil.copytree(root / "train", alone)
    (alone.parent / "test").mkdir()                   # an empty split beside it: nothing published goes unused
    with caplog.at_level("WARNING"):
        read_image_folders(alone)
    assert "is a split folder" not in caplog.text


def test_not_an_image_file_is_named(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    (root / "test/PNEUMONIA/readme.txt").write_text("x")
    with pytest.raises(DataError, match=r"test/PNEUMONIA/readme.txt: suffix '.txt' is not an image format"):
        _load(root)


@pytest.mark.parametrize("split", ["", "train/"])
def test_a_folder_of_documents_among_the_class_folders_is_refused_not_made_a_class(tmp_path, write_image, split):
    """A docs/ folder (a PDF) beside NORMAL/ and PNEUMONIA/ became a third class: with skip_invalid its PDF was left
    out and the study trained a three-class model, one class without a single image."""
    root = tmp_path / "xray"
    for cls, names in (("NORMAL", KERMANY["train/NORMAL"]), ("PNEUMONIA", KERMANY["train/PNEUMONIA"])):
        for name in names:
            write_image(root / split / cls / name, level=100, size=(20, 24))
    (root / split / "docs").mkdir()
    (root / split / "docs" / "protocol.pdf").write_bytes(b"%PDF-1.4\n%%EOF\n")
    with pytest.raises(DataError, match=r"docs holds no image files, only 1 other file\(s\) \(e.g. protocol.pdf\), "
                                        r"so docs would be a class without images; move docs out of"):
        _load(root, skip_invalid=True)


def test_class_folders_spelled_in_another_case_in_one_split_are_named_with_the_fix(tmp_path, write_image):
    """test/Normal beside train/NORMAL was refused as "test lacks the class folder(s) NORMAL that other splits have
    (NORMAL, Normal, PNEUMONIA)", which names neither the folder to rename nor that case is the difference."""
    root = _kermany(tmp_path / "chest_xray", write_image)
    (root / "test" / "NORMAL").rename(root / "test" / "Normal")
    with pytest.raises(DataError, match=r"class folders test/Normal, train/NORMAL under .* differ in case only; "
                                        r"rename them to one spelling \(e.g. NORMAL\)"):
        read_image_folders(root)


def test_empty_class_folder_and_missing_class_are_errors(tmp_path, write_image):
    root = _kermany(tmp_path / "a", write_image, {**KERMANY, "test/PNEUMONIA": []})
    (root / "test/PNEUMONIA").mkdir(parents=True)
    with pytest.raises(DataError, match=r"test/PNEUMONIA holds no files: the test split has no PNEUMONIA images"):
        read_image_folders(root)
    root = _kermany(tmp_path / "b", write_image, {k: v for k, v in KERMANY.items() if k != "test/PNEUMONIA"})
    with pytest.raises(DataError, match=r"test lacks the class folder\(s\) PNEUMONIA"):
        read_image_folders(root)


@pytest.mark.parametrize("split, carved", [("val", True), ("test", True), ("train", False)])
def test_an_empty_split_folder_says_so_and_how_to_have_it_carved(tmp_path, write_image, split, carved):
    """Before: "val lacks the class folder(s) NORMAL, PNEUMONIA that other splits have", of a folder made and left
    empty; dpmed carves a split that has no folder, which the message did not say."""
    root = _kermany(tmp_path, write_image, KERMANY)
    (root / split).mkdir(exist_ok=True)
    for child in (root / split).iterdir():
        shutil.rmtree(child)
    others = ", ".join(sorted(s for s in ("train", "test") if s != split))
    remedy = (f", or remove the empty folder: dpmed then carves the {split} split from the training images"
              if carved else "")
    with pytest.raises(DataError) as err:
        read_image_folders(root)
    verb = "hold" if split == "val" else "holds"
    assert str(err.value) == (f"split folder {root / split} is empty, while {others} {verb} the class folders "
                              f"NORMAL, PNEUMONIA; put its images in those class folders{remedy}")


@pytest.mark.parametrize("name, hint", [("pneumoniamnist.npz", " (an .npz: source medmnist reads MedMNIST files)"),
                                        ("labels.csv", " (a table: source csv, or the source of its layout, reads it)"),
                                        ("scan.png", "")])
def test_a_path_at_a_file_says_the_source_reads_a_folder(tmp_path, name, hint):
    """Before: "image folder .../pneumoniamnist.npz not found (or not a folder)", of a file the user could see."""
    path = tmp_path / name
    path.write_bytes(b"x")
    with pytest.raises(DataError) as err:
        read_image_folders(path)
    assert str(err.value) == (f"data.path {path} is a file, not an image folder{hint}; source 'folders' reads the "
                              "folder that holds train/ and test/ (or one folder per class)")


def test_missing_folder_and_one_class(tmp_path, write_image):
    with pytest.raises(DataError, match="image folder .*nowhere not found"):
        read_image_folders(tmp_path / "nowhere")
    write_image(tmp_path / "one" / "train" / "NORMAL" / "IM-0001-0001.jpeg")
    with pytest.raises(DataError, match="1 class folder"):
        read_image_folders(tmp_path / "one")


@pytest.mark.parametrize("labels", [None, ("NORMAL", "PNEUMONIA")])
def test_a_folder_without_class_folders_says_it_holds_no_images_not_that_labels_mismatch(tmp_path, write_image,
                                                                                          labels):
    """Before: an empty data folder with labels gave "labels [...] do not match the class folders []"."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=rf"image folder {empty} is empty: it holds no images; data.path must name"):
        read_image_folders(empty, class_names=labels)
    (empty / "train").mkdir()
    with pytest.raises(DataError, match=r"its split folder\(s\) train hold no class folders, so there are no images"):
        read_image_folders(empty, class_names=labels)
    write_image(tmp_path / "loose" / "IM-0001-0001.jpeg")
    with pytest.raises(DataError, match=r"holds no class folders, only 1 file\(s\) \(e.g. IM-0001-0001.jpeg\)"):
        read_image_folders(tmp_path / "loose", class_names=labels)


def test_images_of_different_sizes_need_image_size(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    write_image(root / "train/NORMAL/IM-0001-0002.jpeg", size=(30, 30))
    message = (r"^1 of 21 images differ in size from the first readable one \(20x24 px\), e\.g\. \S+/train/NORMAL/"
               r"IM-0001-0002\.jpeg is 30x30 px; set data.image_size to resize every image to one size$")
    with pytest.raises(DataError, match=message):
        _load(root, image_size=None)
    with pytest.raises(DataError, match=message):    # before: counted as an unreadable row, which this would drop
        _load(root, image_size=None, skip_invalid=True)


def test_options_the_source_does_not_read_are_errors(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    with pytest.raises(DataError, match=r"data.columns does not apply to source 'folders' \(it applies to: csv\)"):
        _load(root, columns={"path": "x"})
    with pytest.raises(DataError, match=r"data.uncertain does not apply to source 'folders'"):
        _load(root, uncertain="ones")
    with pytest.raises(DataError, match=r"data.split does not apply to source 'medmnist'"):
        load_dataset(source="medmnist", path=tmp_path / "x.npz", image_size=None, channels=None, seed=0,
                     n_images=None, split=SplitPlan())


# --- the real release ------------------------------------------------------------------------------------------


def test_real_chest_xray_manifest(chest_xray_path):
    m = read_image_folders(chest_xray_path)
    listed = list(csv.DictReader((chest_xray_path / "manifest.csv").open()))
    assert sorted(str(p.relative_to(chest_xray_path)) for p in m.paths) == sorted(r["path"] for r in listed)
    assert m.task.label_names == ("NORMAL", "PNEUMONIA") and not m.problems
    assert m.notes["patient_key"]["files_matched"] == len(m) == 5840
    train = set(m.patient_ids[m.splits == "train"])
    test = set(m.patient_ids[m.splits == "test"])
    assert len(train & test) == 170  # the release's own split shares these patients (module docstring)
    assert (m.labels[m.splits == "test"] == 1).sum() == 390


def test_real_chest_xray_files_decode(chest_xray_path):
    m = read_image_folders(chest_xray_path)
    for i in (0, 2000, 5839):
        x = read_image(m.paths[i], channels=1)
        assert x.shape == (1, 224, 224) and x.dtype == np.float32 and 0 <= x.min() < x.max() <= 1
        small = read_image(m.paths[i], channels=3, size_hint=(64, 64))  # JPEG draft: decoded at >= 64 px
        assert small.shape[0] == 3 and min(small.shape[1:]) >= 64


@pytest.mark.slow
def test_real_chest_xray_whole_dataset(chest_xray_path):
    d = load_dataset(source="folders", path=chest_xray_path, image_size=64, channels=1, seed=0, n_images=None,
                     split=SplitPlan(val_fraction=0.1))
    assert (len(d.train), len(d.val), len(d.test)) == (4254, 505, 624)  # validation: a keyed draw per patient
    assert all(len(splits) == 1 for splits in _owners(d).values())
    assert d.source["split"]["rows_of_those_patients_outside_their_top_split"] == 457


def test_a_published_split_whose_images_are_all_unreadable_is_empty_not_carved(tmp_path, write_image):
    root = _kermany(tmp_path / "chest_xray", write_image)
    for name in KERMANY["test/NORMAL"] + KERMANY["test/PNEUMONIA"]:
        folder = "test/NORMAL" if name in KERMANY["test/NORMAL"] else "test/PNEUMONIA"
        (root / folder / name).write_bytes(b"\xff\xd8\xff\xe0 cut short")
    with pytest.raises(DataError, match=r"4 of 21 rows cannot be used \(4 unreadable image\)"):
        _load(root)
    with pytest.raises(DataError, match="the test split is empty after leaving out invalid rows"):
        _load(root, skip_invalid=True)


@pytest.mark.filterwarnings("ignore:.*bootstrap redraws:RuntimeWarning")  # a 4-image test split
def test_a_folder_study_records_its_preprocessing_and_tells_left_out_rows_privately(tmp_path, write_image, caplog):
    """End to end through `dpmed run`: the run record's data section holds the per-image steps and the split
    settings (what the report's provenance section shows); the rows left out and the patients crossing splits are
    counts of the data, told in the terminal and the private log, never in run.json."""
    import json

    from dpmed.cli import main

    layout = {folder: names + [f"{'IM-09%02d-0001' if 'NORMAL' in folder else 'person9%02d_virus_1'}.jpeg" % k
                               for k in range(12)] for folder, names in KERMANY.items() if folder.startswith("train")}
    root = _kermany(tmp_path / "chest_xray" / "chest_xray", write_image, {**KERMANY, **layout})
    (root / "train/PNEUMONIA/person2_virus_3.jpeg").write_bytes(b"truncated")
    study = tmp_path / "study.yaml"
    study.write_text(
        "name: tiny-folders\nseeds: [0]\n"
        "data:\n  source: folders\n  path: chest_xray\n  image_size: 16\n  channels: 3\n"
        "  preprocessing: {minmax: true, equalize: true, normalize: {mean: [0.5], std: [0.25]}}\n"
        "  split: {val_fraction: 0.25, seed: 0}\n  skip_invalid: true\n"
        "model: {name: small_cnn}\ntraining: {epochs: 1, batch_size: 8}\nevaluation: {bootstrap_resamples: 20}\n"
        "arms:\n  - {name: non-private, mechanism: none}\n")
    assert main(["run", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    record = json.loads((tmp_path / "out" / "tiny-folders" / "runs" / "non-private_seed0" / "run.json").read_text())
    data = record["data"]["source"]   # the reader's provenance
    assert data["format"] == "image-folders" and data["path"] == root.name  # its name: not where it lies
    assert str(tmp_path) not in json.dumps(record)
    assert data["preprocessing"]["resize"].startswith("16x16") and data["preprocessing"]["channels"] == 3
    assert data["preprocessing"]["minmax"] is True and data["preprocessing"]["equalize"] is True
    assert data["preprocessing"]["normalize"] == {"mean": [0.5], "std": [0.25]}
    assert data["split"]["published"] == ["test"] and data["split"]["val_fraction"] == 0.25
    assert not {"left_out_invalid", "rows", "decode", "summary"} & set(data)
    assert "patients_crossing_splits" not in data["split"]
    assert "left out 1 invalid rows ({'unreadable image': 1}" in caplog.text


def test_aspect_crop_decodes_the_central_square_of_a_wide_film(tmp_path, write_image):
    """A film twice as wide as high: ``crop`` keeps its central square, ``stretch`` squeezes all of it; each is the
    decoded file put through the same steps by hand, and the cache does not mix them."""
    from dpmed.data import Preprocessing

    layout = {folder: names[:2] for folder, names in KERMANY.items()}
    root = tmp_path / "wide"
    for folder, names in layout.items():
        for name in names:
            write_image(root / folder / name.replace(".jpeg", ".png"), level=200, size=(20, 40))
    film = root / "test" / "NORMAL" / "IM-0100-0001.png"
    raw = read_image(film, channels=1)[None]                               # [1, 1, 20, 40]
    for aspect in ("crop", "stretch"):
        data = _load(root, aspect=aspect, cache_dir=tmp_path / "cache", split=SplitPlan(val_fraction=0.5))
        row = [str(p) for p in data.test.patient_ids].index("IM-0100")
        expected = Preprocessing(size=(16, 16), aspect=aspect).apply(raw)[0]
        np.testing.assert_allclose(data.test.images[row], expected, atol=1e-6)
        assert data.source["preprocessing"]["aspect"] == aspect
    cropped = Preprocessing(size=(16, 16), aspect="crop").apply(raw)[0, 0]
    stretched = Preprocessing(size=(16, 16)).apply(raw)[0, 0]
    assert np.ptp(cropped[0]) < 0.6 * np.ptp(stretched[0])                 # half the ramp, not all of it


def test_sorted_class_folders_name_their_positive_class_and_labels_reorder_them(tmp_path, write_image):
    """Folders are read in sorted order, so abnormal/ before normal/ makes normal the positive class: the task says
    so (the terminal prints it) and data.labels turns it round."""
    for cls in ("normal", "abnormal"):
        for i in range(4):
            write_image(tmp_path / "xr" / cls / f"{cls}_{i}.png", level=60 + 40 * i)
    split = SplitPlan(val_fraction=0.25, test_fraction=0.25)
    assert _load(tmp_path / "xr", split=split).task.describe() == (
        "binary (positive class normal, label 1; negative abnormal, label 0)")
    assert _load(tmp_path / "xr", labels=("normal", "abnormal"), split=split).task.describe() == (
        "binary (positive class abnormal, label 1; negative normal, label 0)")


def test_plan_tells_the_data_summary_before_a_refusal_it_may_explain(tmp_path, write_image, capsys):
    """A batch above the training set is refused at planning; the summary saying that rows were left out (a patient
    in two published splits) comes first. Before, `dpmed plan` never printed it and `dpmed run` only after
    planning, so the refusal's count of training images was unexplained."""
    from dpmed.cli import main

    _kermany(tmp_path / "chest_xray", write_image)
    study = tmp_path / "study.yaml"
    study.write_text("name: tiny-folders\nseeds: [0]\ndata: {source: folders, path: chest_xray, image_size: 16}\n"
                     "model: {name: small_cnn}\ntraining: {epochs: 1, batch_size: 500}\n"
                     "arms:\n  - {name: non-private, mechanism: none}\n")
    assert main(["plan", str(study), "--out", str(tmp_path / "out"), "--no-estimate"]) == 2
    err = capsys.readouterr().err
    summary = err.index("1 patient is in two published splits: left out its 1 image outside the higher split")
    assert summary < err.index("dpmed: error: arm 'non-private': training.batch_size 500 exceeds")


def test_the_shareable_provenance_is_the_same_with_one_patient_more(tmp_path, write_image):
    """Neighbouring datasets (one training patient added, with two images and one also in the published test
    folder) give the same shareable source: none of the counts the reader found (files matched, patients in two
    published splits, rows) may reach run.json, whose eps is an add/remove eps."""
    plain = _load(_kermany(tmp_path / "a" / "chest_xray", write_image))
    more = {**KERMANY, "train/PNEUMONIA": [*KERMANY["train/PNEUMONIA"], "person8_virus_20.jpeg",
                                           "person8_virus_21.jpeg"],
            "test/PNEUMONIA": [*KERMANY["test/PNEUMONIA"], "person8_virus_22.jpeg"]}
    neighbour = _load(_kermany(tmp_path / "b" / "chest_xray", write_image, more))
    assert neighbour.source["split"]["patients_in_two_published_splits"] == 2     # the reader did count them
    assert neighbour.source["patient_key"]["files_matched"] == 24
    shared, shared_neighbour = plain.shareable_source(), neighbour.shareable_source()
    assert shared["path"] == shared_neighbour["path"] == "chest_xray"     # the folder's name, not where it lies
    assert shared == shared_neighbour
    assert shared["patient_key"] == {"pattern": plain.source["patient_key"]["pattern"]}
    assert shared["split"]["published"] == ["test"] and shared["split"]["val_fraction"] == 0.3


def test_a_small_published_validation_split_is_told(tmp_path, write_image, caplog):
    """Kaggle's copy of the Kermany release has a val/ of 16 images: used as published, it silently replaced the
    validation dpmed carves (split.val_fraction unused), and the threshold rested on 15 images."""
    layout = dict(KERMANY, **{"val/NORMAL": ["IM-0200-0001.jpeg"], "val/PNEUMONIA": ["person50_virus_60.jpeg"]})
    with caplog.at_level("WARNING"):
        d = _load(_kermany(tmp_path / "kaggle", write_image, layout))
    assert len(d.val) == 2
    said = [r.getMessage() for r in caplog.records if "publishes a validation split of only 2 images" in r.getMessage()]
    # a val_fraction the study gives is told unread once, where the study is prepared (test_settings_the_data_turn_off)
    assert len(said) == 1 and "val_fraction" not in said[0] and "data.split.official: false" in said[0], said
    caplog.clear()
    with caplog.at_level("WARNING"):
        _load(_kermany(tmp_path / "mendeley", write_image))           # validation carved: nothing to tell
    assert "publishes a validation split" not in caplog.text
