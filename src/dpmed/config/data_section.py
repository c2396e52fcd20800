"""The ``data`` section of a study file: where the images come from, how they are preprocessed and split, and
which cohort of patients a study keeps (strict and frozen, like the rest of `dpmed.config.schema`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from dpmed.data import DATASET_SOURCES, DataRequest, Dataset, Preprocessing, SplitPlan
from dpmed.data.cohorts import PatientSelection
from dpmed.data.formats.chest_xray import views_unnamed
from dpmed.mechanisms import Strict as _Strict


def path_from_string(cls, v: object) -> Path | None:
    """A path field's validator, used in mode "plain": the models are strict, and strict JSON validation takes a
    Path only as... a Path, which JSON cannot hold; a study.yaml read back through JSON (``dpmed report``,
    ``status``, a resumed run) would refuse its own paths. A leading ``~`` is the user's home, as in a shell (it was
    read as a folder named ~ beside the study file)."""
    if v is None:
        return v
    if isinstance(v, (str, Path)):
        return Path(v).expanduser()
    raise ValueError(f"must be a path (a string), got {type(v).__name__} {v!r}")


def _no_boolean(choices: str, written: str):
    """A before-validator for a number chosen from a fixed set (``Literal[1, 3]``): pydantic compares a literal's
    value by equality, so YAML's true and false, which Python holds equal to 1 and 0, were taken as those numbers
    (``channels: true`` read grey images) in place of a refusal."""
    def check(cls, v: object) -> object:
        if isinstance(v, bool):
            raise ValueError(f"must be {choices}, got {str(v).lower()}; write {written}")
        return v
    return check


SEED_MAX = 2**32 - 1


def _seed_in_range(v: int) -> int:
    """Every seed of a study is checked here, so that one no generator takes is refused naming its key before
    anything trains, rather than where a generator first takes it: numpy's traceback for ``data.seed: -1``, every run
    failing after training for ``evaluation.bootstrap_seed: -1``, torch's "Overflow when unpacking long long" above
    2**64. numpy's default_rng takes any non-negative integer and torch's manual_seed one below 2**64; 2**32 - 1 is
    what every common seeded API takes (numpy's legacy RandomState, scikit-learn's random_state too)."""
    if not 0 <= v <= SEED_MAX:
        raise ValueError(f"a seed must be a whole number from 0 to {SEED_MAX} (2**32 - 1); got {v}: pick one in "
                         "that range")
    return v


Seed = Annotated[int, AfterValidator(_seed_in_range)]

__all__ = ["DataConfig", "SplitConfig", "PreprocessingConfig", "NormalizeConfig", "ColumnsConfig", "PatientsConfig",
           "Seed", "SEED_MAX"]


class SplitConfig(_Strict):
    """How images are split where the dataset publishes no split (or only some of train / val / test).

    val_fraction / test_fraction: shares of the rows being divided (a published training split plus rows without a
    split); seeded (``seed``), whole patients only (HAM10000: whole lesions), each patient's split a keyed draw of
    its own id, so one patient more moves no other (`dpmed.data.splits`); shares hold in expectation.
    official: keep the splits the layout publishes (Kermany's train/test folders, NIH's test_list.txt, CheXpert's
    valid.csv, MIMIC's split file); false divides every image by the fractions instead.
    shared_patients: where published splits put one patient on two sides (the Kermany release: 170 patients),
    ``drop_from_train`` keeps the published test split and leaves that patient's other images out of train and val;
    ``keep`` trains on the published split as is (a reproduction mode; patients then cross splits, and the record
    says how many).
    """

    val_fraction: float = Field(default=0.15, gt=0, lt=1)
    test_fraction: float = Field(default=0.15, gt=0, lt=1)
    seed: Seed = 0
    official: bool = True
    shared_patients: Literal["drop_from_train", "keep"] = "drop_from_train"

    @model_validator(mode="after")
    def _room_for_train(self) -> "SplitConfig":
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError(f"val_fraction + test_fraction must be below 1 (train keeps the rest), got "
                             f"{self.val_fraction} + {self.test_fraction}")
        return self


class NormalizeConfig(_Strict):
    """Fixed per-channel constants, (x - mean) / std at the model input, after any local DP mechanism. Fixed, never
    computed from the training images: their mean and std would leak other patients' images (METHODS.md s.1)."""

    mean: list[float] = Field(min_length=1, max_length=3)
    std: list[float] = Field(min_length=1, max_length=3)

    @model_validator(mode="after")
    def _matching(self) -> "NormalizeConfig":
        if (len(self.mean) != len(self.std) or any(not (s > 0 and math.isfinite(s)) for s in self.std)
                or not all(math.isfinite(m) for m in self.mean)):
            raise ValueError(f"mean and std need the same number of values (1 or one per channel), finite, and std > "
                             f"0, got mean {self.mean}, std {self.std}")
        return self


class PreprocessingConfig(_Strict):
    """Per-image steps around the resize (``data.image_size``), before any mechanism (METHODS.md s.1): ``aspect``
    says how an image that is not square reaches the square size, ``stretch`` (the whole image, distorted) or
    ``crop`` (its central square, then resized: the film keeps its proportions and loses its sides, as MedMNIST
    renders PneumoniaMNIST); ``minmax`` stretches each image to [0, 1]; ``equalize`` histogram-equalises it
    (003_9a91354dc2d7e2df.txt does both); ``normalize`` applies fixed constants at the model input. Channel
    conversion is ``data.channels``."""

    aspect: Literal["stretch", "crop"] = "stretch"
    minmax: bool = False
    equalize: bool = False
    normalize: NormalizeConfig | None = None


class ColumnsConfig(_Strict):
    """The columns of a generic CSV (source ``csv``): ``path`` (image file, relative to the CSV) is required;
    ``patient``, ``sex``, ``age`` and ``split`` (train / val / test / blank) are optional."""

    path: str
    patient: str | None = None
    sex: str | None = None
    age: str | None = None
    split: str | None = None


class PatientsConfig(_Strict):
    """One cohort of the dataset's patients (`dpmed.data.cohorts`): a seeded draw divides the patients into part 0
    (a ``fraction`` of them) and part 1 (the rest), in every split. Two studies that take the two parts of one seed
    see disjoint patients: a second site simulated from one release (``configs/kermany_pretrained.yaml``)."""

    fraction: float = Field(gt=0, lt=1)
    part: Literal[0, 1]
    seed: Seed = 0

    _part_not_boolean = field_validator("part", mode="before")(_no_boolean("0 or 1", "0 or 1"))

    def selection(self) -> PatientSelection:
        """The cohort as the data stage selects and describes it."""
        return PatientSelection(fraction=self.fraction, part=self.part, seed=self.seed)


class DataConfig(_Strict):
    """Where the images come from (README, "A study file, explained", lists where each layout's files go).

    source: ``phantom`` (embedded synthetic chest X-rays, generated from ``seed``), ``random_processes`` (synthetic
    images of random processes, a data-free prior for ``pretrain``; `dpmed.data.random_processes`), ``medmnist``
    (a MedMNIST v2 ``.npz`` at ``path``), or a published layout at ``path``: ``folders`` (class folders, the
    Kermany layout), ``aptos``, ``chexpert``, ``nih``, ``mimic``, ``ham10000``, ``csv`` (a generic table). DICOM
    files are read wherever a layout lists them (``pip install 'dpmed[dicom]'``). Relative paths are resolved
    against the study file's folder (given with --set, and ``cache_dir``, against the working directory).
    seed: the images' seed of a generated source (phantom, random_processes); a source that reads stored images
    takes none, and refuses one other than 0, the default (a split dpmed carves is seeded by ``split.seed``).
    image_size / channels: resize and channel conversion applied per image before any mechanism (METHODS.md s.1);
    unset, every image must be stored at the first one's size and channels (grey or colour), else it is refused: the
    shape is published, and the first image may be a training patient's.
    labels: findings (chexpert, nih, mimic; default: the dataset's standard set), class folder order (folders) or
    label columns (csv). classes (csv): the names of the label column's classes, the k-th for class index k (unset:
    class_0, class_1, ...); name (csv): the dataset's name in the record and the report (unset: the file's, so
    "labels" for labels.csv). columns / task: the csv's columns and task kind (inferred when unset; classes counted
    from the labels need a validation or test image each, `dpmed.suitability.check_classes`). uncertain: CheXpert
    labeller's -1 (chexpert, mimic): ``zeros`` (default) or ``ones``; blank is always 0. views (chexpert, mimic):
    ``frontal`` (CheXpert's Frontal/Lateral = Frontal; MIMIC's ViewPosition PA or AP; a film whose view is blank is
    left out) or ``all``; unset, frontal where the table has that column, else every image.
    ordinal: whether the classes of a multiclass task are ordered grades (quadratic-weighted kappa is then
    reported, METHODS.md s.4); unset, the layout's own knowledge decides (aptos and MedMNIST's RetinaMNIST: true;
    others false).
    patients: keep one seeded cohort of the patients (``{fraction, part, seed}``; `PatientsConfig`).
    skip_invalid: leave out rows whose image is missing or unreadable or whose label is outside the task (counted
    on the terminal and in the private log) instead of stopping; not a repeated id or image file, which stops the
    study even so (which copy is kept would decide the split of its image). cache_dir: write decoded,
    preprocessed images there for later studies (it then holds the patients' images: keep it where the data may
    live); unset, they stay in memory.
    """

    source: Literal[tuple(DATASET_SOURCES)] = "phantom"  # type: ignore[valid-type]
    path: Path | None = None
    image_size: int | None = Field(default=None, ge=8, le=1024)
    channels: Literal[1, 3] | None = None
    n_images: int | None = Field(default=None, ge=20)
    seed: Seed = 0
    labels: list[str] | None = Field(default=None, min_length=1)
    classes: list[str] | None = None
    name: str | None = Field(default=None, min_length=1)
    columns: ColumnsConfig | None = None
    task: Literal["binary", "multiclass", "multilabel"] | None = None
    uncertain: Literal["zeros", "ones"] | None = None
    views: Literal["frontal", "all"] | None = None
    ordinal: bool | None = None
    preprocessing: PreprocessingConfig = Field(default_factory=PreprocessingConfig)
    split: SplitConfig | None = None
    skip_invalid: bool = False
    cache_dir: Path | None = None
    patients: PatientsConfig | None = None

    _path_from_string = field_validator("path", "cache_dir", mode="plain")(path_from_string)
    _channels_not_boolean = field_validator("channels", mode="before")(_no_boolean("1 (grey) or 3 (colour)", "1 or 3"))

    def to_request(self) -> DataRequest:
        """The request the data stage reads (`dpmed.data.read_dataset`)."""
        pre, s = self.preprocessing, self.split
        size = None if self.image_size is None else (self.image_size, self.image_size)
        normalize = None if pre.normalize is None else (tuple(pre.normalize.mean), tuple(pre.normalize.std))
        return DataRequest(
            source=self.source, path=self.path, seed=self.seed, n_images=self.n_images,
            preprocessing=Preprocessing(size=size, channels=self.channels, aspect=pre.aspect, minmax=pre.minmax,
                                        equalize=pre.equalize, normalize=normalize),
            labels=None if self.labels is None else tuple(self.labels),
            classes=None if self.classes is None else tuple(self.classes), name=self.name,
            columns=None if self.columns is None else self.columns.model_dump(exclude_none=True), task=self.task,
            uncertain=self.uncertain, views=self.views, ordinal=self.ordinal, skip_invalid=self.skip_invalid,
            cache_dir=self.cache_dir,
            split=None if s is None else SplitPlan(val_fraction=s.val_fraction, test_fraction=s.test_fraction,
                                                   seed=s.seed, official=s.official,
                                                   shared_patients=s.shared_patients),
            patients=None if self.patients is None else self.patients.selection())

    def settings_turned_off(self, *, size_from_study: bool = False) -> list[tuple[str, str]]:
        """(key, what turns it off) for each setting the file gives that the source or another setting keeps from
        being read: ``preprocessing.aspect`` where the source generates square images at the size, or where no
        ``image_size`` is set (every image keeps its stored size: `dpmed.data.transforms.Preprocessing` crops only to
        a size), unless ``size_from_study`` (pretrain.data, resized to the study's images: `dpmed.pretraining`);
        ``split.official`` and ``split.shared_patients`` where no split is published (aptos, ham10000, a csv without a
        split column), and ``shared_patients`` beside ``official: false``. Told, not refused, like
        `TrainingConfig.settings_turned_off`: a finished run is matched by the content of its data, not by these
        keys, so it is the same run without them."""
        info = DATASET_SOURCES[self.source]
        off = []
        if "aspect" in self.preprocessing.model_fields_set and info.generates:
            off.append(("preprocessing.aspect", f"source {self.source!r} generates square images at data.image_size"))
        elif "aspect" in self.preprocessing.model_fields_set and self.image_size is None and not size_from_study:
            off.append(("preprocessing.aspect", "image_size is unset (every image keeps its stored size, so none is "
                                                "cropped or stretched)"))
        split = self.split
        if split is None:
            return off
        published = info.publishes_split and (self.source != "csv" or (self.columns is not None
                                                                      and self.columns.split is not None))
        if not published and "split" in info.options:
            where = "a csv without columns.split" if self.source == "csv" else f"source {self.source!r}"
            off += [(f"split.{key}", f"{where} publishes no split (every image is divided by the fractions)")
                    for key in ("official", "shared_patients") if key in split.model_fields_set]
        elif "shared_patients" in split.model_fields_set and not split.official:
            off.append(("split.shared_patients", "split.official is false (no published split is kept, so no "
                                                 "patient sits on two sides of one)"))
        return off

    def settings_the_data_turn_off(self, dataset: Dataset) -> list[tuple[str, str]]:
        """(key, what turns it off) for each setting the file gives that ``dataset``, once read, leaves unread:
        ``views: all`` where no table names its films' views (every film is read unset too:
        `dpmed.data.formats.chest_xray`); the fraction of a split its layout publishes (kept as published),
        ``split.seed`` where it publishes both validation and test (nothing is carved), ``official`` (true or false)
        and ``shared_patients`` where it publishes neither (every image is carved either way). Found from the
        reader's notes and which splits the layout publishes (``Dataset.source``), never from a count of its images;
        those `settings_turned_off` tells of already are left to it."""
        off = []
        views = dataset.source.get("views")
        if "views" in self.model_fields_set and self.views == "all" and isinstance(views, str) and views_unnamed(views):
            off.append(("views", f"{dataset.name} names no film's view (every film is read without it)"))
        split, made = self.split, dataset.source.get("split")
        if split is None or not isinstance(made, Mapping):
            return off
        given = split.model_fields_set - {key.removeprefix("split.") for key, _ in self.settings_turned_off()}
        neither = f"{dataset.name} publishes no validation or test split (every image is divided by the fractions)"
        if not made.get("official"):    # false, on a layout that publishes neither, carves what true carves
            if "official" in given and made.get("layout_publishes") == []:
                off.append(("split.official", neither))
            return off
        published = [name for name in ("val", "test") if name in made.get("published", ())]
        words = {"val": "validation", "test": "test"}
        off += [(f"split.{name}_fraction", f"{dataset.name} publishes its {words[name]} split, kept as published")
                for name in published if f"{name}_fraction" in given]
        if "seed" in given and len(published) == 2:
            off.append(("split.seed", f"{dataset.name} publishes its validation and test splits, so none is carved"))
        if not published:
            off += [(f"split.{key}", neither) for key in ("official", "shared_patients") if key in given]
        return off

    @field_validator("seed")
    @classmethod
    def _seed_of_generated_images(cls, v: int, info: ValidationInfo) -> int:
        """``seed`` seeds a generated source's images, and no reader of stored images takes it: a study that set it
        there (to draw another split, say) ran on the images and split of seed 0, and recorded the seed it had not
        used. A study.yaml that dpmed wrote (read back through JSON) holds what an earlier dpmed took without a word,
        and is not refused."""
        source = DATASET_SOURCES.get(info.data.get("source", ""))
        if source is None or source.generates or v == 0 or info.mode == "json":
            return v
        moved = " (a split dpmed carves is seeded by data.split.seed)" if "split" in source.options else ""
        raise ValueError(f"seeds the images a generated source draws, and source {source.name!r} reads its images: "
                         f"it would change nothing{moved}; remove it")

    @model_validator(mode="after")
    def _source_needs(self) -> "DataConfig":
        info = DATASET_SOURCES[self.source]
        if info.needs_path and self.path is None:
            # --data-path sets the study's data.path only (pretrain.data takes it where it reads the same source)
            raise ValueError(f"source {self.source!r} needs 'path': its file or folder (--data-path gives the study's "
                             "data section one, not pretrain.data)")
        if not info.needs_path and self.path is not None:
            raise ValueError(f"source {self.source!r} is generated, it takes no 'path'")
        if not info.takes_n_images and self.n_images is not None:
            generated = ", ".join(repr(n) for n, s in DATASET_SOURCES.items() if s.takes_n_images)
            raise ValueError(f"'n_images' applies only to generated sources ({generated})")
        # The data stage refuses these too (`dpmed.data.registry.read_dataset`), but only once it reads the data,
        # and it names them data.<key>: in pretrain.data (which `dpmed plan` does not read) that named a key the
        # user's data section does not hold, and only when `dpmed run` had read the private data.
        for key in self.to_request().given_options():
            if key not in info.options:
                takers = ", ".join(n for n, s in DATASET_SOURCES.items() if key in s.options)
                raise ValueError(f"'{key}' does not apply to source {self.source!r} (it applies to: {takers}); "
                                 "remove it")
        if self.source == "phantom" and self.task not in (None, "binary", "multilabel"):
            raise ValueError(f"task {self.task!r} is not a phantom task: use binary or multilabel")
        return self
