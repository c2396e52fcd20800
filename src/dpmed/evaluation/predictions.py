"""Predictions, computed once per run (`dpmed.evaluation.inference`) and kept in its predictions.npz; every metric is
a pure function of them (and can be recomputed later). Reading them needs no torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpmed.data import ImageSet
from dpmed.folders import read_arrays, write_arrays_atomic

__all__ = ["save_predictions", "load_predictions", "Predictions", "SplitPredictions"]

_FIELDS = ("scores", "labels", "patient_ids", "sex", "age")
_REQUIRED = ("scores", "labels", "patient_ids")


@dataclass(frozen=True, eq=False)
class SplitPredictions:
    """One split's saved predictions: the model's scores (as `dpmed.evaluation.inference.predict` gives them), the
    labels, and each image's patient id, sex and age (str, str, float; the fairness groups and the patient bootstrap
    read them; sex and age None in files written without them)."""

    scores: np.ndarray
    labels: np.ndarray
    patient_ids: np.ndarray
    sex: np.ndarray | None = None
    age: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Predictions:
    """A run's predictions.npz: the test split, and the validation split that chose its thresholds (None in a file
    without it)."""

    test: SplitPredictions
    val: SplitPredictions | None = None


def save_predictions(path: Path, **splits: tuple[ImageSet, np.ndarray]) -> None:
    """One .npz with, per split, scores, labels, patient ids, sex and age (e.g. ``val=(set, scores)``)."""
    arrays = {}
    for name, (data, scores) in splits.items():
        arrays.update({
            f"{name}_scores": scores, f"{name}_labels": data.labels,
            f"{name}_patient_ids": data.patient_ids.astype(str),
            f"{name}_sex": data.sex.astype(str), f"{name}_age": data.age,
        })
    write_arrays_atomic(path, arrays)


def load_predictions(path: Path) -> Predictions:
    """The predictions :func:`save_predictions` wrote to ``path``. FileNotFoundError if it is absent; ValueError
    naming the file where it is damaged (`dpmed.folders.read_arrays`), and the array if it lacks the test split's
    scores, labels or patient ids (or has a split's arrays in part)."""
    arrays = read_arrays(path)

    def split(name: str) -> SplitPredictions | None:
        present = {field: arrays[f"{name}_{field}"] for field in _FIELDS if f"{name}_{field}" in arrays}
        if not present and name != "test":
            return None
        missing = [f"{name}_{field}" for field in _REQUIRED if field not in present]
        if missing:
            raise ValueError(f"{path} has no {', '.join(missing)}: not a predictions file of this dpmed")
        return SplitPredictions(**present)

    return Predictions(test=split("test"), val=split("val"))  # type: ignore[arg-type]
