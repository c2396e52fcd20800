"""data.ordinal: whether multiclass labels are ordered grades (quadratic-weighted kappa is then reported). Unset, the
layout's own knowledge decides (APTOS and MedMNIST's RetinaMNIST: grades); a study may say so for any multiclass file
and may switch it off, and a task whose classes cannot be grades refuses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpmed.config import Study
from dpmed.errors import DataError


def _npz(path: Path, *, n_classes: int) -> Path:
    """A MedMNIST-layout npz with ``n_classes`` class indices per split."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 10), ("val", 5), ("test", 5)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(n) % n_classes)[:, None].astype(np.uint8)
    np.savez(path, **arrays)
    return path


def test_a_study_may_set_data_ordinal(tmp_path):
    npz = _npz(tmp_path / "grades.npz", n_classes=5)
    study = Study.model_validate({"name": "s", "data": {"source": "medmnist", "path": str(npz), "ordinal": True},
                                  "arms": [{"name": "np", "mechanism": "none"}]})
    assert study.data.ordinal is True and study.data.to_request().ordinal is True


def test_retinamnist_is_ordinal_by_default_and_a_study_decides_for_other_files(tmp_path, load_layout):
    retina = _npz(tmp_path / "retinamnist_64.npz", n_classes=5)
    assert load_layout("medmnist", retina).task.ordinal is True                       # DR grades 0-4
    assert load_layout("medmnist", retina, ordinal=False).task.ordinal is False
    path = _npz(tmp_path / "my_grades.npz", n_classes=4)
    assert load_layout("medmnist", path).task.ordinal is False                        # unknown file: nominal
    assert load_layout("medmnist", path, ordinal=True).task.ordinal is True
    blood = _npz(tmp_path / "bloodmnist.npz", n_classes=8)
    assert load_layout("medmnist", blood).task.ordinal is False                       # cell types: no order


def test_aptos_is_ordinal_unless_the_study_says_otherwise(aptos, load_layout):
    assert load_layout("aptos", aptos).task.ordinal is True
    assert load_layout("aptos", aptos, ordinal=False).task.ordinal is False


def test_ordinal_is_refused_for_a_task_without_grades(tmp_path, load_layout):
    binary = _npz(tmp_path / "pneumoniamnist.npz", n_classes=2)
    with pytest.raises(DataError, match="ordinal"):
        load_layout("medmnist", binary, ordinal=True)
