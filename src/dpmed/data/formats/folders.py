"""Image folders: one folder per class, optionally inside one folder per split (the Kermany / Kaggle layout).

Layout (``data.path`` names the top folder)::

    chest_xray/                     or chest_xray/chest_xray/ (a nested extraction is descended automatically)
      train/NORMAL/IM-0115-0001.jpeg  (also "training"; split folder names match in any case)
      train/PNEUMONIA/person1_bacteria_1.jpeg
      val/...                       optional (also "valid", "validate", "validation"); carved from train when absent
      test/...                      optional (also "testing"); carved from train when absent
    or, with no published split:
    images/<class>/<file>           every image is divided by patient into train / val / test

Image files are JPEG (``.jpg``, ``.jpeg``, ``.jfif``), PNG, BMP, TIFF, WebP or DICOM (``.dcm``), found recursively
under each class folder; hidden files (".DS_Store"), the files of hidden folders and of ``__MACOSX`` or a NAS's
``@eaDir`` there are passed over, any other file is a flagged row ("not an image"), and so is a link whose target is
gone ("missing image"). Classes are the class folders in sorted order unless ``labels`` gives the order (the first
is the negative class of a binary task); every split must hold the same class folders, spelled alike (``Normal`` in
one split and ``NORMAL`` in another is refused, naming both). Two classes make a binary task, more a multiclass one;
a class folder of no image files (``docs/``) is refused, not made a class. Folders next to the split folders
(``__MACOSX``, a second copy of the data) are not read, and the record lists them.

A split must never be taken for a class, nor left out unsaid: a model would learn which folder an image came from,
or be tested on less than the user meant. So a folder next to the split folders that holds class folders (a split
under a name dpmed does not know, ``holdout/NORMAL``) is refused, and so is a folder of images there named like
one of the classes (``NORMAL/`` beside ``train/``: images meant for a split), and so are class folders that all
hold the same folders of images (``Fold1/NORMAL``, ``Fold2/NORMAL``: the inner folders are the classes), and so is a
folder of images named like a split inside a class folder at any depth (``fold1/train/NORMAL``: folds, or
``NORMAL/train``: class above split, or ``train/NORMAL/test``); each message names the folder and the layout dpmed
reads.

Patients. A file name carries no patient in general, so each file is its own patient, except:

* **Kermany** names (Kermany, Zhang, Goldbaum 2018): ``person1_bacteria_1.jpeg`` -> patient ``person1``;
  ``IM-0115-0001.jpeg`` and ``IM-0115-0001-0002.jpeg`` -> ``IM-0115``; ``NORMAL2-IM-0995-0001.jpeg`` ->
  ``NORMAL2-IM-0995`` (the second batch of normal films numbers its patients separately, so its prefix stays).
  The default ``patient_pattern`` matches these; its first non-empty group is the patient.

  The release documents no patient ids, and ``personN`` of a bacteria file and of a virus file is an assumption:
  the two kinds may number separate series. Their image numbers repeat across the kinds (874 numbers are used by
  both), 979 of the 1,667 person numbers appear with both kinds, about as often as two independent series of their
  densities would share numbers (about 950), and the publisher's train/test split never puts one kind of one number
  on both sides. dpmed still takes the number for one child, the safe side for the unit of privacy: were the two
  series one child taken as two patients, that child's eps would be twice the card's (group privacy), while taking
  two children for one costs only data (fewer units, and train images left out as shared with test). The other
  reading is ``patient_pattern=r"^(person\\d+_(?:bacteria|virus))_|^((?:NORMAL\\d+-)?IM-\\d+)-"`` here.
* **DICOM** files: the header's PatientID (and PatientSex, PatientAge as sex and age), never the file name: a
  viewer's export names files ``IM-<series>-<image>.dcm``, which the Kermany pattern would read as a patient. A
  DICOM file without a PatientID names no patient.

A layout in which some files name their patient and others do not is refused, naming the others. Whether the patient
can be the unit of privacy would otherwise turn on whether one such file exists, so that a single image changed what
every privacy card says (and a file without a key is its own "patient", which a person with several is not).

Taken so, the Kermany release puts 170 patients in both train and test (e.g. ``person1``: bacteria images 1-2 in
train, virus images 6-9 and 11-13 in test), each of them a bacteria series on one side and a virus series on the
other. How dpmed handles that is :mod:`dpmed.data.assembly`'s ``shared_patients`` rule.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np

from dpmed.data.decoder import UnreadableImage
from dpmed.data.decoding import DECODERS
from dpmed.data.dicom import quiet_pydicom, read_dicom_header
from dpmed.data.formats.table_reading import other_layout_hint
from dpmed.data.manifest import SPLIT_NAMES, Manifest, parse_age, parse_sex
from dpmed.data.sample import Task
from dpmed.errors import DataError

__all__ = ["read_image_folders", "KERMANY_PATIENT"]

_log = logging.getLogger(__name__)

KERMANY_PATIENT = r"^(person\d+)_|^((?:NORMAL\d+-)?IM-\d+)-"
"""Patient key of Kermany file names (see the module docstring); the first non-empty group is the patient."""

# folders an archiver or file server adds: macOS zip's resource forks, a Synology NAS's thumbnails of each image
# (@eaDir/<image>/SYNOFILE_THUMB_*.jpg, read as more images of the class), Windows' recycle bin and index
_NOT_DATA = {"__MACOSX", "__pycache__", "@eaDir", "$RECYCLE.BIN", "System Volume Information"}
# files an operating system leaves in folders it shows (as it does .DS_Store, which the leading dot already skips)
_SYSTEM_FILES = {"thumbs.db", "ehthumbs.db", "desktop.ini"}


def _listed(path: Path) -> bool:
    """Whether a file of a class folder is the dataset's: not hidden, not a file the operating system left there."""
    return not path.name.startswith(".") and path.name.lower() not in _SYSTEM_FILES


def _data_folder(name: str) -> bool:
    """Whether a folder of this name may hold the dataset: not hidden, not one an archiver or server adds."""
    return not name.startswith(".") and name not in _NOT_DATA


def _subfolders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and _data_folder(p.name))


def _holds_images(folder: Path) -> bool:
    """Whether ``folder`` itself holds an image file, as a class folder does (a split or group folder does not)."""
    return any(p.suffix.lower() in DECODERS and p.is_file() for p in folder.iterdir())


def _files_under(folder: Path) -> list[Path]:
    """Every file below ``folder``, sorted, through linked folders too (each real folder once, so a link back up
    does not loop), dangling links included (`_dangling`). Path.rglob does not enter a linked folder before Python
    3.13, so a class folder holding a link to a batch of images lost that batch without a word. Hidden folders and
    ``__MACOSX`` are not entered, as they are not read beside the class folders: a viewer's ``.thumbnails/`` of a
    class's images would be read as more images of it, and a ``.git/`` stopped the study as "not an image" files."""
    seen: set[str] = set()
    out: list[Path] = []
    for top, folders, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:
            folders[:] = []
            continue
        seen.add(real)
        folders[:] = [f for f in folders if _data_folder(f)]
        out.extend(Path(top) / name for name in files)
    return sorted(out)


def _tell_split_folder_read_alone(top: Path) -> None:
    """Warn where data.path is itself a split folder (``chest_xray/train``) beside others that hold class folders:
    dpmed then reads its class folders alone and carves every split from them, and the published test split next to
    it goes unused, which a user who meant the release would not see from the split sizes alone."""
    if top.name.lower() not in SPLIT_NAMES or top.parent == top:
        return
    siblings = sorted(s.name for s in _subfolders(top.parent)
                      if s != top and s.name.lower() in SPLIT_NAMES and _subfolders(s))
    if siblings:
        _log.warning("data.path %s is a split folder: its class folders are read alone and validation and test are "
                     "carved from them, leaving the published %s beside it unused; to use the published splits, "
                     "point data.path at %s", top, " and ".join(f"{name}/" for name in siblings), top.parent)


def _dangling(path: Path) -> bool:
    """A link whose target is gone: listed so it is reported as a missing image, never silently passed over."""
    return path.is_symlink() and not path.exists()


_LAYOUT_HINT = ("dpmed reads <split>/<class>/<image>, the split folders named train (or training), val (valid, "
                "validate, validation) or test (testing) in any case, or <class>/<image> with no split")


def _refuse_splits_taken_for_classes(top: Path, classes_by_group: dict[Path, list[str]],
                                     split_dirs: dict[Path, str]) -> None:
    """Stop where a split or group folder would be read as a class, or it or a class's images would be left out (see
    the module docstring)."""
    _refuse_split_folders_inside_classes(top, classes_by_group)
    for group, names in classes_by_group.items():
        inner = [{f.name for f in _subfolders(group / c)} for c in names]
        if len(inner) >= 2 and len(inner[0]) >= 2 and all(i == inner[0] for i in inner) and all(
                _holds_images(group / names[0] / f) for f in inner[0]):
            raise DataError(f"the folders {', '.join(names)} in {group} each hold the folders of images "
                            f"{', '.join(sorted(inner[0]))}: those are the classes, and {', '.join(names)} are not "
                            f"(they would be read as classes). {_LAYOUT_HINT}: rename the outer folders to split "
                            "names, or point data.path at one of them")
    classes = {c for names in classes_by_group.values() for c in names}
    for other in _subfolders(top) if split_dirs else []:
        held = sorted(classes & {c.name for c in _subfolders(other)}) if other not in split_dirs else []
        if held:
            raise DataError(f"{other} holds the class folder(s) {', '.join(held)} like the split folder(s) "
                            f"{', '.join(s.name for s in split_dirs)}, but {other.name!r} is not a split name, so it "
                            f"would be left out. {_LAYOUT_HINT}: rename it to the split it holds, or move it out of "
                            f"{top}")
        named = next((c for c in sorted(classes) if c.casefold() == other.name.casefold()), None)
        images = sum(1 for f in _files_under(other) if f.suffix.lower() in DECODERS and _listed(f)
                     and f.is_file()) if named and other not in split_dirs else 0
        if images:
            first = min(split_dirs, key=lambda s: (split_dirs[s] != "train", s.name)).name  # train/ if there
            raise DataError(f"{other} holds {images} image(s) and is named like the class {named} of the split "
                            f"folder(s) {', '.join(s.name for s in split_dirs)}, but {other.name!r} is not a split "
                            f"name, so its images would be left out. {_LAYOUT_HINT}: move them into the {named} "
                            f"folder of a split (e.g. {first}/{named}), or remove {other.name} from {top}")


def _refuse_split_folders_inside_classes(top: Path, classes_by_group: dict[Path, list[str]]) -> None:
    """Stop where a folder of images named like a split lies inside a class folder, at any depth: its images would be
    taken for that class's (for the split that holds the class, if any), its split lost. Folds (``fold1/train/NORMAL``,
    or ``images/train`` beside ``masks/train``) were read as classes fold1 and fold2, ``NORMAL/train/`` was told as
    classes named train and test, and ``train/NORMAL/test/`` added test images to training."""
    for group, names in classes_by_group.items():
        for c in names:
            for f in _files_under(group / c):
                inner = f.relative_to(group / c).parts[:-1]
                k = next((k for k, part in enumerate(inner) if part.lower() in SPLIT_NAMES), None)
                if k is None or f.suffix.lower() not in DECODERS:
                    continue
                folder = group / c / Path(*inner[:k + 1])
                if any(_holds_images(sub) for sub in _subfolders(folder)):     # class folders: a dataset of its own
                    fix = (f"if {folder.parent} holds one whole dataset (one fold of several), point data.path at it; "
                           "otherwise move each split's class folders into one <split>/ folder under data.path")
                else:       # into the split folder there is, however it is spelled
                    split = next((s.name for s in _subfolders(top) if SPLIT_NAMES.get(s.name.lower()) ==
                                  SPLIT_NAMES[folder.name.lower()]), folder.name)
                    fix = f"move its images into {top / split / c}"
                raise DataError(f"the folder {folder} is named like a split but lies inside {group / c}, which dpmed "
                                f"reads as the class {c}: its images would be taken for {c} images and its split "
                                f"lost. {_LAYOUT_HINT}: {fix}")


def _find_top(root: Path) -> Path:
    """Descend nested extractions (chest_xray/chest_xray) while a folder holds exactly one folder of folders and
    no split folder, at most 4 folders down: one more is told as nesting, not read as a dataset of one class."""
    folder, depth = root, 0
    while True:
        subs = _subfolders(folder)
        if any(s.name.lower() in SPLIT_NAMES for s in subs) or len(subs) != 1 or not _subfolders(subs[0]):
            return folder
        if depth == 4:
            raise DataError(f"{root} and each folder below it down to {folder} hold one folder only: dpmed looks 4 "
                            "folders down for train/ and test/ (or one folder per class); point data.path at the "
                            f"folder that holds them ({subs[0]} or a folder in it)")
        folder, depth = subs[0], depth + 1


def _refuse_no_class_folders(top: Path, split_dirs: dict[Path, str]) -> None:
    """DataError for a folder with no class folder anywhere: say what it holds instead (nothing, loose files, or
    empty split folders), not that the class folders [] disagree with ``labels``."""
    layout = ("data.path must name a folder with one folder of images per class (e.g. NORMAL/ and PNEUMONIA/), or "
              "train/ and test/ folders that each hold such class folders")
    if split_dirs:
        raise DataError(f"image folder {top}: its split folder(s) {', '.join(sorted(s.name for s in split_dirs))} "
                        f"hold no class folders, so there are no images to read; {layout}")
    files = [p for p in top.iterdir() if not p.name.startswith(".")]
    if not files:
        raise DataError(f"image folder {top} is empty: it holds no images; {layout}")
    raise DataError(f"image folder {top} holds no class folders, only {len(files)} file(s) (e.g. {files[0].name}); "
                    f"each image's class is the folder it lies in: {layout}")


def read_image_folders(path: str | Path, *, class_names: tuple[str, ...] | None = None,
                       patient_pattern: str = KERMANY_PATIENT) -> Manifest:
    """Read the layout of the module docstring into a Manifest (no pixel is decoded here).

    Raises DataError when the folder is missing, has fewer than two class folders, the splits disagree on the
    classes, ``class_names`` names a folder that is absent (or leaves one out), a class folder holds no image, or a
    split or group folder would be read as a class or left out, or a folder of a class's images beside the split
    folders would be left out (the module docstring).
    """
    root = Path(path).expanduser()
    if root.is_file():
        raise DataError(f"data.path {root} is a file, not an image folder{other_layout_hint(root)}; source 'folders' "
                        "reads the folder that holds train/ and test/ (or one folder per class)")
    if not root.is_dir():
        raise DataError(f"image folder {root} not found (or not a folder); data.path must name the folder that holds "
                        "train/ and test/ (or one folder per class)")
    top = _find_top(root)
    subs = _subfolders(top)
    split_dirs = {s: SPLIT_NAMES[s.name.lower()] for s in subs if s.name.lower() in SPLIT_NAMES}
    ignored = sorted(p.name for p in top.iterdir() if p.is_dir() and p not in split_dirs) if split_dirs else []
    if split_dirs:
        groups = [(s, name) for s, name in split_dirs.items()]
    else:
        groups = [(top, "")]  # class folders directly under the top folder: no published split
        _tell_split_folder_read_alone(top)

    classes_by_group = {s: [c.name for c in _subfolders(s)] for s, _ in groups}
    _refuse_splits_taken_for_classes(top, classes_by_group, split_dirs)
    found = sorted({c for names in classes_by_group.values() for c in names})
    spellings: dict[str, list[str]] = {}
    for c in found:
        spellings.setdefault(c.casefold(), []).append(c)
    for names in spellings.values():
        if len(names) > 1:      # NORMAL in train, Normal in test: one class, two names, else "test lacks NORMAL"
            held = ", ".join(str((s / c).relative_to(top)) for s, held in classes_by_group.items() for c in held
                             if c in names)
            raise DataError(f"the class folders {held} under {top} differ in case only; rename them to one spelling "
                            f"(e.g. {names[0]}): a class folder's name is its class, compared as written")
    for s, names in classes_by_group.items():
        if split_dirs and found and not names:      # a split folder made and left empty, or of loose files
            holders = ", ".join(sorted(g.name for g, held in classes_by_group.items() if held))
            loose = [p for p in s.iterdir() if not p.name.startswith(".")]
            state = f"holds no class folders, only {len(loose)} file(s)" if loose else "is empty"
            carved = (f", or remove the empty folder: dpmed then carves the {split_dirs[s]} split from the training "
                      "images" if split_dirs[s] != "train" and not loose else "")
            verb = "hold" if ", " in holders else "holds"
            raise DataError(f"split folder {s} {state}, while {holders} {verb} the class folders {', '.join(found)}; "
                            f"put its images in those class folders{carved}")
        if sorted(names) != found:
            absent = sorted(set(found) - set(names))
            raise DataError(f"{s} lacks the class folder(s) {', '.join(absent) or '(none)'} that other splits have "
                            f"({', '.join(found)}); every split needs the same classes")
    if not found:   # before labels are compared with the folders: there are none to compare with
        _refuse_no_class_folders(top, split_dirs)
    if class_names is not None:
        if sorted(class_names) != found:
            raise DataError(f"labels {list(class_names)} do not match the class folders {found} under {top}; list "
                            "each class folder once (the first is the negative class of a binary task)")
        found = list(class_names)
    if len(found) < 2:
        raise DataError(f"{top} holds {len(found)} class folder(s) ({', '.join(found) or 'none'}); a classification "
                        "dataset needs at least two (e.g. NORMAL and PNEUMONIA)")

    pattern = re.compile(patient_pattern)
    paths, labels, splits, where = [], [], [], []
    for s, split in groups:
        for k, cls in enumerate(found):
            files = [p for p in _files_under(s / cls) if (p.is_file() or _dangling(p)) and _listed(p)]
            if not files:
                raise DataError(f"{s / cls} holds no files: the {split or 'data'} split has no {cls} images; "
                                "every class folder needs images")
            if not any(f.suffix.lower() in DECODERS for f in files):   # a docs/ folder is no class, even skipped
                raise DataError(f"{s / cls} holds no image files, only {len(files)} other file(s) (e.g. "
                                f"{files[0].name}), so {cls} would be a class without images; move {cls} out of "
                                f"{s} if it is no class, or put its images in it")
            for f in files:
                paths.append(f)
                labels.append(k)
                splits.append(split)
                where.append(str(f.relative_to(top)))
    n = len(paths)
    patients, sex, ages = [], ["unknown"] * n, [""] * n
    matched = from_header = 0
    unreadable: dict[int, str] = {}        # DICOM files without a readable header, and why: flagged below
    for i, f in enumerate(paths):
        m = pattern.search(f.name)
        if f.suffix.lower() in (".dcm", ".dicom"):
            # The header only, never the name: a DICOM viewer's export names files IM-<series>-<image> (OsiriX,
            # Horos), which the Kermany pattern would read as a patient, scattering each real patient over their
            # series. Without a PatientID (anonymised exports blank it) the file names no patient.
            try:
                with quiet_pydicom():       # here, in the one thread that reads the headers
                    header = read_dicom_header(f)
            except UnreadableImage as exc:
                unreadable[i] = str(exc)
                header = {}
            sex[i], ages[i] = header.get("PatientSex", ""), header.get("PatientAge", "")
            patient = (header.get("PatientID") or "").strip()     # leading and trailing spaces are not significant
            patients.append(patient or str(f.relative_to(top)))
            from_header += bool(patient)
        elif m and any(m.groups()):
            patients.append(next(g for g in m.groups() if g))
            matched += 1
        else:
            patients.append(str(f.relative_to(top)))  # its own patient
    # Files that are no image, or unreadable DICOM, are flagged below (left out with skip_invalid): they decide nothing.
    images = [f.suffix.lower() in DECODERS and not _dangling(f) and i not in unreadable for i, f in enumerate(paths)]
    unnamed = [w for w, p, image in zip(where, patients, images) if image and p == w]
    if unnamed and len(unnamed) < sum(images):
        raise DataError(f"{top}: {len(unnamed)} of {sum(images)} images name no patient (e.g. "
                        f"{', '.join(unnamed[:3])}) while the others do, so dpmed cannot tell whose images they are "
                        "nor protect their patients as one unit; rename them as the others are named (person<k>_..., "
                        "IM-<patient>-..., or DICOM files with a PatientID), or move them out of the class folders")
    age, implausible = parse_age(ages)
    manifest = Manifest(
        name=root.name, root=top, task=Task("binary" if len(found) == 2 else "multiclass", tuple(found),
                                            classes_from_data=class_names is None),
        paths=paths, labels=np.array(labels, dtype=np.int64), patient_ids=np.array(patients, dtype=str),
        sex=parse_sex(sex), age=age, splits=np.array(splits, dtype=str), where=np.array(where, dtype=str),
        ids=np.array(where, dtype=str),
        notes={"format": "image-folders", "classes": list(found), "published_splits": sorted(set(splits) - {""}),
               "patient_key": {"pattern": patient_pattern, "files_matched": matched, "dicom_patient_id": from_header,
                               "files_as_own_patient": n - matched - from_header},
               "folders_not_read": ignored, "implausible_ages_set_unknown": implausible,
               # every file names its patient, or none does (a mixed layout is refused above)
               "patients_known": not unnamed and any(images)},
        description=(f"Image folders at {top}: {len(found)} classes ({', '.join(found)}), "
                     f"{'published splits ' + ', '.join(sorted(set(splits) - {''})) if split_dirs else 'no split'}; "
                     "sex and age unknown unless DICOM headers give them."),
    )
    manifest.keep_unread(sex, ages)     # a DICOM header's sex or age that is not blank yet unread: told by assembly
    for i, f in enumerate(paths):
        if _dangling(f):
            manifest.flag(i, "missing image", f"image {where[i]} is a link to {os.readlink(f)}, which does not "
                                              "exist; restore the file it points to, or delete the link")
        if f.suffix.lower() not in DECODERS:
            manifest.flag(i, "not an image", f"suffix {f.suffix or '(none)'!r} is not an image format dpmed reads "
                                             f"({', '.join(sorted(DECODERS))}); move the file out of the class folder")
    for i, reason in unreadable.items():       # after: a row keeps its first problem, and a missing file says so
        manifest.flag(i, "unreadable image", f"image {where[i]} {reason}")
    return manifest
