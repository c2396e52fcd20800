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


def _own_strings(values: np.ndarray) -> np.ndarray:
    """``values`` as numpy strings as wide as their own longest (at least 1), not as the array they were cut from.

    Why: a split's patient ids and sex are a subset of the whole dataset's arrays, whose dtype (``<U33``) is as wide
    as the longest entry of any split. Written as they are, the validation and test splits' file would tell that
    one training patient has a longer id, or an "unknown" sex beside "male" and "female", which no eps covers."""
    return np.array([str(v) for v in values.tolist()], dtype=str).reshape(values.shape)


def save_predictions(path: Path, *, owner_only: bool = False, **splits: tuple[ImageSet, np.ndarray]) -> None:
    """One .npz with, per split, scores, labels, patient ids, sex and age (e.g. ``val=(set, scores)``); the strings
    at their own width (`_own_strings`), so that the file reads the split it holds and nothing of the others.
    ``owner_only``: 0600, for a run's file staged in its private folder until the run finishes."""
    arrays = {}
    for name, (data, scores) in splits.items():
        arrays.update({
            f"{name}_scores": scores, f"{name}_labels": data.labels,
            f"{name}_patient_ids": _own_strings(data.patient_ids),
            f"{name}_sex": _own_strings(data.sex), f"{name}_age": data.age,
        })
    write_arrays_atomic(path, arrays, owner_only=owner_only)


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
