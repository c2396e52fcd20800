"""Reading a dataset's CSV table into a :class:`~dpmed.data.manifest.Manifest`: what every table layout shares.

The table readers (:mod:`dpmed.data.formats.tables`, :mod:`dpmed.data.formats.chest_xray`) find the dataset folder
and its table, read every cell as text without the spaces around it (a blank stays ""), and collect problem rows as
they parse them, each with its CSV line (header = line 1) and the value, so the user can find it; a missing table
(or a folder in its place) or column stops at once with the file and the column named. The manifest is built once,
with the problems flagged on it.
"""

from __future__ import annotations

import csv
import gzip
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpmed.data.manifest import Manifest, parse_age, parse_sex
from dpmed.errors import DataError, error_name

if TYPE_CHECKING:   # pandas is imported where a table is read: the study file's schema imports the readers
    import pandas as pd

__all__ = ["dataset_folder", "other_layout_hint", "first_existing", "optional_file", "read_table", "csv_line",
           "class_index", "patient_column", "table_manifest", "Flags", "index_images", "chosen_labels",
           "where_not_utf8"]

_SHOWN = 5  # lines listed in a message; the count covers all of them


_TABLE_SUFFIXES = {".csv", ".gz", ".txt", ".tsv", ""}   # "": HAM10000_metadata is published without one


def other_layout_hint(path: Path) -> str:
    """" (an .npz: source medmnist ...)" where ``path``'s suffix says which other source reads it, else ""."""
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return " (an .npz: source medmnist reads MedMNIST files)"
    if suffix in (".csv", ".gz", ".tsv"):
        return " (a table: source csv, or the source of its layout, reads it)"
    return ""


def dataset_folder(path: str | Path, dataset: str, table: str) -> Path:
    """The dataset folder: ``path`` itself, or the folder of ``path`` when it names a table file (not when it names
    a file of another kind: data.path at another layout's file is refused, saying so)."""
    p = Path(path).expanduser()
    if p.is_file():
        if p.suffix.lower() not in _TABLE_SUFFIXES:
            raise DataError(f"data.path {p} is a file, not the {dataset} folder{other_layout_hint(p)}; data.path must "
                            f"name the folder that holds {table}")
        p = p.parent
    if not p.is_dir():
        raise DataError(f"{dataset} folder {p} not found; data.path must name the folder that holds {table}")
    return p


def first_existing(root: Path, names: Sequence[str], dataset: str) -> Path:
    """The first of ``names`` that is a file in ``root`` (a table published under several names, or gzipped)."""
    for name in names:
        if (root / name).is_file():
            return root / name
    folder = next((root / name for name in names if (root / name).is_dir()), None)
    if folder is not None:
        raise _folder_not_table(folder)
    raise DataError(f"{dataset}: none of {', '.join(names)} found in {root}; data.path must name the folder the "
                    f"dataset was extracted to (it holds {names[0]})")


def optional_file(path: Path) -> bool:
    """Whether a file the layout may leave out (CheXpert's valid.csv, NIH's split lists, MIMIC's split and patients
    tables) is there; a folder in its place is refused, not skipped (a published split would be dropped unsaid)."""
    if path.is_dir():
        raise _folder_not_table(path)
    return path.is_file()


def _folder_not_table(path: Path) -> DataError:
    """A folder where the layout's table should be (an unzip that made a folder of the table's name): said as such,
    not as a table "not found" that the user can see is there."""
    inner = (f" (it holds {path / path.name}: move that file up in place of the folder)"
             if (path / path.name).is_file() else "")
    kind = "text" if path.suffix == ".txt" else "CSV"
    return DataError(f"table {path} is a folder, not a {kind} file; dpmed reads the {kind} file {path.name} there: "
                     f"replace the folder with the table file itself{inner}")


def read_table(path: Path, required: Sequence[str], *, header_only_ok: bool = False) -> pd.DataFrame:
    """The CSV as text, or DataError naming the file or the column. Every cell is kept as written (a blank stays "")
    but for the spaces around it, which a spreadsheet export may add: "1.0 " is a positive finding, "validate " the
    published split and "ISIC_0024306 " that image, as a reader of the table would take them.

    ``header_only_ok``: a side table (MIMIC's split and patients tables) that names no row of the image table may
    hold its header alone; refused, its first row (a training patient's, perhaps) would decide whether a study runs.
    """
    import pandas as pd

    if path.is_dir():
        raise _folder_not_table(path)
    if not path.is_file():
        below = sorted(c for c in path.parent.iterdir() if (c / path.name).is_file()) if path.parent.is_dir() else []
        inside = (f"; {path.parent.parent} holds it: data.path names the dataset's folder, not one inside it"
                  if (path.parent.parent / path.name).is_file()
                  else f"; {below[0]} holds it: set data.path to that folder" if len(below) == 1 else "")
        raise DataError(f"table {path} not found{inside or '; data.path must name the folder that holds it'}")
    kind = _binary_kind(path)
    if kind is not None:
        raise DataError(f"{path} is not a CSV table but {kind}; data.path must name the CSV table")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text{where_not_utf8(path)}; save it as UTF-8 (e.g. 'CSV UTF-8' in a "
                        "spreadsheet)") from exc
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{path} is empty; it needs a header line and one row per image") from exc
    except pd.errors.ParserError as exc:   # "Error tokenizing data. C error: Expected 6 fields in line 122, saw 8"
        detail = " ".join(str(exc).split())
        raise DataError(f"{path} is not a readable CSV table ({detail}); every line needs as many comma-separated "
                        "fields as the header (quote a field that holds a comma)") from exc
    except (OSError, EOFError, zlib.error) as exc:      # a gzipped table cut short or corrupt (MIMIC-CXR's)
        raise DataError(f"{path} is not a readable CSV table ({error_name(exc)}: {exc})") from exc
    frame.columns = [str(c).strip() for c in frame.columns]
    if len(frame):
        frame = frame.apply(lambda column: column.str.strip())
    missing = [c for c in required if c not in frame.columns]
    if missing:
        have = ", ".join(repr(c) for c in frame.columns[:30])
        other = next((d for d in (";", "\t", "|") if len(frame.columns) == 1 and d in frame.columns[0]), None)
        hint = (f" Its one column holds {other!r}: dpmed reads comma-separated tables; save it as 'CSV UTF-8 "
                "(comma delimited)' (Excel saves ';' where ',' is the decimal separator)." if other else "")
        raise DataError(f"{path} has no column {', '.join(repr(c) for c in missing)}; its columns are {have}. "
                        f"Check the file (or the column names in the study file's data.columns / data.labels).{hint}")
    if len(frame) == 0 and not header_only_ok:
        raise DataError(f"{path} has a header but no rows; the dataset needs images")
    lines = _row_lines(path)
    if len(lines) == len(frame):     # else (a file the two readings parse apart) row i is told at line i + 2
        frame.attrs["lines"] = tuple(lines)
    return frame


def _row_lines(path: Path) -> list[int]:
    """The file line (1-based) each data row of ``path`` starts on. Why not row + 2: pandas passes over blank lines
    and lines of spaces, and a quoted field may hold a line break, so after either every later row was told at a line
    above its own, and a message sent the user to the wrong row. [] where the file cannot be read so."""
    try:
        opened = gzip.open(path, "rt", encoding="utf-8-sig", newline="") if path.suffix == ".gz" else \
            open(path, encoding="utf-8-sig", newline="")
        with opened as f:
            reader = csv.reader(f, skipinitialspace=True)
            starts, end = [], 0
            for record in reader:
                start, end = end + 1, reader.line_num
                if record and (len(record) > 1 or record[0].strip()):     # as pandas, a line of spaces is no row
                    starts.append(start)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error):
        return []
    return starts[1:]   # the first is the header


# What a file that is no table starts with (its first bytes), and what it is, said with what to do where that is clear:
# data.path at another layout's file (a MedMNIST .npz, an image), or a table saved as a workbook or as UTF-16.
_MAGIC = (
    (b"PK\x03\x04", "a zip archive (an Excel .xlsx workbook: save it as CSV; a MedMNIST .npz: source medmnist reads "
                     "it)"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image (the table names its images by their paths)"),
    (b"\xff\xd8\xff", "a JPEG image (the table names its images by their paths)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an Excel .xls workbook (save it as CSV)"),
    (b"\xff\xfe", "UTF-16 text (save it as UTF-8)"),
    (b"\xfe\xff", "UTF-16 text (save it as UTF-8)"),
)


def _binary_kind(path: Path) -> str | None:
    """What ``path`` is by its first bytes where that is no text table (:data:`_MAGIC`), else None (a gzipped table
    is judged by pandas, which decompresses it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(132)
    except OSError:
        return None        # told by the reading below
    if head[128:132] == b"DICM":
        return "a DICOM file (the table names its images by their paths)"
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def where_not_utf8(path: Path) -> str:
    """": line K holds the byte 0xNN (the line)" for the first byte of ``path`` (decompressed, for .gz) that is not
    UTF-8, so that the user can find it: the position in pandas' error counts from a chunk, not the file. "" where the
    file cannot be read again."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        end = data.find(b"\n", exc.start)
        line = data[start:end if end >= 0 else len(data)][:120].rstrip(b"\r")
        shown = line.decode("utf-8", errors="backslashreplace")
        number = data.count(b"\n", 0, exc.start) + 1
        return f": line {number} holds the byte 0x{data[exc.start]:02x} ({shown})"
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return ""
    return ""


def csv_line(row: int, frame: pd.DataFrame | None = None) -> int:
    """The CSV line of data row ``row`` (0-based, a position in the table as :func:`read_table` read it) of
    ``frame``, as a user's editor numbers it."""
    lines = frame.attrs.get("lines") if frame is not None else None
    return lines[row] if lines else row + 2  # the header is line 1, where no line is blank


def class_index(text: str, count: int) -> int | None:
    """A class index 0..count-1 written as an integer ("3" or "3.0"), else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and 0 <= value < count else None


def patient_column(frame: pd.DataFrame, column: str, table: Path, remedy: str, *, unit: str = "patient") -> list[str]:
    """The ids of ``column`` (as :func:`read_table` reads them, without spaces around them), or DataError naming the
    table, the column and the lines where one is blank.

    Why refuse: every blank id would become one patient "", who is then kept on one side of the split and counted
    as one person in a patient-level privacy unit, though the rows belong to unknown, different people.
    ``remedy`` says what the user can do (fill the ids in; for a generic CSV also: drop the patient column);
    ``unit`` is what the column identifies (HAM10000: the lesion).
    """
    ids = frame[column].tolist()
    blank = [csv_line(i, frame) for i, v in enumerate(ids) if not v]
    if blank:
        lines = ", ".join(map(str, blank[:_SHOWN])) + (", ..." if len(blank) > _SHOWN else "")
        raise DataError(f"{table}: the {unit} column {column!r} is blank on {len(blank)} of {len(ids)} rows "
                        f"(line{'s' if len(blank) > 1 else ''} {lines}); {remedy}")
    return ids


def table_manifest(*, name, root, task, paths, labels, patients, sex, ages, splits, where, ids, notes, description,
                   problems=(), demographics_at=None) -> Manifest:
    """The Manifest of a parsed table (sex and age parsed, implausible ages counted, the values read as unknown kept
    for assembly to tell the user), with ``problems`` flagged. ``demographics_at`` [N]: where each row's sex and age
    are written, where another table gives them (`Manifest.keep_unread`)."""
    age, implausible = parse_age(ages)
    manifest = Manifest(name=name, root=root, task=task, paths=list(paths), labels=labels,
                        patient_ids=np.array(patients, dtype=str), sex=parse_sex(sex), age=age,
                        splits=np.array(splits, dtype=str), where=np.array(where, dtype=str),
                        ids=np.array(ids, dtype=str),
                        notes={**notes, "implausible_ages_set_unknown": implausible}, description=description)
    manifest.keep_unread(sex, ages, written_at=demographics_at)
    for row, kind, detail in problems:
        manifest.flag(row, kind, detail)
    return manifest


class Flags(list):
    """Problems found while parsing rows, (row, kind, detail); flagged on the manifest once it exists."""

    def __call__(self, row: int, kind: str, detail: str) -> None:
        self.append((row, kind, detail))


def index_images(folders: Sequence[Path], suffix: str) -> dict[str, Path]:
    """File name -> path over ``folders`` (first folder wins): one directory scan instead of a stat per row."""
    index: dict[str, Path] = {}
    for folder in folders:
        if folder.is_dir():
            for entry in sorted(folder.iterdir()):
                if entry.suffix.lower() == suffix and entry.name not in index:
                    index[entry.name] = entry
    return index


def chosen_labels(labels: Sequence[str] | None, default: Sequence[str], known: Sequence[str], dataset: str) -> tuple:
    """The findings the study asks for (``default`` when none), each one of the dataset's ``known`` findings, once."""
    chosen = tuple(labels) if labels else tuple(default)
    unknown = [f for f in chosen if f not in known]
    if unknown:
        raise DataError(f"{dataset}: data.labels names {unknown}, which are not findings of this dataset; choose from "
                        f"{list(known)}")
    repeated = sorted({f for f in chosen if chosen.count(f) > 1})
    if repeated:
        raise DataError(f"{dataset}: data.labels lists the finding(s) {repeated} more than once ({list(chosen)}); "
                        "list each finding once")
    return chosen
