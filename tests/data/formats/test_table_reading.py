"""What every table reader shares (dpmed.data.formats.table_reading), checked on every table layout's fixture dataset
(conftest.py): a missing column named, every row-level bad input found, flagged and counted, a published split left
empty refused, and the message that lists the first rows."""

from __future__ import annotations

import csv
import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from dpmed.data import SplitPlan
from dpmed.data.formats.chest_xray import read_chexpert, read_mimic, read_nih
from dpmed.data.formats.table_reading import class_index, csv_line, patient_column, read_table
from dpmed.data.formats.tables import read_aptos, read_csv_table, read_ham10000
from dpmed.errors import DataError

# --- bad input common to every table reader ----------------------------------------------------------------------


def test_a_class_index_is_a_whole_number_below_the_count():
    """A grade 5 of five grades, or 1.5, is a label outside the task (flagged), not a class."""
    assert [class_index(t, 5) for t in ("0", "4", "3.0", "5", "1.5", "-1", "x", "")] == [0, 4, 3, None, None, None,
                                                                                       None, None]


def test_patient_ids_are_compared_without_their_spaces_and_one_blank_is_refused(tmp_path):
    """'pt0 ' and 'pt0' are one patient: as two, one person's rows could sit on both sides of the split and count
    as two units. A single blank id is refused as many are."""
    table = tmp_path / "t.csv"
    table.write_text("pid,label\npt0 ,1\npt0,0\n pt1,1\n")
    assert patient_column(read_table(table, ["pid"]), "pid", table, "fill them in") == ["pt0", "pt0", "pt1"]
    table.write_text("pid,label\npt0,1\n  ,0\n")
    with pytest.raises(DataError, match=r"t\.csv: the patient column 'pid' is blank on 1 of 2 rows \(line 3\); fill"):
        patient_column(read_table(table, ["pid"]), "pid", table, "fill them in")


@pytest.mark.parametrize("layout, table, column, read", [
    ("aptos", "train.csv", "id_code", read_aptos),
    ("chexpert", "train.csv", "Sex", read_chexpert),
    ("nih", "Data_Entry_2017.csv", "Patient ID", read_nih),
    ("ham", "HAM10000_metadata.csv", "lesion_id", read_ham10000),
])
def test_a_table_without_a_required_column_names_it(request, layout, table, column, read):
    root = request.getfixturevalue(layout)
    path = root / table
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace(column, column + "_renamed", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"{table} has no column '{column}'"):
        read(root)


@pytest.mark.parametrize("layout, name, column, read", [
    ("nih", "Data_Entry_2017.csv", "Patient ID", read_nih),
    ("ham", "HAM10000_metadata.csv", "lesion_id", read_ham10000),
    ("table", "labels.csv", "pid", lambda p: read_csv_table(p, columns={"path": "file", "patient": "pid"},
                                                            labels=["opacity"])),
])
def test_a_blank_patient_id_is_refused_naming_table_column_and_lines(request, layout, name, column, read):
    """Blank ids would all become one patient "": one side of the split, and one "person" to the privacy unit."""
    made = request.getfixturevalue(layout)
    path = made if made.is_file() else made / name
    rows = list(csv.reader(path.open(newline="")))
    at = rows[0].index(column)
    for line in (4, 6, 7):  # 1-based, header = 1
        rows[line - 1][at] = " "
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(DataError, match=rf"{name}: the (patient|lesion) column '{column}' is blank on 3 of "
                                        rf"{len(rows) - 1} rows \(lines 4, 6, 7\); fill in each row's"):
        read(made)


# --- every table reader, every row-level bad input -----------------------------------------------------------------

# layout fixture -> (source, the table that lists the images, extra load_dataset arguments)
LAYOUTS = {
    "aptos": ("aptos", "train.csv", {}),
    "chexpert": ("chexpert", "train.csv", {}),
    "nih": ("nih", "Data_Entry_2017.csv", {}),
    "mimic": ("mimic", "mimic-cxr-2.0.0-metadata.csv.gz", {}),
    "ham": ("ham10000", "HAM10000_metadata.csv", {}),
    "table": ("csv", "labels.csv", {"columns": {"path": "file", "patient": "pid", "split": "fold"},
                                    "labels": ("opacity",)}),
}


def _layout(request, layout):
    """(folder, the reader's manifest, load(**more)) for one fixture layout."""
    source, _, extra = LAYOUTS[layout]
    made = request.getfixturevalue(layout)  # the dataset folder (the csv fixture: the CSV file itself)
    folder = made.parent if made.is_file() else made
    readers = {"aptos": read_aptos, "chexpert": read_chexpert, "nih": read_nih, "mimic": read_mimic,
               "ham": read_ham10000,
               "table": lambda p: read_csv_table(p, columns=extra["columns"], labels=list(extra["labels"]))}
    load_layout = request.getfixturevalue("load_layout")

    def load(**more):
        # split seed 1: at seed 0 no patient of the CSV fixture's six draws the validation split (refused, not filled)
        split = SplitPlan(val_fraction=0.25, test_fraction=0.25, seed=1 if layout == "table" else 0)
        return load_layout(source, made, **{"split": split, **extra, **more})

    return folder, readers[layout](made), load


def _repeat_data_line(table: Path, line: int) -> None:
    """Append a copy of ``line`` (1-based, header = 1) to the table: a duplicate id at its end."""
    gz = table.suffix == ".gz"
    text = gzip.open(table, "rt", encoding="utf-8").read() if gz else table.read_text(encoding="utf-8")
    lines = text.splitlines()
    lines.append(lines[line - 1])
    if gz:
        with gzip.open(table, "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    else:
        table.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_missing_truncated_and_duplicate_rows_in_every_table_layout(request, layout, no_patient_crosses):
    folder, manifest, load = _layout(request, layout)
    n = len(manifest)
    # rows 0..3 lie in every fixture's training pool (never in a published val/test split)
    missing, truncated = manifest.paths[0], manifest.paths[2]
    assert missing.is_file() and truncated.is_file()
    missing.unlink()
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    _repeat_data_line(folder / LAYOUTS[layout][1], 2 + 3)  # data row 3 listed again at the end
    # Default: stop before any training, with one message naming the rows and counting them. Table problems (the
    # missing file, the repeated id) are found before decoding, so they come first.
    with pytest.raises(DataError) as err:
        load()
    message = str(err.value)
    assert f"2 of {n + 1} rows cannot be used" in message and "1 missing image" in message
    assert "1 duplicate id" in message and str(manifest.where[0]) in message and "skip_invalid" in message
    assert f"line {n + 2}" in message or layout == "chexpert" and str(manifest.ids[3]) in message
    # With the missing file back, the truncated one stops the study at decoding, named.
    missing.write_bytes(manifest.paths[1].read_bytes())
    _drop_last_line(folder / LAYOUTS[layout][1])
    with pytest.raises(DataError) as err:
        load()
    message = str(err.value)
    assert f"1 of {n} rows cannot be used (1 unreadable image)" in message
    assert str(manifest.where[2]) in message and "cannot be decoded" in message
    # skip_invalid leaves out the missing and the truncated image, counted by kind in the run record's data
    # section, but not a repeated id: which copy it kept would decide the split of that image.
    missing.unlink()
    _repeat_data_line(folder / LAYOUTS[layout][1], 2 + 3)
    with pytest.raises(DataError, match=r"(?s)1 duplicate id.*stops the study even with data.skip_invalid"):
        load(skip_invalid=True)
    _drop_last_line(folder / LAYOUTS[layout][1])
    d = load(skip_invalid=True)
    left = d.source["left_out_invalid"]
    assert left["count"] == 2 and left["by_kind"] == {"missing image": 1, "unreadable image": 1}
    assert sum(map(len, (d.train, d.val, d.test))) == n - 2 - d.source["split"][
        "rows_of_those_patients_outside_their_top_split"] and no_patient_crosses(d)
    assert "left out 2 invalid rows" in d.source["summary"]


def _text_lines(table: Path) -> list[str]:
    return (gzip.decompress(table.read_bytes()).decode() if table.suffix == ".gz" else table.read_text()).splitlines()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_row_is_told_at_its_own_line_after_blank_lines(request, layout):
    """A blank line (or one of spaces) in a table is passed over when it is read, so the rows after it were told one
    line too early per such line: a message sent the user to the row above the one at fault. Each row's line is
    checked against the file itself: that line holds the row's id."""
    source, name, extra = LAYOUTS[layout]
    made = request.getfixturevalue(layout)
    table = made if made.is_file() else made / name
    lines = _text_lines(table)
    text = "\n".join([lines[0], "", lines[1], "   ", *lines[2:], ""]) + "\n"
    table.write_bytes(gzip.compress(text.encode()) if table.suffix == ".gz" else text.encode())
    folder, m, _ = _layout(request, layout)
    for where in m.where:      # CheXpert's valid.csv rows included, whose file has no blank line
        name, line, value = re.fullmatch(r"(.+?) line (\d+) \((?:\w+ )?(.+)\)", where).groups()
        written = _text_lines(folder / name)
        assert value in written[int(line) - 1], (where, written[int(line) - 1])
    if "patient" in extra.get("columns", {}):     # the lines of a blank patient id, after the blank lines
        rows = list(csv.reader(table.open(newline="")))
        rows[4][rows[0].index("pid")] = " "
        with table.open("w", newline="") as f:
            csv.writer(f).writerows(rows)
        with pytest.raises(DataError, match=r"is blank on 1 of \d+ rows \(line 5\)"):
            _layout(request, layout)


def test_a_rows_line_counts_blank_lines_before_the_header_and_a_field_that_spans_two(tmp_path):
    """By hand: lines 1-2 blank, the header on 3, a.png on 4 with a quoted note running on to 5, 6 blank, b.png on
    7, 8 spaces, c.png on 9."""
    table = tmp_path / "t.csv"
    table.write_text('\n\nfile,note\na.png,"two\nlines"\n\nb.png,x\n  \nc.png,y\n\n')
    frame = read_table(table, ["file"])
    assert frame["file"].tolist() == ["a.png", "b.png", "c.png"]
    assert [csv_line(i, frame) for i in range(3)] == [4, 7, 9]


def test_a_field_too_long_for_the_line_count_still_reads_and_rows_are_told_as_counted(tmp_path):
    """A cell over the csv module's field limit (131,072 characters, e.g. an image embedded as text) stops the
    line count, not the reading: each row is then told at row + 2."""
    table = tmp_path / "t.csv"
    table.write_text("file,note\na.png," + "x" * 200_000 + "\nb.png,y\n")
    frame = read_table(table, ["file"])
    assert frame["file"].tolist() == ["a.png", "b.png"] and "lines" not in frame.attrs
    assert [csv_line(i, frame) for i in range(2)] == [2, 3]


def _drop_last_line(table: Path) -> None:
    gz = table.suffix == ".gz"
    text = gzip.open(table, "rt", encoding="utf-8").read() if gz else table.read_text(encoding="utf-8")
    body = "\n".join(text.splitlines()[:-1]) + "\n"
    if gz:
        with gzip.open(table, "wt", encoding="utf-8") as f:
            f.write(body)
    else:
        table.write_text(body, encoding="utf-8")


@pytest.mark.parametrize("layout, split, rows", [
    ("chexpert", "val", lambda m: np.flatnonzero(m.splits == "val")),    # valid.csv is the published val split
    ("nih", "test", lambda m: np.flatnonzero(m.splits == "test")),       # test_list.txt
    ("mimic", "test", lambda m: np.flatnonzero(m.splits == "test")),     # the split file's "test"
])
def test_a_published_split_left_empty_is_an_error_not_replaced(request, layout, split, rows):
    _, manifest, load = _layout(request, layout)
    for r in rows(manifest):
        manifest.paths[r].unlink()
    with pytest.raises(DataError, match="missing image"):
        load()
    with pytest.raises(DataError, match=rf"the {split} split is empty after leaving out invalid rows"):
        load(skip_invalid=True)


def test_the_message_lists_the_first_five_rows_and_counts_all(aptos, write_csv, load_layout):
    rows = [[f"{i:03d}c1434d8d7", 9 if i < 8 else i % 5] for i in range(15)]
    write_csv(aptos / "train.csv", ["id_code", "diagnosis"], rows)
    with pytest.raises(DataError) as err:
        load_layout("aptos", aptos)
    message = str(err.value)
    assert "8 of 15 rows cannot be used (8 label outside the task); the first 5:" in message
    listed = [line for line in message.splitlines() if line.startswith("  - ")]
    assert len(listed) == 5 and listed[0].startswith("  - train.csv line 2 (id_code 000c1434d8d7)")
    assert "line 7 " not in message  # the sixth offending row is counted, not listed


@pytest.mark.parametrize("content, said", [
    ("file,label\nä.png,1\n".encode("latin-1"), "is not UTF-8 text: line 2 .* save it as UTF-8"),
    (b"", "is empty; it needs a header line and one row per image"),
    (b"file;label\na.png;1\n", "its columns are 'file;label'.* holds ';': dpmed reads comma-separated tables; "
                              r"save it as 'CSV UTF-8 \(comma delimited\)'"),
    (b"file,label\na.png,1\nb.png,1,extra\n", r"Expected 2 fields in line 3, saw 3\); every line needs as many"),
    (b"file,label\n", r"labels.csv has a header but no rows; the dataset needs images$"),
])
def test_a_table_saved_another_way_says_how_to_save_it(tmp_path, content, said):
    """Before: a Latin-1 file gave a bare UnicodeDecodeError, an empty one "No columns to parse", and a
    semicolon-separated one only that the columns were missing."""
    path = tmp_path / "labels.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=said):
        read_table(path, ["file", "label"])


def test_a_byte_that_is_not_utf8_is_named_by_its_line(tmp_path):
    """Before: "('utf-8' codec can't decode byte 0xfc in position 1: invalid start byte)", a position in a chunk of
    pandas' reading, not in the file: in a table of thousands of lines the user could not find it."""
    rows = [f"img{i}.png,{i % 2},p{i}" for i in range(30)]
    rows[20] = "img20.png,0,M\xfcller"
    path = tmp_path / "labels.csv"
    path.write_bytes(("file,label,patient\n" + "\n".join(rows) + "\n").encode("latin-1"))
    with pytest.raises(DataError) as err:
        read_table(path, ["file", "label"])
    assert str(err.value) == (f"{path} is not UTF-8 text: line 22 holds the byte 0xfc (img20.png,0,M\\xfcller); "
                              "save it as UTF-8 (e.g. 'CSV UTF-8' in a spreadsheet)")
    gzipped = tmp_path / "labels.csv.gz"
    gzipped.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(DataError, match=r"is not UTF-8 text: line 22 holds the byte 0xfc"):
        read_table(gzipped, ["file", "label"])


@pytest.mark.parametrize("content, said", [
    (b"PK\x03\x04" + bytes(range(256)) * 4, "a zip archive (an Excel .xlsx workbook: save it as CSV; a MedMNIST "
                                              ".npz: source medmnist reads it)"),
    (b"\x93NUMPY\x01\x00" + bytes(range(256)), "a NumPy .npy array"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "a PNG image (the table names its images by their paths)"),
    (b"\xff\xd8\xff\xe0" + bytes(range(256)), "a JPEG image (the table names its images by their paths)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(range(256)), "an Excel .xls workbook (save it as CSV)"),
    ("file,label\na.png,1\n".encode("utf-16"), "UTF-16 text (save it as UTF-8)"),
    (bytes(128) + b"DICM" + bytes(range(256)), "a DICOM file (the table names its images by their paths)"),
], ids=["zip", "npy", "png", "jpeg", "xls", "utf-16", "dicom"])
def test_a_file_that_is_no_csv_table_says_what_it_is(tmp_path, content, said):
    """data.path at a file of another layout (an .npz, an image) or a table saved as a workbook: before, "is not
    UTF-8 text ('utf-8' codec can't decode byte 0xca in position 15); save it as UTF-8", which it cannot be."""
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    with pytest.raises(DataError) as err:
        read_table(path, ["file", "label"])
    assert str(err.value) == f"{path} is not a CSV table but {said}; data.path must name the CSV table"


def test_every_changed_byte_of_a_gzipped_table_reads_back_or_is_one_data_error(tmp_path):
    """MIMIC-CXR's tables are gzipped. Before: about one byte in six of a small .csv.gz, inverted, ended in
    zlib.error ("internal error"), uncaught: every byte inverted in turn, and the file cut at every byte."""
    text = "dicom_id,subject_id\n" + "".join(f"a{i},{i}\n" for i in range(30))
    data, damaged = gzip.compress(text.encode(), mtime=0), tmp_path / "metadata.csv.gz"
    refused = 0
    for i in range(len(data)):
        for changed in (data[:i], data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]):
            damaged.write_bytes(changed)
            try:
                frame = read_table(damaged, ["dicom_id"])
            except DataError as exc:
                assert str(damaged) in str(exc)
                refused += 1
            else:
                assert list(frame["dicom_id"]) == [f"a{i}" for i in range(30)]
    assert refused > len(data)


@pytest.mark.parametrize("layout, table, read", [
    ("aptos", "train.csv", read_aptos),
    ("chexpert", "train.csv", read_chexpert),
    ("nih", "Data_Entry_2017.csv", read_nih),
    ("ham", "HAM10000_metadata.csv", read_ham10000),
    ("mimic", "mimic-cxr-2.0.0-metadata.csv.gz", read_mimic),
])
def test_a_table_that_is_a_folder_is_said_to_be_a_folder(request, layout, table, read):
    """An unzip that made a folder of the table's name: before, "table ... not found" (or "none of ... found") for a
    path the user could see was there."""
    root = request.getfixturevalue(layout)
    moved = root / "moved.tmp"
    (root / table).rename(moved)
    (root / table).mkdir()
    moved.rename(root / table / table)
    with pytest.raises(DataError, match=rf"table .*{table} is a folder, not a CSV file; dpmed reads the CSV file "
                                        rf"{table} there: replace the folder with the table file itself \(it holds "
                                        rf".*{table}/{table}: move that file up in place of the folder\)"):
        read(root)


@pytest.mark.parametrize("layout, optional, read", [
    ("chexpert", "valid.csv", read_chexpert),
    ("nih", "test_list.txt", read_nih),
    ("mimic", "mimic-cxr-2.0.0-split.csv.gz", read_mimic),
    ("mimic", "patients.csv.gz", read_mimic),
])
def test_an_optional_table_that_is_a_folder_is_refused_not_skipped(request, layout, optional, read):
    """A file the layout may leave out was looked for with is_file(): a folder in its place was skipped, and with it
    the published validation split (CheXpert), the official test split (NIH, MIMIC) or the sex and age columns."""
    root = request.getfixturevalue(layout)
    path = root / optional
    assert path.is_file()
    moved = root / "moved.tmp"
    path.rename(moved)
    path.mkdir()
    moved.rename(path / optional)
    with pytest.raises(DataError, match=rf"table .*{optional} is a folder, not a (CSV|text) file; .*move that file up"):
        read(root)


def _pad_every_cell(path: Path) -> None:
    """Rewrite the table at ``path`` (gzipped where it ends .gz) with two spaces either side of every cell."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    with opener(path, "wt", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([[f"  {cell}  " for cell in row] for row in rows])


@pytest.mark.parametrize("layout, read", [
    ("aptos", read_aptos),
    ("chexpert", lambda p: read_chexpert(p, findings=("Edema", "Atelectasis"))),
    ("nih", lambda p: read_nih(p, findings=("Effusion", "Atelectasis"))),
    ("mimic", lambda p: read_mimic(p, findings=("Edema", "Atelectasis"))),
    ("ham", read_ham10000),
    ("table", lambda p: read_csv_table(p, columns={"path": "file", "patient": "pid", "sex": "gender", "age": "years",
                                                   "split": "fold"}, labels=["opacity", "effusion"])),
])
def test_spaces_around_any_cell_read_as_the_table_without_them(request, layout, read):
    """A spreadsheet export may pad cells ("Edema ,", "train ", "ISIC_0024306 "). Leading spaces were passed over,
    trailing ones kept, so "1.0 " was no positive finding, "validate " no published split, an image id with a space
    after it no file, and "M " a sex read as unknown: every such cell must read as the cell without them."""
    made = request.getfixturevalue(layout)
    before = read(made)
    tables = [made] if made.is_file() else sorted(p for p in made.iterdir() if p.suffix in (".csv", ".gz"))
    assert tables
    for path in tables:
        _pad_every_cell(path)
    after = read(made)
    assert after.paths == before.paths
    assert after.problems == before.problems
    assert after.unread == before.unread
    for name in ("labels", "patient_ids", "sex", "age", "splits", "ids"):
        np.testing.assert_array_equal(getattr(after, name), getattr(before, name), err_msg=name)
