"""Identical images under two patient ids inside the private set: told once per kind (within a split, across
splits) with counts, splits and the first files, never refused and never in what run.json carries."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np

from dpmed.data import ImageSet, load_dataset
from dpmed.data.duplicates import describe_copies

# file, label, patient, split: each patient's two images of both classes, so every split holds both
ROWS = [(f"{split}{p}-{k}.png", k, f"{split}{p}", split)
        for split, n in (("train", 4), ("val", 2), ("test", 2)) for p in range(n) for k in (0, 1)]
WITHIN = "identical to an image of another patient id in the same split"
ACROSS = "identical to an image of another patient id in another split"


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


def test_each_image_is_counted_once_per_kind_however_many_copies_precede_it():
    """Train holds one image under patients a, a, b, c and test under d: two train images follow a copy of another
    patient (b, c; the second a does not), and the test copy is one image whatever the train copies."""
    blank, other = np.zeros((1, 1, 2, 2), np.float32), np.ones((1, 1, 2, 2), np.float32)

    def images(patients, pixels):
        n = len(patients)
        return ImageSet(images=np.concatenate(pixels), labels=np.zeros(n, np.int64), patient_ids=np.array(patients),
                        sex=np.array(["unknown"] * n), age=np.full(n, np.nan))

    sets = {"train": images(["a", "a", "b", "e", "c"], [blank, blank, blank, other, blank]),
            "val": images(["f"], [other * 0.5]), "test": images(["d"], [blank])}
    within, across = describe_copies(sets)
    assert within.startswith(f"data: 2 images are {WITHIN} (2 in train), e.g. train[0], patient a, and train[2], "
                             "patient b:")
    assert across.startswith(f"data: 1 image is {ACROSS} (1 between train and test), e.g. train[0], patient a, and "
                             "test[0], patient d:")
    sets["test"] = images(["a"], [blank])          # the patient of the first copy: still another patient's (b)
    assert describe_copies(sets)[1].startswith(f"data: 1 image is {ACROSS} (1 between train and test), e.g. "
                                               "train[2], patient b, and test[0], patient a:")


def test_what_the_check_finds_reaches_the_terminal_and_private_log_only(tmp_path, capsys):
    """A statistic of the private images: every file of the study folder outside private/ (study.yaml, run.json,
    report.html, results.csv, ...) is searched for the warning and the copies' names."""
    from dpmed.cli import main

    table = write_csv(tmp_path, [("copy-a.png", "train0-0.png", "patient-of-a", "train"),
                                 ("copy-b.png", "train1-1.png", "patient-of-b", "test")])
    study = tmp_path / "s.yaml"
    study.write_text(f"""
name: copies
settings_chosen_on: "a made-up test set"
data: {{source: csv, path: {table}, columns: {{path: file, patient: pid, split: fold}}, labels: [label],
        task: binary, image_size: 8, channels: 1}}
training: {{epochs: 1, batch_size: 8, threads: 1}}
evaluation: {{bootstrap_resamples: 20}}
arms:
  - {{name: base, mechanism: none}}
""")
    assert main(["run", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    folder = tmp_path / "out" / "copies"
    assert WITHIN in capsys.readouterr().err
    log = (folder / "private" / "dpmed.log").read_text()
    assert WITHIN in log and ACROSS in log
    public = [p for p in folder.rglob("*") if p.is_file() and "private" not in p.relative_to(folder).parts]
    assert {"study.yaml", "run.json", "report.html", "results.csv"} <= {p.name for p in public}
    for path in public:
        content = path.read_bytes()
        assert not [w for w in (b"identical to an image", b"copy-a", b"copy-b", b"patient-of-") if w in content], path
