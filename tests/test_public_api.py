"""The public surface: every exported name imports, and the layer contracts of DESIGN.md hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dpmed


def test_every_exported_name_exists():
    for name in dpmed.__all__:
        assert getattr(dpmed, name) is not None, name


def test_import_contracts_hold():
    """Data flows one way through the stages; accounting imports no torch (import-linter, pyproject.toml)."""
    beside = Path(sys.executable).with_name("lint-imports")
    exe = str(beside) if beside.exists() else shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([exe], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
