"""Shared fixtures of the data-stage tests: the default phantom (generated once) and the real-data folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpmed.data import Dataset, ImageSet, make_phantom

# ../shared/data relative to the repository root (tests/data/conftest.py -> parents[2] is the root).
SHARED_DATA = (Path(__file__).parents[2] / ".." / "shared" / "data").resolve()
PNEUMONIAMNIST = SHARED_DATA / "pneumoniamnist" / "pneumoniamnist.npz"


@pytest.fixture(scope="session")
def phantom() -> Dataset:
    """The default phantom (1,200 images, 64 px, seed 0): the quickstart's dataset."""
    return make_phantom()


@pytest.fixture(scope="session")
def pneumoniamnist_path() -> Path:
    if not PNEUMONIAMNIST.is_file():
        pytest.skip(f"../shared/data/pneumoniamnist absent: {PNEUMONIAMNIST} not found (real-data tests need it)")
    return PNEUMONIAMNIST


def _concat(dataset: Dataset) -> ImageSet:
    """All three splits as one ImageSet (train, then val, then test)."""
    parts = (dataset.train, dataset.val, dataset.test)
    masks = None if parts[0].masks is None else np.concatenate([p.masks for p in parts])
    return ImageSet(
        images=np.concatenate([p.images for p in parts]),
        labels=np.concatenate([p.labels for p in parts]),
        patient_ids=np.concatenate([p.patient_ids for p in parts]),
        sex=np.concatenate([p.sex for p in parts]),
        age=np.concatenate([p.age for p in parts]),
        masks=masks,
    )


@pytest.fixture(scope="session")
def concat():
    """A function: all three splits of a Dataset as one ImageSet (train, then val, then test)."""
    return _concat
