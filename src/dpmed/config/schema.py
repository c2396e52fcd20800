"""The strict, frozen schema of a study file.

A study names a dataset, a model, how to train and evaluate, and the privacy *arms* to compare. Every model here
forbids unknown keys and checks values before any training starts, so a typo or an impossible eps costs seconds,
not hours. Arm parameters that may sweep (``target_epsilon: [1, 8]``) are always held as lists; `plan_runs`
turns a study into one run per value combination per seed. The ``data`` section lives in
`dpmed.config.data_section`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from dpmed.config.data_section import (ColumnsConfig, DataConfig, NormalizeConfig, PatientsConfig,
                                       PreprocessingConfig, Seed, SplitConfig, path_from_string)
from dpmed.data import DATASET_SOURCES, Dataset
from dpmed.data.overlap import HASH_BITS, NEAR_DUPLICATE_BITS
from dpmed.errors import ConfigError
from dpmed.mechanisms import Arm, AuditConfig, Strict as _Strict
from dpmed.mechanisms.base import SLUG
from dpmed.names import CAM_METHODS, DP_ENGINES, MODEL_NAMES

__all__ = [
    "Study", "DataConfig", "SplitConfig", "PreprocessingConfig", "NormalizeConfig", "ColumnsConfig",
    "ModelConfig", "LastBlocks", "PretrainConfig", "PatientsConfig", "resolve_paths", "absolute_path",
    "TrainingConfig", "AugmentationConfig", "ScheduleConfig", "EvaluationConfig", "FairnessConfig",
    "CamConfig", "AuditConfig", "Arm", "PrivacyBudget",
]


class LastBlocks(_Strict):
    """``trainable: {last_blocks: N}``: the head and the last N feature blocks of the model (``ModelInfo.blocks``)."""

    last_blocks: int = Field(ge=1)


class ModelConfig(_Strict):
    """An architecture from the model registry (`dpmed.models`); BatchNorm never appears (DP-SGD forbids it).

    weights: a local state dict every arm starts from (`dpmed.models.weights`: dpmed's own model.pt, torchvision's
    ResNet names; the head may differ; BatchNorm weights are refused, with the reason). A relative path is read from
    the study file's folder (given with --set, from the current folder); nothing downloads. weights_source: what the
    weights were trained on, in the user's words (required with ``weights``): the run record and the report print it
    beside the file's sha256, since a prior trained on the private patients would carry them past every eps.
    trainable: ``all`` (default), ``head``, or ``{last_blocks: N}``; the rest is frozen, and DP-SGD neither clips
    nor noises frozen parameters (the noise has as many coordinates as there are trainable parameters). Freezing
    randomly initialised layers needs trained weights to start from (``weights`` or ``pretrain``): `Study` refuses
    it otherwise.
    """

    name: Literal[MODEL_NAMES] = "small_cnn"  # type: ignore[valid-type]
    weights: Path | None = None
    weights_source: str | None = Field(default=None, min_length=1)
    trainable: Literal["all", "head"] | LastBlocks = "all"

    _path_from_string = field_validator("weights", mode="plain")(path_from_string)

    @field_validator("trainable")
    @classmethod
    def _blocks_exist(cls, v: str | LastBlocks, info: ValidationInfo) -> str | LastBlocks:
        """More blocks than the model has was refused only by `dpmed run`, when it froze the model (after any public
        pretraining), while `dpmed plan` described it as planned; the file is the place to refuse it."""
        name = info.data.get("name")
        if isinstance(v, LastBlocks) and name is not None:
            from dpmed.models import MODELS   # here: the models import torch, which reading a study file needs not
            from dpmed.models.weights import last_blocks_problem

            problem = last_blocks_problem(v.last_blocks, MODELS[name].blocks, model=name)
            if problem is not None:
                raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _declared(self) -> "ModelConfig":
        if self.weights is not None and self.weights_source is None:
            raise ValueError("model.weights needs model.weights_source: say what the weights were trained on (e.g. "
                             "'NIH ChestX-ray14, dpmed small_cnn, run nih_seed0'); the record and the report print it")
        if self.weights is None and self.weights_source is not None:
            raise ValueError("model.weights_source describes model.weights, which is not set")
        return self

    @property
    def trainable_setting(self) -> str | int:
        """"all", "head" or the number of last blocks (`dpmed.models.weights.set_trainable`)."""
        return self.trainable.last_blocks if isinstance(self.trainable, LastBlocks) else self.trainable


# Augmentation multiplicity's ceiling: 8 times the largest K of De et al. 2022 (32). 10**20 passed planning and
# failed inside numpy at the first step, after the study had started.
_MOST_COPIES = 256


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
    multiplicity: at most 256 (:data:`_MOST_COPIES`): each step trains on K copies of every image of its batch, made
    a physical batch at a time, so its time grows with K, its memory not: a unit whose copies (K, K per image of a
    patient) outnumber training.physical_batch_size is summed over slices of that many and clipped once. De et al.
    2022 use K <= 32.
    """

    multiplicity: int = Field(default=1, ge=1)

    @field_validator("multiplicity")
    @classmethod
    def _copies(cls, v: int) -> int:
        if v > _MOST_COPIES:
            raise ValueError(f"must be at most {_MOST_COPIES}, got {v}: each step trains on this many copies of every "
                             "image of its batch at once, and De et al. 2022 use at most 32; write 32 or less (1 "
                             "turns multiplicity off)")
        return v

    crop_padding: int | Literal["auto"] = "auto"
    flip: bool = False

    @field_validator("crop_padding")
    @classmethod
    def _padding(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 0:
            raise ValueError(f"must be >= 0 (or auto), got {v}")
        return v

    def padding(self, size: int) -> int:
        """The crop padding in pixels for images of ``size`` px: ``auto`` is size / 8, at least 1."""
        return max(1, round(size / 8)) if self.crop_padding == "auto" else self.crop_padding


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


# training.threads above this is more than nearly any one machine has cores, where a run only slows (torch takes up
# to 2**31 - 1 and starts as many threads as it is given)
_MOST_THREADS = 1024


# Training settings that decide where and how fast a run executes, not what it computes in exact arithmetic: a finished
# run made with other values of these is still the same run, and a checkpoint made with them continues. The physical
# batch only slices each step for memory (below): a smaller one, after memory ran out, must not retrain.
EXECUTION_ONLY = ("device", "threads", "physical_batch_size")


class TrainingConfig(_Strict):
    """How every arm trains, unless the arm overrides ``epochs``, ``batch_size`` or ``learning_rate``.

    batch_size: the logical batch. Non-private arms draw shuffled batches of this size; DP-SGD draws Poisson
    batches of training units with sample_rate q = batch_size / N, N the released DP count of the arm's units
    (patients where the data has patient ids and privacy_unit is patient, else images; `dpmed.released_size`), so
    this is the *expected* number of units per batch. N is not the exact training size: that size is private too.
    physical_batch_size only bounds memory and never changes the math: every arm's step passes its batch (with its
    augmented copies) through the model in slices of at most that many images and sums them, DP-SGD's clipped sum as
    the other arms' mean loss.

    Training length: ``steps`` (optimiser steps T, the same for every arm) or ``epochs``: passes over the data, or
    ``auto`` (the default): at least 10 epochs and at least 500 steps, so that neither 500 nor 5000 training images
    are under-trained (`dpmed.mechanisms.training_steps`). DP-SGD's accountant takes the resulting T.

    The private training recipe (De et al. 2022; METHODS.md s.9), each off by default: ``augmentation``
    (augmentation multiplicity), ``ema_decay`` (the released and evaluated model is an exponential moving average of
    the iterates: post-processing, free in eps), ``lr_schedule`` (warm-up, cosine or step decay) and ``lr_scaling``
    (the learning rate scaled with the batch: ``linear``, lr * B / reference_batch_size, Goyal et al. 2017, for SGD;
    ``sqrt`` for Adam, Malladi et al. 2022). Weight standardisation and ScatterNet features are models
    (``small_cnn_ws``, ``resnet9_ws``, ``scatternet_linear``, ``scatternet_cnn``).

    optimizer: ``adam`` (the default) or ``sgd``; ``momentum`` is SGD's (0.9 by default), and another value beside
    Adam, which takes none, is refused rather than ignored. weight_decay: the optimiser's L2 penalty (torch's
    ``weight_decay``: the parameters times it added to the gradient; 0, none, by default). Both act on the noisy
    gradient where DP-SGD trains, so they are post-processing, free in eps.
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
    learning_rate: float = Field(default=0.001, gt=0, allow_inf_nan=False)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    lr_schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    reference_batch_size: int = Field(default=256, ge=1)
    augmentation: AugmentationConfig | None = None
    # De et al. 2022 use 0.999 and up; the decay is warmed up as min(decay, (1 + t) / (10 + t)) at update t.
    ema_decay: float | None = Field(default=None, gt=0, lt=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # CPU threads of one run's tensor operations. Float sums depend on it, so a run's numbers are the same in-process,
    # in a process pool or on Ray only with a fixed count; "auto" = min(4, CPU cores), whatever the executor. With
    # --workers N on N cores, set 1. At most 1024. Like device, it changes no setting of the study's runs.
    threads: int | Literal["auto"] = "auto"

    @field_validator("threads", "epochs")
    @classmethod
    def _positive_or_auto(cls, v: int | str, info: ValidationInfo) -> int | str:
        if isinstance(v, int) and info.field_name == "threads" and v > _MOST_THREADS:
            raise ValueError(f"must be from 1 to {_MOST_THREADS} (or auto), got {v}: more threads than the machine "
                             "has cores only slow a run")
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be at least 1 (or auto), got {v}")
        return v

    @property
    def scaled_learning_rate(self) -> float:
        """``learning_rate`` scaled to the batch size by ``lr_scaling`` (unscaled with ``none``): the rate before the
        schedule, a function of the settings alone, so the report can state it as training used it."""
        ratio = self.batch_size / self.reference_batch_size
        return self.learning_rate * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[self.lr_scaling]

    @model_validator(mode="after")
    def _one_length(self) -> "TrainingConfig":
        if self.steps is not None and self.epochs != "auto":
            raise ValueError(f"give the training length once: steps ({self.steps}) or epochs ({self.epochs}), not "
                             "both (to replace a file's epochs from the command line: --set training.epochs=auto "
                             "beside --set training.steps=N)")
        return self

    @field_validator("momentum")
    @classmethod
    def _momentum_of_sgd(cls, v: float, info: ValidationInfo) -> float:
        """Adam takes no momentum: one set beside it trained exactly as the default does. Checked on the field (the
        optimizer is read before it), so that the message names training.momentum and blames a --set that gave it. A
        study.yaml or run.json that dpmed wrote (read back through JSON) holds what an earlier dpmed took without a
        word, and is not refused."""
        if info.data.get("optimizer") == "adam" and v != cls.model_fields["momentum"].default and info.mode != "json":
            raise ValueError("sets SGD's momentum, and optimizer adam takes none (it would change nothing): set "
                             "optimizer: sgd to train with it, or remove it")
        return v

    def settings_turned_off(self) -> list[tuple[str, str]]:
        """(key, what turns it off) for each setting the file gives that another setting keeps from being read:
        ``reference_batch_size`` beside ``lr_scaling: none``, ``milestones`` or ``gamma`` beside a schedule other
        than ``step``. Told, not refused (`dpmed.config.loading.load_study`): a study file that gives them is no
        mistake to stop a study for, and `computed_settings` shows them at their defaults, so that a finished run is
        the same run with or without them."""
        off = []
        if "reference_batch_size" in self.model_fields_set and self.lr_scaling == "none":
            off.append(("reference_batch_size", "lr_scaling is none (set linear or sqrt to scale the learning rate "
                                                "by it)"))
        schedule = self.lr_schedule
        off += [(f"lr_schedule.{key}", f"lr_schedule.kind is {schedule.kind} (set step to decay at the milestones)")
                for key in ("milestones", "gamma") if key in schedule.model_fields_set and schedule.kind != "step"]
        return off

    def computed_settings(self, *, dp_sgd: bool = True) -> dict:
        """The settings as JSON data without those of `EXECUTION_ONLY`: equal for two configs that train the same
        model, so a finished run, a checkpoint or cached pretrained weights made under either are reused. A setting
        the run does not read is shown at its default, whatever it holds: Adam's momentum (Adam reads none), the
        reference_batch_size beside lr_scaling none, a schedule's milestones and gamma beside a kind other than step
        (`settings_turned_off`), and dp_engine, how DP-SGD clips, where ``dp_sgd`` is False (a run that takes no
        DP-SGD step: no privacy, local DP, public pretraining). A run an earlier dpmed finished with another value
        (which the study file may no longer give, or gives otherwise) trained as the default does, so it is reused,
        not retrained: a DP-SGD run retrained is a new release of the same patients, and a local-DP run retrained
        draws its images' noise again."""
        settings = self.model_dump(mode="json", exclude=set(EXECUTION_ONLY))
        default = type(self)().model_dump(mode="json")
        if self.optimizer == "adam":
            settings["momentum"] = default["momentum"]
        if self.lr_scaling == "none":
            settings["reference_batch_size"] = default["reference_batch_size"]
        if self.lr_schedule.kind != "step":
            settings["lr_schedule"] |= {key: default["lr_schedule"][key] for key in ("milestones", "gamma")}
        if not dp_sgd:
            settings["dp_engine"] = default["dp_engine"]
        return settings


_ATTRIBUTES: tuple[Literal["sex", "age"], ...] = ("sex", "age")     # what a dpmed Sample records of a patient


class FairnessConfig(_Strict):
    """Per-group metrics (METHODS.md s.5): the attributes to group test patients by (sex and age, the attributes a
    dpmed Sample records) and the age bin edges ([0,30), [30,60), ... as 003_9a91354dc2d7e2df.txt; ages from the last
    edge on form a group, as do known ages below the first edge; a missing or negative age is the group "unknown", and
    an attribute no test image records is reported as not applicable)."""

    attributes: list[Literal["sex", "age"]] = Field(default_factory=lambda: list(_ATTRIBUTES), min_length=1)
    age_bins: list[float] = Field(default_factory=lambda: [0.0, 30.0, 60.0, 70.0, 80.0, 100.0], min_length=2)

    @field_validator("age_bins")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if not all(math.isfinite(b) for b in v) or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"age bin edges must be finite numbers that increase (ages from the last edge on form a "
                             f"group of their own), got {v}")
        if v[0] < 0:    # a negative age is "unknown": a bin below 0 would count it as known
            raise ValueError(f"age bin edges must start at 0 or above (a negative age is unknown), got {v}")
        return v


class CamConfig(_Strict):
    """Grad-CAM and its faithfulness metrics (METHODS.md s.6) on a fixed, seeded subset of ``n_images`` test images
    (the same images for every arm). method: a pytorch-grad-cam method; deletion_steps: points of the deletion and
    insertion curves; pointing_tolerance: pixels around the lesion mask that still count as a pointing-game hit."""

    method: Literal[CAM_METHODS] = "gradcam"  # type: ignore[valid-type]
    n_images: int = Field(default=64, ge=1)
    seed: Seed = 0
    deletion_steps: int = Field(default=16, ge=2)
    pointing_tolerance: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class EvaluationConfig(_Strict):
    """Bootstrap intervals over test redraws (METHODS.md s.4); the same seed gives every arm the same redraws.

    fairness: per-group metrics (on by default; ``null`` turns them off). explanations: Grad-CAM and its metrics (off
    by default: they need the model and cost forward passes; e.g. ``explanations: {method: gradcam, n_images: 64}``).
    training_metrics: training-set AUROC and accuracy, private (not covered by eps), off by default.

    interval: the interval of the utility metrics (AUROC, accuracy, sensitivity, specificity, kappa) and of each
    fairness group's AUROC and accuracy. ``percentile`` (the default) is what METHODS.md sec. 4 prescribes. ``bca``
    (bias-corrected and accelerated, Efron 1987; `dpmed.evaluation.bootstrap.bca_interval`) is offered because the
    percentile interval undercovers small sets: at 100 test images, and for a fairness group of 20, it held the true
    AUROC, sensitivity or specificity in fewer repetitions than its nominal 95%, where BCa came closer, with no loss
    at 624 images (benchmarks/RESULTS.md, "BCa against percentile"). Paired differences, parity differences and the
    worst group keep the percentile interval either way."""

    bootstrap_resamples: int = Field(default=1000, ge=10)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    interval: Literal["percentile", "bca"] = "percentile"
    bootstrap_seed: Seed = 0
    fairness: FairnessConfig | None = Field(default_factory=FairnessConfig)
    explanations: CamConfig | None = None
    # AUROC and accuracy on the training images (000_56c2431ae4df8d10.txt's train/test table): computed without
    # noise from the training images, so not covered by any eps; written only to the study's private folder.
    training_metrics: bool = False

    def settings_turned_off(self) -> list[tuple[str, str]]:
        """(key, what turns it off) for each setting the file gives that another setting keeps from being read:
        ``fairness.age_bins`` where ``fairness.attributes`` leaves out age (the bins group patients by age alone).
        Told, not refused, like `TrainingConfig.settings_turned_off`."""
        fairness = self.fairness
        if fairness is not None and "age_bins" in fairness.model_fields_set and "age" not in fairness.attributes:
            return [("fairness.age_bins", "fairness.attributes leaves out age (the bins group test patients by age "
                                          "alone)")]
        return []

    def settings_the_data_turn_off(self, dataset: Dataset) -> list[tuple[str, str]]:
        """(key, what turns it off) for each setting the file gives that ``dataset``, once read, leaves unread:
        ``explanations.pointing_tolerance`` where it has no lesion masks (the pointing game scores a map against
        them), ``fairness.age_bins`` where no test image records an age, ``fairness.attributes`` where no test image
        records any of them. What no test image records the report states already (not applicable); nothing of the
        training images is read."""
        cam, fairness, test = self.explanations, self.fairness, dataset.test
        off = []
        if cam is not None and "pointing_tolerance" in cam.model_fields_set and test.masks is None:
            off.append(("explanations.pointing_tolerance", f"{dataset.name} has no lesion masks for the pointing "
                                                           "game to score the maps against"))
        if fairness is None:
            return off
        recorded = {"sex": bool((test.sex != "unknown").any()), "age": bool((~np.isnan(test.age)).any())}
        if "attributes" in fairness.model_fields_set and not any(recorded[a] for a in fairness.attributes):
            off.append(("fairness.attributes", f"no test image of {dataset.name} records "
                                               f"{' or '.join(fairness.attributes)} (the report says not applicable)"))
        elif "age_bins" in fairness.model_fields_set and "age" in fairness.attributes and not recorded["age"]:
            off.append(("fairness.age_bins", f"no test image of {dataset.name} records an age (the report says not "
                                             "applicable)"))
        return off


class PrivacyBudget(_Strict):
    """A total budget for everything the study releases: all DP-SGD runs (every arm, value and seed) trained on the
    same images compose, so their events are accounted together and must stay within epsilon at delta. Checked
    before any training. A run without privacy beside them makes the total infinite, and a local-DP run holds under
    another neighbour relation (no total with DP-SGD's), so a study with either is refused: a budgeted study holds
    DP-SGD arms only (a non-private baseline goes in a study of its own, on other patients or without a budget).
    The budget bounds the total for the study's unit of privacy: the runs' unit where they share one; where they do
    not, the patient, the protected person, whose total is derived where each image-unit arm sets
    max_images_per_patient (`dpmed.budget`; only ``pld`` composes it), and a study without one is refused."""

    epsilon: float = Field(gt=0)
    delta: float = Field(gt=0, lt=1)
    accountant: Literal["pld", "rdp", "pure"] = "pld"     # pure: the sum of Laplace runs' pure bounds

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
    learning rate, ...; the arms' own settings do not apply, but device and threads left at auto take the study's
    training.device and training.threads; it trains without privacy, so a dp_engine is refused). seed:
    initialisation and shuffling (public).
    near_duplicate_bits: the perceptual-hash distance at or below which a public and a private image count as the
    same image (`dpmed.data.overlap`; 30 of 255 bits by default). The weights are cached in the
    study folder by a content hash of the public images, these settings and the model, so they train once.
    """

    data: DataConfig
    public: str = Field(min_length=1)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    seed: Seed = 0
    near_duplicate_bits: int = Field(default=NEAR_DUPLICATE_BITS, ge=0, le=HASH_BITS // 2)

    @field_validator("training")
    @classmethod
    def _no_dp_engine(cls, v: TrainingConfig, info: ValidationInfo) -> TrainingConfig:
        """Public pretraining takes no DP-SGD step, so dp_engine (how DP-SGD clips) changed nothing but the cache key
        of its weights: another engine trained the same weights again. Refused at pretrain.training.dp_engine, so
        that the message names that key and blames a --set that gave it. A study.yaml that dpmed wrote (read back
        through JSON) is not refused."""
        default = TrainingConfig.model_fields["dp_engine"].default
        if v.dp_engine != default and info.mode != "json":
            text = ("chooses how DP-SGD clips, and public pretraining trains without privacy (it would change "
                    "nothing): remove it (training.dp_engine sets the arms')")
            raise ValidationError.from_exception_data("TrainingConfig", [InitErrorDetails(
                type=PydanticCustomError("value_error", text), loc=("dp_engine",), input=v.dp_engine)])
        return v


def holds(at: str, path: list[str]) -> bool:
    """Whether the setting at dotted key ``at`` is the one at ``path`` (its keys, a list item's index as text) or a
    section holding it: setting ``at`` sets what is at ``path``."""
    keys = at.split(".")
    return path[:len(keys)] == keys


def given_by(origins: Mapping[str, str], path: list[str]) -> str | None:
    """Which of ``origins`` (a dotted key as an option set it -> how, e.g. "--set data.split.seed=3") gave the
    setting at ``path`` (its keys, a list item's index as text), or None: the one naming it or a section holding it
    (`holds`), and of two, the later, applied last (--set data.split={...} --set data.split.seed=3 names the second,
    which the first does not hold)."""
    return next((said for at, said in reversed(list(origins.items())) if holds(at, path)), None)


def _given(keys: Mapping, key: str) -> tuple[bool, object]:
    """(whether ``keys``, a study's keys as given (``model_dump(exclude_unset=True)``), hold the dotted ``key``, a
    list item by its index; what they hold there)."""
    value: object = keys
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def describe_removal(key: str) -> str:
    """What removing ``key``, a setting that changes nothing (`Study.settings_turned_off`,
    `Study.settings_the_data_turn_off`), does to the runs that finished with it: none is trained again (a run's
    data are matched by their content, `dpmed.resumption`, and a training setting turned off is none of its
    `TrainingConfig.computed_settings`), but an evaluation setting's change evaluates them again from their
    models."""
    if key.startswith("evaluation."):
        return "finished runs are evaluated again without it, not retrained"
    return "runs that finished with it are the same runs without it"


def absolute_path(given: Path, folder: Path, *, outside: bool) -> tuple[Path, str]:
    """``given`` made absolute, and the rule it was read by in words, for a message (empty for an absolute path): a
    relative path written in the study file is read from the file's ``folder``; one given ``outside`` it (--set,
    --data-path) from the current folder, where the user typed it."""
    if given.is_absolute():
        return given, ""
    if outside:
        return given.resolve(), f"a relative path given outside the study file is read from the current folder, " \
                                f"{Path.cwd()}"
    return (folder / given).resolve(), f"a relative path in the study file is read from its folder, " \
                                       f"{folder.resolve()}"


def resolve_paths(study: "Study", folder: Path, *, outside: Collection[str] = ()) -> "Study":
    """``study`` with ``model.weights`` and ``pretrain.data.path`` absolute where relative: read from ``folder`` (the
    study file's), or from the current folder for the keys in ``outside`` (given outside the file, as --set, like
    --data-path); ConfigError naming the key and the path if the file or folder does not exist (dpmed downloads
    nothing), or the weights file cannot be read: told now, not after the data are read. Whether its contents fit
    the model is checked where the model is built. ``data.path`` is resolved by `dpmed.config.loading`."""
    model, pretrain = study.model, study.pretrain
    if model.weights is not None:
        weights, rule = absolute_path(model.weights, folder, outside="model.weights" in outside)
        if weights.is_dir():
            raise ConfigError(f"model.weights: {weights} is a folder; give the path of the weights file in it (a .pt "
                              "state dict)")
        if not weights.is_file():
            raise ConfigError(f"model.weights: no such file {weights}; give the path of a local state dict (dpmed "
                              f"downloads nothing{'; ' + rule if rule else ''})")
        try:
            with weights.open("rb") as f:
                f.read(1)
        except OSError as exc:
            raise ConfigError(f"model.weights: {weights} cannot be read ({exc.strerror or exc}); check that this "
                              "user may read it (and that the disk holding it works)") from None
        model = model.model_copy(update={"weights": weights})
    if pretrain is not None and pretrain.data.path is not None:
        path, rule = absolute_path(pretrain.data.path, folder,
                                   outside="pretrain.data.path" in outside)
        if not path.exists():
            raise ConfigError(f"pretrain.data.path: no such file or folder {path}"
                              + (f" ({rule})" if rule else ""))
        pretrain = pretrain.model_copy(update={"data": pretrain.data.model_copy(update={"path": path})})
    return study.model_copy(update={"model": model, "pretrain": pretrain})


class Study(_Strict):
    """A whole study file. ``seeds`` (one integer or a list) repeats every arm; each (arm value, seed) is one run.

    ``seeds`` drive everything that is not private (initialisation, splits, shuffling of non-DP arms, evaluation).
    privacy_randomness: ``secure`` (default): Poisson sampling, DP-SGD noise, local-DP noise and canary bits come
    from fresh OS entropy per run (`dpmed.randomness`); ``reproducible``: derived from the seed and run id, for tests
    and debugging, and such runs are labelled "not DP against anyone who knows the seed" everywhere.
    size_epsilon: what releasing the training set's size costs (`dpmed.released_size`): DP-SGD plans q, T and delta
    from a discrete-Laplace count of its units at this eps, and every DP-SGD run's eps includes it (its noise is
    calibrated to the target less it). The count's error is about 1.4 / size_epsilon units (71 at 0.02), which moves
    q and T by that share of N and leaves the accounting exact; where that is much of the count (below about 300 at
    0.02), planning warns, and 12 / n suits a study of about n units, n from what may be published of its size (at
    most 1: below 12 units none does, and training.steps keeps T off the count where no arm's epochs replace it).
    pretrain: public pretraining before the arms (`PretrainConfig`); every arm starts from its weights.
    settings_chosen_on: on what data the learning rates, clipping norm, batch size and length were chosen, in the
    user's words; the report prints it under the arms' recipes ("How each arm trained"). Settings picked by
    comparing results on the private patients spend privacy that no eps covers (Papernot and Steinke 2022), so a
    reader must be told.
    """

    name: str
    settings_chosen_on: str | None = Field(default=None, min_length=1)
    seeds: list[Seed] = Field(default_factory=lambda: [0])
    privacy_randomness: Literal["secure", "reproducible"] = "secure"
    size_epsilon: float = Field(default=0.02, gt=0, le=1)
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    privacy_budget: PrivacyBudget | None = None
    pretrain: PretrainConfig | None = None
    arms: list[Arm]
    # How each key given outside the study file was given (the key as set -> e.g. "--set data.split.seed=3"), and
    # the keys the study file and those options gave, as load_study returned the study (None for a Study built in
    # Python): a key that holds otherwise was changed in Python since (``model_copy(update=...)``, which validates
    # nothing and keeps these), and is neither the file's nor an option's. For warnings told once the data are read:
    # held by the loaded study (`given_with`), in no file it writes
    _origins: dict[str, str] = PrivateAttr(default_factory=dict)
    _read: dict | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _public_cohort_of_the_same_release(cls, raw: object) -> object:
        """``pretrain.data`` without a path, of the study's own source, reads the study's ``data.path``: another
        cohort of the same release (``data.patients``), the second site of ``configs/kermany_pretrained.yaml``;
        ``--data-path`` then moves both."""
        if not isinstance(raw, dict) or not isinstance(raw.get("pretrain"), dict):
            return raw
        public, private = raw["pretrain"].get("data"), raw.get("data")
        # a generated source (the phantom) reads no path: the data section's, a mistake there, is refused there
        # alone, not also in a pretrain.data that holds none
        source = public.get("source") if isinstance(public, dict) else None
        reads_path = isinstance(source, str) and source in DATASET_SOURCES and DATASET_SOURCES[source].needs_path
        if (reads_path and isinstance(private, dict) and "path" not in public
                and public.get("source") == private.get("source") and private.get("path") is not None):
            raw = {**raw, "pretrain": {**raw["pretrain"], "data": {**public, "path": private["path"]}}}
        return raw

    @model_validator(mode="after")
    def _trained_features_to_freeze(self, info: ValidationInfo) -> "Study":
        """``trainable: head`` or ``last_blocks`` without ``model.weights`` or ``pretrain`` would freeze randomly
        initialised layers: the head then learns on random features, almost surely a forgotten prior, and the study
        would run for hours all the same. Refused where a study file is read (`dpmed plan` as `dpmed run`), naming
        ``model.trainable``. Frozen layers that are not random (scatternet's GroupNorm over its fixed scattering) pass.
        A study.yaml that dpmed wrote is read back through JSON and not refused here: its runs trained so already."""
        model = self.model
        if info.mode == "json" or model.trainable == "all" or model.weights is not None or self.pretrain is not None:
            return self
        from dpmed.models import MODELS, build_model    # here: they import torch, which a study file rarely needs
        from dpmed.models.weights import frozen_at_random

        registered = MODELS[model.name]
        built = build_model(model.name, in_channels=1, num_outputs=2, image_size=16, seed=0)
        frozen = frozen_at_random(built, model.trainable_setting, head=registered.head, blocks=registered.blocks)
        if frozen:
            setting = model.trainable_setting
            shown = setting if isinstance(setting, str) else f"{{last_blocks: {setting}}}"
            text = (f"{shown} freezes {len(frozen)} randomly initialised tensor(s) of {model.name} ("
                    f"{', '.join(frozen[:3])}{', ...' if len(frozen) > 3 else ''}), and the study starts from no "
                    "trained weights: the trained part would learn on random features. Set model.weights (with "
                    "model.weights_source) or add a pretrain: section to start from trained weights, or use "
                    "trainable: all")
            raise ValidationError.from_exception_data("Study", [InitErrorDetails(
                type=PydanticCustomError("value_error", text), loc=("model", "trainable"),
                input=model.model_dump(mode="json", include={"name", "trainable"}))])
        return self

    def settings_turned_off(self) -> list[tuple[str, str]]:
        """(dotted key, what turns it off) for every setting of the study that another setting keeps from being read
        (`TrainingConfig.settings_turned_off`, `DataConfig.settings_turned_off`,
        `EvaluationConfig.settings_turned_off`), public pretraining's included (its images resized to the study's)."""
        sections = [("training", self.training.settings_turned_off()), ("data", self.data.settings_turned_off()),
                    ("evaluation", self.evaluation.settings_turned_off())]
        if self.pretrain is not None:
            sections += [("pretrain.training", self.pretrain.training.settings_turned_off()),
                         ("pretrain.data", self.pretrain.data.settings_turned_off(size_from_study=True))]
        return [(f"{name}.{key}", why) for name, off in sections for key, why in off]

    def given_with(self, origins: Mapping[str, str], *, read: dict | None = None) -> "Study":
        """This study, holding how each key of ``origins`` was given outside the study file (`origin`), and
        ``read``: the keys a study file and those options gave (``model_dump(exclude_unset=True)`` of the study
        `load_study` returned), or None for a Study given in Python (`given_in_python`)."""
        study = self.model_copy()
        study._origins, study._read = dict(origins), read
        return study

    def given_in_python(self, key: str) -> bool:
        """Whether ``key`` was given in Python, not by a study file or an option: the whole Study was
        (``Study(...)``, ``Study.model_validate``), or it was loaded and ``key`` holds otherwise than it was read, or
        is set where it was not (a change with ``model_copy(update=...)``)."""
        if self._read is None:
            return True
        return _given(self.model_dump(warnings=False, exclude_unset=True), key) != _given(self._read, key)

    def origin(self, key: str) -> str | None:
        """How the user gave ``key`` outside the study file (`given_by`), or None: given in the file, changed in
        Python since the study was read (`given_in_python`), or by a caller that said nothing of where
        (`given_with`)."""
        if self._read is not None and self.given_in_python(key):
            return None
        return given_by(self._origins, key.split("."))

    def removal(self, key: str) -> str:
        """Where to remove ``key``, a setting that changes nothing, and what that does to finished runs
        (`describe_removal`): from the option that gave it, the study file, or, where it was given in Python
        (`given_in_python`: a Study built there, or a loaded one changed there since), the Study as
        `dpmed.config.check_study` names it."""
        given = self.origin(key) or ("the Study passed to run_study" if self.given_in_python(key) else
                                     "the study file")
        return f"remove it from {given} ({describe_removal(key)})"

    def settings_the_data_turn_off(self, dataset: Dataset) -> list[tuple[str, str]]:
        """(dotted key, what turns it off) for every setting of the study that ``dataset``, once read, leaves unread
        (`DataConfig.settings_the_data_turn_off`, `EvaluationConfig.settings_the_data_turn_off`): found only once
        the data are read, so told by `dpmed.study.prepare_study`, not where the file is read."""
        return ([(f"data.{key}", why) for key, why in self.data.settings_the_data_turn_off(dataset)]
                + [(f"evaluation.{key}", why) for key, why in self.evaluation.settings_the_data_turn_off(dataset)])

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.fullmatch(SLUG, v):
            raise ValueError(f"study name must start with a letter or digit and hold only letters, digits, '_', '-' "
                             f"or '.', at most 64 (it names a folder); got {v!r}: rename it")
        return v

    @field_validator("seeds", mode="before")
    @classmethod
    def _one_seed(cls, v: object) -> object:
        """``seeds: 0`` is the list [0], as ``target_epsilon: 8`` is [8]."""
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

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
