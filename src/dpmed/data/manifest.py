"""What a reader makes of a published layout before any pixel is decoded: one row per image, and its problems.

Why a manifest: every layout (class folders, the APTOS, CheXpert, NIH, MIMIC and HAM10000 tables, a generic CSV)
comes down to the same columns -- an image file, its label, its patient, sex, age, and the split its publisher put it
in. A reader only translates its layout into a :class:`Manifest`; checking files, decoding, caching and splitting
then happen once, in :mod:`dpmed.data.assembly`, the same way for every layout.

A row that cannot be used (its image is missing or unreadable, its label lies outside the task, its id repeats an
earlier row) is not dropped on the spot: the reader *flags* it with a :class:`Problem`, and assembly either stops with
one message that lists the first few flagged rows and their count, or, with ``skip_invalid``, drops them and records
how many (METHODS.md: nothing silently ignored). Problems of the whole table (a missing column, an empty split) are
raised at once as :class:`~dpmed.errors.DataError`: no row-level skipping can repair them.

A sex or age value that cannot be read (sex "X", age "abc" or 250) is no reason to drop a row: it is read as unknown,
the reader keeps it as written (:meth:`Manifest.keep_unread`), and assembly tells the user how many and where
(:func:`describe_demographics`), as it does for left-out rows: on the terminal and in the private log only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from dpmed.data.sample import Task
from dpmed.errors import DataError

__all__ = ["Problem", "Manifest", "parse_sex", "parse_age", "parse_splits", "SPLIT_NAMES", "describe_problems",
           "describe_demographics", "describe_spellings", "patient_key", "refuse_placeholder_patients"]

SPLIT_NAMES: dict[str, str] = {"train": "train", "training": "train", "val": "val", "valid": "val",
                               "validate": "val", "validation": "val", "test": "test", "testing": "test"}
"""How publishers name their splits (MIMIC: "validate", CheXpert: "valid", the Kaggle brain-tumour MRI folders:
"Training", "Testing"; compared in lower case) -> dpmed's train / val / test."""

_SHOWN = 5  # offending rows listed in a message; the count covers all of them

# a sex or age cell that says "unknown": not told as unread (CheXpert's Sex and HAM10000's sex write "Unknown")
_BLANK = ("", "nan", "none", "unknown")

_SEX = {"f": "female", "female": "female", "w": "female", "woman": "female",
        "m": "male", "male": "male", "man": "male"}


@dataclass(frozen=True)
class Problem:
    """Why one row cannot be used. kind: a short category that is counted ("missing image", "unreadable image",
    "label outside the task", "duplicate id", ...); detail: what exactly is wrong and, where useful, what to do."""

    kind: str
    detail: str


@dataclass
class Manifest:
    """One row per image of a dataset, as its reader found it (N rows).

    name: the dataset's name in messages and records; root: the folder the layout lives in (paths are shown
    relative to it); task: what the labels mean; ordinal grades set ``task.ordinal``.
    paths: the image file of each row; labels: int64 [N] (binary, multiclass) or float32 [N, L] 0/1 (multilabel),
    any value in a flagged row; patient_ids: str [N], the unit that never crosses splits (a patient, or for
    HAM10000 a lesion); sex: "female" | "male" | "unknown" [N]; age: float64 [N], nan where unknown;
    splits: "train" | "val" | "test" where the publisher assigned one, "" where not; where: str [N], the row as a
    user finds it ("train.csv line 17 (id_code 000c1434d8d7)" or a relative path); ids: str [N], what must be unique.
    problems: flagged rows, row index -> Problem; notes: the reader's provenance (label policy, counts), recorded in
    the run record; description: one paragraph for the report. unread: "sex" | "age" -> {row index: the value as
    written} where a value that is not blank was read as unknown (:meth:`keep_unread`); told, never recorded.
    unread_where: "sex" | "age" -> {row index: where that value is written}, for the rows whose value comes from
    another table than the row's own (MIMIC's patients.csv); other rows are told at ``where``.
    spellings: patient id -> the ids that :func:`patient_key` takes for it, written as it on construction (told by
    :func:`describe_spellings`, never recorded).
    """

    name: str
    root: Path
    task: Task
    paths: list[Path]
    labels: np.ndarray
    patient_ids: np.ndarray
    sex: np.ndarray
    age: np.ndarray
    splits: np.ndarray
    where: np.ndarray
    ids: np.ndarray
    problems: dict[int, Problem] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)
    description: str = ""
    unread: dict[str, dict[int, str]] = field(default_factory=dict)
    unread_where: dict[str, dict[int, str]] = field(default_factory=dict)
    spellings: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._write_each_patient_one_way()
        n = len(self.paths)
        for name in ("labels", "patient_ids", "sex", "age", "splits", "where", "ids"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Manifest.{name} has {len(getattr(self, name))} rows for {n} paths")
        if n == 0:
            raise DataError(f"{self.root}: the {self.name} layout lists no images; check that data.path names the "
                            "dataset's folder (or file)")

    def __len__(self) -> int:
        return len(self.paths)

    def _write_each_patient_one_way(self) -> None:
        """Rewrite the patient ids that :func:`patient_key` takes for one ("PT1", "pt01") as the first of them in
        sorted order, keeping the spellings in :attr:`spellings`. Why: compared exactly, one person written two ways
        (a table put together from two exports, or a spreadsheet that dropped leading zeros) could sit in training
        and in test, and count as two units of a patient-level privacy unit (a claim for one person that held for
        two). The rarer case, two people whose ids differ only so, makes them one unit, and removing one of them
        re-keys the other's split draw: a replacement of that unit, not a removal. Ids that no other id matches are
        written as they were, so no split of a dataset without such ids moves. Ids that name no patient (notes
        ``patients_known`` False: APTOS's image codes, where "a01b2" and "a1b02" are two images) are left alone."""
        if not self.notes.get("patients_known", True):
            return
        unique, inverse = np.unique(np.asarray(self.patient_ids).astype(str), return_inverse=True)
        first: dict[str, int] = {}
        one_way = np.array([first.setdefault(patient_key(pid), u) for u, pid in enumerate(unique.tolist())],
                           dtype=np.int64)
        if np.array_equal(one_way, np.arange(len(unique))):
            return
        for u in np.unique(one_way[one_way != np.arange(len(unique))]).tolist():
            self.spellings[str(unique[u])] = tuple(unique[one_way == u].tolist())
        self.patient_ids = unique[one_way][inverse.reshape(-1)]

    def flag(self, row: int, kind: str, detail: str) -> None:
        """Mark ``row`` unusable; the first problem found for a row is the one reported."""
        self.problems.setdefault(int(row), Problem(kind, detail))

    def keep_unread(self, sex: Sequence[object], age: Sequence[object], *,
                    written_at: Sequence[str] | None = None) -> None:
        """Keep the values of ``sex`` and ``age`` (as given to :func:`parse_sex` and :func:`parse_age`, [N]) that are
        not blank yet were read as unknown, so that assembly can tell the user of them with an example each.
        ``written_at`` [N]: where each row's sex and age are written, where another table than the row's gives them
        ("" for a row told at its own ``where``)."""
        for name, values, unknown in (("sex", sex, self.sex == "unknown"), ("age", age, np.isnan(self.age))):
            texts = [str(v).strip() for v in values]
            found = {row: texts[row] for row in np.flatnonzero(unknown).tolist() if texts[row].lower() not in _BLANK}
            if found:
                self.unread[name] = found
                if written_at is not None:
                    self.unread_where[name] = {row: written_at[row] for row in found if written_at[row]}

    def subset(self, rows: np.ndarray) -> "Manifest":
        """The manifest of ``rows`` only, in that order (its problems and unread values renumbered with them)."""
        rows = np.asarray(rows, dtype=np.int64)
        position = {int(r): i for i, r in enumerate(rows)}
        return replace(self, paths=[self.paths[r] for r in rows], labels=self.labels[rows],
                       patient_ids=self.patient_ids[rows], sex=self.sex[rows], age=self.age[rows],
                       splits=self.splits[rows], where=self.where[rows], ids=self.ids[rows],
                       problems={position[r]: p for r, p in self.problems.items() if r in position},
                       unread={name: {position[r]: v for r, v in values.items() if r in position}
                               for name, values in self.unread.items()},
                       unread_where={name: {position[r]: v for r, v in values.items() if r in position}
                                     for name, values in self.unread_where.items()})

    def valid_rows(self) -> np.ndarray:
        """int64 indices of the rows not flagged, in order."""
        flagged = np.zeros(len(self), dtype=bool)
        flagged[list(self.problems)] = True
        return np.flatnonzero(~flagged)


def describe_problems(manifest: Manifest, *, skip_hint: bool = True) -> str:
    """One message: how many rows are unusable, by kind, and the first few of them with what is wrong."""
    rows = sorted(manifest.problems)
    kinds = Counter(manifest.problems[r].kind for r in rows)
    counts = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
    lines = [f"{manifest.name} at {manifest.root}: {len(rows)} of {len(manifest)} rows cannot be used ({counts}); "
             f"the first {min(_SHOWN, len(rows))}:"]
    lines += [f"  - {manifest.where[r]}: {manifest.problems[r].detail}" for r in rows[:_SHOWN]]
    if skip_hint:
        lines.append("Fix or remove these rows, or set data.skip_invalid: true to leave them out (dpmed then tells "
                     "you, and its private log keeps, how many were left out and why: no shareable file says so, as "
                     "the count is a statistic of the private data).")
    return "\n".join(lines)


def patient_key(patient_id: str) -> str:
    """A patient id as dpmed compares two: without the spaces around it, the case of its letters and the leading
    zeros of its numbers, so that "P007 ", "p07" and "p7" are one patient (:meth:`Manifest._write_each_patient_one_way`,
    and the public/private overlap check). A number's inner zeros stay: "p70" is not "p7"."""
    return re.sub(r"(?<![0-9])0+(?=[0-9])", "", patient_id.strip().casefold())


# The patient ids that anonymisers and exports write in place of every patient's (a DICOM tool's "ANONYMOUS", a
# spreadsheet's "n/a"), as patient_key writes them; no pseudonymisation gives a real patient one of these
_PLACEHOLDERS = frozenset({"anonymous", "anonymized", "anonymised", "anon", "unknown", "none", "null", "nan", "n/a",
                           "na", "-", "?", "removed", "redacted", "deidentified", "de-identified", "noname", "no name",
                           "xxx", "patient"})
_MOST_OF = 20    # from this many images up, one id that holds more than half of them is no one patient's
_FEW = 10        # up to this many placeholder rows, fewer than half of the images, are stray rows, told as such


def refuse_placeholder_patients(manifest: Manifest, rows: np.ndarray) -> None:
    """DataError where one patient id among ``rows`` is an anonymiser's placeholder rather than a patient's: it is
    written as one (:data:`_PLACEHOLDERS`; "0" is not among them, a table may number its patients from 0), or it
    holds more than half of the images of a dataset of at least 20. Such an id holds unknown or many people, who
    would be split and protected as one patient (a patient-level DP-SGD arm's eps would hold for all of them
    together, not for each), and two sites' placeholders read as two patients. A patient truly imaged often is far
    below half (NIH ChestX-ray14 has patients of over 100 images, among 112,120 images of 30,805 patients). Ids that
    name no patient (notes ``patients_known`` False) are left alone."""
    if not manifest.notes.get("patients_known", True) or not len(rows):
        return
    ids = manifest.patient_ids[np.asarray(rows, dtype=np.int64)].tolist()
    counts = Counter(ids)
    placed = [(pid, n) for pid, n in counts.most_common() if patient_key(pid) in _PLACEHOLDERS]
    pid, held = counts.most_common(1)[0]
    if placed:
        pid, held = placed[0][0], sum(n for _, n in placed)
        why = ("which an anonymiser writes in place of the patient's: whose images they are is unknown, so dpmed "
               "can neither keep each patient's images in one split nor protect each patient as one unit")
    elif len(ids) >= _MOST_OF and held > len(ids) / 2:
        why = ("more than half of the images, which no one patient of a diagnostic dataset holds: its images are of "
               "many people, whom dpmed would split and protect as one patient")
    else:
        return
    source, remedy = _patient_source(manifest)
    stray = [r for r, p in zip(rows.tolist(), ids) if patient_key(p) in _PLACEHOLDERS]
    if placed and len(stray) <= _FEW and 2 * len(stray) < len(ids):
        _refuse_stray_placeholders(manifest, stray, len(ids), source, why)
    named = f"ids ({source}) {_spellings(placed)} hold" if len(placed) > 1 else f"id {pid!r} ({source}) holds"
    where = [str(manifest.where[r]) for r in (stray or [r for r, p in zip(rows.tolist(), ids) if p == pid])][:2]
    raise DataError(f"{manifest.name} at {manifest.root}: the patient {named} {held} of {len(ids)} images "
                    f"(e.g. {', '.join(where)}), {why}. Give each patient a real pseudonymous id, "
                    "the same on all of their images and on no one else's; or, if the patients cannot be told apart, "
                    f"{remedy}")


def _spellings(placed: list[tuple[str, int]]) -> str:
    """The placeholder spellings of a whole export, each with its images, most first: an export of several sites
    writes several, and the one named alone (of 4 images among 23 under placeholders) hid how many were at stake.
    The first `_SHOWN` are named, as rows are."""
    shown = ", ".join(f"{pid!r} ({n} images)" for pid, n in placed[:_SHOWN])
    return shown + (f" and {len(placed) - _SHOWN} more" if len(placed) > _SHOWN else "")


def _refuse_stray_placeholders(manifest: Manifest, stray: list[int], of: int, source: str, why: str) -> None:
    """DataError for a few rows under a placeholder among real ids (a file the export missed, a row typed by hand):
    the remedies of a whole anonymised export (drop the patient column, blank every PatientID) would give up the
    other images' real ids, so the stray rows are named (the first `_SHOWN`: ten of a DICOM folder's paths made one
    line of 750 characters), with what to do about those rows alone."""
    placed = list(dict.fromkeys(str(manifest.patient_ids[r]) for r in stray))
    shown = "; ".join(str(manifest.where[r]) for r in stray[:_SHOWN])
    more = f"; and {len(stray) - _SHOWN} more" if len(stray) > _SHOWN else ""
    ids = ", ".join(repr(p) for p in placed)
    one = len(stray) == 1
    remedy = ("give this image its patient's pseudonymous id, the one on that patient's other images, or take it out "
              "of the data if its patient is unknown" if one else
              "give each of these images its patient's pseudonymous id, the one on that patient's other images, or "
              "take out of the data those whose patient is unknown")
    raise DataError(f"{manifest.name} at {manifest.root}: the patient id{'' if len(placed) == 1 else 's'} {ids} "
                    f"({source}) hold{'s' if len(placed) == 1 else ''} {len(stray)} of {of} images "
                    f"({shown}{more}), {why}; the other {of - len(stray)} "
                    f"images' ids look real: {remedy}")


def _patient_source(manifest: Manifest) -> tuple[str, str]:
    """Where ``manifest``'s patient ids are written, and how to make each image its own unit there."""
    own = "each image is then its own unit, and DP-SGD protects one image, as the privacy card then says"
    columns = manifest.notes.get("columns")
    if manifest.notes.get("format") == "csv" and isinstance(columns, dict):
        column = columns["patient"]
        return f"column {column!r}", f"remove 'patient' from data.columns: {own}"
    key = manifest.notes.get("patient_key")
    if isinstance(key, dict) and key.get("dicom_patient_id"):
        return "the DICOM headers' PatientID", f"blank the PatientID in these files: {own}"
    if isinstance(key, dict):
        return (f"from the file names, by the pattern {key['pattern']!r}",
                "rename the files so that no two patients' names give one id")
    return f"the {manifest.notes.get('format', 'layout')} table's patient column", "correct the ids in the table"


def describe_spellings(manifest: Manifest, rows: np.ndarray) -> list[str]:
    """One line where patient ids among ``rows`` were written several ways and taken for one patient
    (:attr:`Manifest.spellings`), with their count and the first few, else none. A statistic of the private rows:
    for the terminal and the private log only."""
    kept = set(manifest.patient_ids[np.asarray(rows, dtype=np.int64)].tolist())
    merged = [ways for pid, ways in manifest.spellings.items() if pid in kept]
    if not merged:
        return []
    shown = "; ".join(" = ".join(repr(w) for w in ways) for ways in merged[:3])
    return [f"data: {len(merged)} patient id{'s are' if len(merged) > 1 else ' is'} written in ways that differ only "
            f"in case or leading zeros ({shown}{', ...' if len(merged) > 3 else ''}): each taken as one patient, in "
            "one split and one privacy unit. If they are different people, give them ids that differ otherwise"]


_UNREAD = {"age": "age value(s) not a plausible age in years", "sex": "sex value(s) not M/F/male/female"}


def describe_demographics(manifest: Manifest, rows: np.ndarray) -> list[str]:
    """One line per kind of doubtful sex or age among ``rows`` (the rows the dataset keeps): values read as unknown
    (:attr:`Manifest.unread`), and patient ids with rows of two sexes (two people under one id, or a sex mistyped);
    each with its count and the first rows, as the user finds them. No line where there is nothing to tell.

    The counts are statistics of the private rows, training rows included: for the terminal and the private log
    only, never for ``Dataset.source`` (whose shareable keys go to run.json). Ages of one patient far apart are not
    told: a longitudinal release (NIH ChestX-ray14, MIMIC-CXR) images one patient over years.
    """
    kept = set(np.asarray(rows).tolist())
    lines = []
    for name in ("age", "sex"):
        found = [(r, v) for r, v in sorted(manifest.unread.get(name, {}).items()) if r in kept]
        if found:
            written = manifest.unread_where.get(name, {})
            # one example per place: several images of one patient share the line of patients.csv that gives them
            places = dict.fromkeys(f"{written.get(r) or manifest.where[r]}: {v[:20]!r}" for r, v in found)
            shown = ", ".join(list(places)[:3])
            lines.append(f"data: {len(found)} {_UNREAD[name]} were read as unknown (e.g. {shown}); fairness by "
                         f"{name} leaves them out")
    first: dict[str, tuple[str, int]] = {}     # patient -> (sex, row) of their first row of known sex
    mixed: dict[str, tuple[int, int]] = {}     # patient -> (that row, their first row of the other sex)
    patients, sexes = manifest.patient_ids.tolist(), manifest.sex.tolist()
    for r in sorted(kept):
        patient, sex = patients[r], sexes[r]
        if sex != "unknown":
            first.setdefault(patient, (sex, r))
            if first[patient][0] != sex:
                mixed.setdefault(patient, (first[patient][1], r))
    if mixed:
        a, b = next(iter(mixed.values()))
        lines.append(f"data: {len(mixed)} patient id{' has' if len(mixed) == 1 else 's have'} rows of two different "
                     f"sexes (e.g. {manifest.where[a]} and {manifest.where[b]}): two people under one id, or a sex "
                     "mistyped; each image keeps its own row's sex")
    return lines


def parse_sex(values: Iterable[object]) -> np.ndarray:
    """Publishers' sex codes (M/F, Male/Female, male/female; any case) -> "male" | "female" | "unknown" [N].

    Anything else (blank, "Unknown", "O", "X") is "unknown": sex is an attribute for fairness analysis, not a label,
    so an unusual code is told to the user (:meth:`Manifest.keep_unread`, then assembly) rather than refused.
    """
    return np.array([_SEX.get(str(v).strip().lower(), "unknown") for v in values], dtype=object).astype(str)


def parse_age(values: Iterable[object], *, oldest: float = 120.0) -> tuple[np.ndarray, int]:
    """Ages in years -> (float64 [N] with nan where unknown, how many non-blank values were not a plausible age).

    Accepts numbers and DICOM age strings ("045Y", "006M", "010W", "003D"). A value that is not a number, negative or
    above ``oldest`` (NIH ChestX-ray14 lists ages such as 414) becomes nan, and is counted; which values, and where,
    assembly tells the user (:meth:`Manifest.keep_unread`). The count is a statistic of the private rows: a reader
    notes it under a key that :data:`~dpmed.data.sample.SHAREABLE_SOURCE` does not list, so run.json never holds it.
    """
    out, implausible = [], 0
    units = {"Y": 1.0, "M": 1 / 12, "W": 7 / 365.25, "D": 1 / 365.25}
    for v in values:
        text = str(v).strip()
        if text.lower() in _BLANK:
            out.append(np.nan)
            continue
        scale = 1.0
        if text[-1:].upper() in units and text[:-1].replace(".", "", 1).isdigit():
            text, scale = text[:-1], units[text[-1].upper()]
        try:
            age = float(text) * scale
        except ValueError:
            age = np.nan
        if not (0.0 <= age <= oldest):  # also catches nan from a bad string
            implausible += 1
            age = np.nan
        out.append(age)
    return np.array(out, dtype=np.float64), implausible


def parse_splits(values: Iterable[object]) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Publishers' split names -> ("train" | "val" | "test" | "" per row, [(row, unknown name), ...]).

    Names follow :data:`SPLIT_NAMES`; a blank means "not assigned" (the row joins the pool that dpmed splits).
    """
    out, bad = [], []
    for row, v in enumerate(values):
        text = str(v).strip().lower()
        if text in ("", "nan"):
            out.append("")
        elif text in SPLIT_NAMES:
            out.append(SPLIT_NAMES[text])
        else:
            out.append("")
            bad.append((row, str(v)))
    return np.array(out, dtype=object).astype(str), bad
