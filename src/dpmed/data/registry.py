"""Where a study's dataset comes from: a registry of frozen source descriptions, and :func:`read_dataset`.

Why a registry (after timm's model registry): the config validates a source name
against ``DATASET_SOURCES``, the tests parametrize over it, and adding a format is one entry, not another branch.
Each entry also says which optional study keys it reads (``options``), so a key given to a source that would not
read it is an error that names the key, never silently ignored.

Two kinds of source: *arrays* (the phantom, a MedMNIST npz) arrive as whole arrays and are preprocessed here;
*file layouts* (image folders, the tables of :mod:`dpmed.data.formats.chest_xray` and
:mod:`dpmed.data.formats.tables`) are listed into a manifest and decoded, preprocessed, cached and split once by
:mod:`dpmed.data.assembly`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypedDict

import numpy as np

from dpmed import memory
from dpmed.data.assembly import SplitPlan, assemble_dataset
from dpmed.data.cohorts import PatientSelection, in_cohort, select_patients
from dpmed.data.formats.chest_xray import read_chexpert, read_mimic, read_nih
from dpmed.data.formats.folders import read_image_folders
from dpmed.data.formats.medmnist import describe_npz_copies, read_medmnist
from dpmed.data.formats.tables import read_aptos, read_csv_table, read_ham10000
from dpmed.data.manifest import Manifest
from dpmed.data.random_processes import make_random_processes
from dpmed.data.sample import Dataset, ImageSet, TaskKind
from dpmed.data.synthetic import make_phantom
from dpmed.data.transforms import Preprocessing, center_crop, resize
from dpmed.errors import DataError

__all__ = ["DatasetSource", "DataRequest", "DATASET_SOURCES", "read_dataset", "load_dataset", "SplitPlan"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataRequest:
    """Everything a study says about its data, as a reader receives it (see DataConfig for the meaning of each).

    source: a name of DATASET_SOURCES. preprocessing: the per-image steps; for generated sources its size is the
    size they generate at. labels: findings (CheXpert, NIH, MIMIC), class order (folders) or label columns (csv);
    None: the default. classes: the csv's class names, one per class index; name: the csv dataset's name (None: the
    file's). columns: the csv's column names; task: the csv's task kind; uncertain: CheXpert/MIMIC policy for -1;
    views: CheXpert/MIMIC views kept ("frontal", "all"; None: frontal where the table names views).
    ordinal: whether multiclass labels are ordered grades (None: the layout's own knowledge). split: None = the
    defaults of SplitPlan; cache_dir: where decoded tensors are kept on disk (None: memory only).
    patients: keep one seeded cohort of the patients in every split (`dpmed.data.cohorts`; None: all).
    """

    source: str
    path: Path | None
    seed: int
    n_images: int | None = None
    preprocessing: Preprocessing = Preprocessing()
    labels: tuple[str, ...] | None = None
    classes: tuple[str, ...] | None = None
    name: str | None = None
    columns: Mapping[str, str] | None = None
    task: TaskKind | None = None
    uncertain: str | None = None
    views: str | None = None
    ordinal: bool | None = None
    split: SplitPlan | None = None
    skip_invalid: bool = False
    cache_dir: Path | None = None
    patients: PatientSelection | None = None

    def given_options(self) -> list[str]:
        """The optional study keys this request sets (each must be one its source reads)."""
        values = {"labels": self.labels, "classes": self.classes, "name": self.name, "columns": self.columns,
                  "task": self.task, "uncertain": self.uncertain, "views": self.views,
                  "split": self.split, "skip_invalid": self.skip_invalid, "cache_dir": self.cache_dir}
        return [key for key, value in values.items() if value not in (None, False)]


@dataclass(frozen=True)
class DatasetSource:
    """How to obtain one kind of dataset.

    read(request) returns the Dataset. generates: the source draws images at the requested size (the phantom)
    rather than resizing; reads_files: a file layout, decoded and preprocessed by assembly; otherwise arrays are
    preprocessed by :func:`read_dataset`. options: the optional study keys it reads. layout: where its files go.
    reads_folder: its path names a folder (else a file), so that a message asks for the right one.
    publishes_split: its layout can carry a published split (``split.official`` then keeps it; a csv's only with
    ``columns.split``); without, every image is divided by the study's fractions.
    copies: the lines that tell identical images among the images the study uses (`dpmed.data.duplicates`), for an
    array source, given the request and the dataset once its cohort is chosen and preprocessed; a file layout's are
    told by assembly, from the cohort's rows alone.
    """

    name: str
    summary: str
    needs_path: bool
    takes_n_images: bool
    generates: bool
    read: Callable[[DataRequest], Dataset]
    reads_files: bool = False
    options: frozenset[str] = field(default_factory=frozenset)
    layout: str = ""
    reads_folder: bool = False
    publishes_split: bool = False
    copies: Callable[[DataRequest, Dataset], list[str]] | None = None


class _Generated(TypedDict, total=False):
    """What a generated source's generator is given from the request; what it leaves out keeps the generator's
    default."""

    seed: int
    image_size: int
    n_images: int


class _PhantomArguments(_Generated, total=False):
    task: str


def _read_phantom(request: DataRequest) -> Dataset:
    kwargs: _PhantomArguments = {"seed": request.seed}
    if (side := _square(request)) is not None:
        kwargs["image_size"] = side
    if request.n_images is not None:
        kwargs["n_images"] = request.n_images
    if request.task is not None:
        if request.task not in ("binary", "multilabel"):
            raise DataError(f"data.task {request.task!r} is not a phantom task: use binary or multilabel")
        kwargs["task"] = request.task
    _check_generated("phantom", make_phantom, kwargs)
    return make_phantom(**kwargs)


def _read_random_processes(request: DataRequest) -> Dataset:
    kwargs: _Generated = {"seed": request.seed}
    if (side := _square(request)) is not None:
        kwargs["image_size"] = side
    if request.n_images is not None:
        kwargs["n_images"] = request.n_images
    _check_generated("random_processes", make_random_processes, kwargs)
    return make_random_processes(**kwargs)


def _square(request: DataRequest) -> int | None:
    """The side of the square images a generated source draws, None where no size is asked for (its default);
    DataError where the size asked for is not square (drawn at its height, the images kept that side while the
    record gave the size asked for)."""
    if request.preprocessing.size is None:
        return None
    height, width = request.preprocessing.size
    if height != width:
        raise DataError(f"source {request.source} generates square images; asked for {height} x {width} px, give "
                        "one side (data.image_size)")
    return height


def _check_generated(source: str, generate: Callable[..., Dataset], kwargs: _Generated) -> None:
    """Refuse (`dpmed.memory.check_images`) grey images ``generate(**kwargs)`` would make that cannot fit in
    memory, before any is: an n_images of 10**9 filled the memory for minutes, one of 10**23 overflowed NumPy."""
    defaults = inspect.signature(generate).parameters
    n = kwargs.get("n_images", defaults["n_images"].default)
    size = kwargs.get("image_size", defaults["image_size"].default)
    memory.check_images((n, 1, size, size), fix=f"lower n_images (the images source {source} generates) or "
                                                "image_size, or run on a machine with more memory")


def _path(request: DataRequest) -> Path:
    """The file or folder a file source reads; DataError, saying where its files go, where the request gives none.
    :func:`read_dataset` asks for it before any other check; a library call of a (public) registry entry's read
    that skips read_dataset meets the same error here, not a TypeError from deep in a reader."""
    if request.path is None:
        raise DataError(
            f"dataset source {request.source!r} needs a path to its file or folder "
            f"({DATASET_SOURCES[request.source].layout}); set data.path in the study or pass --data-path"
        )
    return request.path


def _read_medmnist(request: DataRequest) -> Dataset:
    return read_medmnist(_path(request))


def _medmnist_copies(request: DataRequest, dataset: Dataset) -> list[str]:
    return describe_npz_copies(_path(request), dataset)


def _from_files(reader: Callable[[Path, DataRequest], Manifest]) -> Callable[[DataRequest], Dataset]:
    """A file layout's read: its reader's manifest of the files at the request's path, checked, decoded, cached and
    split by assembly."""

    def read(request: DataRequest) -> Dataset:
        manifest = reader(_path(request), request)
        rows = len(manifest)
        if request.patients is not None:   # before the split is carved: each cohort's from its own patients
            chosen = np.flatnonzero(in_cohort(manifest.patient_ids, request.patients))
            if len(chosen) == 0:
                raise DataError(f"data.patients ({request.patients.describe()}) keeps none of the {len(manifest)} "
                                f"images at {manifest.root}; choose a larger share or another seed")
            manifest = manifest.subset(chosen)
        dataset = assemble_dataset(manifest, preprocessing=request.preprocessing,
                                   split=request.split or SplitPlan(), skip_invalid=request.skip_invalid,
                                   cache_dir=request.cache_dir)
        return dataset if request.patients is None else select_patients(dataset, request.patients, rows_before=rows)

    return read


_FILE_OPTIONS = frozenset({"split", "skip_invalid", "cache_dir"})
_FINDINGS_OPTIONS = _FILE_OPTIONS | {"labels", "uncertain", "views"}


def _uncertain(request: DataRequest) -> str:
    return request.uncertain or "zeros"


DATASET_SOURCES: dict[str, DatasetSource] = {
    source.name: source
    for source in (
        DatasetSource(
            name="phantom",
            summary="embedded synthetic chest X-rays with lesion masks, sex and age (teaching/testing, no download)",
            needs_path=False, takes_n_images=True, generates=True, read=_read_phantom, options=frozenset({"task"}),
            layout="task: binary (normal / opacity, default) or multilabel (opacity per lung field)",
        ),
        DatasetSource(
            name="random_processes",
            summary="synthetic images of random processes (dead leaves, 1/f^alpha noise) labelled by the process: a "
                    "data-free prior for pretraining (Tang et al. 2023); no person, no download",
            needs_path=False, takes_n_images=True, generates=True, read=_read_random_processes,
            layout="n_images: how many (default 6000); 6 classes, one per process",
        ),
        DatasetSource(
            name="medmnist",
            summary="a MedMNIST v2 2D .npz file with its official splits (no patient ids or demographics)",
            needs_path=True, takes_n_images=False, generates=False, read=_read_medmnist,
            copies=_medmnist_copies,
            layout="path: the .npz file (e.g. pneumoniamnist.npz)",
        ),
        DatasetSource(
            name="folders",
            summary="image folders: [train|val|test/]<class>/<image> (the Kermany/Kaggle chest_xray layout)",
            needs_path=True, takes_n_images=False, generates=False, reads_files=True,
            read=_from_files(lambda path, r: read_image_folders(path, class_names=r.labels)),
            options=_FILE_OPTIONS | {"labels"},
            layout="path: the folder holding train/ and test/ (or one folder per class); labels: class order",
            reads_folder=True, publishes_split=True,
        ),
        DatasetSource(
            name="aptos",
            summary="APTOS 2019 diabetic retinopathy: train.csv (id_code, diagnosis 0-4) + train_images/*.png",
            needs_path=True, takes_n_images=False, generates=False, reads_files=True,
            read=_from_files(lambda path, r: read_aptos(path)), options=_FILE_OPTIONS,
            layout="path: the folder holding train.csv and train_images/",
            reads_folder=True,
        ),
        DatasetSource(
            name="chexpert",
            summary="CheXpert: train.csv/valid.csv (Path, Sex, Age, findings 1/0/-1/blank), multilabel",
            needs_path=True, takes_n_images=False, generates=False, reads_files=True,
            read=_from_files(lambda path, r: read_chexpert(path, findings=r.labels, uncertain=_uncertain(r),
                                                           views=r.views)),
            options=_FINDINGS_OPTIONS,
            layout="path: the release folder (CheXpert-v1.0-small/) holding train.csv, valid.csv and train/",
            reads_folder=True, publishes_split=True,
        ),
        DatasetSource(
            name="nih",
            summary="NIH ChestX-ray14: Data_Entry_2017.csv (Finding Labels a|b, Patient ID/Age/Gender), multilabel",
            needs_path=True, takes_n_images=False, generates=False, reads_files=True,
            read=_from_files(lambda path, r: read_nih(path, findings=r.labels)), options=_FILE_OPTIONS | {"labels"},
            layout="path: the folder holding Data_Entry_2017.csv and images*/ (test_list.txt optional)",
            reads_folder=True, publishes_split=True,
        ),
        DatasetSource(
            name="mimic",
            summary="MIMIC-CXR-JPG: metadata + chexpert label CSVs (split CSV, MIMIC-IV patients.csv optional)",
            needs_path=True, takes_n_images=False, generates=False, reads_files=True,
            read=_from_files(lambda path, r: read_mimic(path, findings=r.labels, uncertain=_uncertain(r),
                                                        views=r.views)),
            options=_FINDINGS_OPTIONS,
            layout="path: the mimic-cxr-jpg/2.x.0 folder holding the mimic-cxr-2.0.0-*.csv.gz files and files/",
            reads_folder=True, publishes_split=True,
        ),
        DatasetSource(
            name="ham10000",
            summary="HAM10000 dermatoscopy: HAM10000_metadata.csv (lesion_id, image_id, dx, age, sex), split by lesion",
            needs_path=True, takes_n_images=False, generates=False, reads_files=True,
            read=_from_files(lambda path, r: read_ham10000(path)), options=_FILE_OPTIONS,
            layout="path: the folder holding HAM10000_metadata.csv and HAM10000_images_part_1/, _part_2/",
            reads_folder=True,
        ),
        DatasetSource(
            name="csv",
            summary="a generic CSV: an image path column, label column(s), optional patient/sex/age/split columns",
            needs_path=True, takes_n_images=False, generates=False, reads_files=True,
            read=_from_files(lambda path, r: read_csv_table(path, columns=r.columns or {}, labels=r.labels or (),
                                                            task=r.task, classes=r.classes, name=r.name)),
            options=_FILE_OPTIONS | {"labels", "classes", "name", "columns", "task"},
            publishes_split=True,
            layout="path: the CSV file (image paths relative to its folder); columns: {path, patient, sex, age, split}",
        ),
    )
}


def read_dataset(request: DataRequest) -> Dataset:
    """The dataset ``request`` describes, every image brought to its preprocessing (size, channels, per-image
    min-max and histogram equalisation; :class:`~dpmed.data.transforms.Preprocessing`).

    Every step is per image, so it may precede a local DP mechanism (METHODS.md section 1); ``normalize`` (fixed
    mean, std) is carried on the Dataset and applied by the run after any mechanism. Phantom masks are generated at
    the requested size, other masks are resized bilinearly and thresholded at 0.5. The Dataset's ``source`` records
    every step (``source["preprocessing"]``).
    Raises DataError for an unknown source, a missing or superfluous path, an option the source does not read
    (nothing is silently ignored), or any problem of the data itself (naming the file, row or column).
    """
    info = DATASET_SOURCES.get(request.source)
    if info is None:
        known = ", ".join(f"{name!r} ({s.summary})" for name, s in DATASET_SOURCES.items())
        raise DataError(f"unknown dataset source {request.source!r}; known sources: {known}")
    if info.needs_path:
        _path(request)                  # a DataError where the study gives none, before any option is checked
    if not info.needs_path and request.path is not None:
        raise DataError(f"dataset source {request.source!r} reads no file, but path={str(request.path)!r} was given; "
                        "remove the path")
    if request.n_images is not None and not info.takes_n_images:
        raise DataError(
            f"dataset source {request.source!r} has fixed splits; n_images={request.n_images} applies only to "
            f"generated sources ({', '.join(n for n, s in DATASET_SOURCES.items() if s.takes_n_images)}); remove it"
        )
    for key in request.given_options():
        if key not in info.options:
            takers = ", ".join(n for n, s in DATASET_SOURCES.items() if key in s.options)
            raise DataError(f"data.{key} does not apply to source {request.source!r} (it applies to: {takers}); "
                            "remove it")
    preprocessing = request.preprocessing
    dataset = _ordinal(info.read(request), request.ordinal)
    if not info.reads_files:
        dataset = _preprocess_arrays(dataset, preprocessing, generated=info.generates)
    if request.patients is not None and not info.reads_files:      # a file layout's read selected it already
        dataset = select_patients(dataset, request.patients)
    # told, not recorded: a statistic of the private images goes to the terminal and the private log only
    for line in info.copies(request, dataset) if info.copies is not None else ():
        _log.warning("%s", line)
    if preprocessing.normalize is not None:
        c = dataset.train.image_shape[0]
        mean, std = preprocessing.normalize
        if len(mean) not in (1, c) or len(std) not in (1, c) or len(mean) != len(std):
            raise DataError(f"data.preprocessing.normalize has {len(mean)} mean and {len(std)} std values for images "
                            f"with {c} channel(s); give 1 value each, or {c} each")
    return dataset


def _ordinal(dataset: Dataset, ordinal: bool | None) -> Dataset:
    """The dataset with the study's ``data.ordinal`` where it gives one (every source: grades are a property of the
    labels, not of the layout); only multiclass classes can be ordered grades."""
    if ordinal is None or ordinal == dataset.task.ordinal:
        return dataset
    if ordinal and dataset.task.kind != "multiclass":
        raise DataError(f"data.ordinal: true applies to multiclass grades, but {dataset.name} is a {dataset.task.kind} "
                        "task; remove it")
    return replace(dataset, task=replace(dataset.task, ordinal=ordinal))


def load_dataset(*, source: str, path: str | Path | None, image_size: int | None, channels: int | None, seed: int,
                 n_images: int | None, aspect: str = "stretch", minmax: bool = False, equalize: bool = False,
                 normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
                 labels: tuple[str, ...] | None = None, classes: tuple[str, ...] | None = None, name: str | None = None,
                 columns: Mapping[str, str] | None = None, task: TaskKind | None = None, uncertain: str | None = None,
                 views: str | None = None,
                 ordinal: bool | None = None, split: SplitPlan | None = None, skip_invalid: bool = False,
                 cache_dir: str | Path | None = None) -> Dataset:
    """:func:`read_dataset` with the request spelled out as keywords (the Python API; a study file's ``data``
    section gives the same request with ``DataConfig.to_request()``). ``image_size`` x ``image_size`` pixels and
    ``channels`` channels, None keeping the data's own; seed: the phantom's generation seed (splits of file layouts
    use ``split.seed``); n_images: the phantom's size; aspect: "stretch" or "crop"
    (`dpmed.data.transforms.center_crop`)."""
    if image_size is not None and image_size < 1:
        raise DataError(f"image_size must be a positive number of pixels, got {image_size}")
    if channels is not None and channels not in (1, 3):
        raise DataError(f"channels must be 1 (grey) or 3 (RGB), got {channels}")
    try:
        preprocessing = Preprocessing(size=None if image_size is None else (image_size, image_size), channels=channels,
                                      aspect=aspect, minmax=minmax, equalize=equalize, normalize=normalize)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    return read_dataset(DataRequest(source=source, path=None if path is None else Path(path), seed=seed,
                                    n_images=n_images, preprocessing=preprocessing,
                                    labels=None if labels is None else tuple(labels),
                                    classes=None if classes is None else tuple(classes), name=name, columns=columns,
                                    task=task,
                                    uncertain=uncertain, views=views, ordinal=ordinal, split=split,
                                    skip_invalid=skip_invalid,
                                    cache_dir=None if cache_dir is None else Path(cache_dir)))


def _preprocess_arrays(dataset: Dataset, preprocessing: Preprocessing, *, generated: bool) -> Dataset:
    """Resize (unless generated at the size), min-max, equalise and convert channels of an array source."""
    _, height, width = dataset.train.image_shape
    size = preprocessing.size
    steps = []
    if size is not None and not generated and (height, width) != size:
        cropped = preprocessing.aspect == "crop" and height * size[1] != width * size[0]
        steps.append(("central crop to the aspect, then " if cropped else "")
                     + f"resize {height}x{width} -> {size[0]}x{size[1]} (bilinear, antialiased)")
    if preprocessing.minmax:
        steps.append("per-image min-max")
    if preprocessing.equalize:
        steps.append("per-image histogram equalisation")
    if preprocessing.channels is not None and dataset.train.image_shape[0] != preprocessing.channels:
        steps.append(f"channels {dataset.train.image_shape[0]} -> {preprocessing.channels}")
    record = {**dataset.source, "preprocessing": preprocessing.describe()}
    if not steps:
        return replace(dataset, source=record, normalization=preprocessing.normalize)
    images_step = replace(preprocessing, size=None if generated else size)
    channels = preprocessing.channels or dataset.train.image_shape[0]
    memory.check_images((sum(len(s) for s in (dataset.train, dataset.val, dataset.test)), channels,
                         *(images_step.size or (height, width))), fix=memory.SMALLER_IMAGES)

    def convert(split: ImageSet) -> ImageSet:
        masks = split.masks  # [N, H, W] or None
        if masks is not None and images_step.size is not None:
            region = masks[:, None].astype(np.float32)        # [N, 1, H, W], cut as the images are
            if images_step.aspect == "crop":
                region = center_crop(region, images_step.size)
            masks = resize(region, images_step.size)[:, 0] >= 0.5
        return ImageSet(images_step.apply(split.images), split.labels, split.patient_ids, split.sex, split.age, masks)

    return replace(
        dataset,
        train=convert(dataset.train),
        val=convert(dataset.val),
        test=convert(dataset.test),
        source={**record, "transforms": tuple(steps)},
        normalization=preprocessing.normalize,
    )
