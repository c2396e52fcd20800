"""The strict, frozen schema of a study file.

A study names a dataset, a model, how to train and evaluate, and the privacy *arms* to compare. Every model here
forbids unknown keys and checks values before any training starts, so a typo or an impossible eps costs seconds,
not hours. Arm parameters that may sweep (``target_epsilon: [1, 8]``) are always held as lists; `plan_runs`
turns a study into one run per value combination per seed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from dpmed.data import DATASET_SOURCES, DataRequest, Preprocessing, SplitPlan
from dpmed.data.cohorts import PatientSelection
from dpmed.data.overlap import HASH_BITS, NEAR_DUPLICATE_BITS
from dpmed.errors import ConfigError
from dpmed.mechanisms import Arm, AuditConfig, Strict as _Strict
from dpmed.mechanisms.base import SLUG
from dpmed.names import CAM_METHODS, DP_ENGINES, MODEL_NAMES

__all__ = [
    "Study", "DataConfig", "SplitConfig", "PreprocessingConfig", "NormalizeConfig", "ColumnsConfig",
    "ModelConfig", "LastBlocks", "PretrainConfig", "PatientsConfig", "resolve_paths", "TrainingConfig",
    "AugmentationConfig", "ScheduleConfig", "EvaluationConfig", "FairnessConfig",
    "CamConfig", "AuditConfig", "Arm", "PrivacyBudget",
]


class SplitConfig(_Strict):
    """How images are split where the dataset publishes no split (or only some of train / val / test).

    val_fraction / test_fraction: shares of the rows being divided (a published training split plus rows without a
    split); seeded (``seed``), stratified by label, whole patients only (HAM10000: whole lesions).
    official: keep the splits the layout publishes (Kermany's train/test folders, NIH's test_list.txt, CheXpert's
    valid.csv, MIMIC's split file); false divides every image by the fractions instead.
    shared_patients: where published splits put one patient on two sides (the Kermany release: 170 patients),
    ``drop_from_train`` keeps the published test split and leaves that patient's other images out of train and val;
    ``keep`` trains on the published split as is (a reproduction mode; patients then cross splits, and the record
    says how many).
    """

    val_fraction: float = Field(default=0.15, gt=0, lt=1)
    test_fraction: float = Field(default=0.15, gt=0, lt=1)
    seed: int = 0
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
        if len(self.mean) != len(self.std) or any(not (s > 0 and math.isfinite(s)) for s in self.std):
            raise ValueError(f"mean and std need the same number of values (1 or one per channel) and std > 0, got "
                             f"mean {self.mean}, std {self.std}")
        return self


class PreprocessingConfig(_Strict):
    """Per-image steps after the resize (``data.image_size``), before any mechanism (METHODS.md s.1): ``minmax``
    stretches each image to [0, 1]; ``equalize`` histogram-equalises it (003_9a91354dc2d7e2df.txt does both);
    ``normalize`` applies fixed constants at the model input. Channel conversion is ``data.channels``."""

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
    seed: int = 0


class DataConfig(_Strict):
    """Where the images come from (README, "A study file, explained", lists where each layout's files go).

    source: ``phantom`` (embedded synthetic chest X-rays, generated from ``seed``), ``random_processes`` (synthetic
    images of random processes, a data-free prior for ``pretrain``; `dpmed.data.random_processes`), ``medmnist``
    (a MedMNIST v2 ``.npz`` at ``path``), or a published layout at ``path``: ``folders`` (class folders, the
    Kermany layout), ``aptos``, ``chexpert``, ``nih``, ``mimic``, ``ham10000``, ``csv`` (a generic table). DICOM
    files are read wherever a layout lists them (``pip install 'dpmed[dicom]'``). Relative paths are resolved
    against the study file's folder (``cache_dir`` against the working directory).
    image_size / channels: resize and channel conversion applied per image before any mechanism (METHODS.md s.1).
    labels: findings (chexpert, nih, mimic; default: the dataset's standard set), class folder order (folders) or
    label columns (csv). columns / task: the csv's columns and task kind (inferred when unset). uncertain: CheXpert
    labeller's -1 (chexpert, mimic): ``zeros`` (default) or ``ones``; blank is always 0.
    ordinal: whether the classes of a multiclass task are ordered grades (quadratic-weighted kappa is then
    reported, METHODS.md s.4); unset, the layout's own knowledge decides (aptos and MedMNIST's RetinaMNIST: true;
    others false).
    patients: keep one seeded cohort of the patients (``{fraction, part, seed}``; `PatientsConfig`).
    skip_invalid: leave out rows whose image is missing or unreadable or whose label is outside the task (the run
    record counts them) instead of stopping. cache_dir: memory-map decoded, preprocessed images there for later
    studies (it then holds the patients' images: keep it where the data may live); unset, they stay in memory.
    """

    source: Literal[tuple(DATASET_SOURCES)] = "phantom"  # type: ignore[valid-type]
    path: Path | None = None
    image_size: int | None = Field(default=None, ge=8, le=1024)
    channels: Literal[1, 3] | None = None
    n_images: int | None = Field(default=None, ge=20)
    seed: int = 0
    labels: list[str] | None = Field(default=None, min_length=1)
    columns: ColumnsConfig | None = None
    task: Literal["binary", "multiclass", "multilabel"] | None = None
    uncertain: Literal["zeros", "ones"] | None = None
    ordinal: bool | None = None
    preprocessing: PreprocessingConfig = Field(default_factory=PreprocessingConfig)
    split: SplitConfig | None = None
    skip_invalid: bool = False
    cache_dir: Path | None = None
    patients: PatientsConfig | None = None

    # "plain": the model is strict, and strict JSON validation takes a Path only as... a Path, which JSON cannot
    # hold; a study.yaml read back through JSON (dpmed report) would refuse its own data path.
    @field_validator("path", "cache_dir", mode="plain")
    @classmethod
    def _path_from_string(cls, v: object) -> Path | None:
        if v is None or isinstance(v, Path):
            return v
        if isinstance(v, str):
            return Path(v)
        raise ValueError(f"must be a path (a string), got {type(v).__name__} {v!r}")

    def to_request(self) -> DataRequest:
        """The request the data stage reads (`dpmed.data.read_dataset`)."""
        pre, s = self.preprocessing, self.split
        size = None if self.image_size is None else (self.image_size, self.image_size)
        normalize = None if pre.normalize is None else (tuple(pre.normalize.mean), tuple(pre.normalize.std))
        return DataRequest(
            source=self.source, path=self.path, seed=self.seed, n_images=self.n_images,
            preprocessing=Preprocessing(size=size, channels=self.channels, minmax=pre.minmax, equalize=pre.equalize,
                                        normalize=normalize),
            labels=None if self.labels is None else tuple(self.labels),
            columns=None if self.columns is None else self.columns.model_dump(exclude_none=True), task=self.task,
            uncertain=self.uncertain, ordinal=self.ordinal, skip_invalid=self.skip_invalid, cache_dir=self.cache_dir,
            split=None if s is None else SplitPlan(val_fraction=s.val_fraction, test_fraction=s.test_fraction,
                                                   seed=s.seed, official=s.official,
                                                   shared_patients=s.shared_patients),
            patients=None if self.patients is None else PatientSelection(
                fraction=self.patients.fraction, part=self.patients.part, seed=self.patients.seed))

    @model_validator(mode="after")
    def _source_needs(self) -> "DataConfig":
        info = DATASET_SOURCES[self.source]
        if info.needs_path and self.path is None:
            raise ValueError(f"source {self.source!r} needs 'path': its file or folder (or pass --data-path)")
        if not info.needs_path and self.path is not None:
            raise ValueError(f"source {self.source!r} is generated, it takes no 'path'")
        if not info.takes_n_images and self.n_images is not None:
            generated = ", ".join(repr(n) for n, s in DATASET_SOURCES.items() if s.takes_n_images)
            raise ValueError(f"'n_images' applies only to generated sources ({generated})")
        return self


class LastBlocks(_Strict):
    """``trainable: {last_blocks: N}``: the head and the last N feature blocks of the model (``ModelInfo.blocks``)."""

    last_blocks: int = Field(ge=1)


class ModelConfig(_Strict):
    """An architecture from the model registry (`dpmed.models`); BatchNorm never appears (DP-SGD forbids it).

    weights: a local state dict every arm starts from (`dpmed.models.weights`: dpmed's own model.pt, torchvision's
    ResNet names; the head may differ; BatchNorm weights are refused, with the reason). Relative paths are read from
    the study file's folder; nothing downloads. weights_source: what the weights were trained on, in the user's words
    (required with ``weights``): the run record and the report print it beside the file's sha256, since a prior
    trained on the private patients would carry them past every eps.
    trainable: ``all`` (default), ``head``, or ``{last_blocks: N}``; the rest is frozen, and DP-SGD neither clips
    nor noises frozen parameters (the noise has as many coordinates as there are trainable parameters).
    """

    name: Literal[MODEL_NAMES] = "small_cnn"  # type: ignore[valid-type]
    weights: Path | None = None
    weights_source: str | None = Field(default=None, min_length=1)
    trainable: Literal["all", "head"] | LastBlocks = "all"

    @field_validator("weights", mode="before")
    @classmethod
    def _path_from_string(cls, v: object) -> object:
        return Path(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _declared(self) -> "ModelConfig":
        if self.weights is not None and self.weights_source is None:
            raise ValueError("model.weights needs model.weights_source: say what the weights were trained on (e.g. "
                             "'ImageNet-21k, BiT-M'); the record and the report print it")
        if self.weights is None and self.weights_source is not None:
            raise ValueError("model.weights_source describes model.weights, which is not set")
        return self

    @property
    def trainable_setting(self) -> str | int:
        """"all", "head" or the number of last blocks (`dpmed.models.weights.set_trainable`)."""
        return self.trainable.last_blocks if isinstance(self.trainable, LastBlocks) else self.trainable


class AugmentationConfig(_Strict):
    """Augmentation multiplicity (De, Berrada, Hayes, Smith, Balle 2022): every sampled image is trained on as
    ``multiplicity`` (K) augmented copies, each copy's loss weighted 1/K, so a unit's gradient is the mean over the
    copies summed over its images, and it is that sum which is clipped: one unit still moves the noisy sum by at most
    C, and the accounting is unchanged (METHODS.md s.9). The average lowers the variance of the signal, not the noise.

    crop_padding: reflect-pad by this many pixels and crop back to the image size at a random offset; ``auto`` is
    S / 8 for S px images (4 px at 32 px, De et al.'s CIFAR-10 setting); 0 turns crops off.
    flip: random horizontal flips, off by default: on chest X-rays a flipped image puts the heart on the right
    (situs inversus, dextrocardia) and swaps the side markers and the laterality of findings, an image the test
    set never holds; turn it on for images without a left-right anatomy (dermoscopy, histology).
    Which crop and flip each copy gets is public randomness (`dpmed.training.augmentation` says why that is sound).
    """

    multiplicity: int = Field(default=1, ge=1)
    crop_padding: int | Literal["auto"] = "auto"
    flip: bool = False

    @field_validator("crop_padding")
    @classmethod
    def _padding(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 0:
            raise ValueError(f"must be >= 0 (or auto), got {v}")
        return v


class ScheduleConfig(_Strict):
    """The learning rate over a run's T steps: ``constant`` (the default), ``cosine`` (half a cosine from the base
    rate to 0; Loshchilov and Hutter 2017) or ``step`` (times ``gamma`` at each of the ``milestones``, fractions of
    T), after a linear warm-up over the first ``warmup_fraction`` of T (Goyal et al. 2017)."""

    kind: Literal["constant", "cosine", "step"] = "constant"
    warmup_fraction: float = Field(default=0.0, ge=0, lt=1)
    milestones: list[float] = Field(default_factory=lambda: [0.5, 0.75])
    gamma: float = Field(default=0.1, gt=0, le=1)

    @field_validator("milestones")
    @classmethod
    def _fractions(cls, v: list[float]) -> list[float]:
        if any(not 0 < m < 1 for m in v) or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"milestones must be increasing fractions of the run in (0, 1), got {v}")
        return v


class TrainingConfig(_Strict):
    """How every arm trains, unless the arm overrides ``epochs``, ``batch_size`` or ``learning_rate``.

    batch_size: the logical batch. Non-private arms draw shuffled batches of this size; DP-SGD draws Poisson
    batches with sample_rate = batch_size / N_train (so this is the *expected* size). physical_batch_size only bounds
    memory and never changes the math.

    Training length: ``steps`` (optimiser steps T, the same for every arm) or ``epochs``: passes over the data, or
    ``auto`` (the default): at least 10 epochs and at least 500 steps, so that neither 500 nor 5000 training images
    are under-trained (`dpmed.mechanisms.training_steps`). DP-SGD's accountant takes the resulting T.

    The private training recipe (De et al. 2022; METHODS.md s.9), each off by default: ``augmentation``
    (augmentation multiplicity), ``ema_decay`` (the released and evaluated model is an exponential moving average of
    the iterates: post-processing, free in eps), ``lr_schedule`` (warm-up, cosine or step decay) and ``lr_scaling``
    (the learning rate scaled with the batch: ``linear``, lr * B / reference_batch_size, Goyal et al. 2017, for SGD;
    ``sqrt`` for Adam, Malladi et al. 2022). Weight standardisation and ScatterNet features are models
    (``small_cnn_ws``, ``resnet9_ws``, ``scatternet_linear``, ``scatternet_cnn``).
    """

    epochs: int | Literal["auto"] = "auto"
    steps: int | None = Field(default=None, ge=1)
    batch_size: int = Field(default=64, ge=1)
    physical_batch_size: int = Field(default=128, ge=1)
    # How DP-SGD computes the per-example clipped sum; both are exact (same sum up to float rounding). dpmed: ghost
    # norms and book-keeping, near the cost of a plain step (benchmarks/RESULTS.md); opacus: Opacus's per-example
    # gradients, slower and larger, kept for comparison and for layers only Opacus supports.
    dp_engine: Literal[DP_ENGINES] = "dpmed"  # type: ignore[valid-type]
    optimizer: Literal["sgd", "adam"] = "adam"  # Adam on the noisy clipped gradient is post-processing: still DP
    learning_rate: float = Field(default=0.001, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)  # sgd only
    weight_decay: float = Field(default=0.0, ge=0)
    lr_schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    reference_batch_size: int = Field(default=256, ge=1)
    augmentation: AugmentationConfig | None = None
    # De et al. 2022 use 0.999 and up; the decay is warmed up as min(decay, (1 + t) / (10 + t)) at update t.
    ema_decay: float | None = Field(default=None, gt=0, lt=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # CPU threads of one run's tensor operations. Float sums depend on it, so a run's numbers are the same in-process,
    # in a process pool or on Ray only with a fixed count; "auto" = min(4, CPU cores), whatever the executor. With
    # --workers N on N cores, set 1. Like device, it changes no setting of the study's runs.
    threads: int | Literal["auto"] = "auto"

    @field_validator("threads", "epochs")
    @classmethod
    def _positive_or_auto(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be at least 1 (or auto), got {v}")
        return v

    @model_validator(mode="after")
    def _one_length(self) -> "TrainingConfig":
        if self.steps is not None and self.epochs != "auto":
            raise ValueError(f"give the training length once: steps ({self.steps}) or epochs ({self.epochs}), not "
                             "both")
        return self


class FairnessConfig(_Strict):
    """Per-group metrics (METHODS.md s.5): the attributes to group test patients by (sex and age, the attributes a
    dpmed Sample records) and the age bin edges ([0,30), [30,60), ... as 003_9a91354dc2d7e2df.txt; a missing value is
    the group "unknown", and an attribute no test image records is reported as not applicable)."""

    attributes: list[Literal["sex", "age"]] = Field(default_factory=lambda: ["sex", "age"], min_length=1)
    age_bins: list[float] = Field(default_factory=lambda: [0.0, 30.0, 60.0, 70.0, 80.0, 100.0], min_length=2)

    @field_validator("age_bins")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"age bin edges must increase, got {v}")
        return v


class CamConfig(_Strict):
    """Grad-CAM and its faithfulness metrics (METHODS.md s.6) on a fixed, seeded subset of ``n_images`` test images
    (the same images for every arm). method: a pytorch-grad-cam method; deletion_steps: points of the deletion and
    insertion curves; pointing_tolerance: pixels around the lesion mask that still count as a pointing-game hit."""

    method: Literal[CAM_METHODS] = "gradcam"  # type: ignore[valid-type]
    n_images: int = Field(default=64, ge=1)
    seed: int = 0
    deletion_steps: int = Field(default=16, ge=2)
    pointing_tolerance: float = Field(default=0.0, ge=0)


class EvaluationConfig(_Strict):
    """Percentile bootstrap over test redraws (METHODS.md s.4); the same seed gives every arm the same redraws.

    fairness: per-group metrics (on by default; ``null`` turns them off). explanations: Grad-CAM and its metrics (off
    by default: they need the model and cost forward passes; e.g. ``explanations: {method: gradcam, n_images: 64}``).
    training_metrics: training-set AUROC and accuracy, private (not covered by eps), off by default."""

    bootstrap_resamples: int = Field(default=1000, ge=10)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    bootstrap_seed: int = 0
    fairness: FairnessConfig | None = Field(default_factory=FairnessConfig)
    explanations: CamConfig | None = None
    # AUROC and accuracy on the training images (000_56c2431ae4df8d10.txt's train/test table): computed without
    # noise from the training images, so not covered by any eps; written only to the study's private folder.
    training_metrics: bool = False


class PrivacyBudget(_Strict):
    """A total budget for everything the study releases under DP-SGD: all DP-SGD runs (every arm, value and seed)
    trained on the same images compose, so their events are accounted together and must stay within epsilon at
    delta. Checked before any training. Local DP arms hold for another neighbour relation and are not counted."""

    epsilon: float = Field(gt=0)
    delta: float = Field(gt=0, lt=1)
    accountant: Literal["pld", "rdp"] = "pld"

    @field_validator("epsilon")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be finite")
        return v


class PretrainConfig(_Strict):
    """Public pretraining, a stage before the arms (`dpmed.pretraining`): the model trains once, without privacy, on
    a dataset the user declares public, and every arm starts from those weights (the source documents' practice:
    003_9a91354dc2d7e2df.txt pretrains on MIMIC-CXR; METHODS.md s.9).

    data: any dataset dpmed reads (a ``data`` section; image_size and channels default to the study's, so the model
    fits both; without a path, a source that is the study's own reads the study's ``data.path``: another cohort of
    one release, selected with ``patients``; ``random_processes`` is a prior that needs no data). public: the
    user's statement of why these data are public (a second site's released images, a published dataset): printed
    in the report beside "not protected by any eps". training: how to train on them (epochs or steps, batch size,
    learning rate, ...; the arms' own settings do not apply). seed: initialisation and shuffling (public).
    near_duplicate_bits: the perceptual-hash distance at or below which a public and a private image count as the
    same image (`dpmed.data.overlap`; 30 of 255 bits by default). The weights are cached in the
    study folder by a content hash of the public images, these settings and the model, so they train once.
    """

    data: DataConfig
    public: str = Field(min_length=1)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    seed: int = 0
    near_duplicate_bits: int = Field(default=NEAR_DUPLICATE_BITS, ge=0, le=HASH_BITS // 2)


def resolve_paths(study: "Study", folder: Path) -> "Study":
    """``study`` with ``model.weights`` and ``pretrain.data.path`` read from ``folder`` (the study file's) where
    relative; ConfigError naming the key and the path if the file or folder does not exist (dpmed downloads
    nothing). ``data.path`` is resolved by `dpmed.config.loading`."""
    model, pretrain = study.model, study.pretrain
    if model.weights is not None:
        weights = model.weights if model.weights.is_absolute() else (folder / model.weights).resolve()
        if not weights.is_file():
            raise ConfigError(f"model.weights: no such file {weights}; give the path of a local state dict (relative "
                              "paths are read from the study file's folder; dpmed downloads nothing)")
        model = model.model_copy(update={"weights": weights})
    if pretrain is not None and pretrain.data.path is not None:
        path = pretrain.data.path if pretrain.data.path.is_absolute() else (folder / pretrain.data.path).resolve()
        if not path.exists():
            raise ConfigError(f"pretrain.data.path: no such file or folder {path} (relative paths are read from the "
                              "study file's folder)")
        pretrain = pretrain.model_copy(update={"data": pretrain.data.model_copy(update={"path": path})})
    return study.model_copy(update={"model": model, "pretrain": pretrain})


class Study(_Strict):
    """A whole study file. ``seeds`` repeats every arm; each (arm value, seed) is one run.

    ``seeds`` drive everything that is not private (initialisation, splits, shuffling of non-DP arms, evaluation).
    privacy_randomness: ``secure`` (default): Poisson sampling, DP-SGD noise, local-DP noise and canary bits come
    from fresh OS entropy per run (`dpmed.randomness`); ``reproducible``: derived from the seed and run id, for tests
    and debugging, and such runs are labelled "not DP against anyone who knows the seed" everywhere.
    pretrain: public pretraining before the arms (`PretrainConfig`); every arm starts from its weights.
    """

    name: str
    seeds: list[int] = Field(default_factory=lambda: [0])
    privacy_randomness: Literal["secure", "reproducible"] = "secure"
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    privacy_budget: PrivacyBudget | None = None
    pretrain: PretrainConfig | None = None
    arms: list[Arm]

    @model_validator(mode="before")
    @classmethod
    def _public_cohort_of_the_same_release(cls, raw: object) -> object:
        """``pretrain.data`` without a path, of the study's own source, reads the study's ``data.path``: another
        cohort of the same release (``data.patients``), the second site of ``configs/kermany_pretrained.yaml``;
        ``--data-path`` then moves both."""
        if not isinstance(raw, dict) or not isinstance(raw.get("pretrain"), dict):
            return raw
        public, private = raw["pretrain"].get("data"), raw.get("data")
        if (isinstance(public, dict) and isinstance(private, dict) and "path" not in public
                and public.get("source") == private.get("source") and private.get("path") is not None):
            raw = {**raw, "pretrain": {**raw["pretrain"], "data": {**public, "path": private["path"]}}}
        return raw

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.match(SLUG, v):
            raise ValueError(f"study name {v!r} must be letters, digits, '_', '-' or '.' (it names a folder)")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"must be a non-empty list of distinct integers, got {v}")
        return v

    @field_validator("arms")
    @classmethod
    def _arms(cls, v: list) -> list:
        if not v:
            raise ValueError("a study needs at least one arm")
        names = [a.name for a in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"arm names must be unique; repeated: {dupes}")
        return v
