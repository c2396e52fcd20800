"""The other table readers (APTOS, HAM10000, a generic CSV) on small fixture datasets written in each one's published
layout (conftest.py), each one's bad inputs, and the example study files that read the table layouts."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from dpmed.data import SplitPlan
from dpmed.data.formats.tables import read_aptos, read_csv_table, read_ham10000
from dpmed.errors import DataError

# --- APTOS 2019 ---------------------------------------------------------------------------------------------------


def test_aptos_grades_are_an_ordinal_task_split_by_fractions(aptos, load_layout):
    m = read_aptos(aptos)
    assert m.task.kind == "multiclass" and m.task.ordinal and m.task.label_names[4] == "proliferative DR"
    assert m.labels.tolist() == [i % 5 for i in range(15)] and m.where[2] == "train.csv line 4 (id_code 002c1434d8d7)"
    d = load_layout("aptos", aptos, channels=3, split=SplitPlan(val_fraction=0.2, test_fraction=0.2))
    assert sum(map(len, (d.train, d.val, d.test))) == 15 and d.train.image_shape == (3, 8, 8)
    assert d.source["split"]["carved"] == ["val", "test"] and len(set(d.test.labels)) >= 2


def test_aptos_bad_rows_are_listed_with_line_and_count(aptos, write_csv, load_layout):
    rows = [["000c1434d8d7", 0], ["001c1434d8d7", 5], ["002c1434d8d7", "x"], ["003c1434d8d7", 2],
            ["000c1434d8d7", 1], ["zzz", 3]] + [[f"{i:03d}c1434d8d7", i % 5] for i in range(4, 15)]
    write_csv(aptos / "train.csv", ["id_code", "diagnosis"], rows)
    with pytest.raises(DataError) as err:
        load_layout("aptos", aptos)
    message = str(err.value)
    assert "4 of 17 rows cannot be used" in message
    assert "train.csv line 3 (id_code 001c1434d8d7): diagnosis '5' is not a grade 0-4" in message
    assert "train.csv line 4 (id_code 002c1434d8d7): diagnosis 'x'" in message
    assert "train.csv line 6 (id_code 000c1434d8d7): id '000c1434d8d7' repeats train.csv line 2" in message
    assert "train.csv line 7 (id_code zzz): image file train_images/zzz.png does not exist" in message
    split = SplitPlan(val_fraction=0.2, test_fraction=0.2)
    with pytest.raises(DataError, match=r"(?s)line 6 .*repeats train.csv line 2.*even with data.skip_invalid"):
        load_layout("aptos", aptos, skip_invalid=True, split=split)    # which copy it kept would decide a split
    write_csv(aptos / "train.csv", ["id_code", "diagnosis"], rows[:4] + rows[5:])
    d = load_layout("aptos", aptos, skip_invalid=True, split=split)
    assert sum(map(len, (d.train, d.val, d.test))) == 13
    assert d.source["left_out_invalid"]["by_kind"] == {"label outside the task": 2, "missing image": 1}


def test_aptos_missing_column_and_folder(aptos, tmp_path, write_csv):
    write_csv(aptos / "train.csv", ["id_code", "grade"], [["000c1434d8d7", 0]])
    with pytest.raises(DataError, match=r"train.csv has no column 'diagnosis'; its columns are 'id_code', 'grade'"):
        read_aptos(aptos)
    with pytest.raises(DataError, match="APTOS 2019 folder .* not found"):
        read_aptos(tmp_path / "elsewhere")
    with pytest.raises(DataError, match=f"{aptos} holds it: data.path names the dataset's folder, not one inside it"):
        read_aptos(aptos / "train_images")


def test_a_path_at_a_file_of_another_layout_says_the_source_reads_a_folder(aptos, tmp_path):
    """Before: data.path at a MedMNIST .npz with source aptos took the npz's folder for the dataset and said "table
    .../train.csv not found", which did not say what was wrong, nor what to do."""
    npz = tmp_path / "pneumoniamnist.npz"
    npz.write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError) as err:
        read_aptos(npz)
    assert str(err.value) == (f"data.path {npz} is a file, not the APTOS 2019 folder (an .npz: source medmnist reads "
                              "MedMNIST files); data.path must name the folder that holds train.csv and train_images/")
    assert read_aptos(aptos / "train.csv").root == aptos          # the table itself names its folder, as before
    (tmp_path / "train_images").mkdir()
    with pytest.raises(DataError, match=rf"^table {tmp_path / 'train.csv'} not found; {aptos} holds it: set "
                                        "data.path to that folder$"):
        read_aptos(tmp_path)
    (aptos / "train.csv").unlink()
    with pytest.raises(DataError, match=rf"^table {tmp_path / 'train.csv'} not found; data.path must name the folder "
                                        "that holds it$"):
        read_aptos(tmp_path)

# --- HAM10000 -----------------------------------------------------------------------------------------------------


def test_ham10000_is_split_by_lesion(ham, load_layout, no_patient_crosses):
    m = read_ham10000(ham)
    assert m.task.kind == "multiclass" and m.task.label_names == ("akiec", "bcc", "bkl", "df", "mel", "nv", "vasc")
    assert m.labels[0] == m.task.label_names.index("nv") and m.patient_ids[0] == m.patient_ids[1] == "HAM_0000000"
    assert np.isnan(m.age[list(m.patient_ids).index("HAM_0000003")]) and m.sex[2] == "female"
    d = load_layout("ham10000", ham, channels=3, split=SplitPlan(val_fraction=0.25, test_fraction=0.25, seed=1))
    assert no_patient_crosses(d) and sum(map(len, (d.train, d.val, d.test))) == 19
    assert not d.patients_known      # a lesion is not a person: the unit of privacy is the image


def test_ham10000_unknown_dx(ham, load_layout):
    text = (ham / "HAM10000_metadata.csv").read_text().replace(",mel,", ",melanoma,", 1)
    (ham / "HAM10000_metadata.csv").write_text(text)
    with pytest.raises(DataError, match=r"HAM10000_metadata.csv line 4 \(ISIC_0024308\): dx 'melanoma' is not one of"):
        load_layout("ham10000", ham)


def test_ham10000_duplicate_image_and_truncated_jpeg(ham, load_layout, caplog):
    text = (ham / "HAM10000_metadata.csv").read_text().splitlines()
    text.append(text[3])  # ISIC_0024308 listed twice
    (ham / "HAM10000_metadata.csv").write_text("\n".join(text) + "\n")
    victim = ham / "HAM10000_images_part_2" / "ISIC_0024310.jpg"
    victim.write_bytes(victim.read_bytes()[:200])
    with pytest.raises(DataError) as err:
        load_layout("ham10000", ham)
    message = str(err.value)
    assert "1 of 20 rows cannot be used (1 duplicate id)" in message  # table problems stop before decoding
    assert ("HAM10000_metadata.csv line 21 (ISIC_0024308): id 'ISIC_0024308' repeats HAM10000_metadata.csv line 4"
            in message)
    split = SplitPlan(val_fraction=0.25, test_fraction=0.25)
    with pytest.raises(DataError, match=r"(?s)1 duplicate id.*even with data.skip_invalid"):
        load_layout("ham10000", ham, skip_invalid=True, split=split)
    (ham / "HAM10000_metadata.csv").write_text("\n".join(text[:-1]) + "\n")
    d = load_layout("ham10000", ham, skip_invalid=True, split=split)
    assert d.source["left_out_invalid"]["by_kind"] == {"unreadable image": 1}
    assert "image HAM10000_images_part_2/ISIC_0024310.jpg cannot be decoded" in caplog.text   # told the user,
    assert "ISIC_0024310" not in str(d.source)                   # not written where run.json and study.yaml carry it


# --- generic CSV --------------------------------------------------------------------------------------------------


def test_generic_csv_binary_with_columns(table, load_layout, no_patient_crosses):
    columns = {"path": "file", "patient": "pid", "sex": "gender", "age": "years", "split": "fold"}
    # split seed 1: at seed 0 none of the six pooled patients draws validation (refused, not filled)
    d = load_layout("csv", table, columns=columns, labels=("opacity",), split=SplitPlan(val_fraction=0.2, seed=1))
    assert d.task.kind == "binary" and d.task.label_names == ("class_0", "class_1")
    assert no_patient_crosses(d)
    # pt6 has img12 (no split) and img13 (published test): img12 is left out of train (test outranks train)
    assert set(d.test.patient_ids) == {"pt6", "pt7"} and len(d.test) == 3
    assert sum(map(len, (d.train, d.val))) == 12 and set(d.train.sex) <= {"female", "male"}
    assert d.patients_known


@pytest.mark.skipif(os.sep == "\\", reason="Windows reads either separator")
def test_generic_csv_paths_written_with_windows_separators_are_read_where_the_images_are(table, load_layout):
    """A table written on Windows (Excel, a Windows script) names its images "pngs\\img0.png": on Linux and macOS
    that was one file name, so every row was refused as an image that does not exist."""
    table.write_text(table.read_text(encoding="utf-8").replace("pngs/", "pngs\\"), encoding="utf-8")
    d = load_layout("csv", table, columns={"path": "file", "patient": "pid"}, labels=("opacity",),
                    split=SplitPlan(val_fraction=0.2, test_fraction=0.2, seed=1))
    assert sum(map(len, (d.train, d.val, d.test))) == 16
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"])
    assert m.paths[3] == table.parent / "pngs" / "img3.png" and m.where[3] == "labels.csv line 5 (pngs\\img3.png)"


@pytest.mark.skipif(os.sep == "\\", reason="a backslash is a separator on Windows")
def test_generic_csv_keeps_a_posix_name_with_a_backslash_and_reads_any_name_it_cannot_check(table):
    """A backslash is a legal character of a POSIX file name: a file so named is read as that file. A name the system
    cannot even look up (a component over 255 bytes, a typo in a table) made the check raise "File name too long",
    which reached the user as an internal error; such a row is an image that cannot be found, as any other."""
    literal = table.parent / "pngs\\img3.png"
    literal.write_bytes((table.parent / "pngs" / "img3.png").read_bytes())
    long = "x" * 300
    table.write_text(table.read_text(encoding="utf-8").replace("pngs/img3.png", "pngs\\img3.png")
                     .replace("pngs/img4.png", f"{long}\\img4.png"), encoding="utf-8")
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"])
    assert m.paths[3] == literal and m.paths[4] == table.parent / long / "img4.png"


def test_generic_csv_reads_each_rows_own_sex_and_age_and_knows_patients_only_from_a_column(table):
    """The fixture's row i is "FM"[i % 2] aged 20 + i: a column read in another order, or F and M swapped, would
    put the fairness groups on other people. Without a patient column every image is its own unit, and the card
    must not claim the patient as the unit."""
    columns = {"path": "file", "patient": "pid", "sex": "gender", "age": "years"}
    m = read_csv_table(table, columns=columns, labels=["opacity"])
    assert m.sex.tolist() == ["female", "male"] * 8 and m.age.tolist() == [20.0 + i for i in range(16)]
    assert m.notes["patients_known"] is True
    assert read_csv_table(table, columns={"path": "file"}, labels=["opacity"]).notes["patients_known"] is False


def test_aptos_publishes_no_patients(aptos):
    """APTOS names images only (two eyes of one person are two rows): the image is the unit."""
    assert read_aptos(aptos).notes["patients_known"] is False


def test_generic_csv_a_named_sex_or_age_column_of_which_nothing_reads_is_refused(table):
    """Before: a sex column coded 0/1 made every image's sex unknown without a word, and the report said the data
    record no sex. One odd value among readable ones stays unknown, as before."""
    columns = {"path": "file", "sex": "gender", "age": "years"}
    lines = table.read_text().splitlines()
    coded = [",".join(f[:4] + [str("FM".index(f[4])) if f[4] in "FM" else f[4]] + f[5:])
             for f in (line.split(",") for line in lines[1:])]
    table.write_text("\n".join([lines[0], *coded]) + "\n")
    with pytest.raises(DataError, match=r"labels.csv: no value of the sex column 'gender' \(data.columns.sex\) reads "
                                        r"as a sex \(it holds '0', '1', \.\.\.\); write M/F or male/female, or "
                                        r"remove 'sex' from data.columns"):
        read_csv_table(table, columns=columns, labels=["opacity"])
    table.write_text("\n".join([lines[0], *(line.replace(f",{20 + i},", f",{20 + i} years,")
                                           for i, line in enumerate(lines[1:]))]) + "\n")
    with pytest.raises(DataError, match=r"no value of the age column 'years' \(data.columns.age\) reads as an age "
                                        r"\(it holds '20 years', '21 years', '22 years', '23 years', \.\.\.\)"):
        read_csv_table(table, columns=columns, labels=["opacity"])
    table.write_text("\n".join([lines[0], lines[1].replace(",F,", ",X,"), *lines[2:]]) + "\n")
    m = read_csv_table(table, columns=columns, labels=["opacity"])
    assert m.sex.tolist().count("unknown") == 1 and (m.sex != "unknown").sum() == 15


def test_generic_csv_multilabel_and_multiclass(table, aptos):
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity", "effusion"])
    assert m.task.kind == "multilabel" and m.labels.shape == (16, 2) and m.labels[2].tolist() == [0.0, 1.0]
    text = table.read_text().replace("pngs/img5.png,1,", "pngs/img5.png,3,")
    table.write_text(text.replace("pngs/img7.png,1,", "pngs/img7.png,2,"))
    m = read_csv_table(table, columns={"path": "file", "patient": "pid"}, labels=["opacity"])
    assert m.task.kind == "multiclass" and m.task.label_names == ("class_0", "class_1", "class_2", "class_3")
    assert m.task.classes_from_data and not read_aptos(aptos).task.classes_from_data
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], task="binary")
    assert m.problems[5].detail == "opacity = '3'; a binary label is a class index 0/1"
    assert m.problems[7].detail == "opacity = '2'; a binary label is a class index 0/1"
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity", "effusion"])
    assert m.problems[7].detail == "opacity = '2'; multilabel columns hold 0 or 1"


def test_generic_csv_a_highest_class_of_2_makes_three_classes_and_a_single_label_task_takes_one_column(table):
    """Classes 0, 1, 2 (no task stated) are three classes, with every row's own index: not a binary task whose
    class-2 rows are labels outside it. A binary or multiclass task reads one label column, never the first of two."""
    table.write_text(table.read_text().replace("pngs/img7.png,1,", "pngs/img7.png,2,"))
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"])
    assert m.task.kind == "multiclass" and m.task.label_names == ("class_0", "class_1", "class_2") and not m.problems
    assert m.labels.tolist() == [2 if i == 7 else i % 2 for i in range(16)]
    for task in ("binary", "multiclass"):
        with pytest.raises(DataError, match=rf"task {task} takes one label column, got \['opacity', 'effusion'\]"):
            read_csv_table(table, columns={"path": "file"}, labels=["opacity", "effusion"], task=task)


@pytest.mark.parametrize("task", ["multi-label", "regression", "Binary"])
def test_generic_csv_a_task_that_is_no_task_kind_is_refused_naming_the_kinds(table, load_layout, task):
    """The Python API passes data.task on unchecked (a study file's schema checks it): "multi-label" made a dataset
    whose task kind was "multi-label", which no objective, metric or report knows."""
    with pytest.raises(DataError, match=rf"data.task '{task}' is no task kind: use binary, multiclass or multilabel"):
        load_layout("csv", table, columns={"path": "file"}, labels=("opacity",), task=task)


def test_generic_csv_a_mistyped_label_that_leaves_classes_without_rows_is_refused(table):
    """"11" for "1" in a 0/1 column read as twelve classes, ten of them empty, and trained a 12-way model."""
    table.write_text(table.read_text().replace("pngs/img5.png,1,", "pngs/img5.png,11,"))
    with pytest.raises(DataError, match=r"labels.csv: the labels of 'opacity' read as classes 0..11, but no row holds "
                                        r"class 2, 3, 4, 5, 6, 7, 8, 9, 10; 1 row\(s\) hold a class above it \(line 7: "
                                        r"11\)\. Correct the mistyped labels; if the classes are meant as written, set "
                                        r"data.task: multiclass"):
        read_csv_table(table, columns={"path": "file"}, labels=["opacity"])
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], task="multiclass")
    assert len(m.task.label_names) == 12 and not m.problems                   # stated: read as written
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], task="binary")
    assert m.problems[5].detail == "opacity = '11'; a binary label is a class index 0/1"


def test_generic_csv_classes_name_the_label_column_s_indices(table, load_layout):
    """Before: a CSV's classes could only be class_0, class_1, ..., and the report said "finds 9 of every 10 class_1
    cases". Named, they are stated, not counted from the images."""
    d = load_layout("csv", table, columns={"path": "file", "patient": "pid", "split": "fold"}, labels=("opacity",),
                    classes=("normal", "opacity"), split=SplitPlan(val_fraction=0.2, seed=1))
    assert d.task.kind == "binary" and d.task.label_names == ("normal", "opacity") and not d.task.classes_from_data
    table.write_text(table.read_text().replace("pngs/img5.png,1,", "pngs/img5.png,2,"))
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], classes=["no", "small", "large"])
    assert m.task.kind == "multiclass" and m.task.label_names == ("no", "small", "large") and not m.problems
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], classes=["no", "yes"])
    assert m.problems[5].detail == ("opacity = '2'; a binary label is a class index 0/1 (data.classes names 2: no, "
                                    "yes)")


@pytest.mark.parametrize("classes, task, labels, message", [
    (["a", "b", "c"], None, ["opacity"], r"labels.csv: data.classes names 3 classes for the class indices 0..2 of "
                                         r"column 'opacity', but no row holds index 2 \(c\) \(the column holds 0, 1\); "
                                         r"list one name per index the column holds, in index order"),
    (["a", "b", "c"], "binary", ["opacity"], r"data.classes names 3 classes \(a, b, c\), but task binary has two"),
    (["a", "a"], None, ["opacity"], r"data.classes \['a', 'a'\] must name each class once"),
    (["a"], None, ["opacity"], r"must name each class once, at least two"),
    (["a", "b"], None, ["opacity", "effusion"], r"a multilabel task's classes are its label columns"),
])
def test_generic_csv_classes_that_do_not_fit_the_column_are_refused(table, classes, task, labels, message):
    with pytest.raises(DataError, match=message):
        read_csv_table(table, columns={"path": "file"}, labels=labels, task=task, classes=classes)


def test_generic_csv_missing_named_column_and_bad_split(table, load_layout):
    with pytest.raises(DataError, match=r"labels.csv has no column 'patient_id'; its columns are 'file', 'opacity'"):
        read_csv_table(table, columns={"path": "file", "patient": "patient_id"}, labels=["opacity"])
    with pytest.raises(DataError, match="must name the image column as 'path'"):
        read_csv_table(table, columns={"image": "file"}, labels=["opacity"])
    text = table.read_text().replace(",test\n", ",holdout\n", 1)
    table.write_text(text)
    with pytest.raises(DataError, match=r"labels.csv line 15 \(pngs/img13.png\): fold = 'holdout'; use train, val"):
        load_layout("csv", table, columns={"path": "file", "split": "fold"}, labels=("opacity",))


def test_generic_csv_an_image_outside_its_folder_is_named_whole_and_a_format_dpmed_cannot_read_by_its_suffix(
        table, load_layout, tmp_path_factory):
    """An absolute path outside the CSV's folder cannot be shown relative to it: the message names it whole."""
    gone = tmp_path_factory.mktemp("elsewhere") / "gone.png"
    (table.parent / "pngs" / "img2.gif").write_bytes(b"GIF89a")
    text = table.read_text().replace("pngs/img1.png,", f"{gone},").replace("pngs/img2.png,", "pngs/img2.gif,")
    table.write_text(text)
    with pytest.raises(DataError) as err:
        load_layout("csv", table, columns={"path": "file"}, labels=("opacity",))
    assert f"labels.csv line 3 ({gone}): image file {gone} does not exist" in str(err.value)
    table.write_text(text.replace(f"{gone},", "pngs/img1.png,"))
    with pytest.raises(DataError) as err:
        load_layout("csv", table, columns={"path": "file"}, labels=("opacity",))
    assert ("labels.csv line 4 (pngs/img2.gif): image pngs/img2.gif has suffix '.gif', not an image format dpmed "
            "reads (.bmp, .dcm, .dicom, .jfif, .jpeg, .jpg, .png, .tif, .tiff, .webp)") in str(err.value)


def test_a_patient_cohort_that_keeps_no_image_of_a_table_says_to_choose_a_larger_share(table):
    from dpmed.data.cohorts import PatientSelection, patient_draws
    from dpmed.data.registry import DataRequest, read_dataset

    cohort = PatientSelection(fraction=0.01, part=0, seed=3)
    assert (patient_draws(np.array([f"pt{i}" for i in range(8)]), 3) >= 0.01).all()   # no patient drawn below 1%
    request = DataRequest(source="csv", path=table, seed=0, labels=("opacity",),
                          columns={"path": "file", "patient": "pid"}, patients=cohort)
    with pytest.raises(DataError) as err:
        read_dataset(request)
    assert str(err.value) == (f"data.patients ({cohort.describe()}) keeps none of the 16 images at {table.parent}; "
                              "choose a larger share or another seed")


def test_generic_csv_one_image_spelled_two_ways_is_a_duplicate(table, load_layout):
    """Under another patient, the second spelling could put a copy of a training image in the test split."""
    with table.open("a") as f:
        f.write("./pngs/img0.png,0,0,pt20,F,30,test\npngs/../pngs/img3.png,1,0,pt21,M,31,\n")
    columns = {"path": "file", "patient": "pid", "split": "fold"}
    with pytest.raises(DataError) as err:
        load_layout("csv", table, columns=columns, labels=("opacity",))
    message = str(err.value)
    assert "2 of 18 rows cannot be used (2 duplicate image)" in message
    assert ("labels.csv line 18 (./pngs/img0.png): image file pngs/img0.png is the same file as labels.csv line 2 "
            "(pngs/img0.png)") in message
    assert "labels.csv line 19 (pngs/../pngs/img3.png): image file pngs/../pngs/img3.png is the same file as " \
           "labels.csv line 5 (pngs/img3.png)" in message
    # never the advice to set data.skip_invalid, which would then stop the study again (before: "Fix or remove these
    # rows, or set data.skip_invalid: true to leave them out")
    assert "set data.skip_invalid: true" not in message
    assert message.endswith("A repeated id or image file stops the study even with data.skip_invalid: which copy to "
                            "leave out would decide the split its image is in. Keep one row (or file) of each image.")
    with pytest.raises(DataError, match=r"(?s)2 duplicate image.*even with data.skip_invalid"):
        load_layout("csv", table, columns=columns, labels=("opacity",), skip_invalid=True)


def test_generic_csv_blank_patient_ids_are_refused_with_column_and_lines(table, load_layout):
    lines = table.read_text().splitlines()  # pid is the fourth column; its ids have no comma
    blank = [",".join(cells[:3] + [""] + cells[4:]) for cells in (line.split(",") for line in lines)]
    table.write_text("\n".join(blank[n] if n in (2, 4) else line for n, line in enumerate(lines)) + "\n")
    with pytest.raises(DataError, match=r"labels.csv: the patient column 'pid' is blank on 2 of 16 rows \(lines 3, "
                                        r"5\); fill in each row's patient id, or remove 'patient' from data.columns"):
        read_csv_table(table, columns={"path": "file", "patient": "pid"}, labels=["opacity"])
    table.write_text("\n".join(lines[:1] + blank[1:]) + "\n")
    with pytest.raises(DataError, match=r"'pid' is blank on 16 of 16 rows \(lines 2, 3, 4, 5, 6, \.\.\.\)"):
        load_layout("csv", table, columns={"path": "file", "patient": "pid"}, labels=("opacity",))
    assert read_csv_table(table, columns={"path": "file"}, labels=["opacity"]).patient_ids[0] == "pngs/img0.png"


def test_generic_csv_placeholder_patient_ids_are_refused_naming_the_column_and_what_to_do(table, load_layout):
    """Two sites' anonymisers wrote "ANONYMOUS" and "0000" for every patient: two "patients" of 8 images each, which
    a patient-level eps protected as two people. Refused by name, with both ways out."""
    lines = table.read_text().splitlines()
    placed = [",".join(cells[:3] + ["ANONYMOUS" if n % 2 else "0000"] + cells[4:])
              for n, cells in enumerate(line.split(",") for line in lines)]
    table.write_text("\n".join(lines[:1] + placed[1:]) + "\n")
    with pytest.raises(DataError, match=r"the patient id 'ANONYMOUS' \(column 'pid'\) holds 8 of 16 images \(e\.g\. "
                                        r"labels\.csv line 2 \(pngs/img0\.png\), .*\), which an anonymiser writes .*"
                                        r"remove 'patient' from data\.columns: each image is then its own unit"):
        load_layout("csv", table, columns={"path": "file", "patient": "pid"}, labels=("opacity",))


def test_generic_csv_blank_path_is_a_missing_image_naming_its_line(table, load_layout):
    """A blank path cell resolves to the CSV's own folder; the row must say the cell is blank, not that a folder is
    no image file."""
    lines = table.read_text().splitlines()
    column = lines[0].split(",").index("file")
    cells = lines[2].split(",")
    lines[2] = ",".join(cells[:column] + [""] + cells[column + 1:])
    table.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        load_layout("csv", table, columns={"path": "file", "patient": "pid"}, labels=("opacity",))
    assert "labels.csv line 3 (): file is blank; fill in the image's path, or delete the row" in str(err.value)
    assert "folder" not in str(err.value).split("line 3")[1].split("\n")[0]


def test_generic_csv_label_column_listed_twice_is_refused(table):
    with pytest.raises(DataError, match=r"data.labels lists the column\(s\) \['opacity'\] more than once "
                                        r"\(\['opacity', 'effusion', 'opacity'\]\); list each label column once"):
        read_csv_table(table, columns={"path": "file"}, labels=["opacity", "effusion", "opacity"])


def test_generic_csv_a_folder_or_no_label_column_is_refused_saying_what_data_needs(table, load_layout):
    with pytest.raises(DataError) as err:
        load_layout("csv", table.parent, columns={"path": "file"}, labels=("opacity",))
    assert str(err.value) == f"{table.parent} is a folder; for source 'csv' data.path names the CSV file itself"
    with pytest.raises(DataError, match=r"^source 'csv' needs data.labels: the label column\(s\)$"):
        load_layout("csv", table, columns={"path": "file"})


def test_empty_split_after_skipping_is_an_error(table, load_layout):
    text = table.read_text()
    for i in (13, 14, 15):
        text = text.replace(f"pngs/img{i}.png,", f"pngs/missing{i}.png,")
    table.write_text(text)
    with pytest.raises(DataError, match="the test split is empty after leaving out invalid rows"):
        load_layout("csv", table, columns={"path": "file", "split": "fold"}, labels=("opacity",), skip_invalid=True,
              split=SplitPlan())


# --- the example study files read these layouts ----------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[3] / "configs" / "examples"


@pytest.mark.parametrize("name, layout, kind", [("aptos", "aptos", "multiclass"),
                                                ("chexpert", "chexpert", "multilabel"),
                                                ("ham10000", "ham", "multiclass")])
def test_example_study_reads_its_layout(name, layout, kind, request, no_patient_crosses):
    from dpmed.config import load_study
    from dpmed.study import load_study_data

    study = load_study(EXAMPLES / f"{name}.yaml", {"data.path": str(request.getfixturevalue(layout)),
                                                   "data.image_size": 8})
    d = load_study_data(study)
    assert d.task.kind == kind and min(len(d.train), len(d.val), len(d.test)) > 0 and no_patient_crosses(d)
    assert d.source["preprocessing"]["resize"].startswith("8x8")


def test_example_csv_study(table, no_patient_crosses):
    from dpmed.config import load_study
    from dpmed.study import load_study_data

    overrides = {"data.path": str(table), "data.labels": ["opacity"], "data.image_size": 8,
                 "data.columns": {"path": "file", "patient": "pid", "sex": "gender", "age": "years", "split": "fold"},
                 "data.split.seed": 1}    # at seed 0 none of the fixture's six pooled patients draws validation
    d = load_study_data(load_study(EXAMPLES / "csv.yaml", overrides))
    assert d.task.kind == "binary" and len(d.test) == 3 and no_patient_crosses(d)
    assert d.task.label_names == ("normal", "abnormal")
    assert d.name == "my_dataset" != table.stem    # before: the file's name, "labels", in the record and the report


def test_a_row_that_names_a_folder_is_said_to_name_a_folder(aptos, write_csv, load_layout):
    """Before, "does not exist" sent the user looking for a file that is there, as a folder."""
    (aptos / "train_images" / "dir0c1434d8d7.png").mkdir()
    rows = [["dir0c1434d8d7", 0]] + [[f"{i:03d}c1434d8d7", i % 5] for i in range(15)]
    write_csv(aptos / "train.csv", ["id_code", "diagnosis"], rows)
    with pytest.raises(DataError, match=r"image file train_images/dir0c1434d8d7.png is a folder, not an image file"):
        load_layout("aptos", aptos)


def test_each_split_holds_its_own_rows_sex_and_age_the_carved_sizes_follow_their_fractions_and_normalize_is_kept(
        table, load_layout):
    """The fixture's row i is patient pt(i // 2), "FM"[i % 2], aged 20 + i: every image of every split must carry a
    row's own triple (fairness groups on the right people). Without a split column both validation and test are
    carved, each at its own fraction (0.1 and 0.4 of 8 patients: not swapped). The fixed normalisation, applied
    at the model input, travels with the dataset."""
    rows = {(f"pt{i // 2}", "FM"[i % 2], 20.0 + i) for i in range(16)}
    columns = {"path": "file", "patient": "pid", "sex": "gender", "age": "years"}
    d = load_layout("csv", table, columns=columns, labels=("opacity",),
                    split=SplitPlan(val_fraction=0.1, test_fraction=0.4, seed=4), normalize=((0.5,), (0.25,)))
    for name in ("train", "val", "test"):
        s = getattr(d, name)
        triples = {(pid, sex[0].upper(), age) for pid, sex, age in zip(s.patient_ids, s.sex, s.age, strict=True)}
        assert triples <= rows and len(triples) == len(s), name
    assert len(set(d.test.patient_ids)) > len(set(d.val.patient_ids)) >= 1
    assert d.source["split"]["carved"] == ["val", "test"]
    assert d.normalization == ((0.5,), (0.25,))


@pytest.mark.parametrize("changed, words", [
    ({"val_fraction": 0}, "val_fraction 0 and test_fraction 0.15 must be in (0, 1) with a sum below 1"),
    ({"test_fraction": 1}, "must be in (0, 1)"),
    ({"val_fraction": 0.5, "test_fraction": 0.5}, "with a sum below 1"),
    ({"shared_patients": "Keep"}, "shared_patients must be 'drop_from_train' or 'keep', got 'Keep'"),
])
def test_a_split_plan_outside_its_ranges_is_refused_by_the_api_too(changed, words):
    """A study file's keys are checked by the config; the Python API's SplitPlan checks the same ranges itself."""
    with pytest.raises(ValueError) as error:
        SplitPlan(**changed)
    assert words in str(error.value)


def test_a_table_of_which_no_row_is_usable_says_so_with_the_problems(table, load_layout):
    text = table.read_text()
    for i in range(16):
        text = text.replace(f"pngs/img{i}.png,", f"pngs/missing{i}.png,")
    table.write_text(text)
    with pytest.raises(DataError, match="No usable row is left") as error:
        load_layout("csv", table, columns={"path": "file"}, labels=("opacity",), skip_invalid=True)
    assert "missing" in str(error.value)


def test_generic_csv_a_label_column_may_hold_the_names_of_data_classes(table):
    """Before: a hospital export's NORMAL/PNEUMONIA column was refused with "no row holds index 0 (NORMAL) ... (the
    column holds none)", though it held exactly the names the study gave. A name outside the list stays a bad label."""
    rows = table.read_text().splitlines()
    named = [rows[0]] + [r.replace(",0,", ",NORMAL,", 1) if r.split(",")[1] == "0"
                         else r.replace(",1,", ",PNEUMONIA,", 1) for r in rows[1:]]
    named[6] = named[6].replace("PNEUMONIA", "PNEUMONA")
    table.write_text("\n".join(named) + "\n")
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], classes=["NORMAL", "PNEUMONIA"])
    assert m.task.label_names == ("NORMAL", "PNEUMONIA") and list(m.problems) == [5]
    assert [int(v) for i, v in enumerate(m.labels) if i != 5] == [i % 2 for i in range(16) if i != 5]
    assert m.problems[5].detail == ("opacity = 'PNEUMONA'; a binary label is a class index 0/1 (data.classes names 2: "
                                    "NORMAL, PNEUMONIA)")


def test_generic_csv_class_names_are_read_in_any_case_where_that_leaves_them_apart(table):
    """Before: an export writing "Pneumonia" where data.classes says PNEUMONIA had every such row refused as a bad
    label. Names that differ only in case (a, A) are matched exactly, as nothing else tells them apart."""
    rows = table.read_text().splitlines()
    named = [rows[0]] + [r.replace(",0,", ",normal,", 1) if r.split(",")[1] == "0"
                         else r.replace(",1,", ", Pneumonia ,", 1) for r in rows[1:]]
    table.write_text("\n".join(named) + "\n")
    m = read_csv_table(table, columns={"path": "file"}, labels=["opacity"], classes=["NORMAL", "PNEUMONIA"])
    assert m.task.label_names == ("NORMAL", "PNEUMONIA") and not m.problems
    assert [int(v) for v in m.labels] == [i % 2 for i in range(16)]
    with pytest.raises(DataError, match=r"no row holds index 1 \(NORMAL\)"):
        read_csv_table(table, columns={"path": "file"}, labels=["opacity"], classes=["normal", "NORMAL", "Pneumonia"])


def test_generic_csv_a_patient_s_rows_without_a_split_beside_a_published_one_are_told_apart(table, load_layout):
    """Before: a patient with one row in the test split and one blank split cell was said to be "in two published
    splits", though the table published one; the message now says the blank rows were read as train and the fix."""
    d = load_layout("csv", table, columns={"path": "file", "patient": "pid", "split": "fold"}, labels=("opacity",),
                    split=SplitPlan(val_fraction=0.2, seed=1))
    assert d.source["split"]["patients_in_two_published_splits"] == 1          # pt6: img12 blank, img13 test
    assert ("1 patient is in two published splits (1 of them with rows that give no split, read as train: give "
            "those rows the patient's split to keep them): left out its 1 image") in d.source["summary"]
    table.write_text(table.read_text().replace("pngs/img12.png,0,0,pt6,F,32,", "pngs/img12.png,0,0,pt6,F,32,train"))
    d = load_layout("csv", table, columns={"path": "file", "patient": "pid", "split": "fold"}, labels=("opacity",),
                    split=SplitPlan(val_fraction=0.2, seed=1))
    assert "1 patient is in two published splits: left out its 1 image outside" in d.source["summary"]
