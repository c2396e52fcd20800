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


CHEST_XRAY = SHARED_DATA / "chest_xray"


@pytest.fixture(scope="session")
def chest_xray_path() -> Path:
    if not (CHEST_XRAY / "train").is_dir():
        pytest.skip(f"../shared/data/chest_xray absent: {CHEST_XRAY} not found (real-data tests need it)")
    return CHEST_XRAY


def _write_image(path: Path, *, level: int = 128, size: tuple[int, int] = (12, 16), mode: str = "L") -> Path:
    """A small image whose pixels rise left to right from ``level // 2`` to ``level`` (grey or RGB)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = size
    ramp = np.linspace(level // 2, level, w, dtype=np.float64)[None, :].repeat(h, axis=0).astype(np.uint8)  # [H, W]
    array = ramp if mode == "L" else np.stack([ramp, ramp // 2, ramp // 3], axis=-1)
    Image.fromarray(array, mode=None).save(path)
    return path


@pytest.fixture(scope="session")
def write_image():
    """A function writing a small JPEG/PNG (by suffix): write_image(path, level=128, size=(12, 16), mode="L")."""
    return _write_image
