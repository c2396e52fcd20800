"""Shared fixtures: where the real data lives, and a tiny study writer."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / ".." / "shared" / "data").resolve()
PNEUMONIAMNIST = SHARED_DATA / "pneumoniamnist" / "pneumoniamnist.npz"


@pytest.fixture
def pneumoniamnist() -> Path:
    if not PNEUMONIAMNIST.is_file():
        pytest.skip(f"real data absent: {PNEUMONIAMNIST} (the project's shared/data folder sits beside the repo)")
    return PNEUMONIAMNIST


@pytest.fixture
def write_study(tmp_path: Path):
    """Write YAML text to a study file in tmp_path and return its path."""

    def write(text: str, name: str = "study.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
