"""Identical images under two patient ids inside the private set: told once per kind (within a split, across
splits) with counts, splits and the first files, never refused and never in what run.json carries. A MedMNIST npz,
without patient ids, is checked by image."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from dpmed.data import ImageSet, load_dataset
from dpmed.data.duplicates import describe_copies

# file, label, patient, split: each patient's two images of both classes, so every split holds both
ROWS = [(f"{split}{p}-{k}.png", k, f"{split}{p}", split)
        for split, n in (("train", 4), ("val", 2), ("test", 2)) for p in range(n) for k in (0, 1)]
WITHIN = "identical to an image of another patient id in the same split"
ACROSS = "identical to an image of another patient id in another split"
IMAGE_WITHIN = "identical to another image in the same split"
IMAGE_ACROSS = "identical to another image in another split"


def write_csv(root: Path, copies: list[tuple[str, str, str, str]] = ()) -> Path:
    """The CSV of ROWS, each a 6 x 6 PNG of its own noise, and ``copies`` (copy, of file, patient, split): byte
    copies of a file under another name, patient and split."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, *_ in ROWS:
        Image.fromarray(rng.integers(0, 256, (6, 6), dtype=np.uint8)).save(root / name)
    rows = list(ROWS)
    for copy, of, patient, split in copies:
        shutil.copy(root / of, root / copy)
        rows.append((copy, 1, patient, split))
    (root / "labels.csv").write_text("\n".join(["file,label,pid,fold"] + [",".join(map(str, r)) for r in rows])
                                     + "\n", encoding="utf-8")
    return root / "labels.csv"


def read(table: Path):
    return load_dataset(source="csv", path=table, image_size=6, channels=1, seed=0, n_images=None,
                        columns={"path": "file", "patient": "pid", "split": "fold"}, labels=("label",))


def test_copies_under_other_patient_ids_are_told_per_kind_with_counts_splits_and_files(tmp_path, caplog):
    table = write_csv(tmp_path, [("a.png", "train0-0.png", "x1", "train"),     # CSV line 18
                                 ("b.png", "train1-1.png", "x2", "test"),      # line 19
                                 ("c.png", "val0-0.png", "x3", "test")])       # line 20
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        d = read(table)
    told = [r.getMessage() for r in caplog.records if "identical to an image" in r.getMessage()]
    assert len(told) == 2 and all(r.levelname == "WARNING" for r in caplog.records if r.getMessage() in told)
    within, across = (next(t for t in told if kind in t) for kind in (WITHIN, ACROSS))
    assert within.startswith(f"data: 1 image is {WITHIN} (1 in train), e.g. labels.csv line 2 (train0-0.png), "
                             "patient train0, and labels.csv line 18 (a.png), patient x1:")
    assert within.endswith("give both one patient id (in the table, or the file names that give it); otherwise "
                           "drop the copy")
    assert across.endswith("that give it), which keeps the patient in one split; otherwise drop the copy")
    assert across.startswith(f"data: 2 images are {ACROSS} (1 between train and test, 1 between val and test), "
                             "e.g. labels.csv line 5 (train1-1.png), patient train1, and labels.csv line 19 (b.png), "
                             "patient x2:")
    assert len(d.train) + len(d.val) + len(d.test) == len(ROWS) + 3          # a warning, not a refusal
    shared = json.dumps(d.shareable_source())
    assert not [v for v in ("a.png", "b.png", "c.png", "x1", "identical") if v in shared]


def test_no_copies_and_copies_of_one_patient_tell_nothing(tmp_path, caplog):
    (tmp_path / "none").mkdir()
    (tmp_path / "one").mkdir()
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        read(write_csv(tmp_path / "none"))
        read(write_csv(tmp_path / "one", [("a.png", "train0-0.png", "train0", "train")]))
    assert "identical to an image" not in caplog.text


def test_a_table_without_patient_ids_tells_its_copies_by_image(tmp_path, caplog):
    """Without a patient column each image is its own unit: a copy is one image counted as two, which "give both one
    patient id" cannot fix (the table has no ids to give)."""
    table = write_csv(tmp_path, [("a.png", "train0-0.png", "x1", "train")])
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        load_dataset(source="csv", path=table, image_size=6, channels=1, seed=0, n_images=None,
                     columns={"path": "file", "split": "fold"}, labels=("label",))
    told = [r.getMessage() for r in caplog.records if "identical to" in r.getMessage()]
    assert len(told) == 1 and IMAGE_WITHIN in told[0] and "patient id" not in told[0], told


BLANK, OTHER = np.zeros((1, 1, 2, 2), np.float32), np.ones((1, 1, 2, 2), np.float32)   # two 2 x 2 images


def images(patients, pixels) -> ImageSet:
    """An image set of ``pixels`` (each [1, 1, 2, 2]) under ``patients``."""
    n = len(patients)
    return ImageSet(images=np.concatenate(pixels), labels=np.zeros(n, np.int64), patient_ids=np.array(patients),
                    sex=np.array(["unknown"] * n), age=np.full(n, np.nan))


def test_each_image_is_counted_once_per_kind_however_many_copies_precede_it():
    """Train holds one image under patients a, a, b, c and test under d: two train images follow a copy of another
    patient (b, c; the second a does not), and the test copy is one image whatever the train copies."""
    sets = {"train": images(["a", "a", "b", "e", "c"], [BLANK, BLANK, BLANK, OTHER, BLANK]),
            "val": images(["f"], [OTHER * 0.5]), "test": images(["d"], [BLANK])}
    within, across = describe_copies(sets)
    assert within.startswith(f"data: 2 images are {WITHIN} (2 in train), e.g. train[0], patient a, and train[2], "
                             "patient b:")
    assert across.startswith(f"data: 1 image is {ACROSS} (1 between train and test), e.g. train[0], patient a, and "
                             "test[0], patient d:")
    sets["test"] = images(["a"], [BLANK])          # the patient of the first copy: still another patient's (b)
    assert describe_copies(sets)[1].startswith(f"data: 1 image is {ACROSS} (1 between train and test), e.g. "
                                               "train[2], patient b, and test[0], patient a:")


def write_study(tmp_path: Path, data: str) -> Path:
    """A one-arm study of ``data``, trained one epoch in batches of 4."""
    study = tmp_path / "s.yaml"
    study.write_text(f"""
name: copies
settings_chosen_on: "a made-up test set"
data: {data}
training: {{epochs: 1, batch_size: 4, threads: 1}}
evaluation: {{bootstrap_resamples: 20}}
arms:
  - {{name: base, mechanism: none}}
""")
    return study


def csv_study(tmp_path: Path) -> tuple[Path, tuple[str, ...], tuple[bytes, ...]]:
    table = write_csv(tmp_path, [("copy-a.png", "train0-0.png", "patient-of-a", "train"),
                                 ("copy-b.png", "train1-1.png", "patient-of-b", "test")])
    data = (f"{{source: csv, path: {table}, columns: {{path: file, patient: pid, split: fold}}, labels: [label], "
            "task: binary, image_size: 8, channels: 1}")
    return write_study(tmp_path, data), (WITHIN, ACROSS), (b"copy-a", b"copy-b", b"patient-of-")


def npz_study(tmp_path: Path) -> tuple[Path, tuple[str, ...], tuple[bytes, ...]]:
    path = write_npz(tmp_path / "x.npz", [("test", 2, "train", 4), ("train", 5, "train", 1)])
    data = f"{{source: medmnist, path: {path}, image_size: 8, channels: 1}}"
    return write_study(tmp_path, data), (IMAGE_WITHIN, IMAGE_ACROSS), (b"_images[",)


@pytest.mark.parametrize("make_study", [csv_study, npz_study])
def test_what_the_check_finds_reaches_the_terminal_and_private_log_only(tmp_path, capsys, make_study):
    """A statistic of the private images: every file of the study folder outside private/ (study.yaml, run.json,
    report.html, results.csv, ...) is searched for the warning and the copies' names."""
    from dpmed.cli import main

    study, told, names = make_study(tmp_path)
    assert main(["run", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    folder = tmp_path / "out" / "copies"
    assert told[0] in capsys.readouterr().err
    log = (folder / "private" / "dpmed.log").read_text()
    assert all(t in log for t in told)
    public = [p for p in folder.rglob("*") if p.is_file() and "private" not in p.relative_to(folder).parts]
    assert {"study.yaml", "run.json", "report.html", "results.csv"} <= {p.name for p in public}
    for path in public:
        content = path.read_bytes()
        assert not [w for w in (b"identical to", *names) if w in content], path


def write_npz(path: Path, copies: list[tuple[str, int, str, int]] = ()) -> Path:
    """A MedMNIST-layout npz of 6, 3 and 3 noise images of 8 x 8, with ``copies`` (split, row, of split, of row):
    that row's image replaced by a copy of the other's."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 6), ("val", 3), ("test", 3)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, 8, 8), dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(n) % 2)[:, None].astype(np.uint8)
    for split, row, of, of_row in copies:
        arrays[f"{split}_images"][row] = arrays[f"{of}_images"][of_row]
    np.savez(path, **arrays)
    return path


def read_npz(path: Path):
    return load_dataset(source="medmnist", path=path, image_size=None, channels=None, seed=0, n_images=None)


def test_copies_in_an_npz_are_told_by_split_and_row_with_what_to_do(tmp_path, caplog):
    """Without patient ids each image is its own unit: a copy in test of a training row is a leak, two copies in
    train one image counted twice; both told (named by file, key and row), neither refused."""
    path = write_npz(tmp_path / "x.npz", [("test", 2, "train", 4), ("train", 5, "train", 1)])
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        d = read_npz(path)
    told = [r.getMessage() for r in caplog.records if "identical to" in r.getMessage()]
    assert len(told) == 2
    within, across = (next(t for t in told if kind in t) for kind in (IMAGE_WITHIN, IMAGE_ACROSS))
    assert within.startswith(f"data: 1 image is {IMAGE_WITHIN} (1 in train), e.g. x.npz train_images[1] and x.npz "
                             "train_images[5]: each image is its own unit")
    assert within.endswith("Drop one copy (its image and its label) and save the file again")
    assert across.startswith(f"data: 1 image is {IMAGE_ACROSS} (1 between train and test), e.g. x.npz "
                             "train_images[4] and x.npz test_images[2]: an image the model trained on")
    assert "Drop the copy in the earlier split" in across and "patient" not in within + across
    assert (len(d.train), len(d.val), len(d.test)) == (6, 3, 3)
    assert "identical" not in json.dumps(d.shareable_source())


def test_an_npz_cohort_tells_the_copies_it_keeps_named_by_their_rows_in_the_file(tmp_path, caplog):
    """data.patients keeps train_images[5], val_images[1] and test_images[2] in cohort 0 of seed 0 and the other
    rows in cohort 1: a copy of train row 5 in test row 2 lies in cohort 0 alone, one of train row 1 in train row 4
    in cohort 1 alone. Each cohort tells its own copy, by its row in the file, and nothing of the other's (told
    before the cohort was chosen, both cohorts warned of both)."""
    from dpmed.data.cohorts import PatientSelection
    from dpmed.data.registry import DataRequest, read_dataset

    path = write_npz(tmp_path / "x.npz", [("test", 2, "train", 5), ("train", 4, "train", 1)])
    told = {}
    for part in (0, 1):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dpmed"):
            read_dataset(DataRequest(source="medmnist", path=path, seed=0,
                                     patients=PatientSelection(fraction=0.5, part=part, seed=0)))
        told[part] = [r.getMessage() for r in caplog.records if "identical to" in r.getMessage()]
    assert len(told[0]) == 1 and told[0][0].startswith(
        f"data: 1 image is {IMAGE_ACROSS} (1 between train and test), e.g. x.npz train_images[5] and x.npz "
        "test_images[2]:"), told[0]
    assert len(told[1]) == 1 and told[1][0].startswith(
        f"data: 1 image is {IMAGE_WITHIN} (1 in train), e.g. x.npz train_images[1] and x.npz train_images[4]:"), told[1]


def test_group_privacy_is_told_for_the_most_copies_of_one_image_not_always_two():
    """Three ids on one image are one person counted as three: the guarantee per unit then covers them as a group of
    k = 3, whose eps is about three times one unit's. A fixed "k = 2" told the reader a guarantee twice as strong."""
    sets = {"train": images(["a", "b", "a", "c", "e"], [BLANK, BLANK, BLANK, BLANK, OTHER]),
            "val": images(["f"], [OTHER * 0.5]), "test": images(["g"], [OTHER * 0.25])}
    within, = describe_copies(sets)
    assert "k = 3" in within and "k = 2" not in within, within                    # ids a, b and c
    sets["train"] = images([f"train-{i}" for i in range(5)], [BLANK, BLANK, BLANK, BLANK, OTHER])   # as MedMNIST
    within, = describe_copies(sets, patients_known=False)
    assert "k = 4" in within and "counts as 4" in within, within
    sets["train"] = images(["a", "b", "e"], [BLANK, BLANK, OTHER])
    assert "k = 2" in describe_copies(sets)[0]


def test_an_image_in_all_three_splits_counts_as_two_copies_not_three():
    """One image in train, val and test is two copies of it in later splits (val's and test's); the pairs they make
    are three, and the count, which says images, read 3."""
    same = np.zeros((1, 1, 2, 2), np.float32)

    def images(split, pixels):
        n = len(pixels)
        return ImageSet(images=np.concatenate(pixels), labels=np.zeros(n, np.int64),
                        patient_ids=np.array([f"{split}-{i}" for i in range(n)]), sex=np.array(["unknown"] * n),
                        age=np.full(n, np.nan))

    sets = {split: images(split, [same, np.full((1, 1, 2, 2), i + 1, np.float32)])
            for i, split in enumerate(("train", "val", "test"))}
    across, = describe_copies(sets, patients_known=False)
    assert across.startswith(f"data: 2 images are {IMAGE_ACROSS} (1 between train and val, 1 between train and "
                             "test, 1 between val and test)"), across


def test_an_npz_without_copies_tells_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        read_npz(write_npz(tmp_path / "x.npz"))
    assert "identical to" not in caplog.text


def test_the_real_pneumoniamnist_copies_are_counted_as_its_raw_bytes_say(pneumoniamnist_path, caplog):
    """Each split's repeats (its images less its distinct ones), and each later split's images found in an earlier
    one, counted from the npz's uint8 bytes."""
    raw = np.load(pneumoniamnist_path)
    keys = {split: [x.tobytes() for x in raw[f"{split}_images"]] for split in ("train", "val", "test")}
    distinct = {split: set(k) for split, k in keys.items()}
    within = {f"in {split}": len(keys[split]) - len(distinct[split]) for split in keys}
    across = {f"between {a} and {b}": sum(x in distinct[a] for x in keys[b])
              for a, b in (("train", "val"), ("train", "test"), ("val", "test"))}
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        read_npz(pneumoniamnist_path)
    for count, kind in ((within, IMAGE_WITHIN), (across, IMAGE_ACROSS)):
        total = sum(count.values())
        parts = ", ".join(f"{n} {where}" for where, n in count.items() if n)
        assert (f"{total} image{'s are' if total > 1 else ' is'} {kind} ({parts})" in caplog.text if total
                else kind not in caplog.text)
