"""The one documented unit of data, and the array form in which splits travel.

Every reader (phantom, MedMNIST, later image folders and tables) produces a :class:`Dataset` of three
:class:`ImageSet` splits. An ImageSet keeps its images as one array so that mechanisms and training work on
whole tensors; indexing it yields a :class:`Sample`, the per-image view documented for users.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Literal, Mapping, Sequence

import numpy as np

__all__ = ["Sample", "ImageSet", "Task", "Dataset", "TaskKind", "names_text"]

TaskKind = Literal["binary", "multiclass", "multilabel"]


def names_text(names: Sequence[str]) -> str:
    """Label names on one line, each still one: ", " between them, "; " where a name holds a comma (the phantom's
    "opacity, image-left lung"; read with ", " its two findings were four)."""
    return ("; " if any("," in n for n in names) else ", ").join(names)


@dataclass(frozen=True)
class Sample:
    """One image and what is known about it.

    image: float32 [C, H, W] with values in [0, 1] (R = 1 for every local DP mechanism).
    label: an int class index (binary, multiclass) or a float32 [L] 0/1 vector (multilabel).
    attributes: ``{"sex": "female" | "male" | "unknown", "age": float (nan when unknown)}``.
    patient_id: splits never put two images of one patient in different splits.
    mask: bool [H, W] lesion mask where ground truth exists (the phantom), else None.
    """

    image: np.ndarray
    label: int | np.ndarray
    attributes: Mapping[str, object]
    patient_id: str
    mask: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class ImageSet:
    """A split held as arrays, N images in one block.

    images: float32 [N, C, H, W] in [0, 1]
    labels: int64 [N] (binary, multiclass) or float32 [N, L] (multilabel)
    patient_ids: str [N]
    sex: str [N], "female", "male" or "unknown"
    age: float64 [N], nan where unknown
    masks: bool [N, H, W] or None
    """

    images: np.ndarray
    labels: np.ndarray
    patient_ids: np.ndarray
    sex: np.ndarray
    age: np.ndarray
    masks: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.images)
        if self.images.ndim != 4:
            raise ValueError(f"images must be [N, C, H, W], got shape {self.images.shape}")
        for name in ("labels", "patient_ids", "sex", "age"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {n} images")
        if self.masks is not None and self.masks.shape != (n, *self.images.shape[2:]):
            raise ValueError(f"masks must be [N, H, W] = {(n, *self.images.shape[2:])}, got {self.masks.shape}")

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> Sample:
        label = self.labels[i]
        return Sample(
            image=self.images[i],
            label=int(label) if np.ndim(label) == 0 else label,
            attributes={"sex": str(self.sex[i]), "age": float(self.age[i])},
            patient_id=str(self.patient_ids[i]),
            mask=None if self.masks is None else self.masks[i],
        )

    def subset(self, indices: np.ndarray) -> "ImageSet":
        """The images at ``indices``, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        return ImageSet(
            images=self.images[idx],
            labels=self.labels[idx],
            patient_ids=self.patient_ids[idx],
            sex=self.sex[idx],
            age=self.age[idx],
            masks=None if self.masks is None else self.masks[idx],
        )

    def with_images(self, images: np.ndarray) -> "ImageSet":
        """The same records with other pixels (e.g. after a local DP mechanism)."""
        return ImageSet(images, self.labels, self.patient_ids, self.sex, self.age, self.masks)

    @property
    def n_patients(self) -> int:
        """How many patients the images belong to (distinct ids)."""
        return len(np.unique(self.patient_ids.astype(str)))

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W)."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]


@dataclass(frozen=True)
class Task:
    """What the labels mean.

    kind: binary (labels 0/1, the model has 2 softmax outputs), multiclass (K softmax outputs) or multilabel
    (L sigmoid outputs). label_names: class names (binary, multiclass) or finding names (multilabel).
    ordinal: the classes are ordered grades (APTOS diabetic retinopathy 0-4), so a near miss is better than a far
    one and the evaluation adds quadratic-weighted kappa (METHODS.md section 4); False for nominal classes.
    classes_from_data: the classes were counted from the images (a generic CSV's labels, a MedMNIST file of unknown
    name, class folders the study's ``labels`` do not list), not given by the layout or the study file. The count is
    released (study.yaml, the model's last layer), so every training class must then have a validation or test image
    (`dpmed.suitability.check_classes`): a class only training images hold would be one patient's label, published.
    """

    kind: TaskKind
    label_names: tuple[str, ...]
    ordinal: bool = False
    classes_from_data: bool = False

    @property
    def num_outputs(self) -> int:
        return len(self.label_names)

    def describe(self) -> str:
        """The task as the terminal states it, naming the positive class of a binary task: class folders are read
        in sorted order, so "abnormal" before "normal" would make normal the positive class without a word."""
        if self.kind == "binary" and len(self.label_names) == 2:
            return (f"binary (positive class {self.label_names[1]}, label 1; negative {self.label_names[0]}, "
                    "label 0)")
        return f"{self.kind} ({names_text(self.label_names)})" if self.label_names else self.kind


@dataclass(frozen=True, eq=False)
class Dataset:
    """A dataset ready for a study: a task and three splits. ``synthetic`` marks teaching data (the phantom).

    source: provenance for the run record (format, path, preprocessing, rows left out). normalization: fixed
    (mean, std) per channel that the run applies at the model input, after any local DP mechanism (which needs
    pixels in [0, 1]); None when the study asks for none. The splits themselves always hold [0, 1] pixels.
    patients_known: whether patient ids are published (False where each image had to be its own patient: MedMNIST,
    APTOS, a CSV without a patient column, folders whose file names carry no patient key; and HAM10000, whose lesion
    ids group its images for the split but may share a person), so a privacy card can say that "one patient" may
    mean "one image".
    """

    name: str
    task: Task
    train: ImageSet
    val: ImageSet
    test: ImageSet
    description: str = ""
    synthetic: bool = False
    source: Mapping[str, object] = field(default_factory=dict)
    normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    patients_known: bool = True

    @property
    def image_bytes(self) -> int:
        """What the splits' images (and masks) take in memory: what each process that holds the dataset holds."""
        sets = (self.train, self.val, self.test)
        return sum(s.images.nbytes + (0 if s.masks is None else s.masks.nbytes) for s in sets)

    def shareable_source(self) -> dict[str, object]:
        """``source`` without what the reader found in the files (:data:`SHAREABLE_SOURCE`): for run.json. The data
        path as its last part, the file or folder name (as the tables' names are kept): the absolute path would publish
        the user's file-system layout, and it is of no use where the file is shared."""
        kept: dict[str, object] = {}
        for key, value in self.source.items():
            allowed = SHAREABLE_SOURCE.get(key)
            if key == "path" and isinstance(value, str):
                kept[key] = PurePath(value).name
            elif allowed is True:
                kept[key] = value
            elif allowed:
                kept[key] = {k: v for k, v in value.items() if k in allowed} if isinstance(value, Mapping) else value
        return kept


# The provenance keys (``Dataset.source``) a shareable file may hold: how the reader was set up, never what it found.
# Counts of rows, of rows left out, of images a cohort kept, of patients in two splits or of files matched, file sizes
# and cache keys all change when one patient is added to the training set, so an add/remove eps does not hold against
# a file that holds them; they go to the terminal and the private log. A key or sub-key not listed here is left out
# (a set lists the sub-keys kept of a mapping).
SHAREABLE_SOURCE: dict[str, bool | frozenset[str]] = {
    **dict.fromkeys(("format", "path", "preprocessing", "transforms", "classes", "published_splits",
                     "patients_known", "columns", "labels", "findings", "uncertain_policy", "blank_policy", "tables",
                     "table", "official_split_lists", "official_split", "demographics", "generator", "seed",
                     "n_images", "image_size", "positive_fraction", "female_fraction", "repeat_fraction",
                     "fractions", "task", "difficulty", "views"), True),
    "patient_key": frozenset({"pattern"}),
    "split": frozenset({"val_fraction", "test_fraction", "seed", "official", "published", "carved",
                        "shared_patients"}),
    "cohort": frozenset({"fraction", "part", "seed", "description", "patients_known"}),
}
