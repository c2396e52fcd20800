"""Reader for MedMNIST v2 2D npz files (Yang et al. 2023, Sci. Data 10:41; https://medmnist.com).

One npz holds the official splits: ``{train,val,test}_images`` uint8 [N, H, W] (grey) or [N, H, W, 3] (RGB) and
``{train,val,test}_labels`` [N, 1] (a class index) or [N, L] (ChestMNIST: L = 14 findings, 0/1). Sizes are 28 px
(v2) or 64/128/224 px (MedMNIST+ files such as ``pneumoniamnist_224.npz``). The official splits are kept as
published, so results compare with the MedMNIST benchmarks (METHODS.md section 8).

MedMNIST publishes no patient ids and no demographics. Each image therefore becomes its own patient
(``"train-17"``), sex is "unknown" and age is nan: fairness by sex or age cannot be measured on MedMNIST, and
whether one patient's images sit in two splits is up to the MedMNIST authors' split (they split by patient where
the source dataset had patient ids, e.g. ChestMNIST from NIH ChestX-ray14).

Identical images are told (`dpmed.data.duplicates`, by image: a copy is one image counted as two, or a test image that
was trained on) by :func:`describe_npz_copies`, which `dpmed.data.registry` calls on the images the study uses, once
``data.patients`` has chosen its cohort and the images are preprocessed: told on the whole file, a copy outside the
cohort was warned of, and counted, as if it were in the study. Each is named by its file, key and row in the file
(``pneumoniamnist.npz test_images[12]``), which its id keeps whatever the cohort; what is found is a statistic of the
private images, so it goes to the terminal and the private log only, never into ``source``.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpmed import memory
from dpmed.data.duplicates import describe_copies
from dpmed.data.sample import Dataset, ImageSet, Task, TaskKind
from dpmed.errors import DataError
from dpmed.numbers import bytes_text

__all__ = ["read_medmnist", "describe_npz_copies", "MEDMNIST_LABELS"]

_SPLITS = ("train", "val", "test")
_KEYS = tuple(f"{split}_{part}" for split in _SPLITS for part in ("images", "labels"))
# What reading an npz member raises when its bytes are corrupt (CRC mismatch, bad deflate stream, cut short; a
# changed header byte gives zipfile's NotImplementedError, "compression method", or RuntimeError, "encrypted").
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError)


@dataclass(frozen=True)
class _KnownDataset:
    """Label names of one MedMNIST 2D dataset, as in the ``INFO`` dict of the medmnist package (medmnist/info.py);
    ordinal: its classes are ordered grades (medmnist's task "ordinal-regression": RetinaMNIST's DR grades 0-4)."""

    kind: TaskKind
    label_names: tuple[str, ...]
    ordinal: bool = False


_ORGANS = ("bladder", "femur-left", "femur-right", "heart", "kidney-left", "kidney-right", "liver", "lung-left",
           "lung-right", "pancreas", "spleen")

MEDMNIST_LABELS: dict[str, _KnownDataset] = {
    "pathmnist": _KnownDataset("multiclass", (
        "adipose", "background", "debris", "lymphocytes", "mucus", "smooth muscle", "normal colon mucosa",
        "cancer-associated stroma", "colorectal adenocarcinoma epithelium")),
    "chestmnist": _KnownDataset("multilabel", (
        "atelectasis", "cardiomegaly", "effusion", "infiltration", "mass", "nodule", "pneumonia", "pneumothorax",
        "consolidation", "edema", "emphysema", "fibrosis", "pleural", "hernia")),
    "dermamnist": _KnownDataset("multiclass", (
        "actinic keratoses and intraepithelial carcinoma", "basal cell carcinoma", "benign keratosis-like lesions",
        "dermatofibroma", "melanoma", "melanocytic nevi", "vascular lesions")),
    "octmnist": _KnownDataset("multiclass", (
        "choroidal neovascularization", "diabetic macular edema", "drusen", "normal")),
    "pneumoniamnist": _KnownDataset("binary", ("normal", "pneumonia")),
    "retinamnist": _KnownDataset("multiclass", ("0", "1", "2", "3", "4"), ordinal=True),
    "breastmnist": _KnownDataset("binary", ("malignant", "normal, benign")),
    "bloodmnist": _KnownDataset("multiclass", (
        "basophil", "eosinophil", "erythroblast",
        "immature granulocytes(myelocytes, metamyelocytes and promyelocytes)", "lymphocyte", "monocyte",
        "neutrophil", "platelet")),
    "tissuemnist": _KnownDataset("multiclass", (
        "Collecting Duct, Connecting Tubule", "Distal Convoluted Tubule", "Glomerular endothelial cells",
        "Interstitial endothelial cells", "Leukocytes", "Podocytes", "Proximal Tubule Segments",
        "Thick Ascending Limb")),
    "organamnist": _KnownDataset("multiclass", _ORGANS),
    "organcmnist": _KnownDataset("multiclass", _ORGANS),
    "organsmnist": _KnownDataset("multiclass", _ORGANS),
}
"""Label names of the MedMNIST 2D datasets, looked up by file name (``pneumoniamnist_64.npz`` -> pneumoniamnist)."""


def read_medmnist(
    path: str | Path,
    *,
    task_kind: TaskKind | None = None,
    label_names: tuple[str, ...] | None = None,
) -> Dataset:
    """Read a MedMNIST v2 2D npz into a :class:`Dataset` with its official train/val/test splits.

    Images become float32 [N, C, H, W] in [0, 1] (uint8 / 255; C = 1 for grey, 3 for RGB).
    The task is inferred from the labels unless ``task_kind`` is given: [N, 1] labels with at most two values
    in {0, 1} -> binary, other [N, 1] class indices -> multiclass, [N, L] 0/1 with L > 1 -> multilabel. Labels are
    int64 [N] (binary, multiclass) or float32 [N, L] (multilabel).
    ``label_names`` defaults to the names MedMNIST publishes when the file name is a known dataset (see
    :data:`MEDMNIST_LABELS`) and the count matches, else "class_0", ... or "finding_0", ...

    Patients and demographics are unknown in MedMNIST: patient_ids are ``f"{split}-{i}"`` (each image its own
    patient), sex is "unknown", age is nan (see the module docstring).

    Raises DataError naming the file when it is missing, not an npz, truncated or corrupt, lacks a key, has labels
    and images that disagree, an empty split, or labels that do not fit the task.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.npz"))
        raise DataError(
            f"{path} is a folder; pass the MedMNIST .npz file itself"
            + (f" (this folder holds {', '.join(found)})" if found else " (this folder holds no .npz file)")
        )
    if not path.is_file():
        where = path.resolve() if not path.is_absolute() else path
        raise DataError(
            f"MedMNIST file not found: looked for {where}. Download the npz from https://medmnist.com (e.g. "
            "pneumoniamnist.npz) and pass its path with --data-path (or data.path in the study)."
        )
    arrays = _load_arrays(path)
    raw = [arrays[f"{split}_images"] for split in _SPLITS]
    if all(r.ndim in (3, 4) for r in raw):      # other shapes are refused, naming the key, in _images
        memory.check_images((sum(map(len, raw)), 1 if raw[0].ndim == 3 else raw[0].shape[-1], *raw[0].shape[1:3]),
                            fix=f"use a smaller release of {path.name} (MedMNIST publishes 28, 64, 128 and 224 px), "
                            "or run on a machine with more memory")
    images = {split: _images(path, split, arrays[f"{split}_images"]) for split in _SPLITS}
    labels = {split: _labels(path, split, arrays[f"{split}_labels"], len(images[split])) for split in _SPLITS}
    shapes = {split: images[split].shape[1:] for split in _SPLITS}
    if len(set(shapes.values())) != 1:
        raise DataError(f"{path}: the splits hold images of different shapes (C, H, W) {shapes}; re-export the file")

    known = MEDMNIST_LABELS.get(_dataset_key(path))
    kind = task_kind or _infer_kind(labels, known)
    labels = {split: _labels_for(path, split, labels[split], kind) for split in _SPLITS}
    names = _label_names(path, kind, labels, label_names, known)

    def split_set(split: str) -> ImageSet:
        n = len(images[split])
        return ImageSet(
            images=images[split],
            labels=labels[split],
            patient_ids=np.array([f"{split}-{i}" for i in range(n)]),   # the row in the file: describe_npz_copies
            sex=np.full(n, "unknown"),
            age=np.full(n, np.nan),
            masks=None,
        )

    sets = {split: split_set(split) for split in _SPLITS}
    return Dataset(
        name=path.stem,
        task=Task(kind=kind, label_names=names, ordinal=kind == "multiclass" and known is not None and known.ordinal,
                  classes_from_data=kind != "multilabel" and label_names is None
                  and (known is None or names != known.label_names)),
        train=sets["train"],
        val=sets["val"],
        test=sets["test"],
        description=(
            f"MedMNIST v2 file {path.name} (Yang et al. 2023, CC BY 4.0) with its official splits; no patient ids "
            "or demographics are published, so each image is its own patient and sex/age are unknown."
        ),
        synthetic=False,
        source={"format": "medmnist-npz", "path": str(path.resolve()), "bytes": path.stat().st_size},
        patients_known=False,
    )


def _load_arrays(path: Path) -> dict[str, np.ndarray]:
    """All six arrays of the npz, or a DataError that says which file and what is wrong with it."""
    advice = "download it again from https://medmnist.com (or check that the path names the .npz file)"
    try:
        archive = np.load(path, allow_pickle=False)  # never unpickle: an npz from elsewhere could run code
    except zipfile.BadZipFile as exc:
        raise DataError(
            f"{path} is not a complete zip archive ({exc}): the npz is truncated or corrupt; {advice}"
        ) from exc
    except ValueError as exc:
        raise DataError(
            f"{path} is neither an npz archive nor a .npy array (wrong file or corrupt bytes); {advice}"
        ) from exc
    except (OSError, EOFError, RuntimeError) as exc:    # RuntimeError: a changed zip header, as in _UNREADABLE
        raise DataError(f"{path} could not be read ({exc}); {advice}") from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(
            f"{path} holds a single .npy array, not an npz archive with the keys {', '.join(_KEYS)}; pass the "
            "MedMNIST .npz file."
        )
    with archive:
        missing = [key for key in _KEYS if key not in archive.files]
        if missing:
            raise DataError(
                f"{path} lacks the key(s) {', '.join(missing)}; it has {', '.join(sorted(archive.files)) or 'none'}. "
                f"A MedMNIST 2D npz holds {', '.join(_KEYS)}; is this a MedMNIST 3D file or another npz?"
            )
        arrays, held = {}, 0
        for key in _KEYS:
            try:
                held += _check_declared_size(path, archive, key, held, advice)
                arrays[key] = archive[key]
            except ValueError as exc:  # object (pickled) or malformed array: refused, never unpickled
                raise DataError(f"{path}: key {key} is not a plain numeric array; {advice}") from exc
            except _UNREADABLE as exc:
                raise DataError(f"{path}: key {key} cannot be read ({exc}): the file is corrupt; {advice}") from exc
    return arrays


def _check_declared_size(path: Path, archive: np.lib.npyio.NpzFile, key: str, held: int, advice: str) -> int:
    """The bytes the array ``key`` declares, read from its header before numpy allocates it; DataError where they and
    the ``held`` bytes of the arrays read before it (all six are kept at once) exceed the free memory. An npz is
    compressed, so a file of kB can declare an array of TB, which numpy met with a MemoryError (an internal error to
    the user) or, where the allocation succeeds, filled until the machine swaps. The member is ``key`` or
    ``key.npy``, as numpy's NpzFile looks it up."""
    zipped = archive.zip
    assert zipped is not None       # open: read inside the caller's `with archive`
    member = key if key in zipped.namelist() else f"{key}.npy"
    with zipped.open(member) as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
    need = math.prod(shape) * dtype.itemsize
    memory.check_bytes(held + need, f"{path}: key {key} declares an array of shape {shape} ({bytes_text(need)}"
                       + (f"; {bytes_text(held + need)} with the arrays before it)" if held else ")"),
                       fix=f"{advice}, or use a machine with more memory")
    return need


def _images(path: Path, split: str, raw: np.ndarray) -> np.ndarray:
    """uint8 [N, H, W] or [N, H, W, 3] -> float32 [N, C, H, W] in [0, 1]."""
    key = f"{split}_images"
    if raw.dtype != np.uint8:
        raise DataError(f"{path}: {key} has dtype {raw.dtype}; MedMNIST images are uint8 (0..255)")
    if len(raw) == 0:
        raise DataError(f"{path}: {key} is empty; every split needs images (train, val and test)")
    if raw.ndim == 3:
        chw = raw[:, None]  # [N, 1, H, W]
    elif raw.ndim == 4 and raw.shape[-1] in (1, 3):
        chw = raw.transpose(0, 3, 1, 2)  # [N, H, W, C] -> [N, C, H, W]
    else:
        raise DataError(
            f"{path}: {key} has shape {raw.shape}; expected [N, H, W] (grey) or [N, H, W, 3] (RGB). 3D MedMNIST "
            "volumes are not supported."
        )
    out = np.empty(chw.shape, dtype=np.float32)
    np.divide(chw, np.float32(255.0), out=out, dtype=np.float32)
    return out


def _labels(path: Path, split: str, raw: np.ndarray, n_images: int) -> np.ndarray:
    """Labels as [N, L] (L >= 1), checked against the image count."""
    key = f"{split}_labels"
    if raw.ndim == 1:
        raw = raw[:, None]
    if raw.ndim != 2 or raw.shape[1] < 1:
        raise DataError(f"{path}: {key} has shape {raw.shape}; expected [N, 1] (class index) or [N, L] (findings)")
    if len(raw) != n_images:
        raise DataError(
            f"{path}: {key} has {len(raw)} rows but {split}_images has {n_images} images; each image needs one label "
            "row. The file is inconsistent: download it again."
        )
    if raw.dtype == np.bool_:       # 0/1 findings saved as booleans: numpy counts bool as no number
        raw = raw.astype(np.uint8)
    if not np.issubdtype(raw.dtype, np.number):
        raise DataError(f"{path}: {key} must hold numbers (class indices, or 0/1 per finding), got dtype "
                        f"{raw.dtype}; save the labels as integers")
    bad = ~np.isfinite(raw)
    if bad.any():   # the dtype is fine (float); the values are not, so name them and where they are
        raise DataError(f"{path}: {key} must hold finite numbers; found {_values_text(raw[bad])}"
                        f"{_first_row(bad.any(axis=1))}. Give every image a label, or drop those images with their "
                        "label rows, and save the npz again")
    return raw


def _infer_kind(labels: dict[str, np.ndarray], known: _KnownDataset | None) -> TaskKind:
    width = labels["train"].shape[1]
    if width > 1:
        return "multilabel"
    if known is not None:
        return known.kind
    values = np.unique(np.concatenate([labels[split][:, 0] for split in _SPLITS]))
    return "binary" if set(values.tolist()) <= {0, 1} else "multiclass"


def _values_text(values: np.ndarray) -> str:
    """The distinct values of ``values`` in one line, the first ten: "0, 0.5, 1" (numpy's own print of an array
    breaks its line and pads its numbers)."""
    distinct = np.unique(values)
    return ", ".join(f"{v:g}" for v in distinct[:10]) + (", ..." if len(distinct) > 10 else "")


def _first_row(bad: np.ndarray) -> str:
    """Where in the label array the first bad row is (counted from 0), and how many there are."""
    rows = np.flatnonzero(bad)
    return f" (row {rows[0]} first; {len(rows):,} of {len(bad):,} rows)"


def _labels_for(path: Path, split: str, raw: np.ndarray, kind: TaskKind) -> np.ndarray:
    """[N, L] raw labels -> int64 [N] (binary, multiclass) or float32 [N, L] (multilabel), checked for the task."""
    key = f"{split}_labels"
    if kind == "multilabel":
        bad = ~np.isin(raw, (0, 1))
        if bad.any():
            raise DataError(f"{path}: {key} must be 0/1 for a multilabel task; found {_values_text(raw[bad])}"
                            f"{_first_row(np.any(bad, axis=1))}")
        return raw.astype(np.float32)
    if raw.shape[1] != 1:
        raise DataError(
            f"{path}: {key} has {raw.shape[1]} columns, so it is multilabel; task_kind={kind!r} needs one class "
            "index per image. Drop task_kind or set it to 'multilabel'."
        )
    cls = raw[:, 0]
    bad = (cls < 0) | (cls != np.round(cls))
    if bad.any():
        raise DataError(f"{path}: {key} must hold class indices 0, 1, ...; found {_values_text(cls[bad])}"
                        f"{_first_row(bad)}")
    if kind == "binary" and np.any(cls > 1):
        raise DataError(
            f"{path}: {key} has classes {_values_text(cls)}, more than 0/1; use task_kind='multiclass' for this file"
        )
    return cls.astype(np.int64)


def _label_names(path: Path, kind: TaskKind, labels, given: tuple[str, ...] | None, known) -> tuple[str, ...]:
    if kind == "multilabel":
        count = labels["train"].shape[1]
    elif kind == "binary":
        count = 2
    else:
        count = int(max(labels[split].max() for split in _SPLITS)) + 1
    if given is not None:
        if len(given) < count or (kind != "multiclass" and len(given) != count):
            raise DataError(
                f"{path}: {len(given)} label names given ({', '.join(given)}) but the {kind} labels need {count}; "
                "pass one name per class (multiclass, binary) or per finding (multilabel)."
            )
        return tuple(given)
    if known is not None and (known.kind == "multilabel") == (kind == "multilabel"):
        fits = len(known.label_names) == count if kind == "multilabel" else len(known.label_names) >= count
        if fits:  # the published names name classes (binary, multiclass) or findings (multilabel), as here
            return known.label_names
    stem = "finding" if kind == "multilabel" else "class"
    return tuple(f"{stem}_{i}" for i in range(count))


def _dataset_key(path: Path) -> str:
    """pneumoniamnist_224.npz -> pneumoniamnist (MedMNIST+ files carry the size as a suffix)."""
    stem = path.stem.lower()
    head, _, tail = stem.rpartition("_")
    return head if head and tail.isdigit() else stem


def describe_npz_copies(path: Path, dataset: Dataset) -> list[str]:
    """`dpmed.data.duplicates.describe_copies` of ``dataset`` (read from the npz at ``path``, then cut to a cohort
    or preprocessed), by image, each named by its key and row in the file: its id (``"train-17"``) is that row."""
    sets = {split: getattr(dataset, split) for split in _SPLITS}

    def name(split: str, i: int) -> str:
        stored, row = str(sets[split].patient_ids[i]).rsplit("-", 1)
        return f"{path.name} {stored}_images[{row}]"

    return describe_copies(sets, name=name, patients_known=False)
