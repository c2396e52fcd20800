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
    "Study", "DataConfig", "ModelConfig", "TrainingConfig", "EvaluationConfig",
    "NoPrivacyArm", "PixelLaplaceArm", "DpSgdArm", "Arm",
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


class DataConfig(_Strict):
    """Where the images come from.

    source: ``phantom`` (embedded synthetic chest X-rays, generated from ``seed``) or ``medmnist`` (a MedMNIST v2
    ``.npz`` at ``path``). Relative paths are resolved against the study file's folder.
    image_size / channels: resize and channel conversion applied per image before any mechanism (METHODS.md s.1).
    """

    source: Literal["phantom", "medmnist"] = "phantom"
    path: Path | None = None
    image_size: int | None = Field(default=None, ge=8, le=1024)
    channels: Literal[1, 3] | None = None
    n_images: int | None = Field(default=None, ge=20)
    seed: int = 0

    @field_validator("path", mode="before")
    @classmethod
    def _path_from_string(cls, v: object) -> object:
        return Path(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _source_needs(self) -> "DataConfig":
        if self.source == "medmnist" and self.path is None:
            raise ValueError("source 'medmnist' needs 'path': the .npz file (or pass --data-path)")
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
    optimizer: Literal["sgd", "adam"] = "adam"  # Adam on the noisy clipped gradient is post-processing: still DP
    learning_rate: float = Field(default=0.001, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)  # sgd only
    weight_decay: float = Field(default=0.0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"


class EvaluationConfig(_Strict):
    """Percentile bootstrap over test redraws (METHODS.md s.4); the same seed gives every arm the same redraws."""

    bootstrap_resamples: int = Field(default=1000, ge=10)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    bootstrap_seed: int = 0


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _ArmBase(_Strict):
    name: str
    epochs: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    learning_rate: float | None = Field(default=None, gt=0)

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"arm name {v!r} must be letters, digits, '_', '-' or '.' (it names folders)")
        return v


class NoPrivacyArm(_ArmBase):
    """The non-private baseline: eps = infinity."""

    mechanism: Literal["none"]


class PixelLaplaceArm(_ArmBase):
    """Local DP: iid Laplace(scale) noise on every released pixel value in [0, 1], then clipped (METHODS.md s.1).

    scale is b in [0, 1] units (000_56c2431ae4df8d10.txt's beta). eps_pixel = 1 / b; eps_image = d / b.
    """

    mechanism: Literal["pixel_laplace"]
    scale: Sweep

    @field_validator("scale")
    @classmethod
    def _scale(cls, v: list[float]) -> list[float]:
        return _positive_finite(v)


class DpSgdArm(_ArmBase):
    """DP-SGD (Abadi et al. 2016): Poisson sampling, per-example L2 clipping, Gaussian noise.

    The noise multiplier is calibrated from (target_epsilon, delta, sample_rate, steps) so that the accountant's eps
    never exceeds the target; it is not set by hand. delta defaults to min(1e-5, 1 / (10 N_train)).
    """

    mechanism: Literal["dp_sgd"]
    target_epsilon: Sweep
    delta: float | None = Field(default=None, gt=0, lt=1)
    max_grad_norm: Sweep = Field(default_factory=lambda: [1.0])
    accountant: Literal["pld", "rdp"] = "pld"

    @field_validator("target_epsilon", "max_grad_norm")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        return _positive_finite(v)


Arm = Annotated[Union[NoPrivacyArm, PixelLaplaceArm, DpSgdArm], Field(discriminator="mechanism")]


class Study(_Strict):
    """A whole study file. ``seeds`` repeats every arm; each (arm value, seed) is one run."""

    name: str
    seeds: list[int] = Field(default_factory=lambda: [0])
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
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
