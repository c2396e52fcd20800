"""The strict, frozen schema of a study file.

A study names a dataset, a model, how to train and evaluate, and the privacy *arms* to compare. Every model here
forbids unknown keys and checks values before any training starts, so a typo or an impossible eps costs seconds,
not hours. Arm parameters that may sweep (``target_epsilon: [1, 8]``) are always held as lists; `expand_runs`
turns a study into one run per value combination per seed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Study", "DataConfig", "SplitConfig", "PreprocessingConfig", "NormalizeConfig", "ColumnsConfig",
    "ModelConfig", "TrainingConfig", "EvaluationConfig", "FairnessConfig", "CamConfig", "CAM_METHOD_NAMES",
    "AuditConfig", "CANARY_KIND_NAMES", "AUDITABLE_MECHANISMS",
    "NoPrivacyArm", "PixelLaplaceArm", "PixelGaussianArm", "ScalarShiftArm", "DpSgdArm", "Arm", "PrivacyBudget",
]


def _as_list(value: object) -> object:
    """Let a sweepable key hold one value or a list of values."""
    return value if isinstance(value, list) else [value]


def _positive_finite(values: list[float]) -> list[float]:
    for v in values:
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"must be a positive finite number, got {v}")
    if not values:
        raise ValueError("must hold at least one value")
    if len(set(values)) != len(values):
        raise ValueError(f"lists a value twice: {values}")
    return values


Sweep = Annotated[list[float], BeforeValidator(_as_list)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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


class DataConfig(_Strict):
    """Where the images come from (README, "A study file, explained", lists where each layout's files go).

    source: ``phantom`` (embedded synthetic chest X-rays, generated from ``seed``), ``medmnist`` (a MedMNIST v2
    ``.npz`` at ``path``), or a published layout at ``path``: ``folders`` (class folders, the Kermany layout),
    ``aptos``, ``chexpert``, ``nih``, ``mimic``, ``ham10000``, ``csv`` (a generic table). DICOM files are read
    wherever a layout lists them (``pip install 'dpmed[dicom]'``). Relative paths are resolved against the study
    file's folder (``cache_dir`` against the working directory).
    image_size / channels: resize and channel conversion applied per image before any mechanism (METHODS.md s.1).
    labels: findings (chexpert, nih, mimic; default: the dataset's standard set), class folder order (folders) or
    label columns (csv). columns / task: the csv's columns and task kind (inferred when unset). uncertain: CheXpert
    labeller's -1 (chexpert, mimic): ``zeros`` (default) or ``ones``; blank is always 0.
    skip_invalid: leave out rows whose image is missing or unreadable or whose label is outside the task (the run
    record counts them) instead of stopping. cache_dir: memory-map decoded, preprocessed images there for later
    studies (it then holds the patients' images: keep it where the data may live); unset, they stay in memory.
    """

    source: Literal["phantom", "medmnist", "folders", "aptos", "chexpert", "nih", "mimic", "ham10000", "csv"] = (
        "phantom")
    path: Path | None = None
    image_size: int | None = Field(default=None, ge=8, le=1024)
    channels: Literal[1, 3] | None = None
    n_images: int | None = Field(default=None, ge=20)
    seed: int = 0
    labels: list[str] | None = Field(default=None, min_length=1)
    columns: ColumnsConfig | None = None
    task: Literal["binary", "multiclass", "multilabel"] | None = None
    uncertain: Literal["zeros", "ones"] | None = None
    preprocessing: PreprocessingConfig = Field(default_factory=PreprocessingConfig)
    split: SplitConfig | None = None
    skip_invalid: bool = False
    cache_dir: Path | None = None

    @field_validator("path", "cache_dir", mode="before")
    @classmethod
    def _path_from_string(cls, v: object) -> object:
        return Path(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _source_needs(self) -> "DataConfig":
        if self.source != "phantom" and self.path is None:
            raise ValueError(f"source {self.source!r} needs 'path': its file or folder (or pass --data-path)")
        if self.source == "phantom" and self.path is not None:
            raise ValueError("source 'phantom' is generated, it takes no 'path'")
        if self.source != "phantom" and self.n_images is not None:
            raise ValueError("'n_images' applies only to source 'phantom'")
        return self


class ModelConfig(_Strict):
    """An architecture from the model registry (`dpmed.models`); BatchNorm never appears (DP-SGD forbids it)."""

    name: str = "small_cnn"


class TrainingConfig(_Strict):
    """How every arm trains, unless the arm overrides ``epochs``, ``batch_size`` or ``learning_rate``.

    batch_size: the logical batch. Non-private arms draw shuffled batches of this size; DP-SGD draws Poisson
    batches with sample_rate = batch_size / N_train (so this is the *expected* size). physical_batch_size only bounds
    memory and never changes the math.
    """

    epochs: int = Field(default=5, ge=1)
    batch_size: int = Field(default=64, ge=1)
    physical_batch_size: int = Field(default=128, ge=1)
    # How DP-SGD computes the per-example clipped sum; both are exact (same sum up to float rounding). dpmed: ghost
    # norms and book-keeping, near the cost of a plain step (benchmarks/RESULTS.md); opacus: Opacus's per-example
    # gradients, slower and larger, kept for comparison and for layers only Opacus supports.
    dp_engine: Literal["dpmed", "opacus"] = "dpmed"
    optimizer: Literal["sgd", "adam"] = "adam"  # Adam on the noisy clipped gradient is post-processing: still DP
    learning_rate: float = Field(default=0.001, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)  # sgd only
    weight_decay: float = Field(default=0.0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"


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


# The CAM methods dpmed.evaluation.explanations offers (a test keeps the two lists equal).
CAM_METHOD_NAMES = ("gradcam", "gradcam++", "xgradcam", "hirescam", "layercam", "eigencam", "scorecam")


class CamConfig(_Strict):
    """Grad-CAM and its faithfulness metrics (METHODS.md s.6) on a fixed, seeded subset of ``n_images`` test images
    (the same images for every arm). method: a pytorch-grad-cam method; deletion_steps: points of the deletion and
    insertion curves; pointing_tolerance: pixels around the lesion mask that still count as a pointing-game hit."""

    method: Literal[CAM_METHOD_NAMES] = "gradcam"  # type: ignore[valid-type]
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


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

# The canary kinds dpmed.data.canaries offers (a test keeps the two lists equal).
CANARY_KIND_NAMES = ("mislabelled", "marked", "noise")
# The arms an audit can test: mislabelled canaries test a claim that covers labels, which local DP on images does not.
AUDITABLE_MECHANISMS = ("none", "dp_sgd")


class AuditConfig(_Strict):
    """The one-run privacy audit (Steinke, Nasr and Jagielski 2023, arXiv:2305.08846): ``canaries`` images of as
    many patients leave the training split, get a wrong label (``kind``: mislabelled, marked = mislabelled with a
    random 4x4 patch, noise = noise images with random labels), and each goes back in with probability 1/2. The
    trained model's fit to each canary's label guesses which went in; the count of correct guesses gives an
    empirical *lower* bound on eps at the run's delta (1e-5 for a non-private arm), valid at ``confidence``.
    A lower bound above the accountant's eps would mean the run is not DP as claimed."""

    canaries: int = Field(ge=2)
    kind: Literal[CANARY_KIND_NAMES] = "mislabelled"  # type: ignore[valid-type]
    confidence: float = Field(default=0.95, gt=0, lt=1)


class _ArmBase(_Strict):
    name: str
    epochs: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    learning_rate: float | None = Field(default=None, gt=0)
    audit: AuditConfig | None = None

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"arm name {v!r} must be letters, digits, '_', '-' or '.' (it names folders)")
        return v

    @model_validator(mode="after")
    def _auditable(self) -> "_ArmBase":
        mechanism = getattr(self, "mechanism", None)
        if self.audit is not None and mechanism not in AUDITABLE_MECHANISMS:
            raise ValueError(f"audit applies to arms with mechanism {' or '.join(AUDITABLE_MECHANISMS)}, not "
                             f"{mechanism!r}: local DP protects the released images, not their labels, so canaries "
                             f"with wrong labels would not test its claim")
        return self


class NoPrivacyArm(_ArmBase):
    """The non-private baseline: eps = infinity."""

    mechanism: Literal["none"]


def _exactly_one(arm: BaseModel, keys: tuple[str, str], why: str) -> None:
    given = [k for k in keys if getattr(arm, k) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {keys[0]!r} and {keys[1]!r} ({why}); got "
                         f"{' and '.join(repr(k) for k in given) if given else 'neither'}")


class PixelLaplaceArm(_ArmBase):
    """Local DP: iid Laplace(scale) noise on every released pixel value in [0, 1], then clipped (METHODS.md s.1).

    scale is b in [0, 1] units (000_56c2431ae4df8d10.txt's beta): eps_pixel = 1 / b, eps_image = d / b. Or give
    target_epsilon_image and b = d / eps_image is solved for the study's image size.
    """

    mechanism: Literal["pixel_laplace"]
    scale: Sweep | None = None
    target_epsilon_image: Sweep | None = None

    @field_validator("scale", "target_epsilon_image")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        return None if v is None else _positive_finite(v)

    @model_validator(mode="after")
    def _one_noise_setting(self) -> "PixelLaplaceArm":
        _exactly_one(self, ("scale", "target_epsilon_image"), "the noise scale, or the per-image eps to solve it for")
        return self


class PixelGaussianArm(_ArmBase):
    """Local DP: iid N(0, std^2) noise on every released pixel value in [0, 1], then clipped (METHODS.md s.1).

    An (eps, delta) guarantee for "any two images" (L2 sensitivity sqrt(d)); give std, or target_epsilon_image
    (solved with the analytic Gaussian). delta defaults to min(1e-5, 1 / (10 N_train)).
    """

    mechanism: Literal["pixel_gaussian"]
    std: Sweep | None = None
    target_epsilon_image: Sweep | None = None
    delta: float | None = Field(default=None, gt=0, lt=1)

    @field_validator("std", "target_epsilon_image")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        return None if v is None else _positive_finite(v)

    @model_validator(mode="after")
    def _one_noise_setting(self) -> "PixelGaussianArm":
        _exactly_one(self, ("std", "target_epsilon_image"), "the noise std, or the per-image eps to solve it for")
        return self


class ScalarShiftArm(_ArmBase):
    """NOT DP: the reproduction of 000_56c2431ae4df8d10.txt's code, one Laplace(scale) brightness shift per image.

    It carries no privacy guarantee (no finite eps exists) and is reported as "not DP" everywhere.
    """

    mechanism: Literal["scalar_shift"]
    scale: Sweep

    @field_validator("scale")
    @classmethod
    def _scale(cls, v: list[float]) -> list[float]:
        return _positive_finite(v)


class DpSgdArm(_ArmBase):
    """DP-SGD (Abadi et al. 2016): Poisson sampling, per-example clipping, noise on the clipped sum.

    The noise multiplier is calibrated from (target_epsilon, delta, sample_rate, steps) so that the accountant's eps
    never exceeds the target. ``noise_multiplier`` instead of ``target_epsilon`` is a reproduction mode: the noise
    is taken as given and its eps reported. delta defaults to min(1e-5, 1 / (10 N_train)).

    noise: ``gaussian`` (L2 clipping, the default) or ``laplace`` (L1 clipping, Laplace noise, noise_multiplier =
    b / C1; 001_d0483fd35863b74c.txt's "Laplacian" rows). sampling: ``poisson`` (what every accountant assumes) or
    ``shuffle``, a reproduction mode whose eps is labelled as not holding for the run.
    accountant: pld (default), rdp, rdp-classic (published figures' conversion), pure (Laplace only). PLD resolves
    eps up to 500; higher Gaussian budgets are certified by RDP and the run records so.

    privacy_unit: ``patient`` (default): neighbouring datasets differ by one patient with all of their images;
    patients are Poisson-sampled and each one's gradients summed over their images and clipped together
    (user-level DP-SGD, McMahan et al. 2018), and batch_size counts patients. ``image``: one image is the unit (the
    source documents' setting); the privacy card then also states what that implies for the patient with the most
    images. Where a dataset publishes no patient ids, each image is its own patient and the two coincide.
    max_images_per_patient: train on at most this many images of each patient (chosen by the study seed); bounds
    what image-level DP implies for a patient, and the per-patient work of a step.
    """

    mechanism: Literal["dp_sgd"]
    target_epsilon: Sweep | None = None
    noise_multiplier: Sweep | None = None
    delta: float | None = Field(default=None, gt=0, lt=1)
    max_grad_norm: Sweep = Field(default_factory=lambda: [1.0])
    noise: Literal["gaussian", "laplace"] = "gaussian"
    accountant: Literal["pld", "rdp", "rdp-classic", "pure"] = "pld"
    sampling: Literal["poisson", "shuffle"] = "poisson"
    privacy_unit: Literal["patient", "image"] = "patient"
    max_images_per_patient: int | None = Field(default=None, ge=1)

    @field_validator("target_epsilon", "noise_multiplier")
    @classmethod
    def _positive_or_unset(cls, v: list[float] | None) -> list[float] | None:
        return None if v is None else _positive_finite(v)

    @field_validator("max_grad_norm")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        return _positive_finite(v)

    @model_validator(mode="after")
    def _consistent(self) -> "DpSgdArm":
        _exactly_one(self, ("target_epsilon", "noise_multiplier"),
                     "a budget to calibrate the noise to, or the noise itself for a reproduction")
        supported = {"gaussian": ("pld", "rdp", "rdp-classic"), "laplace": ("pld", "pure")}[self.noise]
        if self.accountant not in supported:
            raise ValueError(f"accountant {self.accountant!r} does not analyse {self.noise} noise; use one of "
                             f"{', '.join(supported)}")
        return self


Arm = Annotated[Union[NoPrivacyArm, PixelLaplaceArm, PixelGaussianArm, ScalarShiftArm, DpSgdArm],
                Field(discriminator="mechanism")]


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


class Study(_Strict):
    """A whole study file. ``seeds`` repeats every arm; each (arm value, seed) is one run.

    ``seeds`` drive everything that is not private (initialisation, splits, shuffling of non-DP arms, evaluation).
    privacy_randomness: ``secure`` (default): Poisson sampling, DP-SGD noise, local-DP noise and canary bits come
    from fresh OS entropy per run (`dpmed.randomness`); ``reproducible``: derived from the seed and run id, for tests
    and debugging, and such runs are labelled "not DP against anyone who knows the seed" everywhere.
    """

    name: str
    seeds: list[int] = Field(default_factory=lambda: [0])
    privacy_randomness: Literal["secure", "reproducible"] = "secure"
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    privacy_budget: PrivacyBudget | None = None
    arms: list[Arm]

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not _NAME.match(v):
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
